"""Batch-level fast path: columns of (offset, key, value-is-null, timestamp, batch position).

The cleaner and the Spark source read every record of a segment but need only a few
fields. Building a Python object per record costs ~1 µs each; here Python touches each
*batch* once (header, CRC, decompression) and a numba kernel walks the records, writing
numpy columns. Keys come back Arrow-style (``key_offsets`` + ``key_data``) so they can be
hashed in bulk or handed to pyarrow without copying per key.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from kompakt.errors import CorruptRecordError
from kompakt.record import codecs
from kompakt.record.batch import HEADER_SIZE, TIMESTAMP_TYPE_BIT, iter_batches


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


@numba.njit(cache=True, nogil=True)
def _varint(buf, pos, end):
    result = 0
    shift = 0
    while True:
        if pos >= end:
            return 0, -1
        b = np.int64(buf[pos])
        pos += 1
        result |= (b & 0x7F) << shift
        if (b & 0x80) == 0:
            break
        shift += 7
        if shift > 63:
            return 0, -1
    return (result >> 1) ^ -(result & 1), pos


@numba.njit(cache=True, nogil=True)
def _scan_kernel(
    buf,
    starts,
    ends,
    counts,
    base_offsets,
    base_ts,
    max_ts,
    log_append,
    batch_ids,
    out_offset,
    out_ts,
    out_key_start,
    out_key_len,
    out_value_len,
    out_batch,
    key_data,
    key_fill,
    row,
):
    """Walk the records of each described batch; return (rows, key bytes) or (-1-i, 0)."""
    for i in range(len(starts)):
        pos = starts[i]
        end = ends[i]
        for _ in range(counts[i]):
            length, pos = _varint(buf, pos, end)
            if pos < 0 or length < 0 or pos + length > end:
                return -1 - i, key_fill
            rec_end = pos + length
            pos += 1  # attributes
            ts_delta, pos = _varint(buf, pos, rec_end)
            if pos < 0:
                return -1 - i, key_fill
            off_delta, pos = _varint(buf, pos, rec_end)
            if pos < 0:
                return -1 - i, key_fill
            klen, pos = _varint(buf, pos, rec_end)
            if pos < 0 or pos + max(klen, 0) > rec_end:
                return -1 - i, key_fill
            out_key_start[row] = key_fill
            out_key_len[row] = klen
            if klen > 0:
                key_data[key_fill : key_fill + klen] = buf[pos : pos + klen]
                key_fill += klen
                pos += klen
            vlen, pos = _varint(buf, pos, rec_end)
            if pos < 0 or pos + max(vlen, 0) > rec_end:
                return -1 - i, key_fill
            out_value_len[row] = vlen
            out_offset[row] = base_offsets[i] + off_delta
            out_ts[row] = max_ts[i] if log_append[i] else base_ts[i] + ts_delta
            out_batch[row] = batch_ids[i]
            row += 1
            pos = rec_end  # headers are not needed here
    return row, key_fill


def scan_records(
    data: bytes | bytearray | memoryview | np.ndarray,
    position: int = 0,
    end: int | None = None,
    *,
    verify_crc: bool = True,
    include_control: bool = False,
) -> RecordScan:
    """Scan whole batches in ``data[position:end]`` into columns.

    Control batches contribute batch rows but their records only with
    ``include_control``. A corrupt batch raises :class:`CorruptRecordError` with its
    byte position.
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
        b_size[i] = h.batch_length + 12
        end_position = b.position + b_size[i]
        if h.is_control and not include_control:
            continue
        if h.record_count == 0:
            continue
        if h.compression == codecs.NONE:
            plain.append(i)
        else:
            packed.append(i)
            packed_payloads.append(codecs.decompress(h.compression, b.buffer[HEADER_SIZE:]))
    total = int(sum(batches[i].header.record_count for i in plain + packed))
    out_offset = np.empty(total, np.int64)
    out_ts = np.empty(total, np.int64)
    out_key_start = np.empty(total, np.int64)
    out_key_len = np.empty(total, np.int32)
    out_value_len = np.empty(total, np.int32)
    out_batch = np.empty(total, np.int32)
    key_cap = sum(batches[i].header.batch_length for i in plain) + sum(map(len, packed_payloads))
    key_data = np.empty(key_cap, np.uint8)
    row, fill = 0, 0
    for ids, source, starts, ends in _groups(batches, plain, packed, packed_payloads, buf):
        hdrs = [batches[i].header for i in ids]
        res_row, fill = _scan_kernel(
            source,
            starts,
            ends,
            np.array([h.record_count for h in hdrs], np.int64),
            np.array([h.base_offset for h in hdrs], np.int64),
            np.array([h.base_timestamp for h in hdrs], np.int64),
            np.array([h.max_timestamp for h in hdrs], np.int64),
            np.array([bool(h.attributes & TIMESTAMP_TYPE_BIT) for h in hdrs], np.bool_),
            np.array(ids, np.int32),
            out_offset,
            out_ts,
            out_key_start,
            out_key_len,
            out_value_len,
            out_batch,
            key_data,
            fill,
            row,
        )
        if res_row < 0:
            bad = batches[ids[-1 - res_row]]
            raise CorruptRecordError(
                f"malformed record in batch at offset {bad.header.base_offset}",
                position=bad.position,
            )
        row = res_row
    if packed and plain:
        order = np.argsort(out_batch, kind="stable")
        out_offset, out_ts, out_key_start, out_key_len, out_value_len, out_batch = (
            a[order]
            for a in (out_offset, out_ts, out_key_start, out_key_len, out_value_len, out_batch)
        )
    key_null = out_key_len < 0
    lens = np.where(key_null, 0, out_key_len).astype(np.int64)
    key_offsets = np.zeros(total + 1, np.int64)
    np.cumsum(lens, out=key_offsets[1:])
    if packed and plain:
        key_data = _gather(key_data, out_key_start, lens, int(key_offsets[-1]))
    else:
        key_data = key_data[:fill]
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


def _groups(batches, plain, packed, packed_payloads, buf):
    if plain:
        starts = np.array([batches[i].position + HEADER_SIZE for i in plain], np.int64)
        ends = np.array([batches[i].position + batches[i].header.size for i in plain], np.int64)
        yield plain, buf, starts, ends
    if packed:
        joined = np.frombuffer(b"".join(packed_payloads), np.uint8)
        lens = np.array([len(p) for p in packed_payloads], np.int64)
        ends = np.cumsum(lens)
        yield packed, joined, ends - lens, ends


@numba.njit(cache=True, nogil=True)
def _gather(src, starts, lens, total):
    out = np.empty(total, np.uint8)
    fill = 0
    for i in range(len(starts)):
        n = lens[i]
        out[fill : fill + n] = src[starts[i] : starts[i] + n]
        fill += n
    return out


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
    while pos + HEADER_SIZE_NB <= end:
        length = _be(buf, pos + 8, 4)
        size = length + 12
        if length < HEADER_SIZE_NB - 12 or pos + size > end:
            break
        if n == out.shape[0]:
            break
        out[n, 0] = pos
        out[n, 1] = size
        out[n, 2] = _be(buf, pos, 8)
        out[n, 3] = out[n, 2] + _be(buf, pos + 23, 4)
        out[n, 4] = _be(buf, pos + 21, 2)
        out[n, 5] = _be(buf, pos + 43, 8)
        out[n, 6] = _be(buf, pos + 51, 2)
        out[n, 7] = _be(buf, pos + 35, 8)
        out[n, 8] = _be(buf, pos + 57, 4)
        n += 1
        pos += size
    return n, pos


HEADER_SIZE_NB = HEADER_SIZE


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
