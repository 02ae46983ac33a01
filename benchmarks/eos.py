"""Exactly-once consume-transform-produce against kompakt (issue 15's first must-show).

An input topic (2 partitions) holds ``per_txn * committed`` records; a transactional loop
reads them with a read_committed consumer in a group, writes each one transformed to an
output topic (2 partitions) and sends the consumer's offsets with
``send_offsets_to_transaction``; transaction ``t`` is aborted when ``t % 3 == 2`` and
its input is read again (the consumer seeks back to where the transaction began), so the
next transaction writes it once more. Kafka's promise (KIP-98) is then checked:

* a READ_COMMITTED consumer of the output reads each input record exactly once, only
  from committed transactions;
* a READ_UNCOMMITTED consumer reads those plus every aborted transaction's copies;
* the group's committed offsets are what the last committed transaction sent (the
  input's end when that transaction was the last), read with ``require_stable``.

Each output value is ``<input value>|t<transaction number>``, so the check knows which
transaction wrote every copy. ``run_confluent`` uses librdkafka's transactional
producer, ``run_aiokafka`` aiokafka's; both return the figures that ``main`` prints.
``tests/broker/test_transactions_eos.py`` runs the same functions at a few hundred
transactions.

Run: ``.venv/bin/python benchmarks/eos.py [--transactions 10000] [--client confluent|aiokafka|both]``
(starts a broker in this process on free 127.0.0.1 ports).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

TIMEOUT = 30
PARTITIONS = 2


def aborted(txn: int) -> bool:
    """Every third transaction is aborted (issue 15)."""
    return txn % 3 == 2


@dataclass
class Figures:
    client: str
    transactions: int
    committed: int
    aborted: int
    inputs: int  # records read by committed transactions (each once in the output)
    per_txn: int
    seconds: float
    read_committed: int = 0
    read_uncommitted: int = 0
    group_offsets: dict[int, int] = field(default_factory=dict)
    input_ends: dict[int, int] = field(default_factory=dict)  # after the last commit
    problems: list[str] = field(default_factory=list)
    input_topic: str = ""
    output_topic: str = ""
    group: str = ""

    def lines(self) -> list[str]:
        per_s = self.transactions / self.seconds if self.seconds else 0.0
        return [
            f"client                          {self.client}",
            f"transactions                    {self.transactions} "
            f"({self.committed} committed, {self.aborted} aborted)",
            f"input records                   {self.inputs}",
            f"loop time                       {self.seconds:.1f} s ({per_s:.0f} transactions/s)",
            f"read_committed output records   {self.read_committed}",
            f"read_uncommitted output records {self.read_uncommitted}",
            f"group offsets / committed ends  {self.group_offsets} / {self.input_ends}",
            "exactly once                    "
            + ("yes" if not self.problems else "NO: " + "; ".join(self.problems[:5])),
        ]


def create_topics(bootstrap: str, *names: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(n, PARTITIONS, 1) for n in names], operation_timeout=TIMEOUT
    )
    for f in futures.values():
        f.result(TIMEOUT)


def fill_input(bootstrap: str, topic: str, n: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i in range(n):
        p.produce(topic, value=b"in-%07d" % i, partition=i % PARTITIONS)
        if i % 10_000 == 0:
            p.poll(0)
    assert p.flush(TIMEOUT) == 0, "input not acknowledged"


def input_consumer(bootstrap: str, group: str, topic: str) -> Consumer:
    """The loop's read_committed input reader. Its fetches long-poll for only 10 ms
    (``fetch.wait.max.ms``, librdkafka's default 500): once it has read the whole input
    its next fetch waits at the end, and the seek back after an aborted transaction
    waits for that fetch to return, so the default made every aborted transaction cost
    ~0.4 s of the loop's time that no broker write caused."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": 10,
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    return c


def take(c: Consumer, n: int) -> list[Any]:
    """The next ``n`` input records (the input holds enough)."""
    got: list[Any] = []
    deadline = time.monotonic() + TIMEOUT
    while len(got) < n:
        assert time.monotonic() < deadline, f"input ran dry after {len(got)} of {n}"
        for m in c.consume(n - len(got), 1.0):
            if m.error() is None:
                got.append(m)
    return got


def run_confluent(bootstrap: str, transactions: int, per_txn: int = 3) -> Figures:
    """The loop with librdkafka's transactional producer; then :func:`verify`."""
    src, dst, group = f"eos-in-{time.time_ns()}", f"eos-out-{time.time_ns()}", "eos-group"
    committed_txns = transactions - sum(aborted(t) for t in range(transactions))
    inputs = committed_txns * per_txn
    create_topics(bootstrap, src, dst)
    # a last transaction that is aborted reads records no committed one takes
    fill_input(bootstrap, src, inputs + (per_txn if aborted(transactions - 1) else 0))
    c = input_consumer(bootstrap, group, src)
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"eos-{dst}", "linger.ms": 0})
    p.init_transactions(TIMEOUT)
    start = {q: 0 for q in range(PARTITIONS)}  # first input record of the next txn
    t0 = time.monotonic()
    try:
        for t in range(transactions):
            batch = take(c, per_txn)
            ends = dict(start)  # the next record of each partition after this batch
            for m in batch:
                ends[m.partition()] = m.offset() + 1
            p.begin_transaction()
            for m in batch:
                p.produce(dst, value=m.value() + b"|t%d" % t, partition=m.partition())
            # on the broker before the outcome is decided: abort_transaction purges what
            # librdkafka has not sent yet, and the aborted copies are checked below
            assert p.flush(TIMEOUT) == 0
            offsets = [TopicPartition(src, q, off) for q, off in ends.items()]
            p.send_offsets_to_transaction(offsets, c.consumer_group_metadata(), TIMEOUT)
            if aborted(t):
                p.abort_transaction(TIMEOUT)
                for q, off in start.items():  # read this transaction's input again
                    c.seek(TopicPartition(src, q, off))
            else:
                p.commit_transaction(TIMEOUT)
                start = ends
    finally:
        c.close()
    seconds = time.monotonic() - t0
    ends = start
    return finish(
        "confluent-kafka", bootstrap, transactions, per_txn, seconds, ends, src, dst, group
    )


