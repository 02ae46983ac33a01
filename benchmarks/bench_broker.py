"""Broker produce/consume throughput against a loopback TCP ceiling, and produce latency
while a compaction runs.

Starts a broker in this process (``start_test_broker``), then prints:

* produce MB/s and records/s (confluent-kafka ``Producer``, linger.ms=5, batch.size=1 MiB)
  for 100-byte and 1 KiB values, with acks=1 and acks=all;
* consume MB/s from the beginning (confluent ``Consumer`` with ``assign``, no group);
* the same payload bytes through a bare loopback TCP socket (a server thread that reads
  and discards) as the ceiling, and each figure's ratio to it;
* produce p50/p99 delivery latency (acks=1, paced) with no compaction, and while
  ``POST /v1/compact`` cleans a ~50 MB compacted topic full of duplicate keys;
* consumer groups: offset commits/s from one subscribed confluent ``Consumer`` (synchronous,
  asynchronous, and synchronous with 10 partitions per commit), and the time of a
  rebalance to three members: from the third member's ``subscribe()`` until all three
  have their new assignment (``on_assign``), at librdkafka's default heartbeat interval
  (3 s: members hear of a rebalance on their next heartbeat) and at 300 ms;
* transactions (issue 15): 1 KiB records, 100 per transaction, MB/s of a transactional
  producer (begin, 100 produces, commit, one transaction after the other) next to an
  idempotent non-transactional producer (acks=all) writing the same records in the same
  run, and the commit latency p50/p99 (``commit_transaction`` call to return: EndTxn,
  which waits for the batches in flight; the markers follow it);
* ``--cleaner-throttle`` (issue 17, :func:`bench_cleaner_throttle`): produce p99 of a
  steady update load (1 KiB, acks=all, paced, to a compacted topic the background
  cleaner keeps clean) while idle and during the clean of a large compacted topic, for
  each cleaner I/O limit (Kafka's unlimited default, kompakt's default, ...) on a fresh
  broker each, in the same run; with the dirty-bytes backlog, the limit in force and the
  throttle time sampled from ``/metrics`` every second, and the load average.

The broker's background cleaner is off by default (``--background-cleaner`` turns it on)
so that the compaction measured is the one the admin POST starts, not one that already
happened while the topic was filled. MB are 10^6 bytes of record values (payload).
* many partitions (issue 17, ``--partitions 10000``, a section of its own): a
  ``kompakt serve`` process with one compacted topic of that many partitions and small
  segments (``segment.bytes=4096``) under ``kompakt.log.max.open.segments``; prints the
  start time (process spawn to the Kafka port accepting, empty and again after a clean
  shutdown and after a SIGKILL), RSS and open fds (``/proc/PID/fd``) at each step,
  Metadata latency for all topics (confluent ``list_topics``), produce MB/s to all
  partitions round-robin (100 B values, keyed), a fetch of every record of a sample of
  partitions, and ``POST /v1/compact`` of a few partitions.

Run: ``.venv/bin/python benchmarks/bench_broker.py [--scale 0.25] [--groups-only | --txn-only]``
or ``... --partitions 10000``.
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import random
import shutil
import socket
import tempfile
import threading
import time
import urllib.request

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kompakt.broker.app import start_test_broker

CHUNK = 1 << 20


def create_topic(bootstrap: str, name: str, config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    fut = admin.create_topics([NewTopic(name, 1, 1, config=config or {})])[name]
    fut.result(30)


def producer(bootstrap: str, acks: str, linger_ms: int = 5) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": acks,
            "linger.ms": linger_ms,
            "batch.size": 1 << 20,
            "message.max.bytes": 4 << 20,
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1 << 20,
            "compression.type": "none",
            "enable.idempotence": False,
        }
    )


def produce_all(p: Producer, topic: str, value: bytes, n: int, key_mod: int = 0) -> None:
    errors = []

    def on_err(err, _msg) -> None:
        if err is not None:
            errors.append(err)

    for i in range(n):
        key = b"key-%08d" % (i % key_mod) if key_mod else None
        while True:
            try:
                p.produce(topic, value, key, on_delivery=on_err)
                break
            except BufferError:
                p.poll(0.05)
        if i % 1000 == 0:
            p.poll(0)
    left = p.flush(120)
    if left or errors:
        raise RuntimeError(f"{left} undelivered, errors: {errors[:3]}")


def bench_produce(bootstrap: str, topic: str, size: int, n: int, acks: str) -> float:
    create_topic(bootstrap, topic)
    p = producer(bootstrap, acks)
    produce_all(p, topic, b"p" * 10, 10)  # connect and fetch metadata before timing
    t0 = time.perf_counter()
    produce_all(p, topic, b"x" * size, n)
    return time.perf_counter() - t0


def bench_consume(bootstrap: str, topic: str, n: int) -> tuple[float, int]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-unused",  # required by the client; assign() joins no group
            "enable.auto.commit": False,
            "fetch.max.bytes": 64 << 20,
            "max.partition.fetch.bytes": 16 << 20,
        }
    )
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got = nbytes = 0
    t0 = None  # the clock starts at the first fetched message (after connect/metadata)
    deadline = time.perf_counter() + 300
    while got < n and time.perf_counter() < deadline:
        for m in c.consume(10_000, 1.0):
            if m.error():
                continue
            if t0 is None:
                t0 = time.perf_counter()
                continue
            got += 1
            nbytes += len(m.value() or b"")
        if got == n - 1:
            break
    dt = time.perf_counter() - (t0 or 0.0)
    c.close()
    if got < n - 1:
        raise RuntimeError(f"consumed {got + 1} of {n} from {topic}")
    return dt, nbytes


def bench_tcp(total: int) -> float:
    """Seconds to push ``total`` bytes through loopback TCP to a read-and-discard thread."""
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]

    def sink() -> None:
        conn, _ = srv.accept()
        buf = bytearray(CHUNK)
        view = memoryview(buf)
        while conn.recv_into(view):
            pass
        conn.close()

    t = threading.Thread(target=sink, daemon=True)
    t.start()
    cli = socket.create_connection(("127.0.0.1", port))
    data = b"x" * CHUNK
    t0 = time.perf_counter()
    left = total
    while left > 0:
        k = min(left, CHUNK)
        cli.sendall(data[:k] if k < CHUNK else data)
        left -= k
    cli.shutdown(socket.SHUT_WR)
    t.join()
    dt = time.perf_counter() - t0
    cli.close()
    srv.close()
    return dt


class LatencyProbe:
    """Paced acks=1 produces; per-message delivery-callback latency in ms."""

    def __init__(self, bootstrap: str, topic: str, rate: int, linger_ms: int):
        self.p = producer(bootstrap, "1", linger_ms)
        self.topic = topic
        self.rate = rate
        self.value = b"l" * 100
        self._stop = threading.Event()
        self._poller = threading.Thread(target=self._poll, daemon=True)
        self._poller.start()
        produce_all(self.p, topic, b"warm", 100)

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.p.poll(0.05)

    def run(self, until) -> list[float]:
        """Produce until ``until()`` is true; returns the latencies of those messages."""
        lat: list[float] = []

        def done(t0: float, err, _msg) -> None:
            if err is None:
                lat.append((time.perf_counter() - t0) * 1000)

        start = time.perf_counter()
        i = 0
        while not until():
            now = time.perf_counter()
            due = start + i / self.rate
            if now < due:
                time.sleep(min(due - now, 0.002))
                continue
            try:
                self.p.produce(self.topic, self.value, on_delivery=functools.partial(done, now))
                i += 1
            except BufferError:
                time.sleep(0.001)
        self.p.flush(60)
        return lat

    def close(self) -> None:
        self._stop.set()
        self._poller.join()


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of the record counts")
    ap.add_argument("--small", type=int, default=200_000, help="records of 100 B")
    ap.add_argument("--large", type=int, default=50_000, help="records of 1 KiB")
    ap.add_argument("--compact-mb", type=float, default=50.0, help="compacted topic size")
    ap.add_argument("--compact-keys", type=int, default=2_000, help="distinct keys in it")
    ap.add_argument("--rate", type=int, default=1_000, help="latency probe msgs/s")
    ap.add_argument("--latency-linger-ms", type=int, default=5)
    ap.add_argument("--baseline-seconds", type=float, default=5.0)
    ap.add_argument("--background-cleaner", action="store_true")
    ap.add_argument("--commits", type=int, default=5_000, help="offset commits per case")
    ap.add_argument("--rebalance-runs", type=int, default=5, help="rebalances timed per case")
    ap.add_argument(
        "--groups-only", action="store_true", help="only the consumer-group section (quick)"
    )
    ap.add_argument(
        "--security",
        action="store_true",
        help="only 1 KiB produce/consume over SASL_SSL (SCRAM-SHA-512) next to PLAINTEXT",
    )
    ap.add_argument("--txns", type=int, default=500, help="transactions of 100 x 1 KiB")
    ap.add_argument(
        "--txn-only", action="store_true", help="only the transactional section (quick)"
    )
    ap.add_argument(
        "--partitions",
        type=int,
        default=0,
        help="only the many-partitions section: a compacted topic of this many partitions "
        "(issue 17: 10000) in a `kompakt serve` process",
    )
    ap.add_argument(
        "--max-open-segments", type=int, default=1000, help="kompakt.log.max.open.segments"
    )
    ap.add_argument(
        "--records-per-partition", type=int, default=60, help="100 B records each, round-robin"
    )
    ap.add_argument(
        "--cleaner-throttle",
        action="store_true",
        help="only produce p99 idle vs during a large clean, per cleaner I/O limit",
    )
    ap.add_argument(
        "--throttle-limits",
        default="unlimited,default",
        help="comma-separated log.cleaner.io.max.bytes.per.second values (bytes/s, "
        "'unlimited' = Kafka's Double.MaxValue, 'default' = kompakt's), each optionally "
        "with @N for kompakt.log.cleaner.io.check.interval.ms=N",
    )
    ap.add_argument("--throttle-big-mb", type=float, default=200.0, help="large topic size")
    ap.add_argument("--throttle-rate", type=int, default=200, help="update load msgs/s")
    ap.add_argument(
        "--throttle-big-keys",
        type=int,
        default=100_000,
        help="distinct keys of the large topic (what its clean writes back)",
    )
    ap.add_argument("--throttle-idle-seconds", type=float, default=20.0)
    ap.add_argument("--throttle-engine", default="local", help="local | spark")
    ap.add_argument(
        "--throttle-set",
        action="append",
        default=[],
        help="extra broker key=value for every case (e.g. a backlog setpoint)",
    )
    args = ap.parse_args()
    if args.partitions:
        bench_partitions(args)
        return
    if args.cleaner_throttle:
        bench_cleaner_throttle(args)
        return
    if args.security:
        bench_security(args)
        return

    tmp = tempfile.mkdtemp(prefix="kompakt-bench-broker-")
    overrides = {
        "kompakt.cleaner.engine": "local",
        "log.cleaner.backoff.ms": "200",
        # first joins of the timed groups are not delayed; the timed rebalance (a member
        # joining a Stable group) never waits for this delay anyway
        "group.initial.rebalance.delay.ms": "0",
    }
    if not args.background_cleaner:
        overrides["log.cleaner.enable"] = "false"
    b = start_test_broker(tmp, **overrides)
    try:
        if args.txn_only:
            bench_transactions(b, args)
            return
        if not args.groups_only:
            run(b, args)
            print()
            bench_transactions(b, args)
            print()
        bench_groups(b, args)
    finally:
        b.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def run(b, args: argparse.Namespace) -> None:
    bs = b.bootstrap
    rows = []
    consumed = []
    for size, n0 in ((100, args.small), (1024, args.large)):
        n = max(1000, int(n0 * args.scale))
        for acks in ("1", "all"):
            topic = f"tp-{size}-{acks}"
            dt = bench_produce(bs, topic, size, n, acks)
            rows.append((f"produce {size} B acks={acks}", n, n * size, dt))
            if acks == "1":
                consumed.append((size, n, topic))
    for size, n, topic in consumed:
        dt, nbytes = bench_consume(bs, topic, n)
        rows.append((f"consume {size} B (assign)", n - 1, nbytes, dt))

    print(f"broker {bs}, payload MB = 10^6 bytes of values; ceiling = loopback TCP, same bytes")
    hdr = (
        f"{'case':28} {'records':>9} {'MB':>7} {'MB/s':>8} {'rec/s':>10} "
        f"{'TCP MB/s':>9} {'x TCP':>7}"
    )
    print(hdr)
    print("-" * len(hdr))
    for name, n, nbytes, dt in rows:
        ceiling = nbytes / 1e6 / bench_tcp(nbytes)
        mbs = nbytes / 1e6 / dt
        print(
            f"{name:28} {n:>9} {nbytes / 1e6:>7.1f} {mbs:>8.1f} {n / dt:>10.0f} "
            f"{ceiling:>9.0f} {mbs / ceiling:>7.3f}"
        )

    # -- latency while compacting ------------------------------------------------------
    ct = "compacted"
    create_topic(
        bs,
        ct,
        {
            "cleanup.policy": "compact",
            "segment.bytes": "1048576",
            "min.cleanable.dirty.ratio": "0.01",
        },
    )
    vsize = 1000
    nfill = max(1000, int(args.compact_mb * 1e6 * args.scale / vsize))
    t0 = time.perf_counter()
    produce_all(producer(bs, "1"), ct, b"c" * vsize, nfill, key_mod=args.compact_keys)
    fill_s = time.perf_counter() - t0

    lt = "latency"
    create_topic(bs, lt)
    probe = LatencyProbe(bs, lt, args.rate, args.latency_linger_ms)
    t_end = time.perf_counter() + args.baseline_seconds
    base = probe.run(lambda: time.perf_counter() >= t_end)

    result: dict = {}

    def compact() -> None:
        req = urllib.request.Request(
            f"http://127.0.0.1:{b.admin_port}/v1/compact",
            data=json.dumps({"topic": ct}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        t = time.perf_counter()
        with urllib.request.urlopen(req, timeout=600) as resp:
            result["body"] = json.loads(resp.read())
        result["seconds"] = time.perf_counter() - t

    th = threading.Thread(target=compact, daemon=True)
    th.start()
    during = probe.run(lambda: not th.is_alive())
    th.join()
    probe.close()

    res = (result.get("body") or {}).get("results") or [{}]
    r0 = {**res[0], **(res[0].get("stats") or {})}  # figures sit under "stats"
    print()
    print(
        f"compacted topic: {nfill} x {vsize} B records, {args.compact_keys} keys "
        f"({nfill * vsize / 1e6:.0f} MB, filled in {fill_s:.1f} s); "
        f"POST /v1/compact took {result.get('seconds', float('nan')):.2f} s"
    )
    keys = ("status", "records_read", "records_written", "bytes_read", "bytes_written")
    print("compact result:", {k: r0[k] for k in keys if k in r0})
    print(
        f"latency probe: acks=1, 100 B values, {args.rate} msg/s, "
        f"linger.ms={args.latency_linger_ms}, delivery-callback latency"
    )
    hdr = f"{'produce latency':28} {'msgs':>7} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}"
    print(hdr)
    print("-" * len(hdr))
    for name, xs in (("no compaction", base), ("during compaction", during)):
        print(
            f"{name:28} {len(xs):>7} {pct(xs, 0.5):>8.2f} {pct(xs, 0.99):>8.2f} "
            f"{max(xs, default=float('nan')):>8.2f}"
        )


# -- cleaner I/O throttle (issue 17) -----------------------------------------------------


def scrape(admin_port: int) -> dict[str, float]:
    """The unlabelled samples of ``/metrics`` (name -> value)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/metrics", timeout=30) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and "{" not in line:
            name, _, value = line.partition(" ")
            try:
                out[name] = float(value)
            except ValueError:
                continue
    return out


def alter_topic(bootstrap: str, topic: str, config: dict[str, str]) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    res = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
            for k, v in config.items()
        ],
    )
    for fut in admin.incremental_alter_configs([res]).values():
        fut.result(30)


