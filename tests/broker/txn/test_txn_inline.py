"""The transaction coordinator called from request handler threads
(:mod:`kompakt.broker.txn.inline`), as Kafka's ``KafkaApis`` calls its
``TransactionCoordinator``: decisions and their ``__transaction_state`` appends under
the transaction's lock (``txnMetadata.inLock``), the fsync outside it, the record
adopted under it again; timers on the loop under the same lock.

Unit checks of the helpers, then a real broker with several transactional producers at
once (confluent-kafka), whose handler threads share that lock and the fsyncs.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode
from raw_kafka import API, encode_request
from shared_kit import consume_until, wait_for

from kompakt.broker.app import start_test_broker
from kompakt.broker.txn.broker import txn_broker_if_started
from kompakt.broker.txn.inline import LockedScheduler, owe_fsync, run_inline
from kompakt.broker.txn.state import Completion, TransactionState

TIMEOUT = 30


def test_run_inline_fsyncs_without_the_lock_then_adopts_under_it() -> None:
    """An append's fsync owed inside ``run_inline`` runs after the lock is let go (other
    handlers decide meanwhile, Kafka's ``appendRecords`` callback runs outside
    ``inLock``) and the append is adopted with the lock held; outside it nothing is
    owed (the log thread fsyncs)."""
    lock = threading.RLock()
    seen: list[tuple[str, bool]] = []

    def call() -> Completion[ErrorCode]:
        answer: Completion[ErrorCode] = Completion()
        appended: Completion[ErrorCode] = Completion()
        assert owe_fsync(lambda: seen.append(("fsync", lock._is_owned())), appended)
        appended.add_done_callback(lambda code: seen.append(("adopt", lock._is_owned())))
        appended.add_done_callback(answer.complete)
        return answer

    assert run_inline(lock, call) == ErrorCode.none
    assert seen == [("fsync", False), ("adopt", True)]
    assert not owe_fsync(lambda: None, Completion())


def test_run_inline_answers_a_failed_fsync_with_its_error() -> None:
    """A failed fsync is not durable: the append completes with the storage error, as
    an acks=all append that cannot be flushed (never NONE)."""
    lock = threading.RLock()

    def call() -> Completion[ErrorCode]:
        appended: Completion[ErrorCode] = Completion()

        def fail() -> None:
            raise OSError(5, "Input/output error")

        owe_fsync(fail, appended)
        return appended

    assert run_inline(lock, call) not in (ErrorCode.none, None)


def test_run_inline_waits_for_an_answer_another_thread_gives() -> None:
    """A parked request (its id's previous transaction still completing) is answered
    by the thread that completes it, under the lock; the handler thread waits."""
    lock = threading.RLock()
    parked: Completion[ErrorCode] = Completion()

    def complete_later() -> None:
        with lock:
            parked.complete(ErrorCode.concurrent_transactions)

    timer = threading.Timer(0.05, complete_later)
    timer.start()
    try:
        assert run_inline(lock, lambda: parked) == ErrorCode.concurrent_transactions
    finally:
        timer.cancel()


def test_locked_scheduler_timers_set_and_cancelled_from_any_thread() -> None:
    """A timer asked for on a handler thread runs on the loop with the lock held (it
    decides a parked request); one cancelled from another thread never runs."""
    lock = threading.RLock()
    loop = asyncio.new_event_loop()
    runner = threading.Thread(target=loop.run_forever, daemon=True)
    runner.start()
    try:
        scheduler = LockedScheduler(loop, lambda: 0, lock)
        ran: list[tuple[bool, bool]] = []
        cancelled: list[str] = []
        scheduler.call_later(10, lambda: ran.append((lock._is_owned(), loop.is_running())))
        scheduler.call_later(10, lambda: cancelled.append("ran")).cancel()
        last = threading.Event()
        scheduler.call_later(50, last.set)
        assert last.wait(TIMEOUT)
        assert ran == [(True, True)] and cancelled == []
    finally:
        loop.call_soon_threadsafe(loop.stop)
        runner.join(TIMEOUT)
        loop.close()


def read_committed(bootstrap: str, topic: str, group: str, n: int) -> list:
    """The first ``n`` messages a read_committed consumer of a new group reads from
    the start of ``topic``."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    try:
        c.subscribe([topic])
        return consume_until(c, lambda ms: len(ms) >= n, what=f"{n} committed records")
    finally:
        c.close()


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[object]:
    b = start_test_broker(tmp_path, **{"transaction.state.log.num.partitions": 2})
    try:
        yield b
    finally:
        b.stop()


def test_concurrent_transactional_producers_commit_and_abort_exactly(broker) -> None:
    """Four producers (different ids, some sharing a ``__transaction_state``
    partition) run transactions at once, every third aborted: a read_committed
    consumer reads exactly the committed records and every id ends in
    CompleteCommit or CompleteAbort (KIP-98's atomicity with handler threads sharing
    the coordinator's lock and its fsyncs)."""
    bs = broker.bootstrap
    topic = "inline-txn"
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(TIMEOUT)
    producers, txns, per_txn = 4, 12, 5
    committed: set[bytes] = set()
    errors: list[BaseException] = []
    guard = threading.Lock()

    def run(n: int) -> None:
        try:
            p = Producer({"bootstrap.servers": bs, "transactional.id": f"inline-{n}"})
            p.init_transactions(TIMEOUT)
            for t in range(txns):
                p.begin_transaction()
                values = [f"{n}-{t}-{i}".encode() for i in range(per_txn)]
                for i, v in enumerate(values):
                    p.produce(topic, v, partition=i % 2)
                if t % 3 == 2:
                    p.abort_transaction(TIMEOUT)
                else:
                    p.commit_transaction(TIMEOUT)
                    with guard:
                        committed.update(values)
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(producers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT * 4)
    assert errors == []
    assert len(committed) == producers * txns * per_txn * 2 // 3
    got = read_committed(bs, topic, "inline-check", len(committed))
    assert sorted(m.value() for m in got) == sorted(committed)
    tb = txn_broker_if_started(broker.broker.state)
    assert tb is not None
    done = {TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT}

    def all_complete() -> bool:
        with tb.lock:
            states = [tb.coordinator.transactions[f"inline-{n}"].state for n in range(producers)]
        return all(s in done for s in states)

    wait_for(all_complete, "every id's last transaction completed")


def test_a_client_gone_right_after_end_txn_still_gets_its_markers(broker) -> None:
    """EndTxn's markers are submitted once its answer is written
    (:func:`kompakt.broker.workers.after_answer`); a client that sends EndTxn and hangs
    up at once, before the answer, must not leave its transaction in PrepareCommit:
    the markers are written, the id completes and read_committed readers get the
    records (Kafka completes a prepared transaction whatever became of the client)."""
    bs = broker.bootstrap
    topic = "hangup-txn"
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(TIMEOUT)
    p = Producer({"bootstrap.servers": bs, "transactional.id": "hangup", "linger.ms": 0})
    p.init_transactions(TIMEOUT)
    p.begin_transaction()
    for i in range(3):
        p.produce(topic, f"v{i}".encode(), partition=0)
    assert p.flush(TIMEOUT) == 0
    tb = txn_broker_if_started(broker.broker.state)
    assert tb is not None
    with tb.lock:
        meta = tb.coordinator.transactions["hangup"]
        assert meta.state == TransactionState.ONGOING
        pid, epoch = meta.producer_id, meta.producer_epoch
    body = {"transactional_id": "hangup", "producer_id": pid, "producer_epoch": epoch}
    with socket.create_connection(("127.0.0.1", broker.port), timeout=TIMEOUT) as s:
        s.sendall(encode_request(API.end_txn, 3, {**body, "committed": True}))
    # closed without reading the answer

    def complete() -> bool:
        with tb.lock:
            return meta.state == TransactionState.COMPLETE_COMMIT

    wait_for(complete, "the hung-up client's transaction completed")
    got = read_committed(bs, topic, "hangup-check", 3)
    assert [m.value() for m in got] == [b"v0", b"v1", b"v2"]