def run_aiokafka(bootstrap: str, transactions: int, per_txn: int = 3) -> Figures:
    """The loop with aiokafka's transactional producer and consumer; then :func:`verify`."""
    return asyncio.run(_run_aiokafka(bootstrap, transactions, per_txn))


async def _run_aiokafka(bootstrap: str, transactions: int, per_txn: int) -> Figures:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka import TopicPartition as ATP

    src, dst, group = f"eos-ain-{time.time_ns()}", f"eos-aout-{time.time_ns()}", "eos-agroup"
    committed_txns = transactions - sum(aborted(t) for t in range(transactions))
    inputs = committed_txns * per_txn
    create_topics(bootstrap, src, dst)
    # a last transaction that is aborted reads records no committed one takes
    fill_input(bootstrap, src, inputs + (per_txn if aborted(transactions - 1) else 0))
    tps = [ATP(src, q) for q in range(PARTITIONS)]
    c = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
    )
    p = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"eos-{dst}")
    await c.start()
    await p.start()
    c.assign(tps)
    t0 = time.monotonic()
    pending: collections.deque[Any] = collections.deque()  # fetched, not yet in a txn
    start = {tp: 0 for tp in tps}  # the first input record of the next transaction
    try:
        for t in range(transactions):
            batch: list[Any] = []
            deadline = time.monotonic() + TIMEOUT
            while len(batch) < per_txn:
                assert time.monotonic() < deadline, "input ran dry"
                if not pending:
                    got = await c.getmany(timeout_ms=1000, max_records=per_txn - len(batch))
                    for records in got.values():
                        pending.extend(records)
                    continue
                batch.append(pending.popleft())
            # the offsets after this batch: the next record of each partition
            ends = dict(start)
            for m in batch:
                ends[ATP(m.topic, m.partition)] = m.offset + 1
            await p.begin_transaction()
            for m in batch:
                await p.send(dst, value=m.value + b"|t%d" % t, partition=m.partition)
            await p.send_offsets_to_transaction(ends, group)
            if aborted(t):
                await p.abort_transaction()
                pending.clear()
                for tp, off in start.items():
                    c.seek(tp, off)
            else:
                await p.commit_transaction()
                start = ends
    finally:
        await p.stop()
        await c.stop()
    seconds = time.monotonic() - t0
    ends = {tp.partition: off for tp, off in start.items()}
    return finish("aiokafka", bootstrap, transactions, per_txn, seconds, ends, src, dst, group)