class UpdateLoad:
    """The steady update load: paced acks=all produces of 1 KiB values over ``keys`` keys
    of a compacted topic, from its own thread; each delivery's latency (ms) is filed
    under the phase that was current when it was produced."""

    def __init__(self, bootstrap: str, topic: str, rate: int, keys: int = 5_000):
        self.p = producer(bootstrap, "all", linger_ms=0)
        self.topic, self.rate, self.keys = topic, rate, keys
        self.value = b"u" * 1024
        self.phase = "warm-up"
        self.lat: dict[str, list[float]] = {}
        self.timeline: list[tuple[float, float]] = []  # (send time, latency ms)
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> UpdateLoad:
        self._thread.start()
        return self

    def _run(self) -> None:
        start = time.perf_counter()
        i = 0
        while not self._stop.is_set():
            now = time.perf_counter()
            due = start + i / self.rate
            if now < due:
                self.p.poll(min(due - now, 0.002))  # pacing: serve callbacks meanwhile
                continue
            phase = self.lat.setdefault(self.phase, [])

            def done(err, _msg, t0=now, xs=phase) -> None:
                if err is None:
                    ms = (time.perf_counter() - t0) * 1000
                    xs.append(ms)
                    self.timeline.append((t0, ms))

            try:
                key = b"key-%d" % (i % self.keys)
                self.p.produce(self.topic, self.value, key, on_delivery=done)
                i += 1
            except BufferError:
                self.p.poll(0.001)
        self.p.flush(60)
        self.sent = i

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _limit_value(name: str) -> str:
    from kompakt.cleaner.config import IO_MAX_BYTES_PER_SECOND_DEFAULT

    if name == "unlimited":
        return "1.7976931348623157E308"
    if name == "default":
        return repr(IO_MAX_BYTES_PER_SECOND_DEFAULT)
    return name


