"""Error types shared by every layer.

Each error that a Kafka client can be told about carries the Kafka error code the broker
answers with (Kafka's ``org.apache.kafka.common.protocol.Errors``), named as in kio's
``ErrorCode``: ``class X(KompaktError, code="invalid_config")``. Our own bugs are plain
Python exceptions; these are faults of the input, the peer or the environment (h11's
``RemoteProtocolError`` versus ``LocalProtocolError``).
"""

from __future__ import annotations

from typing import Any


class _KafkaCode:
    """A class attribute that is kio's ``ErrorCode[name]``, looked up on first read.

    The lookup is lazy because importing kio costs 0.3 s (it pulls in hypothesis) and
    this module is imported by the record layer and the CLI, which never answer a
    Kafka client; the broker, which does, has kio loaded anyway.
    """

    def __init__(self, name: str):
        self.name = name

    def __get__(self, obj: object, owner: type) -> int:
        from kio.schema.errors import ErrorCode

        return ErrorCode[self.name]


class KompaktError(Exception):
    """Base of every expected kompakt error; ``error_code`` is Kafka's (an ``ErrorCode``
    member once resolved). Without a ``code=`` a subclass answers UNKNOWN_SERVER_ERROR."""

    error_code: Any = _KafkaCode("unknown_server_error")

    def __init_subclass__(cls, code: str | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if code is not None:
            cls.error_code = _KafkaCode(code)


class CorruptRecordError(KompaktError, code="corrupt_message"):
    """A batch fails its CRC or its framing is broken (Kafka CORRUPT_MESSAGE)."""

    def __init__(self, message: str, *, position: int | None = None, file: str | None = None):
        super().__init__(message)
        self.position = position
        self.file = file


class InvalidRecordError(KompaktError, code="invalid_record"):
    """A record breaks a topic rule, e.g. a null key on a compacted topic (INVALID_RECORD).

    ``record_errors`` lists ``(index, message)`` for each offending record, the index being
    the record's position in the produced record set (Kafka's ``RecordError``, KIP-467), so
    a client fails only those records. Empty when the whole batch is at fault.
    """

    def __init__(self, message: str, record_errors: list[tuple[int, str]] | None = None):
        super().__init__(message)
        self.record_errors: list[tuple[int, str]] = list(record_errors or [])


class InvalidTimestampError(InvalidRecordError, code="invalid_timestamp"):
    """A CreateTime outside ``message.timestamp.before/after.max.ms`` or a producer-set
    LogAppendTime (INVALID_TIMESTAMP, Kafka's ``LogValidator.validateTimestamp``)."""


class RecordTooLargeError(KompaktError, code="message_too_large"):
    """A batch is larger than ``max.message.bytes`` (MESSAGE_TOO_LARGE)."""


class OffsetOutOfRangeError(KompaktError, code="offset_out_of_range"):
    """A read below the log start or above the log end (OFFSET_OUT_OF_RANGE)."""


class UnknownTopicError(KompaktError, code="unknown_topic_or_partition"):
    """UNKNOWN_TOPIC_OR_PARTITION."""


class TopicExistsError(KompaktError, code="topic_already_exists"):
    """TOPIC_ALREADY_EXISTS."""


class InvalidTopicError(KompaktError, code="invalid_topic_exception"):
    """A topic name breaks Kafka's naming rules (INVALID_TOPIC_EXCEPTION)."""


class InvalidConfigError(KompaktError, code="invalid_config"):
    """A config key is unknown or its value is invalid (INVALID_CONFIG)."""


class InvalidPartitionsError(KompaktError, code="invalid_partitions"):
    """A partition count that is not positive or would shrink a topic (INVALID_PARTITIONS)."""


class KafkaStorageError(KompaktError, code="kafka_storage_error"):
    """An I/O error on the log (KAFKA_STORAGE_ERROR), e.g. a full disk."""


class LogDirLockedError(KompaktError):
    """Another process holds the data dir's ``.lock``."""


class InconsistentClusterIdError(KompaktError, code="inconsistent_cluster_id"):
    """One of ``log.dirs`` belongs to another cluster or node (Kafka's
    ``MetaPropertiesEnsemble.verify``: every log dir's ``meta.properties`` must agree)."""


class SegmentsChangedError(KompaktError):
    """The segments a clean read were removed meanwhile (retention, DeleteRecords, topic
    deletion): the clean is abandoned, nothing swapped, and retried at the next pass."""


class PolicyViolationError(KompaktError, code="policy_violation"):
    """A request breaks a broker-side limit (POLICY_VIOLATION), e.g. Kafka's cap of
    10000 metadata records per admin operation."""
