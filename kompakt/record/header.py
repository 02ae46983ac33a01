"""Kafka RecordBatch v2 (magic 2) header: its layout, attribute bits and in-place patches.

As Kafka's ``DefaultRecordBatch`` constants: the header is the part of the format every
layer reads (the log indexes it, the broker patches it, the cleaner copies it), so it has
no dependency beyond ``struct`` and CRC-32C.

Byte layout (big-endian, 61-byte header; see ``shared/reference/kafka-storage.md``)::

    baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8 |
    crc uint32 | attributes int16 | lastOffsetDelta int32 | baseTimestamp int64 |
    maxTimestamp int64 | producerId int64 | producerEpoch int16 | baseSequence int32 |
    recordCount int32 | records...

The CRC-32C covers everything from ``attributes`` to the end, so the broker can patch
``baseOffset`` (and the leader epoch) without recomputing it. Each record is
``length varint | attributes int8 | timestampDelta varlong | offsetDelta varint |
key | value | headers`` with zig-zag varints and -1 lengths for null.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable
from typing import NamedTuple

import crc32c as _crc32c

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength precede what batchLength counts
MAGIC = 2
# byte positions of the header fields (Kafka's DefaultRecordBatch *_OFFSET constants)
BASE_OFFSET_POS = 0
BATCH_LENGTH_POS = 8
PARTITION_LEADER_EPOCH_POS = 12
MAGIC_POS = 16
CRC_POS = 17
ATTRIBUTES_POS = 21
LAST_OFFSET_DELTA_POS = 23
BASE_TIMESTAMP_POS = 27
MAX_TIMESTAMP_POS = 35
PRODUCER_ID_POS = 43
PRODUCER_EPOCH_POS = 51
BASE_SEQUENCE_POS = 53
RECORD_COUNT_POS = 57

# the bytes before the magic, outside the CRC, that the log stamps on every batch it
# appends: baseOffset, batchLength, partitionLeaderEpoch
STAMPED_PREFIX = struct.Struct(">qii")

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08  # 1 = LogAppendTime
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
DELETE_HORIZON_BIT = 0x40  # KIP-534: baseTimestamp holds the delete horizon

CREATE_TIME, LOG_APPEND_TIME = 0, 1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1

CONTROL_ABORT, CONTROL_COMMIT = 0, 1
# a control record's key (version, type) and value (version, coordinator epoch):
# Kafka's ControlRecordType / EndTransactionMarker
CONTROL_KEY = struct.Struct(">hh")
CONTROL_VALUE = struct.Struct(">hi")
CONTROL_RECORD_VERSION = 0


crc32c: Callable[[bytes | bytearray | memoryview], int] = _crc32c.crc32c
"""CRC-32C (Castagnoli), the checksum of a v2 batch from ``attributes`` on: the
package's own function, without a Python frame around it (one per batch appended)."""


class Header(NamedTuple):
    """A decoded batch header. Cheap to build: one ``struct.unpack`` per batch."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        return LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_BIT else CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_BIT)

    @property
    def delete_horizon(self) -> int | None:
        return self.base_timestamp if self.attributes & DELETE_HORIZON_BIT else None

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def size(self) -> int:
        """Bytes this batch occupies in a log file."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0


header_of = functools.partial(tuple.__new__, Header)
"""A :class:`Header` of the tuple of its 13 fields, as ``Header._make`` without its
Python frame and length check (a header is made on every batch of every append)."""


def batch_size(prefix: bytes | memoryview, pos: int = 0) -> int:
    """Bytes the batch at ``pos`` takes in a log, from its first ``LOG_OVERHEAD`` bytes
    (baseOffset, batchLength): what a reader needs before it has the whole batch."""
    length = prefix[pos + BATCH_LENGTH_POS : pos + LOG_OVERHEAD]
    return int.from_bytes(length, "big", signed=True) + LOG_OVERHEAD


def read_header(buf: bytes | memoryview, pos: int = 0) -> Header:
    """The header of the batch at ``pos`` (no checks: see ``RecordBatch.ensure_valid``)."""
    return header_of(HEADER.unpack_from(buf, pos))


def set_base_offset(buf: bytearray | memoryview, position: int, base_offset: int) -> None:
    """Patch a batch's base offset in place (not covered by the CRC)."""
    struct.pack_into(">q", buf, position + BASE_OFFSET_POS, base_offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, position: int, epoch: int) -> None:
    """Patch a batch's leader epoch in place (not covered by the CRC either)."""
    struct.pack_into(">i", buf, position + PARTITION_LEADER_EPOCH_POS, epoch)


def set_log_append_time(buf: bytearray, position: int, timestamp: int) -> None:
    """Rewrite a batch for LogAppendTime: type bit, maxTimestamp, and a fresh CRC."""
    set_max_timestamp(buf, position, timestamp, LOG_APPEND_TIME)


def set_max_timestamp(buf: bytearray, position: int, timestamp: int, timestamp_type: int) -> None:
    """Kafka's ``DefaultRecordBatch.setMaxTimestamp``: timestamp type bit and maxTimestamp,
    with the CRC recomputed; a no-op when both already hold."""
    view = memoryview(buf)
    (attributes,) = struct.unpack_from(">h", view, position + ATTRIBUTES_POS)
    (current,) = struct.unpack_from(">q", view, position + MAX_TIMESTAMP_POS)
    if timestamp_type == LOG_APPEND_TIME:
        new_attributes = attributes | TIMESTAMP_TYPE_BIT
    else:
        new_attributes = attributes & ~TIMESTAMP_TYPE_BIT
    if new_attributes == attributes and current == timestamp:
        return
    (length,) = struct.unpack_from(">i", view, position + BATCH_LENGTH_POS)
    struct.pack_into(">h", view, position + ATTRIBUTES_POS, new_attributes)
    struct.pack_into(">q", view, position + MAX_TIMESTAMP_POS, timestamp)
    end = position + LOG_OVERHEAD + length
    struct.pack_into(">I", view, position + CRC_POS, crc32c(view[position + ATTRIBUTES_POS : end]))