def finish(
    client: str,
    bootstrap: str,
    transactions: int,
    per_txn: int,
    seconds: float,
    ends: dict[int, int],
    src: str,
    dst: str,
    group: str,
) -> Figures:
    """The loop's figures (``ends``: the input offsets the last commit sent), verified."""
    committed = transactions - sum(aborted(t) for t in range(transactions))
    fig = Figures(
        client,
        transactions,
        committed,
        transactions - committed,
        committed * per_txn,
        per_txn,
        seconds,
        input_topic=src,
        output_topic=dst,
        group=group,
        input_ends=ends,
    )
    return verify(bootstrap, fig, src, dst, group)


def read_all(bootstrap: str, topic: str, isolation: str) -> list[bytes]:
    """Every record of ``topic`` a consumer with ``isolation`` reads, up to the end."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{time.time_ns()}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    tps = [TopicPartition(topic, q) for q in range(PARTITIONS)]
    ends = [c.get_watermark_offsets(tp, TIMEOUT, cached=False)[1] for tp in tps]
    c.assign([TopicPartition(topic, q, 0) for q in range(PARTITIONS)])
    got: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT
    try:
        while any(
            0 < end and pos.offset < end for pos, end in zip(c.position(tps), ends, strict=True)
        ):
            assert time.monotonic() < deadline, f"{topic}: read {len(got)}, not at {ends}"
            for m in c.consume(10_000, 0.5):
                if m.error() is None:
                    got.append(m.value())
    finally:
        c.close()
    return got


def verify(bootstrap: str, fig: Figures, src: str, dst: str, group: str) -> Figures:
    # input record i sits at offset i // PARTITIONS of partition i % PARTITIONS (one
    # idempotent producer): the committed transactions read those below their ends
    filled = fig.inputs + fig.per_txn
    expected = collections.Counter(
        b"in-%07d" % i
        for i in range(filled)
        if i // PARTITIONS < fig.input_ends.get(i % PARTITIONS, 0)
    )
    if sum(expected.values()) != fig.inputs:
        fig.problems.append(f"committed transactions read {sum(expected.values())} inputs")
    rc = read_all(bootstrap, dst, "read_committed")
    ru = read_all(bootstrap, dst, "read_uncommitted")
    fig.read_committed, fig.read_uncommitted = len(rc), len(ru)

    def split(values: list[bytes]) -> list[tuple[bytes, int]]:
        out = []
        for v in values:
            payload, _, txn = v.rpartition(b"|t")
            out.append((payload, int(txn)))
        return out

    rc_split, ru_split = split(rc), split(ru)
    got = collections.Counter(v for v, _t in rc_split)
    if got != expected:
        missing, extra = expected - got, got - expected
        fig.problems.append(
            f"read_committed output is not each input exactly once: {len(missing)} missing "
            f"(e.g. {sorted(missing)[:3]}), {len(extra)} extra (e.g. {sorted(extra)[:3]})"
        )
    if any(aborted(t) for _v, t in rc_split):
        fig.problems.append("read_committed output holds an aborted transaction's record")
    ru_aborted = [v for v, t in ru_split if aborted(t)]
    if collections.Counter(v for v, t in ru_split if not aborted(t)) != expected:
        fig.problems.append("read_uncommitted committed part differs from the input")
    if len(ru_aborted) != fig.aborted * fig.per_txn:
        fig.problems.append(f"read_uncommitted holds {len(ru_aborted)} aborted copies")
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    try:
        tps = [TopicPartition(src, q) for q in range(PARTITIONS)]
        fig.group_offsets = {tp.partition: tp.offset for tp in c.committed(tps, TIMEOUT)}
    finally:
        c.close()
    if fig.group_offsets != fig.input_ends:
        fig.problems.append("group offsets are not the last committed transaction's")
    return fig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--transactions", type=int, default=10_000)
    ap.add_argument("--per-txn", type=int, default=3, help="input records per transaction")
    ap.add_argument("--client", choices=["confluent", "aiokafka", "both"], default="both")
    args = ap.parse_args()
    from kompakt.broker.app import start_test_broker

    with tempfile.TemporaryDirectory(prefix="kompakt-eos-") as data:
        b = start_test_broker(data)
        try:
            runs = {"confluent": run_confluent, "aiokafka": run_aiokafka}
            names = list(runs) if args.client == "both" else [args.client]
            failed = False
            for name in names:
                fig = runs[name](b.bootstrap, args.transactions, args.per_txn)
                print("\n".join(fig.lines()), flush=True)
                print()
                failed |= bool(fig.problems)
        finally:
            b.stop()
    raise SystemExit(1 if failed else 0)


if __name__ == "__main__":
    main()
