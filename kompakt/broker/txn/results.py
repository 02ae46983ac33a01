"""What the transaction coordinator is configured with and what it answers: its
config (Kafka's ``TransactionStateManagerConfig``), the results of InitProducerId and
DescribeTransactions, EndTxn's outcome, and how a failed log append or a fenced producer
is told to a client. Plain values, no I/O: :mod:`.coordinator` decides, this module
names the shapes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from kio.schema.add_offsets_to_txn.v2.request import AddOffsetsToTxnRequest
from kio.schema.add_partitions_to_txn.v2.request import AddPartitionsToTxnRequest
from kio.schema.end_txn.v2.request import EndTxnRequest
from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest

from kompakt.broker.txn import records as rec
from kompakt.broker.txn.state import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    Completion,
    IllegalTransactionTransition,
    TopicPartition,
    TransactionMetadata,
    TransactionState,
)

OFFSETS_TOPIC_PARTITIONS = 50
"""Kafka's ``offsets.topic.num.partitions`` default: where AddOffsetsToTxn looks a group
up unless the broker passes its group coordinator's ``partition_for``."""

RETRY_BACKOFF_MS = 100
"""Wait before writing markers or a Complete record again after a failure (Kafka's
marker channel re-queues them for its next send round)."""


class TransactionResult(IntEnum):
    """Kafka's ``TransactionResult``: EndTxn's ``committed`` flag and the marker type."""

    ABORT = 0
    COMMIT = 1


@dataclass(frozen=True)
class TransactionConfig:
    """Kafka's ``TransactionStateManagerConfig`` / ``TransactionLogConfig`` values, by
    their Kafka defaults. :data:`CONFIG_KEYS` names each field's broker key."""

    transactional_id_expiration_ms: int = 7 * 24 * 3600 * 1000
    transaction_max_timeout_ms: int = 15 * 60 * 1000
    transaction_state_log_num_partitions: int = 50
    abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    remove_expired_transaction_cleanup_interval_ms: int = 3600 * 1000
    add_partitions_retry_backoff_max_ms: int = 100
    """How long AddPartitionsToTxn waits on the coordinator for the previous
    transaction's Complete record (Kafka's ``add.partitions.to.txn.retry.backoff.max.ms``,
    see :mod:`~kompakt.broker.txn.waits`)."""
    value_version: int = rec.VALUE_V0
    """The ``TransactionLogValue`` version written (Kafka: 0 before transaction.version 2)."""

    @classmethod
    def from_mapping(cls, props: Mapping[str, Any]) -> TransactionConfig:
        """Read the keys of :data:`CONFIG_KEYS` from ``props`` (others are ignored)."""
        given = {CONFIG_KEYS[k]: int(v) for k, v in props.items() if k in CONFIG_KEYS}
        return cls(**given)


CONFIG_KEYS: dict[str, str] = {
    "transactional.id.expiration.ms": "transactional_id_expiration_ms",
    "transaction.max.timeout.ms": "transaction_max_timeout_ms",
    "transaction.state.log.num.partitions": "transaction_state_log_num_partitions",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": (
        "abort_timed_out_transaction_cleanup_interval_ms"
    ),
    "transaction.remove.expired.transaction.cleanup.interval.ms": (
        "remove_expired_transaction_cleanup_interval_ms"
    ),
    "add.partitions.to.txn.retry.backoff.max.ms": "add_partitions_retry_backoff_max_ms",
}
"""Kafka's broker config key of each :class:`TransactionConfig` field."""


PRODUCER_FENCED_SINCE: dict[int, int] = {
    InitProducerIdRequest.__api_key__: 4,
    AddPartitionsToTxnRequest.__api_key__: 2,
    AddOffsetsToTxnRequest.__api_key__: 2,
    EndTxnRequest.__api_key__: 2,
}
"""The first version of each API whose clients know PRODUCER_FENCED (KIP-588); older
ones get INVALID_PRODUCER_EPOCH instead, as Kafka's ``KafkaApis`` answers them."""


