"""``__transaction_state`` record formats (Kafka's ``TransactionLog``).

Kafka's schemas (``transaction-coordinator/src/main/resources/common/message/``), each
value prefixed by its int16 version, as ``MessageUtil.toVersionPrefixedBytes`` writes:

Key: int16 version 0 (``CoordinatorRecordType.TRANSACTION_LOG``), then
``TransactionLogKey`` v0 = transactional_id (int16-length string).

Value ``TransactionLogValue``:

- v0: producer_id int64, producer_epoch int16, transaction_timeout_ms int32,
  transaction_status int8 (the state's id), transaction_partitions nullable array of
  (topic string, partition_ids [int32]) with int32 lengths (-1 = null),
  last_update_timestamp_ms int64, start_timestamp_ms int64.
- v1 (flexible, KIP-482): the same fields with compact (unsigned-varint length + 1)
  strings and arrays, an empty tagged-field section after each partitions entry, and at
  the end the tagged fields PreviousProducerId (tag 0, int64, default -1),
  NextProducerId (tag 1, int64, default -1), ClientTransactionVersion (tag 2, int16,
  default 0), each written only when not its default.

Kafka writes v0 until ``transaction.version`` 2 (KIP-890) is enabled, so
:func:`value_bytes` writes v0 unless asked for v1; both are read. The partitions are
null in Empty (Kafka's ``valueToBytes``), a list (maybe empty) in every other state. A
null value is a tombstone: the transactional id expired.

Reading uses kio's primitives (``kio.serial``), the Kafka protocol's own decoders.
Writing packs the fixed-width fields with ``struct`` (a record is encoded on the
coordinator's path for every AddPartitionsToTxn and EndTxn: an eighth of the cost of
writing them one by one) and leaves v1's compact and tagged parts to kio's writers; the
golden-bytes tests hold both to the schemas.
"""

from __future__ import annotations

import functools
import io
import struct
from dataclasses import dataclass
from typing import Any

from kio.serial import readers as r
from kio.serial import writers as w
from kio.static.primitive import uvarint

from kompakt.broker.coordinator.records import partition_for
from kompakt.broker.txn.state import (
    NO_PRODUCER_ID,
    TransactionMetadata,
    TransactionState,
    TxnTransitMetadata,
)

TRANSACTION_STATE_TOPIC = "__transaction_state"
"""Kafka's ``Topic.TRANSACTION_STATE_TOPIC_NAME``."""

KEY_VERSION = 0
"""The only key version (``CoordinatorRecordType.TRANSACTION_LOG``)."""
VALUE_V0 = 0
"""The value version Kafka writes before ``transaction.version`` 2."""
VALUE_V1 = 1
"""The first flexible value version (tagged fields)."""
VALUE_VERSIONS = (VALUE_V0, VALUE_V1)

TAG_PREVIOUS_PRODUCER_ID = 0
TAG_NEXT_PRODUCER_ID = 1
TAG_CLIENT_TRANSACTION_VERSION = 2


class UnknownValueVersion(ValueError):
    """A value version Kafka's ``readTxnRecordValue`` rejects (it throws
    ``IllegalStateException``): the log was written by a newer broker."""


