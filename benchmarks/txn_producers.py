"""bench_broker's transactions with several producers at once: ``--txn-producers``
transactional producers, each with its own ``transactional.id`` and partition, commit
side by side, next to as many idempotent producers sending the same records, against
kompakt and against the protocol sink.

One transactional producer waits for three round trips a transaction
(AddPartitionsToTxn, Produce, EndTxn): with confluent-kafka against a sink that
answers at once it reaches only 0.26-0.30x its idempotent throughput, whatever the
broker does. Producers side by side overlap those waits, as an application scales
exactly-once work (Kafka Streams runs a transactional producer per stream thread): the
sink's transactional figure then comes near the idempotent one, and what is left
between kompakt's and the sink's is the broker's own cost of a transaction."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from broker_kit import create_topic, produce_all, send
from confluent_kafka import Producer

RECORD = b"t" * 1024


def side_by_side(
    bootstrap: str, base: dict, producers: int, txns: int, records: int, tag: str
) -> tuple[float, float]:
    """(idempotent MB/s, transactional MB/s) of ``producers`` producers at once, each
    sending ``txns`` x ``records`` records of 1 KiB to a partition of its own, the
    transactional ones ``records`` to a transaction."""
    topics = [f"{tag}-{i}" for i in range(producers)]
    for topic in topics:
        create_topic(bootstrap, topic)
    conf = {**base, "bootstrap.servers": bootstrap}
    idem = [Producer({**conf, "enable.idempotence": True}) for _ in topics]
    txn = [Producer({**conf, "transactional.id": f"{tag}-txn-{i}"}) for i in range(producers)]
    for p, topic in zip(idem, topics, strict=True):
        produce_all(p, topic, b"warm", 10)  # connected, metadata and producer id in hand
    for p, topic in zip(txn, topics, strict=True):
        p.init_transactions(30)
        p.begin_transaction()
        produce_all(p, topic, b"warm", 10)
        p.commit_transaction(30)

    def idempotent(i: int) -> None:
        produce_all(idem[i], topics[i], RECORD, txns * records)

    def transactional(i: int) -> None:
        p = txn[i]
        for _ in range(txns):
            p.begin_transaction()
            for _r in range(records):
                send(p, topics[i], RECORD)
            p.commit_transaction(30)

    mb = producers * txns * records * len(RECORD) / 1e6
    return mb / _together(idempotent, producers), mb / _together(transactional, producers)


def _together(fn: Callable[[int], None], n: int) -> float:
    """Seconds for ``fn(0)`` .. ``fn(n - 1)`` on threads of their own, started at once
    (confluent-kafka lets go of the interpreter lock while it waits)."""
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            fn(i)
        except BaseException as exc:  # raised on the bench's thread below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return time.perf_counter() - t0


def report(
    producers: int, txns: int, ours: tuple[float, float], sink: tuple[float, float]
) -> list[str]:
    """The section's lines: each server's two MB/s and their ratio, then kompakt's
    transactional figure over the sink's."""
    lines = [
        f"{producers} producers at once, {txns} transactions of 100 x 1 KiB each "
        "(a partition and transactional.id each):",
        f"  {'server':10} {'idempotent MB/s':>16} {'transactional MB/s':>19} {'÷':>6}",
    ]
    for name, (idem, txn) in (("kompakt", ours), ("sink", sink)):
        lines.append(f"  {name:10} {idem:>16.1f} {txn:>19.1f} {txn / idem:>6.2f}")
    lines.append(
        f"  transactional, kompakt / sink: {ours[1] / sink[1]:.2f}x  (the broker's own "
        "cost of a transaction, with the clients' waits overlapped)"
    )
    return lines