def client_error(error: ErrorCode, api_key: int, version: int) -> ErrorCode:
    """The error to send a client of ``api_key`` at ``version``: PRODUCER_FENCED becomes
    INVALID_PRODUCER_EPOCH for versions before KIP-588 (Kafka's ``KafkaApis``)."""
    since = PRODUCER_FENCED_SINCE.get(api_key)
    if error == ErrorCode.producer_fenced and since is not None and version < since:
        return ErrorCode.invalid_producer_epoch
    return error


APPEND_ERRORS: dict[ErrorCode, ErrorCode] = {
    ErrorCode.unknown_topic_or_partition: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas_after_append: ErrorCode.coordinator_not_available,
    ErrorCode.request_timed_out: ErrorCode.coordinator_not_available,
    ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
    ErrorCode.kafka_storage_error: ErrorCode.not_coordinator,
    ErrorCode.message_too_large: ErrorCode.unknown_server_error,
    ErrorCode.record_list_too_large: ErrorCode.unknown_server_error,
}
"""How a failed ``__transaction_state`` append is told to the client (Kafka's
``TransactionStateManager.appendTransactionToLog``)."""


@dataclass(frozen=True)
class InitProducerIdResult:
    """Kafka's ``InitProducerIdResult``."""

    producer_id: int
    producer_epoch: int
    error: ErrorCode

    @classmethod
    def failed(cls, error: ErrorCode) -> InitProducerIdResult:
        return cls(NO_PRODUCER_ID, NO_PRODUCER_EPOCH, error)


@dataclass(frozen=True)
class TransactionDescription:
    """One entry of Kafka's DescribeTransactions response."""

    transactional_id: str
    error: ErrorCode
    state: str = ""
    txn_timeout_ms: int = 0
    txn_start_timestamp: int = 0
    producer_id: int = 0
    producer_epoch: int = 0
    topics: dict[str, tuple[int, ...]] = field(default_factory=dict)

    @classmethod
    def failed(cls, transactional_id: str, error: ErrorCode) -> TransactionDescription:
        """A failed entry as Kafka's coordinator answers it: only the error set, the
        other fields at the schema's zero defaults (DescribeTransactionsResponse.json has
        none; -1 start times appear only for ids in state Empty)."""
        return cls(transactional_id, error)


Records = list[tuple[bytes, bytes | None]]
AppendFn = Callable[[int, Records, bool], Completion[ErrorCode]]
Append = tuple[int, Records]
"""A ``__transaction_state`` partition and the records to append to it."""
MarkersWritten = tuple[ErrorCode, ErrorCode]
"""What a marker write reports: the markers' error, then the Complete record's (only
appended once the markers are in)."""
MarkerFn = Callable[
    [int, int, TransactionResult, frozenset[TopicPartition], Append],
    Completion[MarkersWritten],
]
Done = Callable[[ErrorCode], None]


def end_txn_outside_ongoing(meta: TransactionMetadata, result: TransactionResult) -> ErrorCode:
    """EndTxn's answer when no transaction is open: a retry of the same outcome is
    fine (NONE when complete, CONCURRENT_TRANSACTIONS while preparing), the other
    outcome or an Empty id is INVALID_TXN_STATE (Kafka's ``endTransaction``)."""
    commit = result == TransactionResult.COMMIT
    same = {
        TransactionState.COMPLETE_COMMIT: (commit, ErrorCode.none),
        TransactionState.COMPLETE_ABORT: (not commit, ErrorCode.none),
        TransactionState.PREPARE_COMMIT: (commit, ErrorCode.concurrent_transactions),
        TransactionState.PREPARE_ABORT: (not commit, ErrorCode.concurrent_transactions),
    }
    if meta.state == TransactionState.EMPTY:
        return ErrorCode.invalid_txn_state
    if meta.state not in same:
        raise IllegalTransactionTransition(
            f"{meta.transactional_id} found in {meta.state}, which is never entered"
        )
    matches, answer = same[meta.state]
    return answer if matches else ErrorCode.invalid_txn_state
