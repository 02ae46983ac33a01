"""The numba record kernel: one walk over v2 records for every bulk reader.

Kafka's ``DefaultRecord.readFrom`` layout, once, for the readers that must not build a
Python object per record: the cleaner's scan (:mod:`kompakt.record.scan`), the Spark
source's columns (:mod:`kompakt.pipeline.columns`) and the cleaner's rebuild of a batch
(:func:`copy_retained`). Python visits each *batch* (header, CRC, decompression) and hands
the kernel the payload ranges; ``walk_records`` writes where each field sits, and the
``flags`` say which fields a caller wants so the hot cleaner scan skips headers.

The varints are :mod:`kompakt.record.varint`'s Python bodies compiled here, so the
pure-Python codec and the kernel cannot disagree on them. (numba's on-disk cache does not
notice edits to another module: after changing ``varint.py`` delete ``__pycache__/*.nb*``.)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numba
import numpy as np

from kompakt.errors import CorruptRecordError
from kompakt.record import varint
from kompakt.record.decode import RecordBatch
from kompakt.record.header import TIMESTAMP_TYPE_BIT

_JIT = {"cache": True, "nogil": True}
decode_varint = numba.njit(**_JIT)(varint.decode_varint)
encode_varint = numba.njit(**_JIT)(varint.encode_varint)
varint_size = numba.njit(**_JIT)(varint.varint_size)

# ``walk_records`` flags: which per-record outputs to fill (offset, timestamp and batch
# index are always filled). Arrays for fields not asked for may be empty.
KEYS = 1  # key_pos, key_len (-1: null)
VALUES = 2  # value_pos, value_len (-1: null)
HEADERS = 4  # header_count and the hk/hv arrays; also checks each record's length
LAYOUT = 8  # body_pos (record attributes), tail_pos (after timestamp delta), rec_end
# key_len, and each key copied into key_data (Arrow offsets in key_offsets) while the
# walk has it in cache: a second gather pass re-reads the whole buffer
KEY_DATA = 16
VALUE_SIZES = 32  # value_len only

RECORD_ATTRIBUTES_SIZE = 1  # the unused int8 after a record's length
# length, attributes, timestamp delta, offset delta, key length, value length
_MIN_RECORD_SIZE = 6


@numba.njit(inline="always", **_JIT)
def read_be(buf, pos, size):
    """The signed big-endian integer of ``size`` bytes (1-8) at ``pos``: a batch
    header's field, read from the bytes without a Python object."""
    v = np.int64(0)
    for i in range(size):
        v = (v << 8) | np.int64(buf[pos + i])
    shift = 64 - 8 * size
    return (v << shift) >> shift if shift else v


@numba.njit(inline="always", **_JIT)
def read_field(buf, pos, end):
    """A length-prefixed field (key, value, header key or value) at ``pos``: (data
    position, length or -1 for null, next position), next position < 0 if it overruns."""
    n, pos = decode_varint(buf, pos, end)
    if pos < 0 or pos + max(n, 0) > end:
        return 0, 0, -1
    return pos, n, pos + max(n, 0)


@numba.njit(inline="always", **_JIT)
def read_record(buf, pos, end):
    """The fields of the record at ``pos`` up to its value (Kafka's
    ``DefaultRecord.readFrom``): (body position, position after the timestamp delta,
    record end, timestamp delta, offset delta, key position, key length, value position,
    value length, position after the value); that last is < 0 if the record is malformed
    (its length or a field overrunning ``end`` or the record)."""
    length, pos = decode_varint(buf, pos, end)
    if pos < 0 or length < 0 or pos + length > end:
        return 0, 0, 0, 0, 0, 0, 0, 0, 0, -1
    body = pos
    rec_end = pos + length
    ts_delta, pos = decode_varint(buf, pos + RECORD_ATTRIBUTES_SIZE, rec_end)
    tail = pos
    off_delta = 0
    if pos >= 0:
        off_delta, pos = decode_varint(buf, pos, rec_end)
    kpos = klen = vpos = vlen = 0
    if pos >= 0:
        kpos, klen, pos = read_field(buf, pos, rec_end)
    if pos >= 0:
        vpos, vlen, pos = read_field(buf, pos, rec_end)
    return body, tail, rec_end, ts_delta, off_delta, kpos, klen, vpos, vlen, pos


