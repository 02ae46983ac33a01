"""Kafka RecordBatch v2 (magic 2): the unit written to and read from a log.

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

import struct
from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple

import crc32c as _crc32c

from kompakt.errors import CorruptRecordError
from kompakt.record import codecs

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength precede what batchLength counts
MAGIC = 2
CRC_POS = 17
ATTRIBUTES_POS = 21
MAX_TIMESTAMP_POS = 35
PARTITION_LEADER_EPOCH_POS = 12

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08  # 1 = LogAppendTime
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
DELETE_HORIZON_BIT = 0x40  # KIP-534: baseTimestamp holds the delete horizon

CREATE_TIME, LOG_APPEND_TIME = 0, 1
NO_PRODUCER_ID = -1
NO_TIMESTAMP = -1

CONTROL_ABORT, CONTROL_COMMIT = 0, 1


def crc32c(data: bytes | memoryview) -> int:
    return _crc32c.crc32c(data)


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


class Record(NamedTuple):
    """One record with absolute offset and timestamp. ``key``/``value`` None means null."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


class ControlRecord(NamedTuple):
    """The key/value of a transaction marker (commit or abort)."""

    type: int  # CONTROL_ABORT or CONTROL_COMMIT
    coordinator_epoch: int
    version: int = 0


# -- varints ---------------------------------------------------------------------------


def write_varint(out: bytearray, value: int) -> None:
    """Append a zig-zag varint (protobuf ``sint64``) to ``out``."""
    v = (value << 1) ^ (value >> 63)
    v &= 0xFFFFFFFFFFFFFFFF
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def read_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """Read a zig-zag varint at ``pos``; return (value, next position)."""
    result = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise CorruptRecordError("truncated varint in record")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint too long")
    return (result >> 1) ^ -(result & 1), pos


# -- decoding --------------------------------------------------------------------------


class RecordBatch:
    """A view of one batch inside a larger buffer (a segment file, a produce request)."""

    __slots__ = ("header", "buffer", "position")

    def __init__(self, header: Header, buffer: memoryview, position: int = 0):
        self.header = header
        self.buffer = buffer  # exactly this batch's bytes
        self.position = position  # where it starts in the buffer it came from

    def __repr__(self) -> str:
        h = self.header
        return (
            f"RecordBatch(base={h.base_offset}, last={h.last_offset}, count={h.record_count}, "
            f"codec={codecs.NAMES.get(h.compression)}, pos={self.position})"
        )

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview) -> RecordBatch:
        batches = list(iter_batches(data))
        if len(batches) != 1 or batches[0].header.size != len(data):
            raise CorruptRecordError("expected exactly one record batch")
        return batches[0]

    def compute_crc(self) -> int:
        return crc32c(self.buffer[ATTRIBUTES_POS:])

    def is_valid(self) -> bool:
        return self.header.magic == MAGIC and self.compute_crc() == self.header.crc

    def ensure_valid(self) -> None:
        h = self.header
        if h.magic != MAGIC:
            raise CorruptRecordError(
                f"unsupported magic {h.magic} in batch at offset {h.base_offset}",
                position=self.position,
            )
        crc = self.compute_crc()
        if crc != h.crc:
            raise CorruptRecordError(
                f"CRC mismatch in batch at offset {h.base_offset}: stored {h.crc:#010x}, "
                f"computed {crc:#010x}",
                position=self.position,
            )

    def records_payload(self) -> bytes | memoryview:
        """The (decompressed) records section."""
        raw = self.buffer[HEADER_SIZE:]
        if self.header.compression == codecs.NONE:
            return raw
        return codecs.decompress(self.header.compression, raw)

    def records(self) -> list[Record]:
        """Decode every record (Python objects: the slow, complete path)."""
        h = self.header
        buf = self.records_payload()
        out: list[Record] = []
        pos = 0
        log_append = h.attributes & TIMESTAMP_TYPE_BIT
        for _ in range(h.record_count):
            length, pos = read_varint(buf, pos)
            end = pos + length
            if length < 0 or end > len(buf):
                raise CorruptRecordError(f"record overruns batch at offset {h.base_offset}")
            pos += 1  # record attributes, unused
            ts_delta, pos = read_varint(buf, pos)
            off_delta, pos = read_varint(buf, pos)
            key, pos = _read_bytes(buf, pos)
            value, pos = _read_bytes(buf, pos)
            n_headers, pos = read_varint(buf, pos)
            headers = []
            for _h in range(n_headers):
                hk, pos = _read_bytes(buf, pos)
                hv, pos = _read_bytes(buf, pos)
                headers.append(((hk or b"").decode("utf-8", "replace"), hv))
            if pos != end:
                raise CorruptRecordError(f"record length mismatch in batch at {h.base_offset}")
            ts = h.max_timestamp if log_append else h.base_timestamp + ts_delta
            out.append(Record(h.base_offset + off_delta, ts, key, value, tuple(headers)))
        if pos != len(buf):
            raise CorruptRecordError(f"trailing bytes after records in batch at {h.base_offset}")
        return out

    def control_record(self) -> ControlRecord | None:
        """The marker of a control batch, or None for a data batch."""
        if not self.header.is_control:
            return None
        recs = self.records()
        if not recs or recs[0].key is None or len(recs[0].key) < 4:
            raise CorruptRecordError("control batch without a valid control record")
        version, ctype = struct.unpack_from(">hh", recs[0].key)
        epoch = -1
        if recs[0].value is not None and len(recs[0].value) >= 6:
            _v, epoch = struct.unpack_from(">hi", recs[0].value)
        return ControlRecord(ctype, epoch, version)


