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

import numba
import numpy as np

from kompakt.record import codecs
from kompakt.record.decode import RecordBatch, iter_batches
from kompakt.record.header import (
    ATTRIBUTES_POS,
    BASE_OFFSET_POS,
    BATCH_LENGTH_POS,
    HEADER_SIZE,
    LAST_OFFSET_DELTA_POS,
    LOG_OVERHEAD,
    MAX_TIMESTAMP_POS,
    PRODUCER_EPOCH_POS,
    PRODUCER_ID_POS,
    RECORD_COUNT_POS,
)
from kompakt.record.kernel import KEYS, VALUES, gather, gather_slices, locate_records, slice_offsets


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
    batches = []
    for b in iter_batches(view, position, end):
        if verify_crc:
            b.ensure_valid()
        batches.append(b)
    nb = len(batches)
    b_pos = np.empty(nb, np.int64)
    b_base = np.empty(nb, np.int64)
    b_last = np.empty(nb, np.int64)
    b_attr = np.empty(nb, np.int16)
    b_pid = np.empty(nb, np.int64)
    b_count = np.empty(nb, np.int32)
    b_size = np.empty(nb, np.int32)
    plain: list[int] = []
    packed: list[int] = []
    packed_payloads: list[bytes] = []
    end_position = position
    for i, b in enumerate(batches):
        h = b.header
        b_pos[i] = b.position
        b_base[i] = h.base_offset
        b_last[i] = h.base_offset + h.last_offset_delta
        b_attr[i] = h.attributes
        b_pid[i] = h.producer_id
        b_count[i] = h.record_count
        b_size[i] = h.size
        end_position = b.position + b_size[i]
        if h.is_control and not include_control:
            continue
        if h.record_count == 0:
            continue
        if h.compression == codecs.NONE:
            plain.append(i)
        elif decompress is None:
            packed.append(i)
            packed_payloads.append(codecs.decompress(h.compression, b.buffer[HEADER_SIZE:]))
        elif (payload := decompress(i, b)) is not None:
            packed.append(i)
            packed_payloads.append(payload)
    located = [
        (
            source,
            locate_records(source, starts, ends, [batches[i] for i in ids], ids, KEYS | VALUES),
        )
        for ids, source, starts, ends in _groups(batches, plain, packed, packed_payloads, buf)
    ]
    cols = [
        _join([getattr(loc, name) for _src, loc in located], empty)
        for name, empty in (
            ("offset", np.empty(0, np.int64)),
            ("timestamp", np.empty(0, np.int64)),
            ("key_len", np.empty(0, np.int32)),
            ("value_len", np.empty(0, np.int32)),
            ("batch", np.empty(0, np.int32)),
        )
    ]
    out_offset, out_ts, out_key_len, out_value_len, out_batch = cols
    key_offsets = slice_offsets(out_key_len)
    key_data = np.empty(int(key_offsets[-1]), np.uint8)
    row = 0
    for source, loc in located:  # keys of each source in row order
        gather(source, loc.key_pos, key_offsets[row : row + len(loc) + 1], key_data)
        row += len(loc)
    if packed and plain:  # back to log order: batches of both groups interleave
        order = np.argsort(out_batch, kind="stable")
        out_offset, out_ts, out_key_len, out_value_len, out_batch = (
            a[order] for a in (out_offset, out_ts, out_key_len, out_value_len, out_batch)
        )
        key_data = gather_slices(key_data, key_offsets[:-1][order], slice_offsets(out_key_len))
        key_offsets = slice_offsets(out_key_len)
    key_null = out_key_len < 0
    return RecordScan(
        offset=out_offset,
        timestamp=out_ts,
        key_offsets=key_offsets,
        key_data=key_data,
        key_null=key_null,
        value_null=out_value_len < 0,
        value_size=out_value_len,
        batch_index=out_batch,
        batch_position=b_pos,
        batch_base_offset=b_base,
        batch_last_offset=b_last,
        batch_attributes=b_attr,
        batch_producer_id=b_pid,
        batch_record_count=b_count,
        batch_size=b_size,
        end_position=int(end_position),
    )


def _join(parts: list[np.ndarray], empty: np.ndarray) -> np.ndarray:
    """One column from the groups' parts, without a copy when there is one group."""
    if not parts:
        return empty
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _groups(batches, plain, packed, packed_payloads, buf):
    """(batch ids, source, starts, ends): plain batches are walked in place, compressed
    ones in one buffer of their decompressed payloads."""
    if plain:
        starts = np.array([batches[i].position + HEADER_SIZE for i in plain], np.int64)
        ends = np.array([batches[i].position + batches[i].header.size for i in plain], np.int64)
        yield plain, buf, starts, ends
    if packed:
        joined = np.frombuffer(b"".join(packed_payloads), np.uint8)
        lens = np.array([len(p) for p in packed_payloads], np.int64)
        ends = np.cumsum(lens)
        yield packed, joined, ends - lens, ends


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

    def __len__(self) -> int:
        return len(self.position)


@numba.njit(cache=True, nogil=True)
def _be(buf, pos, n):
    v = np.int64(0)
    for i in range(n):
        v = (v << 8) | np.int64(buf[pos + i])
    if n < 8 and v >= (np.int64(1) << (8 * n - 1)):
        v -= np.int64(1) << (8 * n)
    return v


@numba.njit(cache=True, nogil=True)
def _walk_headers(buf, pos, end, out):
    n = 0
    while pos + HEADER_SIZE <= end:
        length = _be(buf, pos + BATCH_LENGTH_POS, 4)
        size = length + LOG_OVERHEAD
        if length < HEADER_SIZE - LOG_OVERHEAD or pos + size > end:
            break
        if n == out.shape[0]:
            break
        out[n, 0] = pos
        out[n, 1] = size
        out[n, 2] = _be(buf, pos + BASE_OFFSET_POS, 8)
        out[n, 3] = out[n, 2] + _be(buf, pos + LAST_OFFSET_DELTA_POS, 4)
        out[n, 4] = _be(buf, pos + ATTRIBUTES_POS, 2)
        out[n, 5] = _be(buf, pos + PRODUCER_ID_POS, 8)
        out[n, 6] = _be(buf, pos + PRODUCER_EPOCH_POS, 2)
        out[n, 7] = _be(buf, pos + MAX_TIMESTAMP_POS, 8)
        out[n, 8] = _be(buf, pos + RECORD_COUNT_POS, 4)
        n += 1
        pos += size
    return n, pos


def scan_batch_headers(
    data: bytes | bytearray | memoryview | np.ndarray, position: int = 0, end: int | None = None
) -> BatchHeaders:
    """Walk batch headers only (no CRC check, no decompression); stops at a torn tail."""
    buf = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data
    end = len(buf) if end is None else end
    out = np.empty((max(1, (end - position) // HEADER_SIZE + 1), 9), np.int64)
    n, _ = _walk_headers(buf, position, end, out)
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
    )