@numba.njit(**_JIT)
def walk_records(
    buf,
    starts,
    ends,
    counts,
    base_offsets,
    base_ts,
    max_ts,
    log_append,
    batch_ids,
    flags,
    row,
    out_offset,
    out_ts,
    out_batch,
    key_pos,
    key_len,
    value_pos,
    value_len,
    body_pos,
    tail_pos,
    rec_end_pos,
    header_count,
    hk_pos,
    hk_len,
    hv_pos,
    hv_len,
    key_offsets,
    key_data,
):
    """Walk ``counts[i]`` records in ``buf[starts[i]:ends[i]]`` for each batch i, writing
    rows from ``row`` on; return (next row, headers written) or (-1 - i, 0) for a
    malformed batch i: a record overrunning its batch, or bytes left after the last
    record (Kafka: "Incorrect declared batch size"). With ``KEY_DATA`` a key that would
    overrun ``key_data`` also counts as malformed (its size bounds well-formed keys)."""
    nh = 0
    kd_end = key_offsets[row] if flags & KEY_DATA else 0
    for i in range(len(starts)):
        pos = starts[i]
        end = ends[i]
        base_offset = base_offsets[i]
        ts_base = max_ts[i] if log_append[i] else base_ts[i]
        ts_delta_on = 0 if log_append[i] else 1
        batch_id = batch_ids[i]
        for _ in range(counts[i]):
            body, tail, rec_end, ts_delta, off_delta, kpos, klen, vpos, vlen, pos = read_record(
                buf, pos, end
            )
            if pos < 0:
                return -1 - i, 0
            if flags & LAYOUT:
                body_pos[row] = body
                tail_pos[row] = tail
                rec_end_pos[row] = rec_end
            if flags & KEYS:
                key_pos[row] = kpos
            if flags & (KEYS | KEY_DATA):
                key_len[row] = klen
            if flags & KEY_DATA:
                if klen > 0:
                    if kd_end + klen > len(key_data):
                        return -1 - i, 0
                    key_data[kd_end : kd_end + klen] = buf[kpos : kpos + klen]
                    kd_end += klen
                key_offsets[row + 1] = kd_end
            if flags & VALUES:
                value_pos[row] = vpos
            if flags & (VALUES | VALUE_SIZES):
                value_len[row] = vlen
            if flags & HEADERS:
                nhdr, pos = decode_varint(buf, pos, rec_end)
                if pos < 0 or nhdr < 0 or nh + nhdr > len(hk_pos):
                    return -1 - i, 0
                for _h in range(nhdr):
                    hk_pos[nh], hk_len[nh], pos = read_field(buf, pos, rec_end)
                    if pos < 0:
                        return -1 - i, 0
                    hv_pos[nh], hv_len[nh], pos = read_field(buf, pos, rec_end)
                    if pos < 0:
                        return -1 - i, 0
                    nh += 1
                if pos != rec_end:
                    return -1 - i, 0
                header_count[row] = nhdr
            pos = rec_end
            out_offset[row] = base_offset + off_delta
            out_ts[row] = ts_base + ts_delta * ts_delta_on
            out_batch[row] = batch_id
            row += 1
        if pos != end:
            return -1 - i, 0
    return row, nh


@numba.njit(**_JIT)
def gather(src, pos, offsets, out):
    """``out[offsets[i]:offsets[i + 1]] = src[pos[i]:...]`` for every i: variable-length
    fields into one contiguous (Arrow-style) buffer."""
    for i in range(len(pos)):
        n = offsets[i + 1] - offsets[i]
        if n > 0:
            out[offsets[i] : offsets[i + 1]] = src[pos[i] : pos[i] + n]
    return out


