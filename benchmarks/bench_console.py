"""Server time of the console's pages on a broker with 1,000 partitions (issue 18:
goal <= 1 s per page).

Starts a broker in this process (``start_test_broker``, local engine, background
cleaner backed off) with 100 compacted topics of 10 partitions, writes a few keyed
records with tombstones into every partition through the embedded log API (1 KiB
segments, so each partition has sealed segments), cleans a tenth of them (so the
history and cleans table have rows), then GETs each page over loopback and prints the
server time (the ``Server-Timing`` header the app sets: request in to response start)
and the client round trip: the first visit (it scans every segment once for the
record and tombstone counts, cached per sealed segment afterwards) and the median of
the next five, which the goal is judged on. The data pages are measured too, with ten
consumer groups that committed an offset for every partition (10,000 lag rows).

Run: ``.venv/bin/python benchmarks/bench_console.py [--topics 100] [--partitions 10]``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import httpx

from kompakt.broker.app import start_test_broker
from kompakt.record.encode import build_simple_batch

GOAL_S = 1.0


def server_ms(resp: httpx.Response) -> float:
    timing = resp.headers.get("server-timing", "app;dur=nan")
    return float(timing.split("dur=")[1])


def measure(client: httpx.Client, path: str, runs: int = 5) -> tuple[float, float, float]:
    """(first server ms, median server ms, median round trip ms) of GET path."""
    first = client.get(path, headers={"Accept": "text/html"})
    first.raise_for_status()
    servers, trips = [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        resp = client.get(path, headers={"Accept": "text/html"})
        trips.append((time.perf_counter() - t0) * 1000)
        resp.raise_for_status()
        servers.append(server_ms(resp))
    return server_ms(first), statistics.median(servers), statistics.median(trips)


def commit_groups(b, topics: int, partitions: int, groups: int = 10) -> int:
    """``groups`` consumer groups, each committing an offset for every partition (the
    groups page and the lag gauge then cover groups x partitions rows)."""
    from confluent_kafka import Consumer, TopicPartition

    offsets = [
        TopicPartition(f"topic-{t:03d}", p, 10) for t in range(topics) for p in range(partitions)
    ]
    for g in range(groups):
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": f"group-{g:02d}"})
        try:
            c.commit(offsets=offsets, asynchronous=False)
        finally:
            c.close()
    return groups


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--topics", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=10)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as data:
        b = start_test_broker(data, **{"log.cleaner.backoff.ms": "3600000"})
        try:
            t0 = time.perf_counter()
            now = int(time.time() * 1000)
            for t in range(args.topics):
                name = f"topic-{t:03d}"
                b.logs.create_topic(
                    name,
                    args.partitions,
                    {"cleanup.policy": "compact", "segment.bytes": "1024"},
                )
                for p in range(args.partitions):
                    plog = b.logs.get_log(name, p)
                    for i in range(40):
                        value = None if i % 9 == 8 else b"v" * 30
                        plog.append(
                            build_simple_batch([(f"k{i % 8}".encode(), value)], timestamp=now)
                        )
            total = args.topics * args.partitions
            print(f"broker with {total} partitions filled in {time.perf_counter() - t0:.1f} s")
            cleaner = b.broker.background.cleaner()
            for t in range(0, args.topics, 10):
                cleaner.compact_now(f"topic-{t:03d}")
            b.broker.history_recorder.sample_all()
            groups = commit_groups(b, args.topics, args.partitions)
            print(f"{groups} consumer groups committed offsets of every partition")
            url = f"http://127.0.0.1:{b.admin_port}"
            with httpx.Client(base_url=url, timeout=60) as client:
                rows = [
                    ("overview /", "/"),
                    ("partition page (cleaned)", "/topics/topic-000/0"),
                    ("partition page (dirty)", "/topics/topic-055/3"),
                    ("GET /v1/partitions", "/v1/partitions"),
                    ("GET /console/progress", "/console/progress"),
                    ("key inspector", "/keys?topic=topic-000&partition=0&key=k1"),
                    ("messages (json)", "/messages?topic=topic-055&partition=3&render=json"),
                    ("consumer groups", "/groups"),
                    ("one group", "/groups/group-00"),
                    ("topic configs", "/configs/topic-000"),
                    ("GET /metrics (lag gauge)", "/metrics"),
                ]
                print(
                    f"{'page':28} {'first (ms)':>11} {'server p50 (ms)':>16} {'round trip p50':>15}"
                )
                worst = 0.0
                for label, path in rows:
                    first, med, trip = measure(client, path)
                    worst = max(worst, med)
                    print(f"{label:28} {first:11.1f} {med:16.1f} {trip:15.1f}")
            verdict = "within" if worst <= GOAL_S * 1000 else "OVER"
            print(
                f"slowest server time (p50) {worst:.0f} ms: {verdict} the {GOAL_S:.0f} s goal; "
                "a first visit also scans every segment once for the record and tombstone "
                "counts (cached per sealed segment afterwards)"
            )
        finally:
            b.stop()


if __name__ == "__main__":
    main()
