"""The remote tier's costs: what a user needs to size and price tiered storage.

A real broker (in this process, on 127.0.0.1) with ``remote.log.storage.system.enable``
and two compacted topics fed the same records: ``tiered`` (``remote.storage.enable``,
small ``local.retention.bytes``) and its untiered ``twin``. Printed:

- **upload MB/s**: the remote log manager's copy of every rolled segment (stage, upload
  each file, one manifest commit per segment), timed alone;
- **remote read MB/s, cold and cached**: the Fetch path's reads of the tier
  (``RemoteSegmentReader`` over a ``ChunkCache``), every remote segment from its first
  offset in 1 MiB fetches, first with an empty cache, then again from the cache;
- **remote clean MB/s** (the in-process engine: fetch, clean, upload, one manifest swap,
  ``kompakt.cleaner.remote_clean``) next to a **local clean** of the twin's segments by
  the same engine (``LocalEngine``);
- **requests per GB**: every store request (PUT, GET, LIST, DELETE, manifests included)
  per GB uploaded, read and cleaned, so a user can price a bucket;
- **fetch p50/p99**: a confluent-kafka consumer reading one batch at offsets below the
  local log start (served from the tier, the broker's chunk cache off: every read cold)
  and at offsets in the local log.

``--twin``: the issue's claim instead: ``--mb`` produced to both topics while the tiered
partition's local bytes are sampled (peak printed), then both cleaned (remote clean of
the tiered one, local clean of the twin) and read from offset 0 by a consumer; every
record (offset, key, value, headers, timestamp) is compared.

Run: ``.venv/bin/python benchmarks/bench_tiered.py [--mb 64] [--s3] [--twin] [--spark]``.
``--s3`` runs against moto's S3 server (``moto[server]``) started here, as the tests do.
``--spark`` adds the Spark engine's remote clean (``kompakt.pipeline.remote_engine``,
``kompakt.spark.master`` as the broker's: ``local[*]`` unless ``--spark-master``) of a
third topic fed the same records, its session started before the clock runs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from broker_kit import create_topic, load_average, pct, producer, send  # noqa: E402
from confluent_kafka import Consumer, TopicPartition  # noqa: E402

from kompakt.broker.app import BrokerThread, start_test_broker  # noqa: E402
from kompakt.broker.tiering import Tiering, tiering_of  # noqa: E402
from kompakt.cleaner.cleaner import Cleaner  # noqa: E402
from kompakt.cleaner.config import ENGINE_KEY  # noqa: E402
from kompakt.engines import remote_clean_engine, warm_up_spark  # noqa: E402
from kompakt.log.partition_log import PartitionLog  # noqa: E402
from kompakt.record.decode import iter_batches  # noqa: E402
from kompakt.remote.cache import ChunkCache  # noqa: E402
from kompakt.remote.config import RemoteSettings  # noqa: E402
from kompakt.remote.reads import RemoteSegmentReader  # noqa: E402
from kompakt.remote.storage import RemoteStorageManager, TransferStats  # noqa: E402

MB = 1 << 20
GB = 1 << 30
FETCH_BYTES = MB  # a consumer's max.partition.fetch.bytes default
VALUE_BYTES = 1000
UPDATES_PER_KEY = 4  # so a clean keeps about a quarter
KINDS = ("put", "get", "list", "delete")
AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "kompakt-bench",
    "AWS_SECRET_ACCESS_KEY": "kompakt-bench-secret",
    "AWS_REGION": "us-east-1",
}


# -- the broker and its store --------------------------------------------------------------
@contextmanager
def s3_bucket() -> Iterator[dict[str, str]]:
    """moto's standalone S3 server and a fresh bucket: the broker keys naming it."""
    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # a line per request otherwise
    os.environ.update(AWS_ENV)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    bucket = f"kompakt-bench-{uuid.uuid4().hex[:8]}"
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=bucket)
    try:
        yield {
            "kompakt.remote.storage.url": f"s3://{bucket}/tier",
            "kompakt.remote.storage.s3.endpoint.url": endpoint,
        }
    finally:
        server.stop()


