"""A transactional write checked against its transaction before it is appended (KIP-890
part 1, Kafka's ``transaction.partition.verification.enable``, on by default since 3.6).

The decision is the coordinator's (:meth:`TransactionViews.verify`); this module asks
it for the two writers of transactional batches: a Produce's partition and a
TxnOffsetCommit's ``__consumer_offsets`` partition.
"""

from __future__ import annotations

import struct
from typing import Any

from kio.schema.errors import ErrorCode

from kompakt.broker.coordinator.storage import OFFSETS_TOPIC
from kompakt.broker.txn.broker import load_txn_coordinator, loaded_txn_broker
from kompakt.log.producer_state import InvalidTxnStateError
from kompakt.record.header import ATTRIBUTES_POS, TRANSACTIONAL_BIT, read_header

RETRIABLE = frozenset(
    {
        ErrorCode.concurrent_transactions,
        ErrorCode.coordinator_not_available,
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.not_coordinator,
    }
)
"""The coordinator's answers a writer retries: Kafka's ``ReplicaManager`` tells a
producer NOT_ENOUGH_REPLICAS, the group coordinator COORDINATOR_NOT_AVAILABLE."""

NOT_ADDED = "Partition was not added to the transaction"


def enabled(state: Any) -> bool:
    return bool(state.config.get("transaction.partition.verification.enable"))


def transactional_producer(records: bytes) -> tuple[int, int] | None:
    """(producer id, epoch) of a Produce partition's records if they are transactional
    (Kafka's Produce v3+ carries exactly one batch; a torn one is the log's to refuse)."""
    if len(records) < ATTRIBUTES_POS + 2:
        return None
    if not int.from_bytes(records[ATTRIBUTES_POS : ATTRIBUTES_POS + 2]) & TRANSACTIONAL_BIT:
        return None
    try:
        h = read_header(records)
    except struct.error:  # too short for a header: the log refuses it
        return None
    return h.producer_id, h.producer_epoch


Guard = tuple[int, int]
"""(producer id, its markers in the partition when the write was verified): the append
takes the write only if no marker came in between (:func:`check_guard`)."""


def verify_produce(
    state: Any, transactional_id: str | None, records: bytes, plog: Any
) -> tuple[ErrorCode, str | None, Guard | None]:
    """On a handler thread: NONE with the write's guard, or the error and message a
    transactional Produce of ``records`` to ``plog`` is answered with instead."""
    producer = transactional_producer(records)
    if producer is None or not enabled(state):
        return ErrorCode.none, None, None
    guard = (producer[0], plog.transactions.markers_of(producer[0]))  # before the check
    tb = loaded_txn_broker(state)
    with tb.lock:
        code = tb.coordinator.verify(transactional_id, *producer, [(plog.topic, plog.partition)])
    code = _told(code, ErrorCode.not_enough_replicas)
    if code == ErrorCode.none:
        return code, None, guard
    return code, NOT_ADDED if code == ErrorCode.invalid_txn_state else None, None


def _told(code: ErrorCode, retriable_as: ErrorCode) -> ErrorCode:
    """The coordinator's answer as a writer is told it: a retriable one as
    ``retriable_as`` (Kafka's ``ReplicaManager`` says NOT_ENOUGH_REPLICAS to a producer,
    the group coordinator COORDINATOR_NOT_AVAILABLE), a stale epoch as the partition's
    producer state answers it, INVALID_PRODUCER_EPOCH (Kafka's ``ProducerAppendInfo``):
    every client takes that as fatal fencing, while librdkafka takes a Produce's
    PRODUCER_FENCED as abortable, and TxnOffsetCommit clients before 2.7 do not know it."""
    if code in RETRIABLE:
        return retriable_as
    if code == ErrorCode.producer_fenced:
        return ErrorCode.invalid_producer_epoch
    return code


def check_guard(plog: Any, guard: Guard | None) -> None:
    """Under ``plog.lock``, as the verified write is appended: refuse it if a marker of
    its producer reached the partition since it was verified (its transaction ended on
    the way: appended now, it would open a transaction no marker ends)."""
    if guard is not None and plog.transactions.markers_of(guard[0]) != guard[1]:
        raise InvalidTxnStateError(
            f"the transaction of producer {guard[0]} ended while this write was verified"
        )


async def verify_offsets(
    state: Any, transactional_id: str | None, producer_id: int, epoch: int, partition: int
) -> ErrorCode:
    """On the loop: NONE, or the error of a TxnOffsetCommit whose group's
    ``__consumer_offsets`` ``partition`` is not in the producer's ongoing transaction
    (a fenced producer's offsets were applied by the next commit of its id)."""
    if not enabled(state):
        return ErrorCode.none
    tb = await load_txn_coordinator(state)
    with tb.lock:
        code = tb.coordinator.verify(
            transactional_id, producer_id, epoch, [(OFFSETS_TOPIC, partition)]
        )
    return _told(code, ErrorCode.coordinator_not_available)