def _throttle_case(args: argparse.Namespace, limit: str) -> dict:
    """One broker: fill the large topic (held back by min.compaction.lag.ms), run the
    update load idle, then let the cleaner at the large topic and keep the load going
    until that clean is done; metrics sampled every second."""
    import os

    tmp = tempfile.mkdtemp(prefix="kompakt-bench-throttle-")
    overrides = {
        "kompakt.cleaner.engine": args.throttle_engine,
        "log.cleaner.backoff.ms": "200",
        "log.cleaner.io.max.bytes.per.second": _limit_value(limit.partition("@")[0]),
    }
    if "@" in limit:
        overrides["kompakt.log.cleaner.io.check.interval.ms"] = limit.partition("@")[2]
    overrides.update(kv.split("=", 1) for kv in args.throttle_set)
    b = start_test_broker(tmp, **overrides)
    samples: list[dict] = []
    try:
        bs, port = b.bootstrap, b.admin_port
        compacted = {"cleanup.policy": "compact"}
        # the update load's topic: small segments, so the cleaner cleans it every few
        # seconds (a steady load to keep up with); the large topic: held back until the
        # clean is let go
        create_topic(
            bs,
            "updates",
            {**compacted, "segment.bytes": str(1 << 20), "min.cleanable.dirty.ratio": "0.5"},
        )
        create_topic(
            bs,
            "big",
            {**compacted, "segment.bytes": str(16 << 20), "min.compaction.lag.ms": "3600000"},
        )
        vsize = 1000
        nfill = max(1000, int(args.throttle_big_mb * 1e6 / vsize))
        t0 = time.perf_counter()
        produce_all(producer(bs, "1"), "big", b"c" * vsize, nfill, key_mod=args.throttle_big_keys)
        fill_s = time.perf_counter() - t0
        warm = getattr(b.broker, "_spark_warm", None)  # the Spark engine's eager start
        if warm is not None:
            warm.join(600)  # the JVM's start-up is not the clean being measured
        load = UpdateLoad(bs, "updates", args.throttle_rate).start()
        t_start = time.perf_counter()
        load.t_start = t_start
        stop = threading.Event()

        def sampler() -> None:
            while not stop.is_set():
                m = scrape(port)
                samples.append(
                    {
                        "t": time.perf_counter() - t_start,
                        "phase": load.phase,
                        "backlog": m.get("kompakt_log_cleaner_backlog_bytes", 0),
                        "limit": m.get("kompakt_log_cleaner_io_limit_bytes_per_second", 0),
                        "throttle_s": m.get("kompakt_log_cleaner_throttle_seconds_total", 0),
                        "io": m.get("kompakt_log_cleaner_io_bytes_total", 0),
                        "cleans": m.get("kompakt_log_cleaner_compactions_total", 0),
                        "load1": os.getloadavg()[0],
                    }
                )
                stop.wait(1.0)  # pacing: one sample a second

        st = threading.Thread(target=sampler, daemon=True)
        st.start()
        time.sleep(3)  # pacing: the load's first seconds (connections, first cleans)
        load.phase = "idle"
        time.sleep(args.throttle_idle_seconds)  # pacing: the idle phase lasts this long
        before = scrape(port)
        load.phase = "large clean"
        t_clean = time.perf_counter()
        alter_topic(bs, "big", {"min.compaction.lag.ms": "0"})
        clean_s = None
        while time.perf_counter() - t_clean < 1800:
            if _big_cleaned(port):
                clean_s = time.perf_counter() - t_clean
                break
            time.sleep(0.5)  # pacing: polling the admin endpoint
        load.phase = "after"
        time.sleep(3)  # pacing: a few seconds of the load after the clean
        stop.set()
        st.join()
        load.stop()
        after = scrape(port)
    finally:
        b.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return {
        "limit": limit,
        "lat": load.lat,
        "samples": samples,
        "timeline": [(t - t_start, ms) for t, ms in load.timeline],
        "fill_s": fill_s,
        "nfill": nfill,
        "clean_s": clean_s,
        "throttle_s": after.get("kompakt_log_cleaner_throttle_seconds_total", 0)
        - before.get("kompakt_log_cleaner_throttle_seconds_total", 0),
        "io_mb": (
            after.get("kompakt_log_cleaner_io_bytes_total", 0)
            - before.get("kompakt_log_cleaner_io_bytes_total", 0)
        )
        / 1e6,
    }