def _read_bytes(buf: bytes | memoryview, pos: int) -> tuple[bytes | None, int]:
    n, pos = read_varint(buf, pos)
    if n < 0:
        return None, pos
    end = pos + n
    if end > len(buf):
        raise CorruptRecordError("record field overruns batch")
    return bytes(buf[pos:end]), end


def read_header(buf: bytes | memoryview, pos: int = 0) -> Header:
    return Header._make(HEADER.unpack_from(buf, pos))


def iter_batches(
    data: bytes | bytearray | memoryview, position: int = 0, end: int | None = None
) -> Iterator[RecordBatch]:
    """Yield the whole batches in ``data[position:end]``.

    A partial batch at the end (a fetch cut by ``max.bytes``, a torn write) ends the
    iteration quietly, as Kafka's batch iterator does; callers that need every byte
    accounted for compare the last batch's end with the buffer's end. A batch whose
    length field is impossible raises :class:`CorruptRecordError`.
    """
    view = memoryview(data)
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    end = len(view) if end is None else end
    pos = position
    while pos + LOG_OVERHEAD <= end:
        batch_length = int.from_bytes(view[pos + 8 : pos + 12], "big", signed=True)
        if batch_length < HEADER_SIZE - LOG_OVERHEAD:
            raise CorruptRecordError(
                f"batch length {batch_length} smaller than the header", position=pos
            )
        size = batch_length + LOG_OVERHEAD
        if pos + size > end:
            if pos + HEADER_SIZE <= end and view[pos + 16] != MAGIC:
                raise CorruptRecordError(f"unsupported magic {view[pos + 16]}", position=pos)
            return
        header = Header._make(HEADER.unpack_from(view, pos))
        yield RecordBatch(header, view[pos : pos + size], pos)
        pos += size


# -- encoding --------------------------------------------------------------------------


def encode_record(
    out: bytearray,
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes | None]] = (),
) -> None:
    body = bytearray(b"\x00")  # attributes
    write_varint(body, timestamp_delta)
    write_varint(body, offset_delta)
    if key is None:
        write_varint(body, -1)
    else:
        write_varint(body, len(key))
        body += key
    if value is None:
        write_varint(body, -1)
    else:
        write_varint(body, len(value))
        body += value
    write_varint(body, len(headers))
    for hk, hv in headers:
        hkb = hk.encode() if isinstance(hk, str) else bytes(hk)
        write_varint(body, len(hkb))
        body += hkb
        if hv is None:
            write_varint(body, -1)
        else:
            write_varint(body, len(hv))
            body += hv
    write_varint(out, len(body))
    out += body


def build_batch(
    records: Iterable[Record],
    *,
    base_offset: int | None = None,
    compression: int = codecs.NONE,
    timestamp_type: int = CREATE_TIME,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    control: bool = False,
    partition_leader_epoch: int = -1,
    last_offset: int | None = None,
    delete_horizon: int | None = None,
    max_timestamp: int | None = None,
) -> bytes:
    """Encode records (with absolute offsets and timestamps) as one v2 batch.

    Offsets may have gaps (cleaned batches); ``last_offset`` keeps a batch's original
    lastOffsetDelta when its last records were removed. With ``delete_horizon`` the
    horizon bit is set and baseTimestamp holds it (KIP-534); record timestamps stay
    absolute because their deltas are taken from the horizon. An empty record list
    builds the header-only batch Kafka keeps for producer state (baseTimestamp -1).
    """
    recs = list(records)
    if base_offset is None:
        base_offset = recs[0].offset if recs else 0
    if last_offset is None:
        last_offset = recs[-1].offset if recs else base_offset
    if delete_horizon is not None:
        base_ts = delete_horizon
    elif recs:
        base_ts = recs[0].timestamp
    else:
        base_ts = NO_TIMESTAMP
    if max_timestamp is None:
        max_timestamp = max((r.timestamp for r in recs), default=NO_TIMESTAMP)
    body = bytearray()
    for r in recs:
        encode_record(
            body, r.offset - base_offset, r.timestamp - base_ts, r.key, r.value, r.headers
        )
    payload = codecs.compress(compression, bytes(body)) if compression else bytes(body)
    attributes = compression & COMPRESSION_MASK
    if timestamp_type == LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_BIT
    if transactional:
        attributes |= TRANSACTIONAL_BIT
    if control:
        attributes |= CONTROL_BIT
    if delete_horizon is not None:
        attributes |= DELETE_HORIZON_BIT
    return _assemble(
        base_offset,
        partition_leader_epoch,
        attributes,
        last_offset - base_offset,
        base_ts,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        len(recs),
        payload,
    )


