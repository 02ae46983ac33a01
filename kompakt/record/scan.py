"""Batch-level fast path: columns of (offset, key, value-is-null, timestamp, batch position).

The cleaner and the Spark source read every record of a segment but need only a few
fields. Building a Python object per record costs ~1 µs each; here Python touches each
*batch* once (header, CRC, decompression) and a numba kernel walks the records, writing
numpy columns. Keys come back Arrow-style (``key_offsets`` + ``key_data``) so they can be
hashed in bulk or handed to pyarrow without copying per key.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np

from kompakt.errors import CorruptRecordError
from kompakt.record import codecs
from kompakt.record.decode import RecordBatch, iter_batches
from kompakt.record.header import (
    ATTRIBUTES_POS,
    BASE_OFFSET_POS,
    BASE_TIMESTAMP_POS,
    BATCH_LENGTH_POS,
    COMPRESSION_MASK,
    CONTROL_BIT,
    CRC_POS,
    HEADER_SIZE,
    LAST_OFFSET_DELTA_POS,
    LOG_OVERHEAD,
    MAGIC,
    MAGIC_POS,
    MAX_TIMESTAMP_POS,
    PRODUCER_EPOCH_POS,
    PRODUCER_ID_POS,
    RECORD_COUNT_POS,
    TIMESTAMP_TYPE_BIT,
    crc32c,
)
from kompakt.record.kernel import (
    KEY_DATA,
    VALUE_SIZES,
    BatchFields,
    gather_slices,
    locate_rows,
    malformed,
    read_be,
    slice_offsets,
)
from kompakt.record.stream_scan import stream_columns


@dataclass
class RecordScan:
    """Columns of one scan; row i is one record, in offset order."""

    offset: np.ndarray  # int64
    timestamp: np.ndarray  # int64
    key_offsets: np.ndarray  # int64, len n+1: key i is key_data[key_offsets[i]:key_offsets[i+1]]
    key_data: np.ndarray  # uint8
    key_null: np.ndarray  # bool
    value_null: np.ndarray  # bool
    value_size: np.ndarray  # int32 (-1 for null)
    batch_index: np.ndarray  # int32: index into the batch columns below
    # one entry per batch (data and control batches alike)
    batch_position: np.ndarray  # int64 byte position in the scanned buffer
    batch_base_offset: np.ndarray  # int64
    batch_last_offset: np.ndarray  # int64
    batch_attributes: np.ndarray  # int16
    batch_producer_id: np.ndarray  # int64
    batch_record_count: np.ndarray  # int32
    batch_size: np.ndarray  # int32
    end_position: int  # byte position after the last whole batch

    def __len__(self) -> int:
        return len(self.offset)

    def key(self, i: int) -> bytes | None:
        if self.key_null[i]:
            return None
        return self.key_data[self.key_offsets[i] : self.key_offsets[i + 1]].tobytes()


def scan_records(
    data: bytes | bytearray | memoryview | np.ndarray,
    position: int = 0,
    end: int | None = None,
    *,
    verify_crc: bool = True,
    include_control: bool = False,
    decompress: Callable[[int, RecordBatch], bytes | None] | None = None,
) -> RecordScan:
    """Scan whole batches in ``data[position:end]`` into columns.

    Control batches contribute batch rows but their records only with
    ``include_control``. A corrupt batch raises :class:`CorruptRecordError` with its
    byte position. ``decompress(i, batch)``, if given, returns batch i's payload, or
    None to leave its records out (the Produce validator streams those itself).
    """
    buf = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data
    view = memoryview(buf)
    end = len(buf) if end is None else end
    hb, end_position = _headers(buf, position, end)

    def batch(i: int) -> RecordBatch:
        return next(iter_batches(view, int(hb.position[i]), int(hb.position[i] + hb.size[i])))

    if verify_crc:
        for i, (pos, size, crc, magic) in enumerate(
            zip(
                hb.position.tolist(),
                hb.size.tolist(),
                hb.crc.tolist(),
                hb.magic.tolist(),
                strict=True,
            )
        ):
            if magic != MAGIC or crc32c(view[pos + ATTRIBUTES_POS : pos + size]) != crc:
                batch(i).ensure_valid()  # raises the batch's own error
    if end_position + LOG_OVERHEAD <= end:  # raises for an impossible batch length
        next(iter_batches(view, end_position, end), None)
    wanted = hb.record_count > 0
    if not include_control:
        wanted &= (hb.attributes & CONTROL_BIT) == 0
    codec = hb.attributes & COMPRESSION_MASK
    plain = np.flatnonzero(wanted & (codec == codecs.NONE))
    located: list[Any] = []

    def locate(ids: np.ndarray, source: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> None:
        located.append(
            locate_rows(
                source,
                starts,
                ends,
                hb.fields(ids),
                ids,
                KEY_DATA | VALUE_SIZES,
                lambda k: malformed(batch(int(ids[k]))),
            )
        )

    if len(plain):
        locate(plain, buf, hb.position[plain] + HEADER_SIZE, hb.position[plain] + hb.size[plain])
    packed: list[int] = []
    payloads: list[bytes] = []
    held = 0
    for i in np.flatnonzero(wanted & (codec != codecs.NONE)).tolist():
        b = batch(i)
        if decompress is not None:
            payload = decompress(i, b)
        else:
            payload = codecs.decompress_bounded(b.header.compression, b.buffer[HEADER_SIZE:], HELD)
            if payload is None:  # expands past what is held at once: a chunk at a time
                located.append(stream_columns(b, i))
                continue
        if payload is not None:
            packed.append(i)
            payloads.append(payload)
            held += len(payload)
            if held > HELD:
                locate(*_packed_group(packed, payloads))
                packed, payloads, held = [], [], 0
    if packed:
        locate(*_packed_group(packed, payloads))
    cols = [
        _join([getattr(loc, name) for loc in located], empty)
        for name, empty in (
            ("offset", np.empty(0, np.int64)),
            ("timestamp", np.empty(0, np.int64)),
            ("key_len", np.empty(0, np.int32)),
            ("value_len", np.empty(0, np.int32)),
            ("batch", np.empty(0, np.int32)),
            ("key_data", np.empty(0, np.uint8)),
        )
    ]
    out_offset, out_ts, out_key_len, out_value_len, out_batch, key_data = cols
    if len(located) == 1:
        key_offsets = located[0].key_offsets
    else:
        key_offsets = slice_offsets(out_key_len)
    if len(located) > 1 and np.any(np.diff(out_batch) < 0):  # back to log order
        order = np.argsort(out_batch, kind="stable")
        out_offset, out_ts, out_key_len, out_value_len, out_batch = (
            a[order] for a in (out_offset, out_ts, out_key_len, out_value_len, out_batch)
        )
        key_data = gather_slices(key_data, key_offsets[:-1][order], slice_offsets(out_key_len))
        key_offsets = slice_offsets(out_key_len)
    return RecordScan(
        offset=out_offset,
        timestamp=out_ts,
        key_offsets=key_offsets,
        key_data=key_data,
        key_null=out_key_len < 0,
        value_null=out_value_len < 0,
        value_size=out_value_len,
        batch_index=out_batch,
        batch_position=hb.position,
        batch_base_offset=hb.base_offset,
        batch_last_offset=hb.last_offset,
        batch_attributes=hb.attributes,
        batch_producer_id=hb.producer_id,
        batch_record_count=hb.record_count,
        batch_size=hb.size.astype(np.int32),
        end_position=end_position,
    )


HELD = 64 << 20
"""Decompressed bytes a scan holds at once: compressed batches are walked in groups of
about this much, and a batch expanding past it a chunk at a time
(:func:`kompakt.record.stream_scan.stream_columns`). Kafka bounds a batch's compressed
size only, so a few KiB of zstd may hold GiB; a scan holding every payload of a segment
took a cleaner past its memory."""


def payload_expansion(data: bytes | bytearray | memoryview | np.ndarray, limit: int) -> int:
    """Bytes the compressed data batches in ``data`` expand to, counted by streaming each
    payload and never holding it, stopping once the count passes ``limit`` (a result
    above ``limit`` means "more than ``limit``"). Kafka bounds a batch's compressed size
    only, so a caller with a time budget (the key inspector) asks this before it scans.
    A corrupt payload counts what it yielded before."""
    buf = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data
    hb, _end = _headers(buf, 0, len(buf))
    codec = hb.attributes & COMPRESSION_MASK
    wanted = (hb.record_count > 0) & ((hb.attributes & CONTROL_BIT) == 0) & (codec != 0)
    view = memoryview(buf)
    total = 0
    for i in np.flatnonzero(wanted).tolist():
        start, end = int(hb.position[i]) + HEADER_SIZE, int(hb.position[i] + hb.size[i])
        try:
            for piece in codecs.decompress_chunks(int(codec[i]), view[start:end], 1 << 20):
                total += len(piece)
                if total > limit:
                    return total
        except CorruptRecordError:
            continue  # the scan that follows reports it with its position
    return total


def _join(parts: list[np.ndarray], empty: np.ndarray) -> np.ndarray:
    """One column from the groups' parts, without a copy when there is one group."""
    if not parts:
        return empty
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _packed_group(
    packed: list[int], payloads: list[bytes]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(batch ids, source, starts, ends) of compressed batches: walked in one buffer of
    their decompressed payloads."""
    joined = np.frombuffer(payloads[0] if len(payloads) == 1 else b"".join(payloads), np.uint8)
    lens = np.array([len(p) for p in payloads], np.int64)
    ends = np.cumsum(lens)
    return np.array(packed, np.int64), joined, ends - lens, ends


@dataclass
class BatchHeaders:
    """Header fields of every whole batch in a buffer, without reading records."""

    position: np.ndarray  # int64
    size: np.ndarray  # int64 (whole batch, incl. the 12-byte log overhead)
    base_offset: np.ndarray  # int64
    last_offset: np.ndarray  # int64
    attributes: np.ndarray  # int16
    producer_id: np.ndarray  # int64
    producer_epoch: np.ndarray  # int16
    max_timestamp: np.ndarray  # int64
    record_count: np.ndarray  # int32
    base_timestamp: np.ndarray  # int64
    magic: np.ndarray  # int8
    crc: np.ndarray  # int64 (the stored uint32)

    def __len__(self) -> int:
        return len(self.position)

    def fields(self, ids: np.ndarray) -> BatchFields:
        """What the record walk needs of batches ``ids``."""
        return BatchFields(
            self.record_count[ids].astype(np.int64),
            self.base_offset[ids],
            self.base_timestamp[ids],
            self.max_timestamp[ids],
            (self.attributes[ids] & TIMESTAMP_TYPE_BIT) != 0,
        )


@numba.njit(cache=True, nogil=True)
def _walk_headers(buf, pos, end, out):
    n = 0
    while pos + HEADER_SIZE <= end:
        length = read_be(buf, pos + BATCH_LENGTH_POS, 4)
        size = length + LOG_OVERHEAD
        if length < HEADER_SIZE - LOG_OVERHEAD or pos + size > end:
            break
        if n == out.shape[0]:
            break
        out[n, 0] = pos
        out[n, 1] = size
        out[n, 2] = read_be(buf, pos + BASE_OFFSET_POS, 8)
        out[n, 3] = out[n, 2] + read_be(buf, pos + LAST_OFFSET_DELTA_POS, 4)
        out[n, 4] = read_be(buf, pos + ATTRIBUTES_POS, 2)
        out[n, 5] = read_be(buf, pos + PRODUCER_ID_POS, 8)
        out[n, 6] = read_be(buf, pos + PRODUCER_EPOCH_POS, 2)
        out[n, 7] = read_be(buf, pos + MAX_TIMESTAMP_POS, 8)
        out[n, 8] = read_be(buf, pos + RECORD_COUNT_POS, 4)
        out[n, 9] = read_be(buf, pos + BASE_TIMESTAMP_POS, 8)
        out[n, 10] = read_be(buf, pos + MAGIC_POS, 1)
        out[n, 11] = read_be(buf, pos + CRC_POS, 4) & 0xFFFFFFFF
        n += 1
        pos += size
    return n, pos


def scan_batch_headers(
    data: bytes | bytearray | memoryview | np.ndarray, position: int = 0, end: int | None = None
) -> BatchHeaders:
    """Walk batch headers only (no CRC check, no decompression); stops at a torn tail."""
    buf = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data
    return _headers(buf, position, len(buf) if end is None else end)[0]


def _headers(buf: np.ndarray, position: int, end: int) -> tuple[BatchHeaders, int]:
    """The whole batches' headers in ``buf[position:end]`` and the position after them."""
    out = np.empty((max(1, (end - position) // HEADER_SIZE + 1), 12), np.int64)
    n, stop = _walk_headers(buf, position, end, out)
    out = out[:n]
    return BatchHeaders(
        position=out[:, 0].copy(),
        size=out[:, 1].copy(),
        base_offset=out[:, 2].copy(),
        last_offset=out[:, 3].copy(),
        attributes=out[:, 4].astype(np.int16),
        producer_id=out[:, 5].copy(),
        producer_epoch=out[:, 6].astype(np.int16),
        max_timestamp=out[:, 7].copy(),
        record_count=out[:, 8].astype(np.int32),
        base_timestamp=out[:, 9].copy(),
        magic=out[:, 10].astype(np.int8),
        crc=out[:, 11].copy(),
    ), int(stop)