def _big_cleaned(admin_port: int) -> bool:
    """Whether the large topic has had its clean (its last-clean duration is exported)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/metrics", timeout=30) as r:
        text = r.read().decode()
    return any(
        line.startswith("kompakt_log_cleaner_duration_seconds{") and 'topic="big"' in line
        for line in text.splitlines()
    )


def bench_cleaner_throttle(args: argparse.Namespace) -> None:
    """Issue 17's must-show: produce p99 idle vs during a large clean, per I/O limit."""
    import os

    cases = [_throttle_case(args, name) for name in args.throttle_limits.split(",")]
    print(
        f"cleaner I/O throttle: update load {args.throttle_rate} msg/s x 1 KiB acks=all "
        f"(linger.ms=0) to a compacted topic; large clean of {args.throttle_big_mb:.0f} MB "
        f"({cases[0]['nfill']} x 1000 B, {args.throttle_big_keys} keys); "
        f"engine {args.throttle_engine}; "
        f"{os.cpu_count()} cores; extra: {args.throttle_set or 'none'}"
    )
    hdr = (
        f"{'limit (B/s)':>22} {'phase':>12} {'msgs':>6} {'p50 ms':>7} {'p99 ms':>7} "
        f"{'max ms':>7} {'p99/idle':>8} {'clean s':>8} {'thr s':>6} {'io MB':>7} {'load1':>6}"
    )
    print(hdr)
    print("-" * len(hdr))
    for c in cases:
        idle = c["lat"].get("idle", [])
        for phase in ("idle", "large clean"):
            xs = c["lat"].get(phase, [])
            loads = [s["load1"] for s in c["samples"] if s["phase"] == phase]
            extra = (
                f"{c['clean_s'] or float('nan'):>8.1f} {c['throttle_s']:>6.1f} {c['io_mb']:>7.0f}"
                if phase == "large clean"
                else f"{'':>8} {'':>6} {'':>7}"
            )
            print(
                f"{c['limit']:>22} {phase:>12} {len(xs):>6} {pct(xs, 0.5):>7.2f} "
                f"{pct(xs, 0.99):>7.2f} {max(xs, default=float('nan')):>7.2f} "
                f"{pct(xs, 0.99) / pct(idle, 0.99):>8.2f} {extra} "
                f"{sum(loads) / max(1, len(loads)):>6.2f}"
            )
    for c in cases:
        print()
        print(
            f"backlog over time, limit {c['limit']} (sampled from /metrics every ~2 s; "
            "p99 of the update load sent since the row before)"
        )
        print(
            f"{'t s':>6} {'phase':>12} {'backlog MB':>10} {'limit MB/s':>10} "
            f"{'throttle s':>10} {'io MB':>8} {'cleans':>6} {'p99 ms':>7} {'load1':>6}"
        )
        prev = 0.0
        for s in c["samples"][::2]:
            lim = s["limit"]
            lim_s = "unlimited" if lim > 1e300 or lim == float("inf") else f"{lim / 1e6:.1f}"
            window = [ms for t, ms in c["timeline"] if prev <= t < s["t"]]
            prev = s["t"]
            print(
                f"{s['t']:>6.1f} {s['phase']:>12} {s['backlog'] / 1e6:>10.1f} {lim_s:>10} "
                f"{s['throttle_s']:>10.1f} {s['io'] / 1e6:>8.0f} {s['cleans']:>6.0f} "
                f"{pct(window, 0.99):>7.1f} {s['load1']:>6.2f}"
            )