@dataclass(frozen=True)
class TransactionLogValue:
    """Kafka's ``TransactionLogValue``, fields in schema order."""

    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    state: TransactionState
    partitions: tuple[tuple[str, tuple[int, ...]], ...] | None
    """(topic, partition ids) per topic; None in Empty."""
    last_update_timestamp_ms: int
    start_timestamp_ms: int
    previous_producer_id: int = NO_PRODUCER_ID
    """v1 tag 0."""
    next_producer_id: int = NO_PRODUCER_ID
    """v1 tag 1."""
    client_transaction_version: int = 0
    """v1 tag 2."""

    def topic_partitions(self) -> frozenset[tuple[str, int]]:
        return frozenset((t, p) for t, ps in self.partitions or () for p in ps)

    def metadata(self, transactional_id: str) -> TransactionMetadata:
        """The id's state as a load rebuilds it (Kafka's ``readTxnRecordValue``):
        an Empty one has no partitions."""
        empty = self.state == TransactionState.EMPTY
        return TransactionMetadata(
            transactional_id,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            txn_timeout_ms=self.transaction_timeout_ms,
            state=self.state,
            topic_partitions=set() if empty else set(self.topic_partitions()),
            txn_start_timestamp=self.start_timestamp_ms,
            txn_last_update_timestamp=self.last_update_timestamp_ms,
        )

    @classmethod
    def of(cls, t: TxnTransitMetadata) -> TransactionLogValue:
        """What Kafka's ``valueToBytes`` writes for a transition: partitions grouped by
        topic (sorted here, so equal states give equal bytes), null in Empty."""
        if t.state == TransactionState.EMPTY:
            if t.topic_partitions:
                raise ValueError(f"an Empty transaction has no partitions: {t}")
            partitions = None
        else:
            by_topic: dict[str, list[int]] = {}
            for topic, p in sorted(t.topic_partitions):
                by_topic.setdefault(topic, []).append(p)
            partitions = tuple((topic, tuple(ps)) for topic, ps in by_topic.items())
        return cls(
            t.producer_id,
            t.producer_epoch,
            t.txn_timeout_ms,
            t.state,
            partitions,
            t.txn_last_update_timestamp,
            t.txn_start_timestamp,
        )


IDS_CACHED = 1 << 14
"""Transactional ids whose record key and partition are kept worked out: every record
an id writes (three a transaction) needs both, and the partition is a Java string hash
of the id."""

_HEAD = struct.Struct(">hqhib")
"""version, producer_id, producer_epoch, transaction_timeout_ms, transaction_status."""
_INT16, _INT32 = struct.Struct(">h"), struct.Struct(">i")
_TIMESTAMPS = struct.Struct(">qq")
"""last_update_timestamp_ms, start_timestamp_ms."""


def _legacy_string(value: str) -> bytes:
    """An int16-length string (kio's ``write_legacy_string``)."""
    raw = value.encode()
    return _INT16.pack(len(raw)) + raw


@functools.lru_cache(maxsize=IDS_CACHED)
def key_bytes(transactional_id: str) -> bytes:
    """Kafka's ``TransactionLog.keyToBytes``."""
    return _INT16.pack(KEY_VERSION) + _legacy_string(transactional_id)


@functools.lru_cache(maxsize=IDS_CACHED)
def partition_of(transactional_id: str, partitions: int) -> int:
    """An id's ``__transaction_state`` partition (Kafka's ``partitionFor``:
    ``Utils.abs(transactionalId.hashCode) % partitions``)."""
    return partition_for(transactional_id, partitions)


def read_key(key: bytes) -> str | None:
    """Kafka's ``readTxnRecordKey``: the transactional id, or None for a key of another
    record type (skipped on load, as Kafka does)."""
    version, pos = r.read_int16(key, 0)
    if version != KEY_VERSION:
        return None
    transactional_id, _ = r.read_legacy_string(key, pos)
    return transactional_id


def value_bytes(v: TransactionLogValue, version: int = VALUE_V0) -> bytes:
    """Kafka's ``TransactionLog.valueToBytes`` at ``version``. Written with ``struct``
    (one record per AddPartitionsToTxn and EndTxn, on the coordinator's path); the
    flexible parts of v1 with kio's writers."""
    if version not in VALUE_VERSIONS:
        raise UnknownValueVersion(f"transaction log value version {version}")
    head = _HEAD.pack(
        version, v.producer_id, v.producer_epoch, v.transaction_timeout_ms, v.state.value
    )
    times = _TIMESTAMPS.pack(v.last_update_timestamp_ms, v.start_timestamp_ms)
    parts = v.partitions
    if version == VALUE_V0:
        out = [head, _INT32.pack(-1 if parts is None else len(parts))]
        for topic, ids in parts or ():
            out += (_legacy_string(topic), _INT32.pack(len(ids)))
            out += [_INT32.pack(p) for p in ids]
        out.append(times)
        return b"".join(out)
    buf = io.BytesIO()
    buf.write(head)
    w.write_compact_array_length(buf, None if parts is None else len(parts))
    for topic, ids in parts or ():
        w.write_compact_string(buf, topic)
        w.write_compact_array_length(buf, len(ids))
        for p in ids:
            buf.write(_INT32.pack(p))
        w.write_empty_tagged_fields(buf)
    buf.write(times)
    tagged = [
        (TAG_PREVIOUS_PRODUCER_ID, w.write_int64, v.previous_producer_id, NO_PRODUCER_ID),
        (TAG_NEXT_PRODUCER_ID, w.write_int64, v.next_producer_id, NO_PRODUCER_ID),
        (TAG_CLIENT_TRANSACTION_VERSION, w.write_int16, v.client_transaction_version, 0),
    ]
    present = [(tag, fn, value) for tag, fn, value, default in tagged if value != default]
    w.write_unsigned_varint(buf, uvarint(len(present)))
    for tag, fn, value in present:
        w.write_tagged_field(buf, uvarint(tag), fn, value)
    return buf.getvalue()


