"""The transaction coordinator on a manual clock: no sockets, no event loop, no sleeps.

The ``__transaction_state`` log and the data partitions' markers are an in-memory
:class:`TxnLog` whose appends either complete at once or are held until the test
releases them, so every window Kafka guards with a pending state (an append in flight,
markers being written) is stepped by hand. Time moves only through
:class:`ManualScheduler`. Each test cites the Kafka rule it checks
(``TransactionCoordinator``, ``TransactionStateManager``, ``TransactionMetadata``,
``KafkaApis``).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
)
from kio.schema.add_offsets_to_txn.v2.request import AddOffsetsToTxnRequest
from kio.schema.add_partitions_to_txn.v2.request import AddPartitionsToTxnRequest
from kio.schema.end_txn.v2.request import EndTxnRequest
from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from manual_clock import ManualScheduler

from kompakt.broker.coordinator.records import partition_for
from kompakt.broker.txn import records as rec
from kompakt.broker.txn.coordinator import TransactionCoordinator
from kompakt.broker.txn.records import TransactionLogValue
from kompakt.broker.txn.results import (
    CONFIG_KEYS,
    RETRY_BACKOFF_MS,
    InitProducerIdResult,
    MarkersWritten,
    TransactionConfig,
    TransactionDescription,
    TransactionResult,
    client_error,
)
from kompakt.broker.txn.state import (
    SHORT_MAX,
    VALID_PREVIOUS_STATES,
    Completion,
    TransactionMetadata,
    TransactionState,
)

S = TransactionState
E = ErrorCode
COMMIT, ABORT = TransactionResult.COMMIT, TransactionResult.ABORT
FIRST_PID = 1000
TIMEOUT = 60_000


@dataclass
class TxnLog:
    """``__transaction_state`` and the markers, in memory. ``hold`` / ``hold_markers``
    park each call until :meth:`release` / :meth:`release_markers`; ``fail`` answers
    the next appends with that error instead of writing."""

    records: list[tuple[int, bytes, bytes | None]] = field(default_factory=list)
    durable: list[bool] = field(default_factory=list)
    """Whether each append asked for an fsync, in order."""
    markers: list[tuple[int, int, TransactionResult, frozenset]] = field(default_factory=list)
    hold: bool = False
    hold_markers: bool = False
    fail: ErrorCode | None = None
    fail_markers: ErrorCode | None = None
    held: list[tuple[int, list, Completion[ErrorCode]]] = field(default_factory=list)
    held_markers: list[tuple[tuple, tuple, Completion[MarkersWritten]]] = field(
        default_factory=list
    )

    def append(self, partition: int, records: list, durable: bool) -> Completion[ErrorCode]:
        self.durable.append(durable)
        done: Completion[ErrorCode] = Completion()
        if self.fail is not None:
            done.complete(self.fail)
        elif self.hold:
            self.held.append((partition, records, done))
        else:
            self._write(partition, records, done)
        return done

    def _write(self, partition: int, records: list, done: Completion[ErrorCode]) -> None:
        self.records.extend((partition, k, v) for k, v in records)
        done.complete(E.none)

    def release(self, error: ErrorCode = E.none) -> None:
        partition, records, done = self.held.pop(0)
        if error == E.none:
            self._write(partition, records, done)
        else:
            done.complete(error)

    def write_markers(
        self, pid: int, epoch: int, result: TransactionResult, partitions: frozenset, complete
    ) -> Completion[MarkersWritten]:
        """The markers, then (as the broker's log thread does) the Complete record
        through :meth:`append`, not durable."""
        done: Completion[MarkersWritten] = Completion()
        marker = (pid, epoch, result, partitions)
        if self.fail_markers is not None:
            done.complete((self.fail_markers, E.none))
        elif self.hold_markers:
            self.held_markers.append((marker, complete, done))
        else:
            self._mark(marker, complete, done)
        return done

    def _mark(self, marker: tuple, complete: tuple, done: Completion[MarkersWritten]) -> None:
        self.markers.append(marker)
        self.append(*complete, False).add_done_callback(lambda e: done.complete((E.none, e)))

    def release_markers(self) -> None:
        self._mark(*self.held_markers.pop(0))

    def decoded(self) -> list[tuple[str, TransactionLogValue | None]]:
        out = []
        for _p, key, value in self.records:
            record = rec.read_record(key, value)
            assert record is not None
            out.append(record)
        return out

    def states(self, tid: str) -> list[S | None]:
        """The states written for ``tid``, None for a tombstone."""
        return [v.state if v else None for t, v in self.decoded() if t == tid]


def coordinator(
    log: TxnLog | None = None,
    scheduler: ManualScheduler | None = None,
    pids: Iterator[int] | None = None,
    **config: Any,
) -> tuple[TransactionCoordinator, TxnLog, ManualScheduler]:
    """A coordinator over ``log`` (new if None); ``pids`` is the producer id allocator,
    shared across restarts as the broker's is (ids are never handed out twice)."""
    log = log or TxnLog()
    scheduler = scheduler or ManualScheduler()
    pids = pids or itertools.count(FIRST_PID)
    tc = TransactionCoordinator(
        TransactionConfig(**config),
        scheduler,
        log.append,
        log.write_markers,
        lambda: next(pids),
    )
    return tc, log, scheduler


def init(
    tc: TransactionCoordinator,
    tid: str = "tx",
    expected: tuple[int, int] | None = None,
    timeout: int = TIMEOUT,
) -> InitProducerIdResult:
    c = tc.init_producer_id(tid, timeout, expected)
    assert c.done()
    return c.result()


def started(tc: TransactionCoordinator, tid: str = "tx", *parts: tuple[str, int]) -> tuple:
    """An Ongoing transaction of a fresh producer; its (pid, epoch)."""
    r = init(tc, tid)
    assert r.error == E.none
    assert (
        tc.add_partitions(tid, r.producer_id, r.producer_epoch, parts or [("t", 0)]).result()
        == E.none
    )
    return r.producer_id, r.producer_epoch


# -- InitProducerId ----------------------------------------------------------------------


def test_handle_init_producer_id_new_transactional_id_gets_a_producer_id_at_epoch_0() -> None:
    """``handleInitProducerId``: an unknown id gets a new producer id, epoch 0, in an
    Empty record appended before the answer."""
    tc, log, _ = coordinator()
    assert init(tc) == InitProducerIdResult(FIRST_PID, 0, E.none)
    assert log.states("tx") == [S.EMPTY]
    assert log.records[0][0] == tc.partition_for("tx") == partition_for("tx", 50)
    meta = tc.transactions["tx"]
    assert (meta.state, meta.producer_epoch, meta.txn_timeout_ms) == (S.EMPTY, 0, TIMEOUT)


def test_handle_init_producer_id_existing_id_bumps_the_epoch() -> None:
    """``prepareIncrementProducerEpoch`` without an expected epoch: same producer id,
    epoch + 1, fencing the previous instance."""
    tc, log, _ = coordinator()
    init(tc)
    assert init(tc) == InitProducerIdResult(FIRST_PID, 1, E.none)
    assert log.states("tx") == [S.EMPTY, S.EMPTY]


def test_handle_init_producer_id_without_transactional_id_is_idempotent_only() -> None:
    """``handleInitProducerId`` with a null id: a fresh producer id at epoch 0, nothing
    logged; an empty id is INVALID_REQUEST."""
    tc, log, _ = coordinator()
    assert tc.init_producer_id(None, TIMEOUT).result() == InitProducerIdResult(FIRST_PID, 0, E.none)
    assert init(tc, "").error == E.invalid_request
    assert not log.records


@pytest.mark.parametrize("timeout", [0, -1, 900_001])
def test_validate_transaction_timeout_ms(timeout: int) -> None:
    """``validateTransactionTimeoutMs``: 0 < transaction.timeout.ms <=
    transaction.max.timeout.ms, else INVALID_TRANSACTION_TIMEOUT."""
    tc, log, _ = coordinator()
    assert init(tc, timeout=timeout) == InitProducerIdResult(-1, -1, E.invalid_transaction_timeout)
    assert init(tc, timeout=900_000).error == E.none
    tc2, _, _ = coordinator(transaction_max_timeout_ms=1000)
    assert init(tc2, timeout=1001).error == E.invalid_transaction_timeout


def test_init_producer_id_while_ongoing_aborts_first_and_answers_concurrent_transactions() -> None:
    """``prepareInitProducerIdTransit`` in Ongoing: fence (epoch + 1, never returned),
    abort the open transaction, answer CONCURRENT_TRANSACTIONS; the retry bumps again."""
    tc, log, _ = coordinator()
    pid, epoch = started(tc)
    log.hold_markers = True
    assert init(tc).error == E.concurrent_transactions
    assert log.states("tx")[-1] == S.PREPARE_ABORT
    assert init(tc).error == E.concurrent_transactions  # markers still being written
    log.release_markers()
    assert log.markers == [(pid, epoch + 1, ABORT, frozenset({("t", 0)}))]
    assert log.states("tx")[-1] == S.COMPLETE_ABORT
    # the old producer is fenced; the retry gets epoch + 2
    assert tc.end_txn("tx", pid, epoch, COMMIT).result() == E.producer_fenced
    assert init(tc) == InitProducerIdResult(pid, epoch + 2, E.none)


def test_init_producer_id_epoch_exhaustion_rotates_the_producer_id() -> None:
    """``prepareProducerIdRotation``: at Short.MaxValue - 1 the next InitProducerId gets a
    new producer id at epoch 0 (``isEpochExhausted``)."""
    tc, _, _ = coordinator()
    tc.load([("tx", TransactionLogValue(77, SHORT_MAX - 2, TIMEOUT, S.EMPTY, None, 1, -1))])
    assert init(tc) == InitProducerIdResult(77, SHORT_MAX - 1, E.none)
    assert init(tc) == InitProducerIdResult(FIRST_PID, 0, E.none)
    assert tc.transactions["tx"].last_producer_id == 77


def test_kip360_rotation_retry_with_the_exhausted_epoch_gets_the_same_answer() -> None:
    """``isValidProducerId``: the previous producer id with an exhausted epoch is a
    retry of a rotation whose answer was lost; it gets the new id again."""
    tc, _, _ = coordinator()
    tc.load([("tx", TransactionLogValue(77, SHORT_MAX - 1, TIMEOUT, S.EMPTY, None, 1, -1))])
    expected = (77, SHORT_MAX - 1)
    assert init(tc, expected=expected) == InitProducerIdResult(FIRST_PID, 0, E.none)
    assert init(tc, expected=expected) == InitProducerIdResult(FIRST_PID, 0, E.none)


def test_kip360_init_with_current_epoch_bumps_and_a_stale_one_is_fenced() -> None:
    """``prepareIncrementProducerEpoch`` with an expected epoch (KIP-360): the current
    epoch bumps, the previous one is a retry, anything else or another producer id
    is PRODUCER_FENCED."""
    tc, _, _ = coordinator()
    pid = init(tc).producer_id
    assert init(tc, expected=(pid, 0)) == InitProducerIdResult(pid, 1, E.none)
    assert init(tc, expected=(pid, 0)) == InitProducerIdResult(pid, 1, E.none)  # retry
    assert init(tc, expected=(pid, 5)).error == E.producer_fenced
    assert init(tc, expected=(pid + 1, 1)).error == E.producer_fenced
    assert init(tc) == InitProducerIdResult(pid, 2, E.none)  # a new instance
    assert init(tc, expected=(pid, 1)).error == E.producer_fenced  # last epoch forgotten


def test_kip360_init_after_abortable_error_in_ongoing_fences_then_bumps() -> None:
    """A KIP-360 InitProducerId (current pid/epoch) mid-transaction aborts it like any
    InitProducerId in Ongoing; the retry then bumps once more."""
    tc, log, _ = coordinator()
    pid, epoch = started(tc)
    assert init(tc, expected=(pid, epoch)).error == E.concurrent_transactions
    assert log.states("tx")[-1] == S.COMPLETE_ABORT
    # Kafka forgot the last epoch in the fence, so the old epoch no longer matches
    assert init(tc, expected=(pid, epoch)).error == E.producer_fenced
    assert init(tc, expected=(pid, epoch + 1)) == InitProducerIdResult(pid, epoch + 2, E.none)


def test_init_producer_id_during_pending_append_is_concurrent_transactions() -> None:
    """``pendingTransitionInProgress``: a second request while the first one's append
    is in flight gets CONCURRENT_TRANSACTIONS and writes nothing."""
    tc, log, _ = coordinator()
    log.hold = True
    first = tc.init_producer_id("tx", TIMEOUT)
    assert not first.done()
    assert init(tc).error == E.concurrent_transactions
    log.release()
    assert first.result() == InitProducerIdResult(FIRST_PID, 0, E.none)
    assert len(log.records) == 1


def test_failed_append_is_reported_and_clears_the_pending_state() -> None:
    """``appendTransactionToLog``: a failed append is mapped to the coordinator error
    (UNKNOWN_TOPIC_OR_PARTITION → COORDINATOR_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER →
    NOT_COORDINATOR) and the pending state is dropped so the client may retry."""
    tc, log, _ = coordinator()
    init(tc)
    log.fail = E.unknown_topic_or_partition
    assert init(tc).error == E.coordinator_not_available
    log.fail = E.not_leader_or_follower
    assert init(tc).error == E.not_coordinator
    log.fail = None
    assert tc.transactions["tx"].pending_state is None
    assert init(tc) == InitProducerIdResult(FIRST_PID, 1, E.none)


# -- AddPartitionsToTxn / AddOffsetsToTxn ------------------------------------------------


def test_handle_add_partitions_fencing_and_mapping_errors() -> None:
    """``handleAddPartitionsToTransaction``: unknown id or other producer id →
    INVALID_PRODUCER_ID_MAPPING; another epoch → PRODUCER_FENCED."""
    tc, log, _ = coordinator()
    r = init(tc)
    parts = [("t", 0)]
    assert (
        tc.add_partitions("nope", r.producer_id, 0, parts).result() == E.invalid_producer_id_mapping
    )
    assert (
        tc.add_partitions("tx", r.producer_id + 1, 0, parts).result()
        == E.invalid_producer_id_mapping
    )
    assert tc.add_partitions("tx", r.producer_id, 1, parts).result() == E.producer_fenced
    assert tc.add_partitions("", r.producer_id, 0, parts).result() == E.invalid_request
    assert log.states("tx") == [S.EMPTY]


@pytest.mark.parametrize(
    ("api_key", "first_fenced"),
    [
        (InitProducerIdRequest.__api_key__, 4),
        (AddPartitionsToTxnRequest.__api_key__, 2),
        (AddOffsetsToTxnRequest.__api_key__, 2),
        (EndTxnRequest.__api_key__, 2),
    ],
)
def test_producer_fenced_is_invalid_producer_epoch_before_kip588(
    api_key: int, first_fenced: int
) -> None:
    """``KafkaApis``: clients before KIP-588's versions get INVALID_PRODUCER_EPOCH for a
    fenced producer; other errors pass unchanged."""
    assert client_error(E.producer_fenced, api_key, first_fenced - 1) == E.invalid_producer_epoch
    assert client_error(E.producer_fenced, api_key, first_fenced) == E.producer_fenced
    assert client_error(E.concurrent_transactions, api_key, 0) == E.concurrent_transactions


def test_add_partitions_starts_the_transaction_and_known_partitions_answer_at_once() -> None:
    """``prepareAddPartitions``: the first partition moves Empty → Ongoing and starts
    the timeout clock; partitions already in an Ongoing transaction answer NONE
    without a log append (Kafka's shortcut)."""
    tc, log, sched = coordinator()
    r = init(tc)
    sched.advance(5)
    assert tc.add_partitions("tx", r.producer_id, 0, [("t", 0), ("t", 1)]).result() == E.none
    meta = tc.transactions["tx"]
    assert meta.state == S.ONGOING and meta.txn_start_timestamp == sched.now()
    sched.advance(5)
    assert tc.add_partitions("tx", r.producer_id, 0, [("t", 1)]).result() == E.none
    assert len(log.records) == 2
    assert tc.add_partitions("tx", r.producer_id, 0, [("u", 0)]).result() == E.none
    assert meta.topic_partitions == {("t", 0), ("t", 1), ("u", 0)}
    assert meta.txn_start_timestamp == sched.now() - 5  # the start stays
    assert log.decoded()[-1][1].topic_partitions() == meta.topic_partitions


def test_add_partitions_while_preparing_is_concurrent_transactions() -> None:
    """``handleAddPartitionsToTransaction`` in PrepareCommit/PrepareAbort or with a
    pending transition: CONCURRENT_TRANSACTIONS (while completing, once
    ``add.partitions.to.txn.retry.backoff.max.ms`` has passed without the Complete)."""
    tc, log, sched = coordinator()
    pid, epoch = started(tc)
    log.hold_markers = True
    assert tc.end_txn("tx", pid, epoch, COMMIT).result() == E.none
    assert tc.transactions["tx"].state == S.PREPARE_COMMIT
    waiting = tc.add_partitions("tx", pid, epoch, [("t", 9)])
    sched.advance(99)
    assert not waiting.done()
    sched.advance(1)
    assert waiting.result() == E.concurrent_transactions
    log.release_markers()
    log.hold = True
    pending = tc.add_partitions("tx", pid, epoch, [("t", 9)])
    assert tc.add_partitions("tx", pid, epoch, [("t", 8)]).result() == E.concurrent_transactions
    log.release()
    assert pending.result() == E.none


@pytest.mark.parametrize("result", [COMMIT, ABORT])
def test_add_partitions_while_completing_waits_for_the_complete_record(
    result: TransactionResult,
) -> None:
    """Kafka's broker waits out CONCURRENT_TRANSACTIONS itself for up to
    ``add.partitions.to.txn.retry.backoff.max.ms`` (KIP-890's
    ``AddPartitionsToTxnManager``): the next transaction's AddPartitionsToTxn and
    AddOffsetsToTxn, sent as soon as EndTxn is answered, are decided once the previous
    transaction's Complete record is written instead of costing the client its retry
    backoff."""
    tc, log, sched = coordinator()
    pid, epoch = started(tc)
    log.hold_markers = True
    assert tc.end_txn("tx", pid, epoch, result).result() == E.none
    added = tc.add_partitions("tx", pid, epoch, [("t", 9)])
    offsets = tc.add_offsets("tx", pid, epoch, "g")
    assert not added.done() and not offsets.done()
    log.release_markers()
    assert (added.result(), offsets.result()) == (E.none, E.none)
    meta = tc.transactions["tx"]
    assert meta.state == S.ONGOING
    assert meta.topic_partitions == {("t", 9), ("__consumer_offsets", partition_for("g", 50))}
    complete = S.COMPLETE_COMMIT if result == COMMIT else S.COMPLETE_ABORT
    assert log.states("tx")[-3:] == [complete, S.ONGOING, S.ONGOING]
    assert not [t for t in sched.pending() if t.fn.__qualname__.startswith("CompletionWaits")]


def test_add_partitions_waiting_on_a_failed_complete_is_answered_at_once() -> None:
    """A Complete append that fails for good (NOT_COORDINATOR: the id stays in
    PrepareCommit for a reload to finish, ``appendTransactionToLog``) decides the parked
    AddPartitionsToTxn at once: CONCURRENT_TRANSACTIONS, as Kafka answers in Prepare."""
    tc, log, _ = coordinator()
    pid, epoch = started(tc)
    log.hold_markers = True
    assert tc.end_txn("tx", pid, epoch, COMMIT).result() == E.none
    waiting = tc.add_partitions("tx", pid, epoch, [("t", 9)])
    log.fail = E.not_leader_or_follower
    log.release_markers()
    assert waiting.result() == E.concurrent_transactions
    assert tc.transactions["tx"].state == S.PREPARE_COMMIT  # no time has passed


def test_add_offsets_adds_the_groups_consumer_offsets_partition() -> None:
    """``handleAddOffsetsToTxnRequest``: the group's ``__consumer_offsets`` partition
    (``partitionFor(groupId)``) joins the transaction."""
    tc, _, _ = coordinator()
    r = init(tc)
    assert tc.add_offsets("tx", r.producer_id, 0, "my-group").result() == E.none
    assert tc.transactions["tx"].topic_partitions == {
        ("__consumer_offsets", partition_for("my-group", 50))
    }


# -- EndTxn ------------------------------------------------------------------------------


def test_handle_end_transaction_commit_prepare_markers_complete() -> None:
    """``endTransaction``: PrepareCommit is appended and the client answered; then the
    markers are written and CompleteCommit appended (``TransactionMarkerChannelManager``);
    until then the id has a pending CompleteCommit."""
    tc, log, _ = coordinator()
    pid, epoch = started(tc, "tx", ("t", 0), ("u", 1))
    log.hold_markers = True
    assert tc.end_txn("tx", pid, epoch, COMMIT).result() == E.none
    meta = tc.transactions["tx"]
    assert (meta.state, meta.pending_state) == (S.PREPARE_COMMIT, S.COMPLETE_COMMIT)
    assert log.states("tx") == [S.EMPTY, S.ONGOING, S.PREPARE_COMMIT]
    log.release_markers()
    assert log.markers == [(pid, epoch, COMMIT, frozenset({("t", 0), ("u", 1)}))]
    assert log.states("tx")[-1] == S.COMPLETE_COMMIT
    assert meta.state == S.COMPLETE_COMMIT and not meta.topic_partitions
    assert log.decoded()[-1][1].partitions == ()  # Complete: an empty list, not null


def test_only_the_complete_record_waits_for_a_later_fsync() -> None:
    """Kafka answers on every ``__transaction_state`` append but the Complete one
    (InitProducerId, AddPartitionsToTxn and EndTxn wait for theirs; the marker channel
    appends CompleteX after the client has its answer), so only that record is appended
    without an fsync of its own: the next acknowledged record of the id, in the same
    partition, is fsynced after it."""
    tc, log, _ = coordinator()
    pid, epoch = started(tc)
    assert tc.end_txn("tx", pid, epoch, COMMIT).result() == E.none
    assert tc.add_partitions("tx", pid, epoch, [("t", 1)]).result() == E.none
    assert log.states("tx") == [S.EMPTY, S.ONGOING, S.PREPARE_COMMIT, S.COMPLETE_COMMIT, S.ONGOING]
    assert log.durable == [True, True, True, False, True]
    assert len({p for p, _k, _v in log.records}) == 1


def test_end_transaction_retry_after_complete_and_invalid_txn_state() -> None:
    """``endTransaction``: a retried EndTxn of the same outcome in CompleteX is NONE,
    the other outcome INVALID_TXN_STATE; EndTxn in Empty is INVALID_TXN_STATE."""
    tc, log, _ = coordinator()
    pid, epoch = started(tc)
    assert tc.end_txn("tx", pid, epoch, COMMIT).result() == E.none
    n = len(log.records)
    assert tc.end_txn("tx", pid, epoch, COMMIT).result() == E.none
    assert tc.end_txn("tx", pid, epoch, ABORT).result() == E.invalid_txn_state
    assert len(log.records) == n
    pid2, epoch2 = started(tc, "ty")
    assert tc.end_txn("ty", pid2, epoch2, ABORT).result() == E.none
    assert tc.end_txn("ty", pid2, epoch2, ABORT).result() == E.none
    assert tc.end_txn("ty", pid2, epoch2, COMMIT).result() == E.invalid_txn_state
    r = init(tc, "tz")
    assert tc.end_txn("tz", r.producer_id, 0, COMMIT).result() == E.invalid_txn_state


def complete_append_failing(
    error: ErrorCode,
) -> tuple[TransactionCoordinator, TxnLog, ManualScheduler, TransactionMetadata]:
    """A committed transaction whose markers are written but whose CompleteCommit
    append fails with ``error`` (the log keeps failing until ``log.fail = None``)."""
    tc, log, sched = coordinator()
    pid, epoch = started(tc)
    log.hold_markers = True
    assert tc.end_txn("tx", pid, epoch, COMMIT).result() == E.none
    log.fail = error
    log.release_markers()
    return tc, log, sched, tc.transactions["tx"]


def test_end_transaction_in_prepare_without_pending_state() -> None:
    """``endTransaction`` in PrepareCommit with nothing pending (the Complete append
    failed with NOT_COORDINATOR): the same outcome is CONCURRENT_TRANSACTIONS, the
    other INVALID_TXN_STATE."""
    tc, _, _, meta = complete_append_failing(E.not_leader_or_follower)
    pid, epoch = meta.producer_id, meta.producer_epoch
    assert (meta.state, meta.pending_state) == (S.PREPARE_COMMIT, None)
    assert tc.end_txn("tx", pid, epoch, COMMIT).result() == E.concurrent_transactions
    assert tc.end_txn("tx", pid, epoch, ABORT).result() == E.invalid_txn_state


def test_end_transaction_fencing_and_mapping() -> None:
    """``endTransaction``: another producer id → INVALID_PRODUCER_ID_MAPPING; a client
    epoch that is not the current one → PRODUCER_FENCED."""
    tc, _, _ = coordinator()
    pid, epoch = started(tc)
    assert tc.end_txn("tx", pid + 1, epoch, COMMIT).result() == E.invalid_producer_id_mapping
    assert tc.end_txn("tx", pid, epoch + 1, COMMIT).result() == E.producer_fenced
    assert tc.end_txn("nope", pid, epoch, COMMIT).result() == E.invalid_producer_id_mapping
    assert tc.end_txn("", pid, epoch, COMMIT).result() == E.invalid_request


def test_end_transaction_failed_prepare_append_leaves_ongoing() -> None:
    """``appendTransactionToLog`` failure on PrepareCommit: the client gets the error,
    the transaction stays Ongoing with nothing pending, a retry commits."""
    tc, log, _ = coordinator()
    pid, epoch = started(tc)
    log.fail = E.request_timed_out
    assert tc.end_txn("tx", pid, epoch, COMMIT).result() == E.coordinator_not_available
    meta = tc.transactions["tx"]
    assert (meta.state, meta.pending_state) == (S.ONGOING, None)
    log.fail = None
    assert tc.end_txn("tx", pid, epoch, COMMIT).result() == E.none
    assert meta.state == S.COMPLETE_COMMIT


def test_marker_write_failure_is_retried_on_the_scheduler() -> None:
    """``TransactionMarkerChannelManager``: markers that fail are sent again (after the
    backoff), and only then is the Complete record appended."""
    tc, log, sched = coordinator()
    pid, epoch = started(tc)
    log.fail_markers = E.not_leader_or_follower
    assert tc.end_txn("tx", pid, epoch, ABORT).result() == E.none
    sched.advance(RETRY_BACKOFF_MS * 3)
    assert tc.transactions["tx"].state == S.PREPARE_ABORT
    log.fail_markers = None
    sched.advance(RETRY_BACKOFF_MS)
    assert log.markers == [(pid, epoch, ABORT, frozenset({("t", 0)}))]
    assert tc.transactions["tx"].state == S.COMPLETE_ABORT
    assert not sched.pending()


def test_complete_append_coordinator_not_available_is_retried() -> None:
    """``appendTransactionToLog`` with ``retryOnError`` for the Complete record:
    COORDINATOR_NOT_AVAILABLE keeps the pending state and the append is retried."""
    _, log, sched, meta = complete_append_failing(E.not_enough_replicas)
    assert meta.pending_state == S.COMPLETE_COMMIT
    log.fail = None
    sched.advance(RETRY_BACKOFF_MS)
    assert meta.state == S.COMPLETE_COMMIT and meta.pending_state is None


# -- timeouts and expiration -------------------------------------------------------------


def test_abort_timed_out_transactions_fences_the_producer(caplog: pytest.LogCaptureFixture) -> None:
    """``abortTimedOutTransactions`` (every
    transaction.abort.timed.out.transaction.cleanup.interval.ms): an Ongoing transaction
    older than its transaction.timeout.ms is aborted with an epoch bump, so the
    producer's commit is PRODUCER_FENCED; a younger one is left alone. The rollback is
    logged at info, as Kafka's ``onEndTransactionComplete`` logs "Completed rollback of
    ongoing transaction ... due to timeout"."""
    caplog.set_level(logging.INFO, logger="kompakt.broker.txn")
    tc, log, sched = coordinator(abort_timed_out_transaction_cleanup_interval_ms=1000)
    tc.startup()
    r = init(tc, "old", timeout=1500)
    tc.add_partitions("old", r.producer_id, 0, [("t", 0)])
    sched.advance(1000)  # 1000 < 1500: not yet
    young = init(tc, "young", timeout=5000)
    tc.add_partitions("young", young.producer_id, 0, [("t", 1)])
    assert tc.transactions["old"].state == S.ONGOING
    sched.advance(1000)
    assert log.markers == [(r.producer_id, 1, ABORT, frozenset({("t", 0)}))]
    assert tc.transactions["old"].state == S.COMPLETE_ABORT
    assert tc.transactions["young"].state == S.ONGOING
    rolled = [m.getMessage() for m in caplog.records if "rolled back" in m.getMessage()]
    assert rolled == ["rolled back transaction old: open past its timeout"]
    assert tc.end_txn("old", r.producer_id, 0, COMMIT).result() == E.producer_fenced
    assert tc.add_partitions("old", r.producer_id, 0, [("t", 0)]).result() == E.producer_fenced
    tc.shutdown()
    sched.advance(10_000)
    assert tc.transactions["young"].state == S.ONGOING  # no task after shutdown


def test_failed_epoch_fence_is_retried_with_the_same_epoch() -> None:
    """``hasFailedEpochFence``: if the timed-out abort's PrepareAbort append fails, the
    bumped epoch (kept in memory) is reused by the next attempt, not bumped again."""
    tc, log, sched = coordinator(abort_timed_out_transaction_cleanup_interval_ms=1000)
    tc.startup()
    r = init(tc, "tx", timeout=500)
    tc.add_partitions("tx", r.producer_id, 0, [("t", 0)])
    log.fail = E.not_enough_replicas
    sched.advance(1000)
    meta = tc.transactions["tx"]
    assert meta.has_failed_epoch_fence and meta.producer_epoch == 1
    assert meta.state == S.ONGOING and meta.pending_state is None
    log.fail = None
    sched.advance(1000)
    assert meta.state == S.COMPLETE_ABORT and meta.producer_epoch == 1
    assert not meta.has_failed_epoch_fence


def test_transactional_id_expiration_writes_a_tombstone() -> None:
    """``enableTransactionalIdExpiration``: an id idle (Empty/Complete) for
    transactional.id.expiration.ms is tombstoned in __transaction_state and forgotten;
    one with a transaction open is kept."""
    tc, log, sched = coordinator(
        transactional_id_expiration_ms=5000,
        remove_expired_transaction_cleanup_interval_ms=1000,
        transaction_max_timeout_ms=3_600_000,
    )
    tc.startup()
    init(tc, "idle")
    started(tc, "busy")
    pid, epoch = started(tc, "done")
    tc.end_txn("done", pid, epoch, COMMIT)
    sched.advance(4000)
    assert set(tc.transactions) == {"idle", "busy", "done"}
    sched.advance(1000)
    assert set(tc.transactions) == {"busy"}
    assert log.states("idle")[-1] is None and log.states("done")[-1] is None
    assert log.records[-1][0] in (tc.partition_for("idle"), tc.partition_for("done"))
    # a new producer with the expired id starts over with a new producer id
    assert init(tc, "idle") == InitProducerIdResult(FIRST_PID + 3, 0, E.none)


def test_expiration_tombstone_failure_keeps_the_id() -> None:
    """``removeFromCacheCallback``: a tombstone that is not written leaves the id in
    the cache, pending state cleared, usable again."""
    tc, log, sched = coordinator(
        transactional_id_expiration_ms=10, remove_expired_transaction_cleanup_interval_ms=100
    )
    tc.startup()
    init(tc)
    log.fail = E.not_leader_or_follower
    sched.advance(100)
    assert tc.transactions["tx"].pending_state is None
    log.fail = None
    assert init(tc).producer_epoch == 1


# -- load --------------------------------------------------------------------------------


def test_load_last_value_wins_and_tombstone_removes() -> None:
    """``loadTransactionMetadata``: records replayed in offset order."""
    v = TransactionLogValue(5, 3, TIMEOUT, S.ONGOING, (("t", (0, 2)),), 20, 10)
    tc, log, _ = coordinator()
    tc.load(
        [
            ("a", TransactionLogValue(5, 2, TIMEOUT, S.EMPTY, None, 1, -1)),
            ("a", v),
            ("b", TransactionLogValue(6, 0, TIMEOUT, S.EMPTY, None, 1, -1)),
            ("b", None),
        ]
    )
    assert set(tc.transactions) == {"a"}
    meta = tc.transactions["a"]
    assert (meta.producer_id, meta.producer_epoch, meta.state) == (5, 3, S.ONGOING)
    assert meta.topic_partitions == {("t", 0), ("t", 2)}
    assert (meta.txn_start_timestamp, meta.txn_last_update_timestamp) == (10, 20)
    assert not log.records and not log.markers
    tc.load([("a", None)])  # a tombstone also clears what the cache held
    assert not tc.transactions


@pytest.mark.parametrize("result", [COMMIT, ABORT])
def test_coordinator_restart_between_prepare_and_complete_finishes_the_transaction(
    result: TransactionResult,
) -> None:
    """``loadTransactionsForTxnTopicPartition``: a transaction loaded in PrepareCommit
    or PrepareAbort (the broker died before its markers) gets its markers and its
    Complete record on load."""
    tc, log, sched = coordinator()
    pid, epoch = started(tc, "tx", ("t", 0), ("t", 1))
    log.hold_markers = True
    assert tc.end_txn("tx", pid, epoch, result).result() == E.none
    prepared = log.states("tx")[-1]
    assert prepared == (S.PREPARE_COMMIT if result == COMMIT else S.PREPARE_ABORT)
    # the broker is killed: the held markers are never written
    restarted_log = TxnLog(records=list(log.records))
    restarted, _, _ = coordinator(restarted_log, sched)
    restarted.load(restarted_log.decoded())
    assert restarted_log.markers == [(pid, epoch, result, frozenset({("t", 0), ("t", 1)}))]
    done = S.COMPLETE_COMMIT if result == COMMIT else S.COMPLETE_ABORT
    assert restarted_log.states("tx")[-1] == done
    assert restarted.transactions["tx"].state == done
    assert restarted.end_txn("tx", pid, epoch, result).result() == E.none


def test_config_keys_are_kafkas_and_read_from_properties() -> None:
    """Kafka's broker keys and defaults (``TransactionStateManagerConfig``,
    ``TransactionLogConfig``)."""
    cfg = TransactionConfig()
    assert set(CONFIG_KEYS.values()) <= set(vars(cfg))
    assert (
        cfg.transactional_id_expiration_ms,
        cfg.transaction_max_timeout_ms,
        cfg.transaction_state_log_num_partitions,
        cfg.abort_timed_out_transaction_cleanup_interval_ms,
        cfg.remove_expired_transaction_cleanup_interval_ms,
    ) == (604_800_000, 900_000, 50, 10_000, 3_600_000)
    cfg = TransactionConfig.from_mapping({"transaction.max.timeout.ms": "1000", "other": "x"})
    assert cfg.transaction_max_timeout_ms == 1000


# -- DescribeTransactions / ListTransactions / gauges ----------------------------------


def test_handle_describe_transactions() -> None:
    """``handleDescribeTransactions``: state name, timeout, start time, producer and
    partitions by topic; an unknown id is TRANSACTIONAL_ID_NOT_FOUND, an empty one
    INVALID_REQUEST."""
    tc, _, sched = coordinator()
    pid, epoch = started(tc, "tx", ("u", 2), ("t", 1), ("t", 0))
    d = tc.describe("tx")
    assert d == TransactionDescription(
        "tx", E.none, "Ongoing", TIMEOUT, sched.now(), pid, epoch, {"t": (0, 1), "u": (2,)}
    )
    assert tc.describe("nope").error == E.transactional_id_not_found
    assert tc.describe("").error == E.invalid_request


def test_list_transaction_states_filters() -> None:
    """``listTransactionStates``: filters by producer id, by state name (unknown names
    are returned as ``unknownStateFilters`` and match nothing) and, KIP-994, by how
    long the transaction has been open."""
    tc, _, sched = coordinator()
    a, _ = started(tc, "a")
    sched.advance(1000)
    b = init(tc, "b").producer_id
    assert tc.list_transactions() == ([("a", a, "Ongoing"), ("b", b, "Empty")], [])
    assert tc.list_transactions(producer_ids=[b]) == ([("b", b, "Empty")], [])
    assert tc.list_transactions(state_names=["Ongoing", "Bogus"]) == (
        [("a", a, "Ongoing")],
        ["Bogus"],
    )
    assert tc.list_transactions(state_names=["Bogus"]) == ([], ["Bogus"])
    started(tc, "c")
    assert [t for t, _, _ in tc.list_transactions(min_duration_ms=500)[0]] == ["a", "b"]


def test_open_transaction_gauges() -> None:
    """The gauges issue 15 asks for: open transactions (Ongoing/PrepareX) and the
    oldest one's age."""
    tc, log, sched = coordinator()
    assert tc.open_transactions() == (0, 0)
    pid, epoch = started(tc, "a")
    sched.advance(700)
    started(tc, "b")
    init(tc, "c")
    sched.advance(300)
    assert tc.open_transactions() == (2, 1000)
    log.hold_markers = True
    tc.end_txn("a", pid, epoch, COMMIT)
    assert tc.open_transactions() == (2, 1000)  # PrepareCommit is still open
    log.release_markers()
    assert tc.open_transactions() == (1, 300)


# -- the state machine under random request sequences ---------------------------------------

TIDS = ("a", "b")
MACHINE_CONFIG: dict[str, Any] = {
    "abort_timed_out_transaction_cleanup_interval_ms": 500,
    "transactional_id_expiration_ms": 20_000,
    "remove_expired_transaction_cleanup_interval_ms": 5000,
}
PARTS = st.sets(st.sampled_from([("t", 0), ("t", 1), ("u", 0)]), min_size=1, max_size=2)


class TransactionCoordinatorMachine(RuleBasedStateMachine):
    """Random InitProducerId / AddPartitions / AddOffsets / EndTxn / time / restart
    sequences, with crashes between EndTxn's Prepare record and its markers. The
    current producer's requests always succeed; after every step: every transition in
    the log is one ``validPreviousStates`` allows, a producer id's epoch never goes
    down, every PrepareX is completed after its markers, and a coordinator loaded from
    the log holds the same state (Kafka's ``TransactionStateManager`` reload)."""

    def __init__(self) -> None:
        super().__init__()
        self.pids = itertools.count(FIRST_PID)
        self.tc, self.log, self.sched = coordinator(pids=self.pids, **MACHINE_CONFIG)
        self.tc.startup()
        self.producers: dict[str, tuple[int, int]] = {}
        """Each id's last answer from InitProducerId (the client's view)."""

    def _producer(self, tid: str, stale: bool) -> tuple[int, int]:
        pid, epoch = self.producers.get(tid, (FIRST_PID + 99, 0))
        return (pid, max(0, epoch - 1)) if stale else (pid, epoch)

    @rule(tid=st.sampled_from(TIDS), kip360=st.booleans(), timeout=st.integers(100, 3000))
    def init_producer_id(self, tid: str, kip360: bool, timeout: int) -> None:
        expected = self.producers.get(tid) if kip360 else None
        r = self.tc.init_producer_id(tid, timeout, expected).result()
        if r.error == E.none:
            self.producers[tid] = (r.producer_id, r.producer_epoch)
        else:
            assert r.error in (E.concurrent_transactions, E.producer_fenced)

    def _current(self, tid: str, pid: int, epoch: int) -> TransactionMetadata | None:
        """The id's metadata if (pid, epoch) is its current producer, else None."""
        meta = self.tc.transactions.get(tid)
        if meta is None or (meta.producer_id, meta.producer_epoch) != (pid, epoch):
            return None
        return meta

    @rule(tid=st.sampled_from(TIDS), parts=PARTS, stale=st.booleans())
    def add_partitions(self, tid: str, parts: set, stale: bool) -> None:
        pid, epoch = self._producer(tid, stale)
        meta = self._current(tid, pid, epoch)
        error = self.tc.add_partitions(tid, pid, epoch, parts).result()
        # nothing is pending between steps, so the current producer always succeeds
        assert (error == E.none) == (meta is not None), error
        assert meta is None or parts <= meta.topic_partitions
        assert error in (E.none, E.producer_fenced, E.invalid_producer_id_mapping)

    @rule(tid=st.sampled_from(TIDS), group=st.sampled_from(["g1", "g2"]))
    def add_offsets(self, tid: str, group: str) -> None:
        pid, epoch = self._producer(tid, False)
        error = self.tc.add_offsets(tid, pid, epoch, group).result()
        assert (error == E.none) == (self._current(tid, pid, epoch) is not None), error

    @rule(tid=st.sampled_from(TIDS), commit=st.booleans(), stale=st.booleans())
    def end_txn(self, tid: str, commit: bool, stale: bool) -> None:
        pid, epoch = self._producer(tid, stale)
        meta = self._current(tid, pid, epoch)
        open_before = meta is not None and meta.state == S.ONGOING
        error = self.tc.end_txn(tid, pid, epoch, COMMIT if commit else ABORT).result()
        if open_before:
            assert error == E.none
            assert meta is not None and meta.state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT)
        assert error in (
            E.none,
            E.producer_fenced,
            E.invalid_producer_id_mapping,
            E.invalid_txn_state,
        ), error

    @rule(ms=st.sampled_from([100, 600, 3500, 25_000]))
    def advance(self, ms: int) -> None:
        self.sched.advance(ms)

    @precondition(lambda self: bool(self.log.records))
    @rule()
    def restart(self) -> None:
        """The broker restarts: a new coordinator loads the log."""
        self.tc.shutdown()
        self.tc, _, _ = coordinator(self.log, self.sched, self.pids, **MACHINE_CONFIG)
        self.tc.load(self.log.decoded())
        self.tc.startup()

    @rule(tid=st.sampled_from(TIDS), commit=st.booleans())
    def crash_between_prepare_and_complete(self, tid: str, commit: bool) -> None:
        """The broker dies once EndTxn's Prepare record is written and the client
        answered, before any marker: the restart must finish the transaction."""
        meta = self.tc.transactions.get(tid)
        if meta is None or meta.state != S.ONGOING or meta.pending_transition_in_progress:
            return
        self.log.hold_markers = True
        result = COMMIT if commit else ABORT
        answer = self.tc.end_txn(tid, meta.producer_id, meta.producer_epoch, result)
        assert answer.result() == E.none
        self.log.hold_markers = False
        self.log.held_markers.clear()  # never written: the process is gone
        self.restart()

    @invariant()
    def every_prepare_is_completed_after_its_markers(self) -> None:
        """PrepareX is always followed by CompleteX of the same producer epoch, and each
        Complete record comes after that transaction's markers were written."""
        last: dict[str, TransactionLogValue] = {}
        completes = []
        for tid, value in self.log.decoded():
            before = last.pop(tid, None)
            if before is not None and before.state.in_prepare:
                assert value is not None
                assert (value.state, value.producer_epoch) == (
                    S.COMPLETE_COMMIT if before.state == S.PREPARE_COMMIT else S.COMPLETE_ABORT,
                    before.producer_epoch,
                )
                result = COMMIT if value.state == S.COMPLETE_COMMIT else ABORT
                completes.append((value.producer_id, value.producer_epoch, result))
            if value is not None:
                last[tid] = value
        assert not any(v.state.in_prepare for v in last.values())
        assert [m[:3] for m in self.log.markers] == completes

    @invariant()
    def transitions_in_the_log_are_legal(self) -> None:
        last: dict[str, S] = {}
        for tid, value in self.log.decoded():
            if value is None:
                last.pop(tid, None)
                continue
            before = last.get(tid)
            if before is None:
                assert value.state == S.EMPTY
            else:
                assert before in VALID_PREVIOUS_STATES[value.state], (before, value.state)
            last[tid] = value.state

    @invariant()
    def epochs_never_decrease_for_a_producer_id(self) -> None:
        epochs: dict[int, int] = {}
        for _tid, value in self.log.decoded():
            if value is not None:
                assert value.producer_epoch >= epochs.get(value.producer_id, 0)
                epochs[value.producer_id] = value.producer_epoch

    @invariant()
    def a_reload_reproduces_the_metadata(self) -> None:
        assert all(m.pending_state is None for m in self.tc.transactions.values())
        replica, _, _ = coordinator(TxnLog(hold=True, hold_markers=True))
        replica.load(self.log.decoded())
        snapshot = {
            t: TransactionLogValue.of(m.snapshot()) for t, m in self.tc.transactions.items()
        }
        reloaded = {
            t: TransactionLogValue.of(m.snapshot()) for t, m in replica.transactions.items()
        }
        assert reloaded == snapshot


TestTransactionCoordinatorMachine = TransactionCoordinatorMachine.TestCase
TestTransactionCoordinatorMachine.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None
)