# -- consumer groups ---------------------------------------------------------------------


def group_consumer(bootstrap: str, group: str, **extra: object) -> Consumer:
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "log_level": 3,
    }
    conf.update(extra)
    return Consumer(conf)


def bench_commits(bootstrap: str, topic: str, n: int, mode: str, width: int) -> float:
    """Seconds for ``n`` commits of ``width`` partitions by one subscribed member."""
    done = []

    def on_commit(err, _parts) -> None:
        if err is not None:
            raise RuntimeError(f"commit failed: {err}")
        done.append(1)

    c = group_consumer(bootstrap, f"bench-commit-{mode}-{width}", on_commit=on_commit)
    c.subscribe([topic])
    deadline = time.perf_counter() + 60
    while len(c.assignment()) < width and time.perf_counter() < deadline:
        c.poll(0.05)
    if len(c.assignment()) < width:
        raise RuntimeError("the commit benchmark's consumer got no assignment")
    c.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)  # warm
    c.poll(0)
    base = len(done)
    t0 = time.perf_counter()
    for i in range(n):
        offsets = [TopicPartition(topic, p, i + 1) for p in range(width)]
        if mode == "sync":
            c.commit(offsets=offsets, asynchronous=False)
        else:
            c.commit(offsets=offsets, asynchronous=True)
            if i % 100 == 0:
                c.poll(0)
    if mode != "sync":
        deadline = time.perf_counter() + 300
        while len(done) - base < n and time.perf_counter() < deadline:
            c.poll(0.01)
        if len(done) - base < n:
            raise RuntimeError(f"{len(done) - base} of {n} async commits acknowledged")
    dt = time.perf_counter() - t0
    c.close()
    return dt