@numba.njit(**_JIT)
def copy_retained(src, body_pos, tail_pos, rec_end, keep, ts, base_ts, out):
    """Re-encode the kept records of one batch (positions from ``walk_records`` with
    ``LAYOUT``), rewriting only each timestamp delta against ``base_ts``: the record part
    of Kafka's ``buildRetainedRecordsInto``. Returns the bytes written to ``out``."""
    o = 0
    for i in range(len(body_pos)):
        if keep[i]:
            delta = ts[i] - base_ts
            rest = rec_end[i] - tail_pos[i]
            o = encode_varint(out, o, RECORD_ATTRIBUTES_SIZE + varint_size(delta) + rest)
            out[o] = src[body_pos[i]]
            o += RECORD_ATTRIBUTES_SIZE
            o = encode_varint(out, o, delta)
            out[o : o + rest] = src[tail_pos[i] : rec_end[i]]
            o += rest
    return o


@dataclass
class Located:
    """Where ``walk_records`` found each record's fields; row i is one record.

    Columns of fields not asked for by the flags are empty; positions index the buffer
    that was walked."""

    offset: np.ndarray  # int64
    timestamp: np.ndarray  # int64
    batch: np.ndarray  # int32: the batch id given for the record's batch
    key_pos: np.ndarray  # int64
    key_len: np.ndarray  # int32, -1 for null
    value_pos: np.ndarray  # int64
    value_len: np.ndarray  # int32, -1 for null
    body_pos: np.ndarray  # int64
    tail_pos: np.ndarray  # int64
    rec_end: np.ndarray  # int64
    header_count: np.ndarray  # int64
    hk_pos: np.ndarray  # int64, one entry per header
    hk_len: np.ndarray  # int32
    hv_pos: np.ndarray  # int64
    hv_len: np.ndarray  # int32
    key_offsets: np.ndarray  # int64, len n+1 (KEY_DATA): key i is key_data[o[i]:o[i+1]]
    key_data: np.ndarray  # uint8 (KEY_DATA)

    def __len__(self) -> int:
        return len(self.offset)


class BatchFields(NamedTuple):
    """What the walk needs of each batch's header, one array per field."""

    record_count: np.ndarray  # int64
    base_offset: np.ndarray  # int64
    base_timestamp: np.ndarray  # int64
    max_timestamp: np.ndarray  # int64
    log_append_time: np.ndarray  # bool


def batch_fields(batches: Sequence[RecordBatch]) -> BatchFields:
    """The header fields ``walk_records`` reads, from decoded batches."""
    hdrs = [b.header for b in batches]
    nb = len(hdrs)
    return BatchFields(
        np.fromiter((h.record_count for h in hdrs), np.int64, nb),
        np.fromiter((h.base_offset for h in hdrs), np.int64, nb),
        np.fromiter((h.base_timestamp for h in hdrs), np.int64, nb),
        np.fromiter((h.max_timestamp for h in hdrs), np.int64, nb),
        np.fromiter((bool(h.attributes & TIMESTAMP_TYPE_BIT) for h in hdrs), np.bool_, nb),
    )


def locate_records(
    buf: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    batches: Sequence[RecordBatch],
    batch_ids: np.ndarray,
    flags: int,
) -> Located:
    """Run ``walk_records`` over the record payloads ``buf[starts[i]:ends[i]]`` of
    ``batches[i]`` (decompressed by the caller) and return the located fields; a malformed
    batch raises :class:`CorruptRecordError` with its byte position."""
    return locate_rows(
        buf, starts, ends, batch_fields(batches), batch_ids, flags, lambda i: malformed(batches[i])
    )


