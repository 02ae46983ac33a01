"""Broker produce/consume throughput against the client's own ceiling, produce latency
while a compaction runs, and transactional produce.

Starts a broker and a protocol sink (:mod:`protocol_sink`: the same Kafka protocol,
nothing stored), then prints:

* produce MB/s and records/s (confluent-kafka ``Producer``, linger.ms=5, batch.size=1 MiB)
  for 100-byte and 1 KiB values, with acks=1 and acks=all, and consume MB/s from the
  beginning (confluent ``Consumer`` with ``assign``, no group), each against kompakt and
  against the sink, back to back; ``÷ sink`` is kompakt's figure over the sink's (the
  client's ceiling with the same client and config: 1.0 means the broker costs nothing),
  and ``÷ TCP`` the same payload bytes over a bare loopback socket. The broker
  (``kompakt serve``) and the sink run in processes of their own (:mod:`served`), as a
  client meets a broker; ``--in-process`` runs both as threads of this process instead,
  where the client's Python and the server's share one interpreter lock and the
  client's own queue grows while it waits for it;
* produce p50/p99 delivery latency (acks=1, paced) with no compaction, and while
  ``POST /v1/compact`` cleans a ~50 MB compacted topic full of duplicate keys;
* transactions (issue 15): 1 KiB records, 100 per transaction, MB/s of a transactional
  producer (begin, 100 produces, commit, one transaction after the other) next to an
  idempotent non-transactional producer (acks=all) writing the same records in the same
  run, and the commit latency p50/p99 (``commit_transaction`` call to return: EndTxn,
  which waits for the batches in flight; the markers follow it);
* consumer groups (:mod:`bench_groups`): offset commits/s and rebalance time.

The other sections run against a broker in this process (``start_test_broker``).
The broker's background cleaner is off by default (``--background-cleaner`` turns it on)
so that the compaction measured is the one the admin POST starts, not one that already
happened while the topic was filled. MB are 10^6 bytes of record values (payload).

Sections of their own, each also a script: ``--cleaner-throttle`` (:mod:`bench_throttle`),
``--security`` (:mod:`bench_security`), ``--partitions N`` (:mod:`bench_partitions`).

Run: ``.venv/bin/python benchmarks/bench_broker.py [--scale 0.2] [--throughput-only |
--groups-only | --txn-only]``.
"""

from __future__ import annotations

import argparse
import functools
import json
import shutil
import tempfile
import threading
import time
import urllib.request

import bench_groups
import bench_partitions
import bench_security
import bench_throttle
import txn_producers
from bench_throughput import throughput
from broker_kit import (
    create_topic,
    load_average,
    pct,
    produce_all,
    producer,
    send,
)
from confluent_kafka import Producer
from protocol_sink import ProtocolSink
from served import ServedBroker, ServedSink, cpu_of

from kompakt.broker.app import start_test_broker