def bench_rebalance(bootstrap: str, topic: str, heartbeat_ms: int) -> float:
    """Seconds from the third member's subscribe() until all three have been assigned."""
    group = f"bench-rebalance-{heartbeat_ms}-{time.monotonic_ns()}"
    assigned: dict[int, float] = {}
    stop = threading.Event()
    ready = [threading.Event() for _ in range(3)]
    go = threading.Event()
    t_sub: list[float] = []

    def member(i: int) -> None:
        c = group_consumer(
            bootstrap,
            group,
            **{"heartbeat.interval.ms": heartbeat_ms, "session.timeout.ms": 10_000},
        )

        def on_assign(_c, parts) -> None:
            if parts:
                assigned[i] = time.perf_counter()
                ready[i].set()

        if i == 2:
            go.wait()
            t_sub.append(time.perf_counter())
        c.subscribe([topic], on_assign=on_assign)
        while not stop.is_set():
            c.poll(0.05)
        c.close()

    threads = [threading.Thread(target=member, args=(i,), daemon=True) for i in range(3)]
    for t in threads:
        t.start()
    if not (ready[0].wait(60) and ready[1].wait(60)):
        raise RuntimeError("the first two members were not assigned")
    # let the group settle into Stable with two members; the random part puts the third
    # join at a random point of the members' heartbeat cycle (else every run is the same)
    time.sleep(1.0 + random.uniform(0, heartbeat_ms / 1000))
    assigned.clear()
    go.set()
    deadline = time.perf_counter() + 120
    while len(assigned) < 3 and time.perf_counter() < deadline:
        time.sleep(0.01)
    stop.set()
    for t in threads:
        t.join(30)
    if len(assigned) < 3:
        raise RuntimeError("the rebalance to three members did not complete")
    return max(assigned.values()) - t_sub[0]


def bench_groups(b, args: argparse.Namespace) -> None:
    bs = b.bootstrap
    topic = "bench-groups"
    admin = AdminClient({"bootstrap.servers": bs, "log_level": 3})
    admin.create_topics([NewTopic(topic, 12, 1)])[topic].result(30)
    n = max(200, int(args.commits * args.scale))
    print(
        "consumer groups: one subscribed confluent Consumer committing explicit offsets; "
        "each commit is one __consumer_offsets batch, flushed like an acks=all produce"
    )
    hdr = f"{'offset commits':34} {'commits':>8} {'seconds':>8} {'commits/s':>10} {'offsets/s':>10}"
    print(hdr)
    print("-" * len(hdr))
    for name, mode, width in (
        ("synchronous, 1 partition", "sync", 1),
        ("asynchronous, 1 partition", "async", 1),
        ("synchronous, 10 partitions each", "sync", 10),
    ):
        dt = bench_commits(bs, topic, n, mode, width)
        print(f"{name:34} {n:>8} {dt:>8.2f} {n / dt:>10.0f} {n * width / dt:>10.0f}")
    print()
    print(
        "rebalance to 3 members (12 partitions, eager range assignor): third member's "
        "subscribe() -> all three assigned"
    )
    hdr = f"{'heartbeat.interval.ms':34} {'runs':>8} {'min s':>8} {'median s':>10} {'max s':>10}"
    print(hdr)
    print("-" * len(hdr))
    for hb in (3000, 300):
        times = [bench_rebalance(bs, topic, hb) for _ in range(args.rebalance_runs)]
        print(
            f"{hb:<34} {len(times):>8} {min(times):>8.2f} {pct(times, 0.5):>10.2f} "
            f"{max(times):>10.2f}"
        )


# -- --security: the cost of TLS + SASL -----------------------------------------------------
def bench_security(args: argparse.Namespace) -> None:
    """1 KiB produce (acks=1) and consume MB/s over PLAINTEXT and over SASL_SSL with
    SCRAM-SHA-512 on the same broker, same run; the ratio is SASL_SSL / PLAINTEXT.
    Certificates are made on the fly (trustme, a test dependency)."""
    import trustme

    from kompakt.broker.app import BrokerThread
    from kompakt.broker.config import BrokerConfig

    tmp = tempfile.mkdtemp(prefix="kompakt-bench-security-")
    ca = trustme.CA()
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(f"{tmp}/server.pem")
    ca.cert_pem.write_to_path(f"{tmp}/ca.pem")
    props = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "kompakt.admin.listener": "http://127.0.0.1:0",
        "log.dirs": f"{tmp}/data",
        "kompakt.cleaner.engine": "local",
        "log.cleaner.enable": "false",
        "ssl.keystore.location": f"{tmp}/server.pem",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "kompakt.sasl.bootstrap.users": "bench:bench-secret",
    }
    n = max(1000, int(args.large * args.scale))
    b = BrokerThread(BrokerConfig.from_mapping(props)).start()
    try:
        ports = b.broker.server.ports
        confs = {
            "PLAINTEXT": {"bootstrap.servers": f"127.0.0.1:{ports['PLAINTEXT']}"},
            "SASL_SSL": {
                "bootstrap.servers": f"127.0.0.1:{ports['SASL_SSL']}",
                "security.protocol": "SASL_SSL",
                "ssl.ca.location": f"{tmp}/ca.pem",
                "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": "bench",
                "sasl.password": "bench-secret",
            },
        }
        create_topic(confs["PLAINTEXT"]["bootstrap.servers"], "warm")
        figures: dict[str, tuple[float, float]] = {}
        for name, conf in confs.items():
            topic = f"sec-{name.lower()}"
            create_topic(confs["PLAINTEXT"]["bootstrap.servers"], topic)
            p = Producer({**producer_conf("1"), **conf})
            produce_all(p, topic, b"p" * 10, 10)  # connect + authenticate before timing
            t0 = time.perf_counter()
            produce_all(p, topic, b"x" * 1024, n)
            produce_s = time.perf_counter() - t0
            consume_s = _consume_secure(conf, topic, n + 10)
            figures[name] = (n * 1024 / produce_s / 1e6, n * 1024 / consume_s / 1e6)
        print(f"1 KiB records: {n}")
        print(f"{'listener':<10} {'produce MB/s':>13} {'consume MB/s':>13}")
        for name, (pr, co) in figures.items():
            print(f"{name:<10} {pr:13.1f} {co:13.1f}")
        (p0, c0), (p1, c1) = figures["PLAINTEXT"], figures["SASL_SSL"]
        print(f"SASL_SSL / PLAINTEXT: produce {p1 / p0:.2f}, consume {c1 / c0:.2f}")
    finally:
        b.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def producer_conf(acks: str) -> dict[str, object]:
    return {
        "acks": acks,
        "linger.ms": 5,
        "batch.size": 1 << 20,
        "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 1 << 20,
        "compression.type": "none",
        "enable.idempotence": False,
    }