def locate_rows(
    buf: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    fields: BatchFields,
    batch_ids: np.ndarray,
    flags: int,
    error: Callable[[int], CorruptRecordError],
) -> Located:
    """:func:`locate_records` for batches given as header columns (a segment scan reads
    them in one compiled pass); ``error(i)`` is raised for a malformed batch i."""
    n = int(fields.record_count.sum())

    def col(flag: int, dtype: type = np.int64, size: int = n) -> np.ndarray:
        return np.empty(size if flags & flag else 0, dtype)

    # each header takes at least its two length bytes
    max_headers = len(buf) // 2 if flags & HEADERS else 0
    starts = np.asarray(starts, np.int64)
    ends = np.asarray(ends, np.int64)
    key_offsets = np.zeros(n + 1 if flags & KEY_DATA else 1, np.int64)
    # A well-formed record spends at least one byte on each of its length, attributes,
    # timestamp delta, offset delta, key length and value length, so its key is at most
    # that much shorter than its bytes: the bound is reserved, only the keys are touched.
    key_room = max(int((ends - starts).sum()) - _MIN_RECORD_SIZE * n, 0)
    loc = Located(
        offset=np.empty(n, np.int64),
        timestamp=np.empty(n, np.int64),
        batch=np.empty(n, np.int32),
        key_pos=col(KEYS),
        key_len=col(KEYS | KEY_DATA, np.int32),
        value_pos=col(VALUES),
        value_len=col(VALUES | VALUE_SIZES, np.int32),
        body_pos=col(LAYOUT),
        tail_pos=col(LAYOUT),
        rec_end=col(LAYOUT),
        header_count=col(HEADERS),
        hk_pos=col(HEADERS, size=max_headers),
        hk_len=col(HEADERS, np.int32, max_headers),
        hv_pos=col(HEADERS, size=max_headers),
        hv_len=col(HEADERS, np.int32, max_headers),
        key_offsets=key_offsets,
        key_data=col(KEY_DATA, np.uint8, key_room),
    )
    rows, nh = walk_records(
        buf,
        starts,
        ends,
        *fields,
        np.asarray(batch_ids, np.int32),
        flags,
        0,
        loc.offset,
        loc.timestamp,
        loc.batch,
        loc.key_pos,
        loc.key_len,
        loc.value_pos,
        loc.value_len,
        loc.body_pos,
        loc.tail_pos,
        loc.rec_end,
        loc.header_count,
        loc.hk_pos,
        loc.hk_len,
        loc.hv_pos,
        loc.hv_len,
        loc.key_offsets,
        loc.key_data,
    )
    if rows < 0:
        raise error(-1 - rows)
    loc.key_data = loc.key_data[: key_offsets[-1]]
    loc.hk_pos, loc.hk_len, loc.hv_pos, loc.hv_len = (
        c[:nh] for c in (loc.hk_pos, loc.hk_len, loc.hv_pos, loc.hv_len)
    )
    return loc


def malformed(batch: RecordBatch, why: str = "") -> CorruptRecordError:
    """The error of a batch the kernel found malformed (Kafka's ``InvalidRecordException``
    from ``DefaultRecord.readFrom``, whose message ``why`` may carry; CORRUPT_MESSAGE here,
    with the batch's position)."""
    h = batch.header
    return CorruptRecordError(
        f"malformed record in batch at offset {h.base_offset}" + (f": {why}" if why else ""),
        position=batch.position,
    )


def slice_offsets(lens: np.ndarray) -> np.ndarray:
    """Arrow-style offsets (len n+1) for fields of ``lens`` bytes (-1, null, takes none)."""
    offsets = np.zeros(len(lens) + 1, np.int64)
    np.cumsum(np.maximum(lens, 0), out=offsets[1:])
    return offsets


def gather_slices(src: np.ndarray, pos: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """The fields at ``pos`` (sizes from ``offsets``) of ``src``, back to back."""
    return gather(src, pos, offsets, np.empty(int(offsets[-1]), np.uint8))