class _Cursor:
    """Reads kio primitives from ``buf`` one after another; ``flexible`` picks compact
    or legacy strings and array lengths."""

    def __init__(self, buf: bytes):
        self.buf = buf
        self.pos = 0
        self.flexible = False

    def _take(self, reader: r.Reader[int] | r.Reader[str] | r.Reader[int | None]) -> Any:
        value, size = reader(self.buf, self.pos)
        self.pos += size
        return value

    def int8(self) -> int:
        return int(self._take(r.read_int8))

    def int16(self) -> int:
        return int(self._take(r.read_int16))

    def int32(self) -> int:
        return int(self._take(r.read_int32))

    def int64(self) -> int:
        return int(self._take(r.read_int64))

    def uvarint(self) -> int:
        return int(self._take(r.read_unsigned_varint))

    def string(self) -> str:
        return str(self._take(r.read_compact_string if self.flexible else r.read_legacy_string))

    def array_length(self) -> int | None:
        """None for a null array."""
        if self.flexible:
            n = self._take(r.read_compact_array_length)
            return None if n is None else int(n)
        n = int(self._take(r.read_legacy_array_length))
        return None if n < 0 else n

    def tagged_fields(self) -> dict[int, bytes]:
        """A tagged-field section: {tag: raw bytes} (unknown tags are skipped)."""
        fields = {}
        for _ in range(self.uvarint()):
            tag, size = self.uvarint(), self.uvarint()
            fields[tag] = self.buf[self.pos : self.pos + size]
            self.pos += size
        return fields


def read_value(value: bytes) -> TransactionLogValue:
    """Kafka's ``readTxnRecordValue`` (the tombstone case is the caller's: a null
    value). Raises :class:`UnknownValueVersion` for a version Kafka does not know."""
    c = _Cursor(value)
    version = c.int16()
    if version not in VALUE_VERSIONS:
        raise UnknownValueVersion(f"unknown transaction log value version {version}")
    c.flexible = version >= VALUE_V1
    producer_id, epoch, timeout = c.int64(), c.int16(), c.int32()
    state = TransactionState(c.int8())
    n = c.array_length()
    partitions: tuple[tuple[str, tuple[int, ...]], ...] | None = None
    if n is not None:
        entries = []
        for _ in range(n):
            topic = c.string()
            ids = tuple(c.int32() for _ in range(c.array_length() or 0))
            if c.flexible:
                c.tagged_fields()
            entries.append((topic, ids))
        partitions = tuple(entries)
    last_update, start = c.int64(), c.int64()
    tagged = c.tagged_fields() if c.flexible else {}

    def tag(number: int, reader: r.Reader[int], default: int) -> int:
        raw = tagged.get(number)
        return default if raw is None else int(reader(raw, 0)[0])

    return TransactionLogValue(
        producer_id,
        epoch,
        timeout,
        state,
        partitions,
        last_update,
        start,
        tag(TAG_PREVIOUS_PRODUCER_ID, r.read_int64, NO_PRODUCER_ID),
        tag(TAG_NEXT_PRODUCER_ID, r.read_int64, NO_PRODUCER_ID),
        tag(TAG_CLIENT_TRANSACTION_VERSION, r.read_int16, 0),
    )


def read_record(key: bytes, value: bytes | None) -> tuple[str, TransactionLogValue | None] | None:
    """One ``__transaction_state`` record decoded: (transactional id, value or None for
    a tombstone), or None for a key of another record type."""
    transactional_id = read_key(key)
    if transactional_id is None:
        return None
    return transactional_id, None if value is None else read_value(value)