def _consume_secure(conf: dict, topic: str, n: int) -> float:
    c = Consumer(
        {
            **conf,
            "group.id": "bench-unused",
            "enable.auto.commit": False,
            "fetch.max.bytes": 64 << 20,
            "max.partition.fetch.bytes": 16 << 20,
        }
    )
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got, t0 = 0, None
    deadline = time.perf_counter() + 300
    while got < n - 1 and time.perf_counter() < deadline:
        for m in c.consume(10_000, 1.0):
            if m.error():
                continue
            if t0 is None:  # the clock starts at the first record (after the handshakes)
                t0 = time.perf_counter()
                continue
            got += 1
    dt = time.perf_counter() - (t0 or 0.0)
    c.close()
    if got < n - 1:
        raise RuntimeError(f"consumed {got + 1} of {n} from {topic}")
    return dt


TXN_RECORDS = 100  # records per transaction (issue 15)


def bench_transactions(b, args: argparse.Namespace) -> None:
    """Transactional vs idempotent produce of the same 1 KiB records, and commit latency."""
    bs = b.bootstrap
    n_txn = max(20, int(args.txns * args.scale))
    n = n_txn * TXN_RECORDS
    value = b"t" * 1024
    base = {
        "bootstrap.servers": bs,
        "linger.ms": 5,
        "batch.size": 1 << 20,
        "compression.type": "none",
        "queue.buffering.max.messages": 1_000_000,
    }
    create_topic(bs, "idem-1k")
    idem = Producer({**base, "enable.idempotence": True})  # acks=all, like a txn producer
    produce_all(idem, "idem-1k", b"warm", 10)
    t0 = time.perf_counter()
    produce_all(idem, "idem-1k", value, n)
    idem_dt = time.perf_counter() - t0

    create_topic(bs, "txn-1k")
    txn = Producer({**base, "transactional.id": "bench-txn"})
    txn.init_transactions(30)
    txn.begin_transaction()
    produce_all(txn, "txn-1k", b"warm", 10)
    txn.commit_transaction(30)
    commits: list[float] = []
    t0 = time.perf_counter()
    for _ in range(n_txn):
        txn.begin_transaction()
        for _i in range(TXN_RECORDS):
            while True:
                try:
                    txn.produce("txn-1k", value)
                    break
                except BufferError:
                    txn.poll(0.05)
        c0 = time.perf_counter()
        txn.commit_transaction(30)  # flushes the transaction's records first
        commits.append((time.perf_counter() - c0) * 1000)
    txn_dt = time.perf_counter() - t0
    mb = n * len(value) / 1e6
    print(
        f"transactions: {n_txn} x {TXN_RECORDS} records of 1 KiB ({mb:.1f} MB each way), "
        "one partition, acks=all"
    )
    hdr = f"{'producer':34} {'records':>8} {'s':>8} {'MB/s':>8} {'txn/s':>8}"
    print(hdr)
    print("-" * len(hdr))
    print(f"{'idempotent, no transaction':34} {n:>8} {idem_dt:>8.2f} {mb / idem_dt:>8.1f} {'':>8}")
    print(
        f"{'transactional, 100 per txn':34} {n:>8} {txn_dt:>8.2f} {mb / txn_dt:>8.1f} "
        f"{n_txn / txn_dt:>8.0f}"
    )
    print(
        f"commit_transaction latency ms: p50 {pct(commits, 0.5):.1f}  "
        f"p99 {pct(commits, 0.99):.1f}  max {max(commits):.1f}"
    )


# -- many partitions (issue 17) -----------------------------------------------------------