class LatencyProbe:
    """Paced produces (acks=1 unless told); per-message delivery-callback latency in ms."""

    def __init__(self, bootstrap: str, topic: str, rate: int, linger_ms: int, acks: str = "1"):
        self.p = producer(bootstrap, acks, linger_ms)
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of the record counts")
    # a round of 0.3-0.5 s: at 50,000 x 1 KiB (0.1 s) the sink's rounds swung 311-887 MB/s,
    # at 200,000 they held within 10%
    ap.add_argument("--small", type=int, default=400_000, help="records of 100 B")
    ap.add_argument("--large", type=int, default=200_000, help="records of 1 KiB")
    ap.add_argument("--compact-mb", type=float, default=50.0, help="compacted topic size")
    ap.add_argument("--compact-keys", type=int, default=2_000, help="distinct keys in it")
    ap.add_argument("--rate", type=int, default=1_000, help="latency probe msgs/s")
    ap.add_argument("--latency-linger-ms", type=int, default=5)
    ap.add_argument("--baseline-seconds", type=float, default=5.0)
    ap.add_argument("--background-cleaner", action="store_true")
    ap.add_argument(
        "--repeat", type=int, default=3, help="rounds of the throughput cases (best kept)"
    )
    ap.add_argument(
        "--throughput-only",
        action="store_true",
        help="only produce/consume MB/s against kompakt and the sink (quick)",
    )
    ap.add_argument(
        "--latency-only",
        action="store_true",
        help="only the produce latency probe, acks=1 and acks=all, no compaction (quick)",
    )
    ap.add_argument(
        "--groups-only", action="store_true", help="only the consumer-group section (quick)"
    )
    ap.add_argument(
        "--security",
        action="store_true",
        help="only 1 KiB produce/consume over SASL_SSL (SCRAM-SHA-512) next to PLAINTEXT",
    )
    ap.add_argument(
        "--separate-processes",
        action="store_true",
        help="with --txn-only, the transactions with the broker (kompakt serve) and the "
        "sink each in a process of its own (the throughput cases always are, unless "
        "--in-process)",
    )
    ap.add_argument(
        "--in-process",
        action="store_true",
        help="the throughput cases with the broker and the sink as threads of this "
        "process, sharing the client's interpreter lock (how this bench ran before)",
    )
    ap.add_argument("--txns", type=int, default=500, help="transactions of 100 x 1 KiB")
    ap.add_argument(
        "--txn-producers",
        type=int,
        default=4,
        help="transactional producers side by side after the one alone (1: none)",
    )
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
        "--cleaner-throttle",
        action="store_true",
        help="only produce p99 idle vs during a large clean, per cleaner I/O limit",
    )
    bench_groups.add_arguments(ap)
    bench_partitions.add_arguments(ap)
    bench_throttle.add_arguments(ap)
    args = ap.parse_args()
    if args.partitions:
        bench_partitions.bench_partitions(args)
        return
    if args.cleaner_throttle:
        bench_throttle.bench_cleaner_throttle(args)
        return
    if args.security:
        bench_security.bench_security(args)
        return

    overrides = {
        "kompakt.cleaner.engine": "local",
        "log.cleaner.backoff.ms": "200",
        **bench_groups.GROUP_OVERRIDES,
    }
    if not args.background_cleaner:
        overrides["log.cleaner.enable"] = "false"
    if args.txn_only and args.separate_processes:
        with ServedBroker(overrides) as served:
            bench_transactions(served, args)
        return
    if args.throughput_only and not args.in_process:
        with ServedBroker(overrides) as served:
            throughput(served, args)
        return
    tmp = tempfile.mkdtemp(prefix="kompakt-bench-broker-")
    b = start_test_broker(tmp, **overrides)
    try:
        if args.txn_only:
            bench_transactions(b, args)
            return
        if args.latency_only:
            print(f"before: {load_average()}")
            idle_latency(b, args)
            print(f"after: {load_average()}")
            return
        if not args.groups_only:
            if args.in_process:
                throughput(b, args)
            else:
                with ServedBroker(overrides) as served:
                    throughput(served, args)
            if args.throughput_only:
                return
            print()
            latency(b, args)
            print()
            bench_transactions(b, args)
            print()
        bench_groups.bench_groups(b, args)
    finally:
        b.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def _latency_table(args: argparse.Namespace, rows: list[tuple[str, list[float]]]) -> None:
    print(
        f"latency probe: 100 B values, {args.rate} msg/s, "
        f"linger.ms={args.latency_linger_ms}, delivery-callback latency"
    )
    hdr = f"{'produce latency':28} {'msgs':>7} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}"
    print(hdr)
    print("-" * len(hdr))
    for name, xs in rows:
        print(
            f"{name:28} {len(xs):>7} {pct(xs, 0.5):>8.2f} {pct(xs, 0.99):>8.2f} "
            f"{max(xs, default=float('nan')):>8.2f}"
        )


def _probe_idle(b, args: argparse.Namespace, topic: str, acks: str) -> list[float]:
    create_topic(b.bootstrap, topic)
    probe = LatencyProbe(b.bootstrap, topic, args.rate, args.latency_linger_ms, acks)
    t_end = time.perf_counter() + args.baseline_seconds
    try:
        return probe.run(lambda: time.perf_counter() >= t_end)
    finally:
        probe.close()


def idle_latency(b, args: argparse.Namespace) -> None:
    """Produce latency, paced, no compaction: acks=1, then acks=all (issue 28: p50 at
    most 2 ms at 1,000 msg/s with acks=all, whose answer waits for the fsync)."""
    rows = [
        ("acks=1, no compaction", _probe_idle(b, args, "latency-acks-1", "1")),
        ("acks=all, no compaction", _probe_idle(b, args, "latency-acks-all", "all")),
    ]
    _latency_table(args, rows)


def latency(b, args: argparse.Namespace) -> None:
    """Produce latency (paced) idle, acks=1 and acks=all, and with acks=1 while
    POST /v1/compact cleans a topic."""
    bs = b.bootstrap

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

    base_all = _probe_idle(b, args, "latency-acks-all", "all")
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
    rows = [
        ("acks=1, no compaction", base),
        ("acks=1, during compaction", during),
        ("acks=all, no compaction", base_all),
    ]
    _latency_table(args, rows)


TXN_RECORDS = 100  # records per transaction (issue 15)


