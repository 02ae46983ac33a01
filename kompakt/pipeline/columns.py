"""Full-record columnar decode: key, value and headers as Arrow-style columns.

``kompakt.record.scan`` gives the cleaner what it needs (offsets, keys, value-is-null),
but a DataFrame needs the value bytes and headers too. This module adds that without a
Python object per record: Python visits each *batch* (header, CRC, decompression), one
numba kernel records where every field sits in the (decompressed) payload, and a second
gathers those slices into contiguous buffers that become Arrow arrays without copying.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from kompakt.errors import CorruptRecordError
from kompakt.record import codecs
from kompakt.record.batch import HEADER_SIZE, TIMESTAMP_TYPE_BIT, RecordBatch
from kompakt.record.scan import _varint


@dataclass
class Slices:
    """Binary column as Arrow parts: item i is ``data[offsets[i]:offsets[i+1]]``."""

    offsets: np.ndarray  # int32, len n+1
    data: np.ndarray  # uint8
    null: np.ndarray  # bool, len n


@dataclass
class RecordColumns:
    """Row i is one record, in log order."""

    offset: np.ndarray  # int64
    timestamp: np.ndarray  # int64 (ms)
    timestamp_type: np.ndarray  # int32 (0 CreateTime, 1 LogAppendTime)
    batch: np.ndarray  # int32 index into the batch list given to decode_batches
    key: Slices
    value: Slices
    header_offsets: np.ndarray  # int32, len n+1: headers of row i are entries [a, b)
    header_key: Slices
    header_value: Slices

    def __len__(self) -> int:
        return len(self.offset)


@numba.njit(cache=True, nogil=True)
def _locate_kernel(
    buf,
    starts,
    ends,
    counts,
    base_offsets,
    base_ts,
    max_ts,
    log_append,
    out_offset,
    out_ts,
    out_batch,
    key_pos,
    key_len,
    val_pos,
    val_len,
    hdr_count,
    hk_pos,
    hk_len,
    hv_pos,
    hv_len,
):
    """Record field positions of every record; return (rows, headers) or (-1-batch, 0)."""
    row = 0
    nh = 0
    for i in range(len(starts)):
        pos = starts[i]
        end = ends[i]
        for _ in range(counts[i]):
            length, pos = _varint(buf, pos, end)
            if pos < 0 or length < 0 or pos + length > end:
                return -1 - i, 0
            rec_end = pos + length
            pos += 1  # record attributes
            ts_delta, pos = _varint(buf, pos, rec_end)
            if pos < 0:
                return -1 - i, 0
            off_delta, pos = _varint(buf, pos, rec_end)
            if pos < 0:
                return -1 - i, 0
            klen, pos = _varint(buf, pos, rec_end)
            if pos < 0 or pos + max(klen, 0) > rec_end:
                return -1 - i, 0
            key_pos[row] = pos
            key_len[row] = klen
            pos += max(klen, 0)
            vlen, pos = _varint(buf, pos, rec_end)
            if pos < 0 or pos + max(vlen, 0) > rec_end:
                return -1 - i, 0
            val_pos[row] = pos
            val_len[row] = vlen
            pos += max(vlen, 0)
            nhdr, pos = _varint(buf, pos, rec_end)
            if pos < 0 or nhdr < 0 or nh + nhdr > len(hk_pos):
                return -1 - i, 0
            for _h in range(nhdr):
                hkl, pos = _varint(buf, pos, rec_end)
                if pos < 0 or pos + max(hkl, 0) > rec_end:
                    return -1 - i, 0
                hk_pos[nh] = pos
                hk_len[nh] = hkl
                pos += max(hkl, 0)
                hvl, pos = _varint(buf, pos, rec_end)
                if pos < 0 or pos + max(hvl, 0) > rec_end:
                    return -1 - i, 0
                hv_pos[nh] = pos
                hv_len[nh] = hvl
                pos += max(hvl, 0)
                nh += 1
            if pos != rec_end:
                return -1 - i, 0
            hdr_count[row] = nhdr
            out_offset[row] = base_offsets[i] + off_delta
            out_ts[row] = max_ts[i] if log_append[i] else base_ts[i] + ts_delta
            out_batch[row] = i
            row += 1
        if pos != end:
            return -1 - i, 0
    return row, nh


@numba.njit(cache=True, nogil=True)
def _gather(src, pos, lens, offsets):
    out = np.empty(offsets[-1], np.uint8)
    for i in range(len(pos)):
        n = offsets[i + 1] - offsets[i]
        if n > 0:
            out[offsets[i] : offsets[i + 1]] = src[pos[i] : pos[i] + n]
    return out


def _slices(src: np.ndarray, pos: np.ndarray, lens: np.ndarray) -> Slices:
    null = lens < 0
    sizes = np.where(null, 0, lens).astype(np.int64)
    offsets = np.zeros(len(lens) + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    if offsets[-1] >= 2**31:
        raise ValueError("a binary column chunk exceeds 2 GiB; decode fewer batches at once")
    data = _gather(src, pos, lens, offsets)
    return Slices(offsets.astype(np.int32), data, null)


def decode_batches(batches: list[RecordBatch]) -> RecordColumns:
    """Decode the records of data batches (the caller drops control batches) into columns.

    Batches must be CRC-checked by the caller when that matters. Compressed batches are
    decompressed and concatenated into one scratch buffer so a single kernel call covers
    every batch.
    """
    payloads: list[bytes | memoryview] = []
    for b in batches:
        raw = b.buffer[HEADER_SIZE:]
        if b.header.compression == codecs.NONE:
            payloads.append(raw)
        else:
            payloads.append(codecs.decompress(b.header.compression, raw))
    lens = np.fromiter((len(p) for p in payloads), np.int64, len(payloads))
    ends = np.cumsum(lens)
    starts = ends - lens
    src = np.frombuffer(b"".join(payloads), np.uint8)
    hdrs = [b.header for b in batches]
    n = int(sum(h.record_count for h in hdrs))
    max_headers = len(src) // 2  # each header takes at least two length bytes
    # offset, timestamp, batch index, key pos/len, value pos/len
    out = [np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int32)]
    out += [np.empty(n, np.int64) for _ in range(4)]
    hdr_count = np.empty(n, np.int64)
    hcols = [np.empty(max_headers, np.int64) for _ in range(4)]
    rows, nh = _locate_kernel(
        src,
        starts,
        ends,
        np.fromiter((h.record_count for h in hdrs), np.int64, len(hdrs)),
        np.fromiter((h.base_offset for h in hdrs), np.int64, len(hdrs)),
        np.fromiter((h.base_timestamp for h in hdrs), np.int64, len(hdrs)),
        np.fromiter((h.max_timestamp for h in hdrs), np.int64, len(hdrs)),
        np.fromiter((bool(h.attributes & TIMESTAMP_TYPE_BIT) for h in hdrs), np.bool_, len(hdrs)),
        *out,
        hdr_count,
        *hcols,
    )
    if rows < 0:
        bad = batches[-1 - rows]
        raise CorruptRecordError(
            f"malformed record in batch at offset {bad.header.base_offset}", position=bad.position
        )
    offset, ts, batch_ix, key_pos, key_len, val_pos, val_len = out
    hk_pos, hk_len, hv_pos, hv_len = (c[:nh] for c in hcols)
    ts_type = np.fromiter(
        (1 if h.attributes & TIMESTAMP_TYPE_BIT else 0 for h in hdrs), np.int32, len(hdrs)
    )
    header_offsets = np.zeros(n + 1, np.int32)
    np.cumsum(hdr_count, out=header_offsets[1:])
    return RecordColumns(
        offset=offset,
        timestamp=ts,
        timestamp_type=ts_type[batch_ix] if n else np.empty(0, np.int32),
        batch=batch_ix,
        key=_slices(src, key_pos, key_len),
        value=_slices(src, val_pos, val_len),
        header_offsets=header_offsets,
        header_key=_slices(src, hk_pos, hk_len),
        header_value=_slices(src, hv_pos, hv_len),
    )