def bench_partitions(args: argparse.Namespace) -> None:
    """One compacted topic of ``args.partitions`` partitions in a broker process."""
    import os
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from reliability.kit import BrokerProcess, process_stats

    n = args.partitions
    topic = "many"
    tmp = Path(tempfile.mkdtemp(prefix="kompakt-bench-partitions-"))
    broker = BrokerProcess(
        tmp / "data",
        {
            "kompakt.cleaner.engine": "local",
            "log.cleaner.enable": "false",  # the cleans timed are the POSTed ones
            "kompakt.log.max.open.segments": str(args.max_open_segments),
            "num.partitions": "1",
        },
    )
    rows: list[tuple[str, str]] = []

    def stats(step: str) -> None:
        rss, fds, _pending, seg_fds = process_stats(broker.pid)
        rows.append((step, f"RSS {rss / 2**20:.0f} MiB, fds {fds} ({seg_fds} segment files)"))

    def start(step: str) -> float:
        t = time.perf_counter()
        broker.start(timeout=300)
        dt = time.perf_counter() - t
        rows.append((f"start: {step}", f"{dt:.2f} s (spawn to port accepting)"))
        return dt

    def metadata(step: str, times: int = 5) -> None:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 3})
        lat = []
        for _ in range(times):
            t = time.perf_counter()
            md = admin.list_topics(timeout=120)
            lat.append(time.perf_counter() - t)
        parts = sum(len(t.partitions) for t in md.topics.values())
        del admin
        rows.append(
            (
                f"metadata: {step}",
                f"p50 {pct(lat, 0.5) * 1000:.0f} ms, max {max(lat) * 1000:.0f} ms "
                f"({parts} partitions, all topics)",
            )
        )

    try:
        start("empty data dir")
        t = time.perf_counter()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 3})
        admin.create_topics(
            [
                NewTopic(
                    topic,
                    n,
                    1,
                    config={
                        "cleanup.policy": "compact",
                        "segment.bytes": "4096",
                        "min.cleanable.dirty.ratio": "0.01",
                    },
                )
            ],
            request_timeout=600,
        )[topic].result(600)
        rows.append(("create topic", f"{n} partitions in {time.perf_counter() - t:.1f} s"))
        del admin
        stats("after create")
        metadata("after create")

        # produce: every partition in turn, keys repeating per partition (compactable)
        p = producer(broker.bootstrap, "1", linger_ms=20)
        p.produce(topic, b"warm", b"warm", partition=0)
        p.flush(60)
        value = b"v" * 100
        total = n * args.records_per_partition
        t = time.perf_counter()
        for i in range(total):
            part = i % n
            key = b"k%d" % ((i // n) % 10)
            while True:
                try:
                    p.produce(topic, value, key, partition=part)
                    break
                except BufferError:
                    p.poll(0.05)
            if i % 5000 == 0:
                p.poll(0)
        left = p.flush(600)
        dt = time.perf_counter() - t
        del p  # no reconnect attempts (and their log lines) across the restarts below
        rows.append(
            (
                "produce round-robin",
                f"{total} x 100 B to all {n} partitions: {total * 100 / 1e6 / dt:.2f} MB/s, "
                f"{total / dt:.0f} rec/s ({left} undelivered)",
            )
        )
        stats("after produce")

        # fetch every record of a sample of partitions (assign, no group)
        sample = list(range(0, n, max(1, n // 200)))
        c = Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": "bench-partitions",
                "enable.auto.commit": False,
                "log_level": 3,
            }
        )
        c.assign([TopicPartition(topic, q, OFFSET_BEGINNING) for q in sample])
        want = len(sample) * args.records_per_partition
        got = 0
        t = time.perf_counter()
        deadline = t + 300
        while got < want and time.perf_counter() < deadline:
            for m in c.consume(1000, 1.0):
                if m.error() is None and m.value() == value:
                    got += 1
        dt = time.perf_counter() - t
        c.close()
        rows.append(
            (
                "fetch sample",
                f"{got}/{want} records of {len(sample)} partitions in {dt:.2f} s",
            )
        )
        stats("after fetch")

        # clean a few partitions on demand
        t = time.perf_counter()
        written = read = 0
        statuses: collections.Counter[str] = collections.Counter()
        cleaned = list(range(0, n, max(1, n // 10)))
        for q in cleaned:
            req = urllib.request.Request(
                f"http://127.0.0.1:{broker.admin_port}/v1/compact",
                data=json.dumps({"topic": topic, "partition": q}).encode(),
                headers={"Content-Type": "application/json"},
                method="POST",
            )
            with urllib.request.urlopen(req, timeout=600) as resp:
                body = json.loads(resp.read())
            for r in body.get("results") or []:
                statuses[r["status"] + (f" ({r['reason']})" if r.get("reason") else "")] += 1
                st = {**r, **(r.get("stats") or {})}
                read += st.get("records_read", 0)
                written += st.get("records_written", 0)
        rows.append(
            (
                "compact",
                f"{len(cleaned)} partitions in {time.perf_counter() - t:.2f} s "
                f"({read} records read, {written} written; {dict(statuses)})",
            )
        )
        t = time.perf_counter()
        listing = json.loads(broker.admin_get("/v1/partitions", timeout=300))
        rows.append(
            (
                "GET /v1/partitions",
                f"{len(listing.get('partitions', []))} rows in {time.perf_counter() - t:.2f} s",
            )
        )
        stats("after compact")

        t = time.perf_counter()
        broker.stop(timeout=600)
        rows.append(("clean shutdown", f"{time.perf_counter() - t:.2f} s (SIGTERM to exit)"))
        start("after a clean shutdown")
        stats("after clean restart")
        metadata("after clean restart")
        broker.kill()
        start("after SIGKILL (recovery)")
        stats("after SIGKILL restart")
        metadata("after SIGKILL restart", times=2)
    finally:
        broker.kill()
        load = os.getloadavg()
        print(
            f"many partitions: {n} partitions, kompakt.log.max.open.segments="
            f"{args.max_open_segments}, {os.cpu_count()} cores, load average "
            f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (shared machine)"
        )
        for step, text in rows:
            print(f"{step:34} {text}")
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
