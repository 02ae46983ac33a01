"""Consumer-group figures of one broker: offset commits/s and rebalance time.

Offset commits/s from one subscribed confluent ``Consumer`` (synchronous, asynchronous,
and synchronous with 10 partitions per commit), and the time of a rebalance to three
members: from the third member's ``subscribe()`` until all three have their new
assignment (``on_assign``), at librdkafka's default heartbeat interval (3 s: members hear
of a rebalance on their next heartbeat) and at 300 ms.

Run: ``.venv/bin/python benchmarks/bench_groups.py [--scale 0.2]``
(``bench_broker.py --groups-only`` runs the same on its broker).
"""

from __future__ import annotations

import argparse
import random
import shutil
import tempfile
import threading
import time

from broker_kit import pct
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kompakt.broker.app import start_test_broker

# first joins of the timed groups are not delayed; the timed rebalance (a member joining
# a Stable group) never waits for this delay anyway
GROUP_OVERRIDES = {"group.initial.rebalance.delay.ms": "0"}


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


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--commits", type=int, default=5_000, help="offset commits per case")
    ap.add_argument("--rebalance-runs", type=int, default=5, help="rebalances timed per case")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of the commit counts")
    add_arguments(ap)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="kompakt-bench-groups-")
    b = start_test_broker(
        tmp, **{"kompakt.cleaner.engine": "local", "log.cleaner.enable": "false"}, **GROUP_OVERRIDES
    )
    try:
        bench_groups(b, args)
    finally:
        b.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
