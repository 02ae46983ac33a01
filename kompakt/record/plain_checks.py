"""Produce validation's quick pass: the record set of a typical producer (uncompressed
data batches of CreateTime records) checked in one compiled call that reads each batch's
header fields from the bytes itself.

It answers only "every record passes" (with each batch's largest timestamp) or "not
sure": anything else (a compressed or control batch, the LogAppendTime bit, a varint
longer than two bytes, a malformed record, any record a rule rejects) sends the caller
to the full pass (:mod:`kompakt.record.checks`), which walks every case and words every
error. So the quick pass judges with the same rule (:func:`checks.judge`, Kafka's
``LogValidator.validateRecord``) and accepts a record only when the full pass's strict
read (Kafka's ``DefaultRecord.readFrom``) would: length, attributes, timestamp delta,
offset delta, key, value and headers (no negative count or header key size) ending
exactly at the record's end, and the last record ending at the batch's end.

Each batch's CRC-32C is checked in the same walk, right after its records brought its
bytes into the cache (:mod:`kompakt.record.crc`: compiled, as no Python may run per
batch here); "every record passes" thus also says every CRC matched, and a mismatch is
left to the full pass, which words it (Kafka's ``DefaultRecordBatch.ensureValid``).

:func:`check_served` is the fetch side's: the whole, CRC-valid batches a read serves,
found without a Python object per batch; anything else goes to the Python walk.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import types

from kompakt.record.checks import judge
from kompakt.record.crc import crc32c_of
from kompakt.record.header import (
    ATTRIBUTES_POS,
    BASE_TIMESTAMP_POS,
    BATCH_LENGTH_POS,
    COMPRESSION_MASK,
    CONTROL_BIT,
    CRC_POS,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    MAGIC_POS,
    RECORD_COUNT_POS,
    TIMESTAMP_TYPE_BIT,
)
from kompakt.record.kernel import read_be

_JIT = {"cache": True, "nogil": True}
UNSURE = -1  # what check_plain returns when the full pass must decide
# a batch the quick pass leaves to the full one: compressed, control, or LogAppendTime
_NOT_PLAIN = COMPRESSION_MASK | CONTROL_BIT | TIMESTAMP_TYPE_BIT
_SIGNATURES = [
    types.int64(
        types.Array(types.uint8, 1, "C", readonly=ro),
        types.boolean,
        types.boolean,
        types.int64,
        types.int64,
        types.Array(types.int64, 1, "C"),
    )
    for ro in (True, False)
]


@numba.njit(inline="always", **_JIT)
def _short_varint(buf, p, last):
    """The zig-zag varint of one or two bytes at ``p`` (<= ``last``): (value, next
    position, 1 when it is longer or its second byte would lie past ``last``, which
    the caller leaves to the full pass). A branch on the first byte: every record of
    a batch takes the same side, and the one-byte side reads one byte."""
    b0 = np.int64(buf[np.uint64(p)])  # unsigned: no wraparound test for negative ones
    if b0 < 0x80:
        return (b0 >> 1) ^ -(b0 & 1), p + 1, np.int64(0)
    if p >= last:
        return np.int64(0), p + 2, np.int64(1)
    b1 = np.int64(buf[np.uint64(p + 1)])
    u = (b0 & 0x7F) | (b1 << 7)
    return (u >> 1) ^ -(u & 1), p + 2, b1 >> 7


@numba.njit(inline="always", **_JIT)
def _short_varint_end(buf, p, last):
    """Where the varint of one or two bytes at ``p`` ends, and 1 when it is longer: a
    field whose value no rule reads (the offset delta) is only stepped over."""
    if buf[np.uint64(p)] < 0x80:
        return p + 1, np.int64(0)
    if p >= last:
        return p + 2, np.int64(1)
    return p + 2, np.int64(buf[np.uint64(p + 1)]) >> 7


@numba.njit(inline="always", **_JIT)
def _crc_matches(buf, pos, end):
    """Whether the batch at ``pos`` (ending at ``end``) holds the CRC-32C of its bytes
    from the attributes on, as ``DefaultRecordBatch.ensureValid`` checks it."""
    return crc32c_of(buf, pos + ATTRIBUTES_POS, end) == read_be(buf, pos + CRC_POS, 4) & 0xFFFFFFFF


@numba.njit(inline="always", **_JIT)
def _skip_headers(buf, q, tail, last):
    """The position after the record headers at ``q`` (<= ``tail``, the record's last
    byte), read as Kafka's strict ``readFrom`` reads them, and 1 when the full pass
    must decide (a negative count or key size, a longer varint, a field past the
    record)."""
    count, q, longer = _short_varint(buf, q, last)
    if longer or count < 0:
        return q, 1
    for _ in range(count):  # each header takes two bytes at least: bounded by the record
        if q > tail:
            return q, 1
        key_len, q, longer = _short_varint(buf, q, last)
        q += key_len
        if longer or key_len < 0 or q > tail:
            return q, 1
        value_len, q, longer = _short_varint(buf, q, last)
        q += max(value_len, 0)
        if longer:
            return q, 1
    return q, 0


@numba.njit(inline="always", **_JIT)
def _check(buf, compact, create_time, lo, hi, maxima):
    """:func:`check_plain`'s walk, inlined there with the rules as constants."""
    n = 0
    pos = 0
    size = len(buf)
    while pos < size:
        if pos + HEADER_SIZE > size or n >= len(maxima):
            return UNSURE
        end = pos + LOG_OVERHEAD + read_be(buf, pos + BATCH_LENGTH_POS, 4)
        count = read_be(buf, pos + RECORD_COUNT_POS, 4)
        if end > size or end < pos + HEADER_SIZE or count <= 0:
            return UNSURE
        if read_be(buf, pos + ATTRIBUTES_POS, 2) & _NOT_PLAIN:
            return UNSURE
        base_ts = read_be(buf, pos + BASE_TIMESTAMP_POS, 8)
        top = np.int64(-(2**63))
        bad = 0
        p = pos + HEADER_SIZE
        last = end - 1
        for _ in range(count):
            if p >= end:
                return UNSURE
            length, q, longer = _short_varint(buf, p, last)
            rec_end = q + length
            if longer or length < 6 or rec_end > end:
                return UNSURE
            # The fields are read from at most body + 5 on (each of the three varints
            # before the key takes one or two bytes), within the record since its
            # length is at least 6; every later one only once the field before it ends
            # inside the record.
            tail = rec_end - 1
            # the timestamp and offset deltas end by body + 4 <= tail: read without the
            # bound (``last`` given as the second byte's own position)
            ts_delta, q, b1 = _short_varint(buf, q + 1, q + 2)
            q, b2 = _short_varint_end(buf, q, q + 1)
            key_len, q, b3 = _short_varint(buf, q, last)
            q += max(key_len, 0)
            if q > tail:
                return UNSURE
            value_len, q, b4 = _short_varint(buf, q, last)
            q += max(value_len, 0)
            if q > tail:
                return UNSURE
            if buf[np.uint64(q)] == 0:  # no headers, the common case: one byte
                q += 1
            else:
                q, longer = _skip_headers(buf, q, tail, last)
                if longer:
                    return UNSURE
            ts = base_ts + ts_delta
            bad |= b1 | b2 | b3 | b4 | (q != rec_end)
            bad |= judge(ts, key_len, False, compact, create_time, lo, hi)
            top = max(top, ts)
            p = rec_end
        if bad or p != end:
            return UNSURE
        # the CRC of the bytes the walk just brought into the cache
        if not _crc_matches(buf, pos, end):
            return UNSURE
        maxima[n] = top
        n += 1
        pos = end
    return n


