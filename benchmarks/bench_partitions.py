"""Many partitions (issue 17): a ``kompakt serve`` process with one compacted topic of
``--partitions`` partitions and small segments (``segment.bytes=4096``) under
``kompakt.log.max.open.segments``.

Prints the start time (process spawn to the Kafka port accepting, empty and again after
a clean shutdown and after a SIGKILL), RSS and open fds (``/proc/PID/fd``) at each step,
Metadata latency for all topics (confluent ``list_topics``), produce MB/s to all
partitions round-robin (100 B values, keyed), a fetch of every record of a sample of
partitions, and ``POST /v1/compact`` of a few partitions.

Run: ``.venv/bin/python benchmarks/bench_partitions.py --partitions 10000``
(``bench_broker.py --partitions 10000`` runs the same).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from broker_kit import pct, producer, send
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from reliability.kit import BrokerProcess, process_stats  # noqa: E402


def bench_partitions(args: argparse.Namespace) -> None:
    """One compacted topic of ``args.partitions`` partitions in a broker process."""
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
            send(p, topic, value, key, partition=part)
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


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument(
        "--max-open-segments", type=int, default=1000, help="kompakt.log.max.open.segments"
    )
    ap.add_argument(
        "--records-per-partition", type=int, default=60, help="100 B records each, round-robin"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, default=10_000, help="of the compacted topic")
    add_arguments(ap)
    bench_partitions(ap.parse_args())


if __name__ == "__main__":
    main()