def build_batch_like(
    header: Header,
    records: Iterable[Record],
    *,
    compression: int | None = None,
    delete_horizon: int | None = None,
) -> bytes:
    """Re-encode ``records`` as the batch ``header`` describes: same base offset and
    ``lastOffset``, timestamp type, producer fields, flags and leader epoch; its own
    codec unless ``compression`` says otherwise (recompression, the cleaner's rewrite)."""
    return build_batch(
        records,
        base_offset=header.base_offset,
        compression=header.compression if compression is None else compression,
        timestamp_type=header.timestamp_type,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        transactional=header.is_transactional,
        control=header.is_control,
        partition_leader_epoch=header.partition_leader_epoch,
        last_offset=header.last_offset,
        delete_horizon=delete_horizon,
    )


def _assemble(
    base_offset: int,
    partition_leader_epoch: int,
    attributes: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    record_count: int,
    payload: bytes | memoryview,
) -> bytes:
    buf = bytearray(HEADER_SIZE + len(payload))
    HEADER.pack_into(
        buf,
        0,
        base_offset,
        HEADER_SIZE - LOG_OVERHEAD + len(payload),
        partition_leader_epoch,
        MAGIC,
        0,
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        record_count,
    )
    buf[HEADER_SIZE:] = payload
    struct.pack_into(">I", buf, CRC_POS, crc32c(memoryview(buf)[ATTRIBUTES_POS:]))
    return bytes(buf)


def build_simple_batch(
    items: Iterable[tuple[bytes | None, bytes | None]]
    | Iterable[tuple[bytes | None, bytes | None, Sequence[tuple[str, bytes | None]]]],
    *,
    timestamp: int,
    base_offset: int = 0,
    compression: int = codecs.NONE,
    **kwargs,
) -> bytes:
    """Batch of (key, value[, headers]) items at consecutive offsets, one timestamp."""
    recs = []
    for i, item in enumerate(items):
        headers = tuple(item[2]) if len(item) > 2 else ()
        recs.append(Record(base_offset + i, timestamp, item[0], item[1], headers))
    return build_batch(recs, base_offset=base_offset, compression=compression, **kwargs)


def build_control_batch(
    control_type: int,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int = 0,
    timestamp: int,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
) -> bytes:
    """A transaction marker batch (COMMIT or ABORT), transactional + control bits set."""
    key = struct.pack(">hh", 0, control_type)
    value = struct.pack(">hi", 0, coordinator_epoch)
    return build_batch(
        [Record(base_offset, timestamp, key, value)],
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transactional=True,
        control=True,
        partition_leader_epoch=partition_leader_epoch,
    )


def build_empty_batch(header: Header) -> bytes:
    """The header-only batch the cleaner keeps for a producer's last batch (count 0)."""
    return _assemble(
        header.base_offset,
        header.partition_leader_epoch,
        header.attributes,
        header.last_offset_delta,
        NO_TIMESTAMP,
        header.max_timestamp,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        0,
        b"",
    )


def set_base_offset(buf: bytearray | memoryview, position: int, base_offset: int) -> None:
    """Patch a batch's base offset in place (not covered by the CRC)."""
    struct.pack_into(">q", buf, position, base_offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, position: int, epoch: int) -> None:
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
    (length,) = struct.unpack_from(">i", view, position + 8)
    struct.pack_into(">h", view, position + ATTRIBUTES_POS, new_attributes)
    struct.pack_into(">q", view, position + MAX_TIMESTAMP_POS, timestamp)
    end = position + LOG_OVERHEAD + length
    struct.pack_into(">I", view, position + CRC_POS, crc32c(view[position + ATTRIBUTES_POS : end]))