@numba.njit(_SIGNATURES, **_JIT)
def check_plain(buf, compact, create_time, lo, hi, maxima):
    """Check every record and each batch's CRC of the record set ``buf`` (whole batches
    back to back) under the rules (compacted topic, CreateTime topic, timestamp bounds
    ``[lo, hi]``); return
    the number of batches, each one's largest record timestamp in ``maxima``, or
    :data:`UNSURE`. One walk compiled for each pair of rules: the record loop then
    tests no rule that does not apply (a tenth less time per record)."""
    if compact:
        if create_time:
            return _check(buf, True, True, lo, hi, maxima)
        return _check(buf, True, False, lo, hi, maxima)
    if create_time:
        return _check(buf, False, True, lo, hi, maxima)
    return _check(buf, False, False, lo, hi, maxima)


@numba.njit(**_JIT)
def check_served(buf):
    """Where the whole batches at the start of ``buf`` (a read of a segment) end when
    each has magic 2 and its CRC matches and the walk stops only at the end of ``buf``
    or before a partial batch (a read cut at ``max.bytes``) the Python walk also stops
    at quietly; :data:`UNSURE` otherwise (a batch fails a check: the Python walk,
    :func:`kompakt.record.decode.iter_batches` and ``ensure_valid``, words it)."""
    size = len(buf)
    pos = 0
    while pos + LOG_OVERHEAD <= size:
        end = pos + LOG_OVERHEAD + read_be(buf, pos + BATCH_LENGTH_POS, 4)
        if end < pos + HEADER_SIZE:
            return UNSURE
        if end > size:
            return pos if pos + HEADER_SIZE > size or buf[pos + MAGIC_POS] == MAGIC else UNSURE
        if buf[pos + MAGIC_POS] != MAGIC:
            return UNSURE
        if not _crc_matches(buf, pos, end):
            return UNSURE
        pos = end
    return pos
