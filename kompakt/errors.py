"""Error types shared by every layer.

Each error that a Kafka client can be told about carries the Kafka error code the broker
answers with (see Kafka's ``org.apache.kafka.common.protocol.Errors``). Our own bugs are
plain Python exceptions; these are faults of the input, the peer or the environment.
"""

from __future__ import annotations


class KompaktError(Exception):
    """Base of every expected kompakt error; ``error_code`` is Kafka's."""

    error_code: int = -1  # UNKNOWN_SERVER_ERROR


class CorruptRecordError(KompaktError):
    """A batch fails its CRC or its framing is broken (Kafka CORRUPT_MESSAGE)."""

    error_code = 2

    def __init__(self, message: str, *, position: int | None = None, file: str | None = None):
        super().__init__(message)
        self.position = position
        self.file = file


class InvalidRecordError(KompaktError):
    """A record breaks a topic rule, e.g. a null key on a compacted topic (INVALID_RECORD).

    ``record_errors`` lists ``(index, message)`` for each offending record, the index being
    the record's position in the produced record set (Kafka's ``RecordError``, KIP-467), so
    a client fails only those records. Empty when the whole batch is at fault.
    """

    error_code = 87

    def __init__(self, message: str, record_errors: list[tuple[int, str]] | None = None):
        super().__init__(message)
        self.record_errors: list[tuple[int, str]] = list(record_errors or [])


class InvalidTimestampError(InvalidRecordError):
    """A CreateTime outside ``message.timestamp.before/after.max.ms`` or a producer-set
    LogAppendTime (INVALID_TIMESTAMP, Kafka's ``LogValidator.validateTimestamp``)."""

    error_code = 32


class RecordTooLargeError(KompaktError):
    """A batch is larger than ``max.message.bytes`` (MESSAGE_TOO_LARGE)."""

    error_code = 10


class OffsetOutOfRangeError(KompaktError):
    error_code = 1


class UnknownTopicError(KompaktError):
    """UNKNOWN_TOPIC_OR_PARTITION."""

    error_code = 3


class TopicExistsError(KompaktError):
    error_code = 36


class InvalidTopicError(KompaktError):
    """A topic name breaks Kafka's naming rules (INVALID_TOPIC_EXCEPTION)."""

    error_code = 17


class InvalidConfigError(KompaktError):
    """A config key is unknown or its value is invalid (INVALID_CONFIG)."""

    error_code = 40


class InvalidPartitionsError(KompaktError):
    error_code = 37


class KafkaStorageError(KompaktError):
    """An I/O error on the log (KAFKA_STORAGE_ERROR), e.g. a full disk."""

    error_code = 56


class LogDirLockedError(KompaktError):
    """Another process holds the data dir's ``.lock``."""


class SegmentsChangedError(KompaktError):
    """The segments a clean read were removed meanwhile (retention, DeleteRecords, topic
    deletion): the clean is abandoned, nothing swapped, and retried at the next pass."""

    error_code = -1


class PolicyViolationError(KompaktError):
    """A request breaks a broker-side limit (POLICY_VIOLATION), e.g. Kafka's cap of
    10000 metadata records per admin operation."""

    error_code = 44