def bench_transactions(b, args: argparse.Namespace) -> None:
    """Transactional vs idempotent produce of the same 1 KiB records, and commit latency;
    then the same transactional loop against the protocol sink (AddPartitionsToTxn and
    EndTxn answered at once, nothing stored), the client's own ceiling for transactions."""
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
    separate = isinstance(b, ServedBroker)
    create_topic(bs, "idem-1k")
    idem = Producer({**base, "enable.idempotence": True})  # acks=all, like a txn producer
    produce_all(idem, "idem-1k", b"warm", 10)
    t0 = time.perf_counter()
    produce_all(idem, "idem-1k", value, n)
    idem_dt = time.perf_counter() - t0

    import txn_pieces  # only here: where a transaction's time goes on the broker

    def transaction_loop(conf: dict, topic: str) -> tuple[float, list[float]]:
        """(seconds, commit latencies in ms) of ``n_txn`` transactions of ``TXN_RECORDS``
        records each, one after the other, by one transactional producer, after a warm-up
        transaction (the id's InitProducerId and the topic's metadata)."""
        create_topic(conf["bootstrap.servers"], topic)
        txn = Producer({**conf, "transactional.id": "bench-txn"})
        txn.init_transactions(30)
        txn.begin_transaction()
        produce_all(txn, topic, b"warm", 10)
        txn.commit_transaction(30)
        commits: list[float] = []
        ours = conf["bootstrap.servers"] == bs
        if ours and not separate:
            before = txn_pieces.snapshot(b)
        cpu0 = cpu_of(b) if ours else 0.0
        t0 = time.perf_counter()
        for _ in range(n_txn):
            txn.begin_transaction()
            for _i in range(TXN_RECORDS):
                send(txn, topic, value)
            c0 = time.perf_counter()
            txn.commit_transaction(30)  # flushes the transaction's records first
            commits.append((time.perf_counter() - c0) * 1000)
        dt = time.perf_counter() - t0
        if ours and not separate:
            pieces.extend(txn_pieces.report(before, txn_pieces.snapshot(b), n_txn))
        elif ours:
            spent = (cpu_of(b) - cpu0) / n_txn * 1000
            pieces.append(f"  the broker process's CPU: {spent:.2f} ms per txn")
        return dt, commits

    pieces: list[str] = []
    txn_dt, commits = transaction_loop(base, "txn-1k")
    k = args.txn_producers
    each = max(20, n_txn // max(1, k))  # transactions per producer side by side
    if k > 1:
        ours = txn_producers.side_by_side(bs, base, k, each, TXN_RECORDS, "par")
    sink_topics = [("txn-1k", 1024)] + [(f"par-{i}", 1024) for i in range(k)]
    with ServedSink(sink_topics) if separate else ProtocolSink() as sink:
        ceiling_dt, ceiling_commits = transaction_loop(
            {**base, "bootstrap.servers": sink.bootstrap}, "txn-1k"
        )
        if k > 1:
            theirs = txn_producers.side_by_side(sink.bootstrap, base, k, each, TXN_RECORDS, "par")
    mb = n * len(value) / 1e6
    print(
        f"transactions: {n_txn} x {TXN_RECORDS} records of 1 KiB ({mb:.1f} MB each way), "
        "one partition, acks=all"
        + (", broker and sink each a process of its own" if separate else "")
    )
    hdr = f"{'producer':34} {'records':>8} {'s':>8} {'MB/s':>8} {'txn/s':>8}"
    print(hdr)
    print("-" * len(hdr))
    print(f"{'idempotent, no transaction':34} {n:>8} {idem_dt:>8.2f} {mb / idem_dt:>8.1f} {'':>8}")
    for name, dt in (
        ("transactional, 100 per txn", txn_dt),
        ("transactional, sink (ceiling)", ceiling_dt),
    ):
        print(f"{name:34} {n:>8} {dt:>8.2f} {mb / dt:>8.1f} {n_txn / dt:>8.0f}")
    print(
        f"commit_transaction latency ms: p50 {pct(commits, 0.5):.1f}  "
        f"p99 {pct(commits, 0.99):.1f}  max {max(commits):.1f}"
        f"  (sink: p50 {pct(ceiling_commits, 0.5):.1f})"
    )
    print(txn_ratio_line(idem_dt, txn_dt))
    print(f"transactional / ceiling: {ceiling_dt / txn_dt:.2f}x  (the client's own limit: 1.0)")
    print(
        f"ceiling / idempotent: {idem_dt / ceiling_dt:.2f}x  (the most transactional / "
        "idempotent can be with this client, whatever the broker)"
    )
    where = "its own process" if separate else "this process: broker and client"
    print(f"where a transaction's time goes on kompakt ({where}):")
    print("\n".join(pieces))
    if k > 1:
        print("\n".join(txn_producers.report(k, each, ours, theirs)))


def txn_ratio_line(idem_dt: float, txn_dt: float) -> str:
    """Issue 28's must-show: transactional MB/s over idempotent MB/s of the same
    records in the same run (at least 0.5), with the machine's load then."""
    return f"transactional / idempotent: {idem_dt / txn_dt:.2f}x  ({load_average()})"


if __name__ == "__main__":
    main()