def start_broker(data: Path, keys: dict[str, str]) -> tuple[BrokerThread, Tiering]:
    props = {"remote.log.storage.system.enable": "true", "log.cleaner.enable": "false", **keys}
    b = start_test_broker(str(data), **{k.replace(".", "_"): v for k, v in props.items()})
    tiering = tiering_of(b.broker.state)
    assert tiering is not None
    return b, tiering


def topic_configs(
    segment_bytes: int, local_bytes: int, delete_delay_ms: int | None = None
) -> tuple[dict[str, str], dict[str, str]]:
    """(tiered, twin) topic configs; ``delete_delay_ms``: the ``file.delete.delay.ms``
    of both (None: Kafka's default, a minute), how long a deleted segment's renamed
    ``.deleted`` files stay on disk."""
    twin = {"cleanup.policy": "compact", "segment.bytes": str(segment_bytes)}
    if delete_delay_ms is not None:
        twin["file.delete.delay.ms"] = str(delete_delay_ms)
    tiered = {**twin, "remote.storage.enable": "true", "local.retention.bytes": str(local_bytes)}
    return tiered, twin


def produce(bootstrap: str, topics: list[str], mb: int, during: Callable[[], None] = lambda: None):
    """``mb`` MB of ``VALUE_BYTES`` values to each topic, the same records in the same
    order; keys repeat ``UPDATES_PER_KEY`` times; headers on every record."""
    n = mb * MB // VALUE_BYTES
    keys = max(1, n // UPDATES_PER_KEY)
    p = producer(bootstrap, "1")
    t0 = int(time.time() * 1000)
    errors: list[Any] = []

    def on_err(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    for i in range(n):
        key = b"key-%09d" % ((i * 7919) % keys)
        value = (b"%09d-" % i) * (VALUE_BYTES // 10)
        for t in topics:
            send(p, t, value, key, headers=[("i", b"%d" % i)], timestamp=t0 + i, on_delivery=on_err)
        if i % 1000 == 0:
            p.poll(0)
            during()
    if p.flush(300) or errors:
        raise RuntimeError(f"produce failed: {errors[:3]}")
    return n


def delta(after: TransferStats, before: TransferStats) -> dict[str, int]:
    return {k: after.by_kind.get(k, 0) - before.by_kind.get(k, 0) for k in KINDS}


def per_gb(requests: dict[str, int], nbytes: int) -> dict[str, float]:
    return {k: round(v * GB / nbytes, 1) for k, v in requests.items() if nbytes}


def writer(tiering: Tiering, plog: PartitionLog) -> Any:
    return tiering._writer((plog.topic, plog.partition))


# -- the figures ---------------------------------------------------------------------------
def upload(tiering: Tiering, plog: PartitionLog) -> dict[str, Any]:
    """Copy every rolled segment (and apply local retention after, untimed)."""
    stats = tiering.tier.segments.stats
    before = stats.snapshot()
    with writer(tiering, plog):
        t0 = time.perf_counter()
        segments = tiering.copy(plog)
        dt = time.perf_counter() - t0
        tiering.apply_retention(plog)
    after = stats.snapshot()
    up = after.bytes_uploaded - before.bytes_uploaded
    req = delta(after, before)
    return {
        "segments": segments,
        "bytes": up,
        "MB/s": round(up / MB / dt, 1),
        "requests": req,
        "requests/GB": per_gb(req, up),
    }


def remote_read(tiering: Tiering, plog: PartitionLog) -> dict[str, Any]:
    """Every remote segment read from its first offset in 1 MiB fetches through a fresh
    chunk cache: once cold, once cached."""
    m = tiering.manifest(plog)
    assert m is not None
    segments = RemoteStorageManager(tiering.tier.store, ChunkCache(2 * m.size + MB))
    reader = RemoteSegmentReader(segments)
    out: dict[str, Any] = {}
    for name in ("cold", "cached"):
        before = segments.stats.snapshot()
        nbytes = 0
        t0 = time.perf_counter()
        for seg in m.segments:
            offset = seg.base_offset
            while offset <= seg.last_offset:
                data = reader.read(seg, offset, FETCH_BYTES, True)
                if not data:
                    break
                nbytes += len(data)
                *_, last = iter_batches(data)
                offset = last.header.last_offset + 1
        dt = time.perf_counter() - t0
        req = delta(segments.stats.snapshot(), before)
        out[name] = {
            "bytes": nbytes,
            "MB/s": round(nbytes / MB / dt, 1),
            "requests": req,
            "requests/GB": per_gb(req, nbytes),
        }
    out["cache"] = segments.cache.stats().__dict__ if segments.cache else None
    return out


def fetch_latency(bootstrap: str, topic: str, offsets: list[int]) -> dict[str, float]:
    """ms from ``assign`` at each offset to its first record, one consumer (its
    connection made first)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-unused",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 10,
            "max.partition.fetch.bytes": FETCH_BYTES,
            "log_level": 3,
        }
    )
    c.list_topics(topic, timeout=30)
    times = []
    try:
        for off in offsets:
            t0 = time.perf_counter()
            c.assign([TopicPartition(topic, 0, off)])
            while True:
                msg = c.poll(10)
                if msg is None:
                    raise RuntimeError(f"no record at offset {off} of {topic} in 10 s")
                if not msg.error():
                    break
            times.append((time.perf_counter() - t0) * 1000)
            c.unassign()
    finally:
        c.close()
    return {"p50 ms": round(pct(times, 0.5), 2), "p99 ms": round(pct(times, 0.99), 2)}


def spaced(lo: int, hi: int, n: int) -> list[int]:
    """``n`` offsets spread over ``[lo, hi)``, in a shuffled order (no read-ahead)."""
    step = max(1, (hi - lo) // n)
    offs = list(range(lo, hi, step))[:n]
    return offs[::2] + offs[1::2]


def remote_clean(tiering: Tiering, plog: PartitionLog) -> dict[str, Any]:
    """The broker's remote clean of the whole remote range, its steps timed through the
    cleaner's step hook."""
    m = tiering.manifest(plog)
    assert m is not None
    marks: dict[str, float] = {}
    cleaner = tiering.remote_cleaner
    cleaner.fault = lambda step: marks.setdefault(step, time.perf_counter())
    stats = tiering.tier.segments.stats
    before = stats.snapshot()
    try:
        t0 = time.perf_counter()
        cleaned = tiering.compact_remote_now(plog)
        dt = time.perf_counter() - t0
        cleaner.delete_due(now_ms=int(time.time() * 1000) + 10**12)  # the replaced, now
    finally:
        cleaner.fault = lambda step: None
    req = delta(stats.snapshot(), before)
    after = tiering.manifest(plog)
    steps = {}
    last = t0
    for step in ("fetched", "cleaned", "uploaded", "committed"):
        if step in marks:
            steps[step + " s"] = round(marks[step] - last, 2)
            last = marks[step]
    return {
        "cleaned": cleaned,
        "bytes in": m.size,
        "bytes out": after.size if after else None,
        "MB/s": round(m.size / MB / dt, 1),
        "steps": steps,
        "requests": req,
        "requests/GB": per_gb(req, m.size),
    }


def local_clean(b: BrokerThread, plog: PartitionLog) -> dict[str, Any]:
    """The in-process engine (LocalEngine) cleaning the twin's segments on local disk."""
    size = sum(s.size for s in plog.segments_snapshot()[:-1])
    cleaner = Cleaner(b.logs)
    t0 = time.perf_counter()
    cleaner.clean_partition(plog, force=True)
    dt = time.perf_counter() - t0
    return {"bytes in": size, "bytes out": plog.size_bytes(), "MB/s": round(size / MB / dt, 1)}


class _SparkBroker:
    """The broker's config as the engine registry reads it, with the Spark engine."""

    def __init__(self, config: Any):
        self.config, self.spark = config, config.spark

    def get(self, key: str) -> Any:
        return "spark" if key == ENGINE_KEY else self.config.get(key)


def spark_clean(b: BrokerThread, tiering: Tiering, plog: PartitionLog) -> dict[str, Any]:
    """The Spark engine's remote clean (executors fetching and uploading through the
    store client, ``kompakt.pipeline.remote_engine``) of another tiered topic fed the
    same records, the session and its Python workers warmed up first (printed apart).
    Its requests are the driver's only: the executors' store clients are their own."""
    settings = RemoteSettings.of(b.broker.config.values, b.logs.dir)
    engine = remote_clean_engine(_SparkBroker(b.broker.config), tiering.tier.segments, settings)
    session_s, warm_s = warm_up_spark(engine.config)
    cleaner = tiering.remote_cleaner
    saved, cleaner.engine = cleaner.engine, engine
    try:
        out = remote_clean(tiering, plog)
    finally:
        cleaner.engine = saved
    out["requests"] = f"driver only: {out.pop('requests')}"
    del out["requests/GB"]
    return {"session start s": round(session_s, 1), "warm-up s": round(warm_s, 1), **out}


def roll(plog: PartitionLog) -> None:
    """Roll the active segment so every record is in a rolled segment (tiered or cleaned)."""
    if plog.active_segment.size:
        plog.roll()


# -- the modes -----------------------------------------------------------------------------
def bench(args: argparse.Namespace, work: Path, keys: dict[str, str]) -> dict[str, Any]:
    seg = args.segment_mb * MB
    b, tiering = start_broker(
        work / "data",
        {
            **keys,
            "remote.log.manager.task.interval.ms": "3600000",  # passes run by the bench
            "kompakt.remote.cache.bytes": "0",  # every fetch from the tier is cold
            **({"kompakt.spark.master": args.spark_master} if args.spark_master else {}),
        },
    )
    try:
        tiered_cfg, twin_cfg = topic_configs(seg, 2 * seg)
        topics = ["tiered", "twin"] + (["tiered_spark"] if args.spark else [])
        for topic in topics:
            create_topic(b.bootstrap, topic, twin_cfg if topic == "twin" else tiered_cfg)
        t0 = time.perf_counter()
        n = produce(b.bootstrap, topics, args.mb)
        produced_s = time.perf_counter() - t0
        plog, twin = b.logs.get_log("tiered", 0), b.logs.get_log("twin", 0)
        for topic in topics:
            roll(b.logs.get_log(topic, 0))
        out: dict[str, Any] = {
            "records": n,
            f"produce s ({len(topics)} topics)": round(produced_s, 1),
        }
        out["upload"] = upload(tiering, plog)
        local_start, end = plog.log_start_offset, plog.log_end_offset
        out["local log start"] = local_start
        out["remote read"] = remote_read(tiering, plog)
        out["fetch remote (cold)"] = fetch_latency(
            b.bootstrap, "tiered", spaced(0, local_start, args.samples)
        )
        out["fetch local"] = fetch_latency(
            b.bootstrap, "twin", spaced(local_start, end, args.samples)
        )
        out["remote clean"] = remote_clean(tiering, plog)
        out["local clean (twin)"] = local_clean(b, twin)
        if args.spark:
            spark_log = b.logs.get_log("tiered_spark", 0)
            with writer(tiering, spark_log):
                tiering.copy(spark_log)
            out["spark remote clean"] = spark_clean(b, tiering, spark_log)
        return out
    finally:
        b.stop()


def disk_bytes(folder: Path) -> int:
    """Bytes the folder's files take on disk (``du``: the preallocated, sparse index
    files count what they use, not their length)."""
    total = 0
    for e in os.scandir(folder):
        try:
            total += e.stat().st_blocks * 512 if e.is_file() else 0
        except FileNotFoundError:
            pass  # deleted since the listing
    return total


def log_bytes(plog: PartitionLog) -> int:
    """The local log's ``.log`` bytes: what ``local.retention.bytes`` bounds."""
    return sum(s.size for s in plog.segments_snapshot())


def digests(bootstrap: str, topic: str) -> list[bytes]:
    """A digest of every record (offset, key, value, headers, timestamp) from offset 0."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-unused",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.max.bytes": 64 * MB,
            "max.partition.fetch.bytes": 16 * MB,
            "log_level": 3,
        }
    )
    c.assign([TopicPartition(topic, 0, 0)])
    out: list[bytes] = []
    deadline = time.monotonic() + 1800
    try:
        while time.monotonic() < deadline:
            for m in c.consume(10_000, 1.0):
                if m.error():
                    if m.error().code() == -191:  # _PARTITION_EOF
                        return out
                    raise RuntimeError(f"{topic}: {m.error()}")
                h = hashlib.blake2b(digest_size=16)
                for part in (m.offset(), m.key(), m.value(), m.headers(), m.timestamp()):
                    h.update(repr(part).encode())
                out.append(h.digest())
        raise RuntimeError(f"{topic}: not read to its end in 30 minutes")
    finally:
        c.close()


def twin(args: argparse.Namespace, work: Path, keys: dict[str, str]) -> dict[str, Any]:
    seg = args.segment_mb * MB
    local_limit = 2 * seg
    b, tiering = start_broker(work / "data", {**keys, "remote.log.manager.task.interval.ms": "200"})
    try:
        tiered_cfg, twin_cfg = topic_configs(seg, local_limit, args.file_delete_delay_ms)
        create_topic(b.bootstrap, "tiered", tiered_cfg)
        create_topic(b.bootstrap, "twin", twin_cfg)
        plog, twin_log = b.logs.get_log("tiered", 0), b.logs.get_log("twin", 0)
        peak = [0, 0]  # .log bytes, disk bytes
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(0.05):
                peak[0] = max(peak[0], log_bytes(plog))
                peak[1] = max(peak[1], disk_bytes(plog.dir))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        t0 = time.perf_counter()
        n = produce(b.bootstrap, ["tiered", "twin"], args.mb)
        produced_s = time.perf_counter() - t0
        roll(plog)
        roll(twin_log)
        deadline = time.monotonic() + 600
        while tiering.highest_tiered_offset(plog) < plog.log_end_offset - 1:
            if time.monotonic() > deadline:
                raise RuntimeError("the tiered topic was not tiered in 10 minutes")
            stop.wait(0.2)
        with writer(tiering, plog):
            tiering.apply_retention(plog)
        stop.set()
        sampler.join()
        out: dict[str, Any] = {
            "records": n,
            "produced MB per topic": args.mb,
            "produce s (both topics)": round(produced_s, 1),
            "local.retention.bytes": local_limit,
            "segment.bytes": seg,
            "file.delete.delay.ms": args.file_delete_delay_ms or "default (60000)",
            "tiered peak local .log bytes": peak[0],
            "tiered peak local disk bytes (du of the partition dir)": peak[1],
            "tiered final local .log / disk bytes": (log_bytes(plog), disk_bytes(plog.dir)),
            "twin final local .log / disk bytes": (log_bytes(twin_log), disk_bytes(twin_log.dir)),
        }
        if not args.no_clean:
            out["remote clean"] = remote_clean(tiering, plog)
            out["local clean (twin)"] = local_clean(b, twin_log)
        t0 = time.perf_counter()
        mine, theirs = digests(b.bootstrap, "tiered"), digests(b.bootstrap, "twin")
        out["read both s"] = round(time.perf_counter() - t0, 1)
        first = next(
            (i for i, (x, y) in enumerate(zip(mine, theirs, strict=False)) if x != y), None
        )
        out["records read (tiered, twin)"] = (len(mine), len(theirs))
        out["identical"] = mine == theirs
        out["first difference at record"] = first
        return out
    finally:
        b.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=64, help="MB produced to each topic")
    ap.add_argument("--segment-mb", type=int, default=4, help="segment.bytes in MiB")
    ap.add_argument("--samples", type=int, default=100, help="fetches timed per side")
    ap.add_argument("--s3", action="store_true", help="moto's S3 server instead of file://")
    ap.add_argument("--twin", action="store_true", help="local bytes bound + twin comparison")
    ap.add_argument("--no-clean", action="store_true", help="--twin without the cleans")
    ap.add_argument(
        "--file-delete-delay-ms",
        type=int,
        help="--twin: file.delete.delay.ms of both topics (default: Kafka's, 60000)",
    )
    ap.add_argument("--spark", action="store_true", help="add a Spark engine remote clean")
    ap.add_argument("--spark-master", help="kompakt.spark.master for --spark")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-tiered-"))
    try:
        with s3_bucket() if args.s3 else nullcontext({}) as keys:
            store = "moto S3" if args.s3 else "file://"
            run = twin if args.twin else bench
            result = run(args, work, keys)
        print(f"bench_tiered: {args.mb} MB a topic, store {store}, {load_average()}")
        for name, value in result.items():
            print(f"{name}: {json.dumps(value, default=str)}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
