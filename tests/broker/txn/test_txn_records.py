"""The transaction state machine and the ``__transaction_state`` record formats.

Kafka's rules checked: ``TransactionState.validPreviousStates`` and the two-step
``prepareTransitionTo`` / ``completeTransitionTo`` of ``TransactionMetadata``; the
``TransactionLogKey`` v0 and ``TransactionLogValue`` v0/v1 layouts of
``transaction-coordinator/src/main/resources/common/message/`` (golden bytes written
out by hand from those schemas), state ids as ``TransactionState.fromId`` reads them.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kompakt.broker.txn import records as rec
from kompakt.broker.txn.records import TransactionLogValue
from kompakt.broker.txn.state import (
    SHORT_MAX,
    VALID_PREVIOUS_STATES,
    Completion,
    IllegalTransactionTransition,
    TransactionMetadata,
    TransactionState,
    is_epoch_exhausted,
)

S = TransactionState


def test_transaction_state_ids_and_names_are_kafkas() -> None:
    """``TransactionState.fromId``: the ids written to the log, and the names
    DescribeTransactions reports."""
    assert {s.value: str(s) for s in S} == {
        0: "Empty",
        1: "Ongoing",
        2: "PrepareCommit",
        3: "PrepareAbort",
        4: "CompleteCommit",
        5: "CompleteAbort",
        6: "Dead",
        7: "PrepareEpochFence",
    }
    assert S.from_name("PrepareEpochFence") is S.PREPARE_EPOCH_FENCE
    with pytest.raises(ValueError):
        S.from_name("Stable")


def test_valid_previous_states_are_kafkas() -> None:
    """``TransactionMetadata.scala``: each state's ``validPreviousStates``."""
    assert VALID_PREVIOUS_STATES == {
        S.EMPTY: {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
        S.ONGOING: {S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
        S.PREPARE_COMMIT: {S.ONGOING},
        S.PREPARE_ABORT: {S.ONGOING, S.PREPARE_EPOCH_FENCE},
        S.COMPLETE_COMMIT: {S.PREPARE_COMMIT},
        S.COMPLETE_ABORT: {S.PREPARE_ABORT},
        S.DEAD: {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
        S.PREPARE_EPOCH_FENCE: {S.ONGOING},
    }


def _meta(state: S = S.EMPTY, epoch: int = 0) -> TransactionMetadata:
    return TransactionMetadata(
        "tx", producer_id=7, producer_epoch=epoch, txn_timeout_ms=1000, state=state
    )


@pytest.mark.parametrize("state", list(S))
def test_prepare_transition_checks_valid_previous_states(state: S) -> None:
    """``prepareTransitionTo`` throws for a move ``validPreviousStates`` forbids and
    leaves no pending state behind; a legal one records the pending state."""
    for target in S:
        meta = _meta(state)
        if state in VALID_PREVIOUS_STATES[target]:
            transit = meta.prepare_transition(target, producer_epoch=0, txn_last_update_timestamp=5)
            assert meta.pending_state is target and transit.state is target
            assert transit.last_producer_id == 7
        else:
            with pytest.raises(IllegalTransactionTransition):
                meta.prepare_transition(target, producer_epoch=0, txn_last_update_timestamp=5)
            assert meta.pending_state is None


def test_second_prepare_while_pending_is_refused() -> None:
    """``prepareTransitionTo``: one pending transition at a time (the coordinator turns
    this into CONCURRENT_TRANSACTIONS before it gets here)."""
    meta = _meta()
    meta.prepare_add_partitions(frozenset({("t", 0)}), now=10)
    assert meta.pending_transition_in_progress
    with pytest.raises(IllegalTransactionTransition):
        meta.prepare_add_partitions(frozenset({("t", 1)}), now=11)


def test_complete_transition_adopts_only_the_pending_one() -> None:
    """``completeTransitionTo``: the transit must be the pending state's; the state
    changes only then (after the log append)."""
    meta = _meta()
    transit = meta.prepare_add_partitions(frozenset({("t", 0)}), now=10)
    assert meta.state is S.EMPTY and not meta.topic_partitions
    meta.complete_transition(transit)
    assert meta.state is S.ONGOING and meta.pending_state is None
    assert meta.topic_partitions == {("t", 0)} and meta.txn_start_timestamp == 10
    with pytest.raises(IllegalTransactionTransition):
        meta.complete_transition(transit)  # nothing pending any more
    dying = _meta()
    with pytest.raises(IllegalTransactionTransition):
        dying.complete_transition(dying.prepare_dead())  # Dead ends in removal


def test_increment_epoch_kip360_rules() -> None:
    """``prepareIncrementProducerEpoch``: no expected epoch bumps and forgets the last;
    the current one bumps and remembers it; the last one is a retry (same epoch); any
    other is fenced (None)."""
    meta = _meta(epoch=3)
    t = meta.prepare_increment_producer_epoch(1000, None, now=1)
    assert t is not None and (t.producer_epoch, t.last_producer_epoch) == (4, -1)
    meta.pending_state = None
    t = meta.prepare_increment_producer_epoch(1000, 3, now=1)
    assert t is not None and (t.producer_epoch, t.last_producer_epoch) == (4, 3)
    meta.complete_transition(t)
    t = meta.prepare_increment_producer_epoch(1000, 3, now=2)
    assert t is not None and (t.producer_epoch, t.last_producer_epoch) == (4, 3)
    meta.pending_state = None
    assert meta.prepare_increment_producer_epoch(1000, 1, now=2) is None


def test_epoch_exhaustion_and_fence_limits() -> None:
    """``isEpochExhausted``: Short.MaxValue - 1 is the last usable epoch, so a fence
    (one more bump) always fits; fencing at Short.MaxValue throws."""
    assert not is_epoch_exhausted(SHORT_MAX - 2)
    assert is_epoch_exhausted(SHORT_MAX - 1)
    meta = _meta(S.ONGOING, epoch=SHORT_MAX - 1)
    assert meta.prepare_fence_producer_epoch().producer_epoch == SHORT_MAX
    with pytest.raises(IllegalTransactionTransition):
        _meta(S.ONGOING, epoch=SHORT_MAX).prepare_fence_producer_epoch()
    with pytest.raises(IllegalTransactionTransition):
        _meta(epoch=SHORT_MAX - 1).prepare_increment_producer_epoch(1000, None, 1)


def test_failed_epoch_fence_is_not_bumped_twice() -> None:
    """``prepareFenceProducerEpoch`` with ``hasFailedEpochFence``: the epoch of a fence
    whose append failed was never handed out, so the next fence reuses it."""
    meta = _meta(S.ONGOING, epoch=4)
    meta.has_failed_epoch_fence = True
    assert meta.prepare_fence_producer_epoch().producer_epoch == 4


def test_completion_runs_callbacks_once_in_order() -> None:
    c: Completion[int] = Completion()
    seen: list[tuple[str, int]] = []
    c.add_done_callback(lambda v: seen.append(("a", v)))
    c.add_done_callback(lambda v: seen.append(("b", v)))
    assert not c.done()
    with pytest.raises(LookupError):
        c.result()
    c.complete(1)
    c.complete(2)  # the first answer wins
    c.add_done_callback(lambda v: seen.append(("late", v)))
    assert seen == [("a", 1), ("b", 1), ("late", 1)] and c.result() == 1


# -- records ----------------------------------------------------------------------------

ONGOING = TransactionLogValue(
    producer_id=5,
    producer_epoch=1,
    transaction_timeout_ms=60000,
    state=S.ONGOING,
    partitions=(("a", (0, 1)),),
    last_update_timestamp_ms=10,
    start_timestamp_ms=9,
)


def test_key_golden_bytes() -> None:
    """TransactionLogKey v0 behind the int16 record type 0: int16 length + UTF-8."""
    assert rec.key_bytes("tx") == bytes.fromhex("000000027478")
    assert rec.read_key(bytes.fromhex("000000027478")) == "tx"
    assert rec.read_key(bytes.fromhex("000100027478")) is None  # another type


def test_value_v0_golden_bytes() -> None:
    """TransactionLogValue v0: int64 pid, int16 epoch, int32 timeout, int8 status,
    int32-counted array of (int16 string, int32-counted [int32]), int64 x2."""
    golden = bytes.fromhex(
        "0000"  # version 0
        "0000000000000005"  # ProducerId
        "0001"  # ProducerEpoch
        "0000ea60"  # TransactionTimeoutMs 60000
        "01"  # TransactionStatus Ongoing
        "00000001"  # one PartitionsSchema
        "000161"  # Topic "a"
        "00000002"
        "00000000"
        "00000001"  # PartitionIds [0, 1]
        "000000000000000a"  # TransactionLastUpdateTimestampMs
        "0000000000000009"  # TransactionStartTimestampMs
    )
    assert rec.value_bytes(ONGOING) == golden
    assert rec.read_value(golden) == ONGOING


def test_value_v0_empty_has_null_partitions() -> None:
    """``valueToBytes``: the partitions of an Empty transaction are null (length -1)."""
    empty = TransactionLogValue(5, 0, 60000, S.EMPTY, None, 10, -1)
    golden = bytes.fromhex(
        "0000000000000000000500000000ea6000ffffffff000000000000000affffffffffffffff"
    )
    assert rec.value_bytes(empty) == golden
    assert rec.read_value(golden) == empty


def test_value_v1_golden_bytes_with_tagged_fields() -> None:
    """TransactionLogValue v1 (flexible): compact array and string lengths (+1), an
    empty tag section per partitions entry, and the tagged PreviousProducerId (0),
    NextProducerId (1), ClientTransactionVersion (2), written only when not default."""
    value = TransactionLogValue(5, 1, 60000, S.ONGOING, (("a", (0, 1)),), 10, 9, 4, -1, 2)
    golden = bytes.fromhex(
        "0001"  # version 1
        "0000000000000005"
        "0001"
        "0000ea60"
        "01"
        "02"  # compact array: 1 entry
        "0261"  # compact string "a"
        "03"
        "00000000"
        "00000001"  # compact [0, 1]
        "00"  # the entry's tagged fields: none
        "000000000000000a"
        "0000000000000009"
        "02"  # two tagged fields
        "00"
        "08"
        "0000000000000004"  # tag 0 PreviousProducerId = 4
        "02"
        "02"
        "0002"  # tag 2 ClientTransactionVersion = 2
    )
    assert rec.value_bytes(value, rec.VALUE_V1) == golden
    assert rec.read_value(golden) == value


def test_value_v1_defaults_write_no_tags_and_null_is_zero() -> None:
    empty = TransactionLogValue(5, 0, 60000, S.EMPTY, None, 10, -1)
    raw = rec.value_bytes(empty, rec.VALUE_V1)
    assert raw.endswith(bytes.fromhex("00000000000000000affffffffffffffff00"))
    assert rec.read_value(raw) == empty


def test_unknown_value_version_is_refused() -> None:
    """``readTxnRecordValue`` throws on a version it does not know."""
    with pytest.raises(rec.UnknownValueVersion):
        rec.read_value(bytes.fromhex("0002") + rec.value_bytes(ONGOING)[2:])
    with pytest.raises(rec.UnknownValueVersion):
        rec.value_bytes(ONGOING, 2)


def test_tombstone_decodes_to_none() -> None:
    """A null value is an expired transactional id (Kafka's tombstone)."""
    assert rec.read_record(rec.key_bytes("tx"), None) == ("tx", None)
    assert rec.read_record(rec.key_bytes("tx"), rec.value_bytes(ONGOING)) == ("tx", ONGOING)


def test_value_of_transit_groups_partitions_by_topic() -> None:
    """``valueToBytes``: one PartitionsSchema per topic; an Empty transit must have no
    partitions."""
    meta = _meta()
    transit = meta.prepare_add_partitions(frozenset({("b", 1), ("a", 2), ("b", 0)}), 3)
    value = TransactionLogValue.of(transit)
    assert value.partitions == (("a", (2,)), ("b", (0, 1)))
    assert value.topic_partitions() == transit.topic_partitions


names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20)
values = st.builds(
    TransactionLogValue,
    producer_id=st.integers(-1, 2**63 - 1),
    producer_epoch=st.integers(-1, SHORT_MAX),
    transaction_timeout_ms=st.integers(1, 2**31 - 1),
    state=st.sampled_from(list(S)),
    partitions=st.none()
    | st.lists(
        st.tuples(names, st.lists(st.integers(0, 2**31 - 1), max_size=4).map(tuple)),
        max_size=4,
    ).map(tuple),
    last_update_timestamp_ms=st.integers(-1, 2**62),
    start_timestamp_ms=st.integers(-1, 2**62),
    previous_producer_id=st.integers(-1, 2**63 - 1),
    next_producer_id=st.integers(-1, 2**63 - 1),
    client_transaction_version=st.integers(0, SHORT_MAX),
)


@given(values, names)
def test_round_trip_v1(value: TransactionLogValue, tid: str) -> None:
    assert rec.read_record(rec.key_bytes(tid), rec.value_bytes(value, rec.VALUE_V1)) == (
        tid,
        value,
    )


@given(values)
def test_round_trip_v0_drops_only_the_tagged_fields(value: TransactionLogValue) -> None:
    """v0 has no tagged fields: they read back as their defaults."""
    back = rec.read_value(rec.value_bytes(value, rec.VALUE_V0))
    assert back == TransactionLogValue(*[getattr(value, f) for f in _V0_FIELDS])


_V0_FIELDS = (
    "producer_id",
    "producer_epoch",
    "transaction_timeout_ms",
    "state",
    "partitions",
    "last_update_timestamp_ms",
    "start_timestamp_ms",
)


def test_complete_transition_adopts_the_whole_transit() -> None:
    """``TransactionMetadata.completeTransitionTo`` (Java): every field of the transit is
    taken, so an id back in Empty has no start time in memory, as a reload of its Empty
    record gives (the Scala version kept the old start time in memory)."""
    meta = _meta(S.COMPLETE_COMMIT)
    meta.txn_start_timestamp = 10
    transit = meta.prepare_increment_producer_epoch(1000, None, now=20)
    assert transit is not None
    meta.complete_transition(transit)
    assert meta.snapshot() == transit
    assert meta.txn_start_timestamp == -1 and meta.producer_epoch == 1
