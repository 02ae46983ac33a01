"""Produce validation's record pass, compiled: Kafka's ``LogValidator.validateRecord``
over the bytes of a record set without a Python object per record.

:func:`check_records` walks records with the record kernel's reader
(:func:`kernel.read_record`) and applies the per-record rules (a key on a compacted
topic, ``validateKey``; the timestamp against ``message.timestamp.type`` and the KIP-937
bounds, ``validateTimestamp``), keeping only what the append needs: each batch's largest
record timestamp and the records in error (row, kind, offset, timestamp).
:class:`RecordChecks` carries that state from call to call, so a record set in memory and
a compressed batch streamed a chunk at a time pass the same compiled rules.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numba
import numpy as np
from numba import types

from kompakt.record.decode import RecordBatch
from kompakt.record.header import NO_TIMESTAMP, TIMESTAMP_TYPE_BIT
from kompakt.record.kernel import decode_varint, malformed, read_field, read_record

_JIT = {"cache": True, "nogil": True}
_LONG_MIN = -(2**63)

# What is wrong with a record (0: nothing), in Kafka's order of checks.
KEY_NULL = 1  # validateKey: a compacted topic's record without a key
OUT_OF_RANGE = 2  # validateTimestamp: outside [now - before.max.ms, now + after.max.ms]
LOG_APPEND_CLAIMED = 3  # validateTimestamp: the producer set the LogAppendTime type


@numba.njit(inline="always", **_JIT)
def judge(ts, key_len, log_append, compact, create_time, lo, hi):
    """The rule a record breaks (Kafka's ``validateRecord``): the key first, then the
    timestamp: a CreateTime topic's stamped record must lie in [lo, hi], and otherwise
    the batch must not claim LogAppendTime."""
    if compact and key_len < 0:
        return KEY_NULL
    if create_time and ts != NO_TIMESTAMP:
        return OUT_OF_RANGE if ts < lo or ts > hi else 0
    return LOG_APPEND_CLAIMED if log_append else 0


@numba.njit(inline="always", **_JIT)
def note(row, offset, ts, key_len, log_append, rules, errors, n_errors):
    """Judge one record (``rules``: compact, create time, lo, hi) and list it if in
    error; the new error count."""
    kind = judge(
        ts, key_len, log_append, rules[COMPACT] != 0, rules[CREATE_TIME] != 0, rules[LO], rules[HI]
    )
    if kind:
        if n_errors < errors.shape[0]:
            errors[n_errors, 0] = row
            errors[n_errors, 1] = kind
            errors[n_errors, 2] = offset
            errors[n_errors, 3] = ts
        n_errors += 1
    return n_errors


# Why a record is malformed (Kafka's ``DefaultRecord.readFrom`` InvalidRecordException).
STRUCTURE = 1  # a length or field overruns the record or batch
RECORD_SIZE = 2  # the headers end before the record's length says
HEADER_COUNT = 3  # a negative header count (readFrom; readPartiallyFrom reads it as none)
HEADER_KEY = 4  # a negative header key size (readFrom; readPartiallyFrom skips nothing)
BATCH_SIZE = 5  # bytes left after the last record

# columns of ``check_records``' arrays
START, END, COUNT, BATCH, FIRST_ROW = range(5)  # parts: one row per run of records
BASE_OFFSET, BASE_TS, MAX_TS, LOG_APPEND, COMPRESSED = range(5)  # meta: one row per batch
TOP, SEEN = range(2)  # state: one row per batch
COMPACT, CREATE_TIME, LO, HI = range(4)  # rules

_ROWS = types.Array(types.int64, 2, "C")
_LONGS = types.Array(types.int64, 1, "C")
# check_records' explicit signatures (the record bytes read-only, from ``bytes``, or
# writable): compiled or loaded once at import, so a call's dispatch only matches them.
_SIGNATURES = [
    types.UniTuple(types.int64, 2)(
        types.Array(types.uint8, 1, "C", readonly=ro),
        _ROWS,
        _ROWS,
        _LONGS,
        _ROWS,
        _ROWS,
        types.int64,
        _LONGS,
    )  # fmt: skip
    for ro in (True, False)
]


@numba.njit(inline="always", **_JIT)
def headers_end(buf, pos, rec_end, strict):
    """The position after the headers at ``pos`` and 0, or (-reason, detail): Kafka's
    ``readFrom`` (``strict``, uncompressed batches) or ``readPartiallyFrom`` (the
    streaming read of a compressed batch, lenient on negative counts and key sizes)."""
    n, pos = decode_varint(buf, pos, rec_end)
    if pos < 0:
        return -STRUCTURE, 0
    if n < 0:
        if strict:
            return -HEADER_COUNT, n
        n = 0
    for _ in range(n):  # each header takes at least two bytes: bounded by the record
        _kp, klen, pos = read_field(buf, pos, rec_end)
        if pos < 0:
            return -STRUCTURE, 0
        if strict and klen < 0:
            return -HEADER_KEY, klen
        _vp, _vl, pos = read_field(buf, pos, rec_end)
        if pos < 0:
            return -STRUCTURE, 0
    return pos, 0


@numba.njit(_SIGNATURES, **_JIT)
def check_records(buf, parts, meta, rules, state, errors, n_errors, fail):
    """Check ``parts[k, COUNT]`` records in ``buf[parts[k, START]:parts[k, END]]`` of
    batch ``parts[k, BATCH]`` (rows from ``parts[k, FIRST_ROW]``), folding their
    timestamps into that batch's ``state`` row. Return (0, error count), or (-1 - k, ...)
    when part k is malformed, with ``fail`` = (reason, detail, detail)."""
    for k in range(parts.shape[0]):
        b = parts[k, BATCH]
        pos = parts[k, START]
        end = parts[k, END]
        row = parts[k, FIRST_ROW]
        base_offset = meta[b, BASE_OFFSET]
        base_ts = meta[b, BASE_TS]
        appended = meta[b, LOG_APPEND] != 0
        strict = meta[b, COMPRESSED] == 0
        top = state[b, TOP]
        for _ in range(parts[k, COUNT]):
            rec = read_record(buf, pos, end)
            if rec[9] < 0:
                fail[0] = STRUCTURE
                return -1 - k, n_errors
            pos, detail = headers_end(buf, rec[9], rec[2], strict)
            if pos < 0:
                fail[0], fail[1] = -pos, detail
                return -1 - k, n_errors
            if pos != rec[2]:
                fail[0], fail[1], fail[2] = RECORD_SIZE, rec[2] - rec[0], pos - rec[0]
                return -1 - k, n_errors
            ts = meta[b, MAX_TS] if appended else base_ts + rec[3]
            n_errors = note(
                row, base_offset + rec[4], ts, rec[6], appended, rules, errors, n_errors
            )
            top = max(top, ts)
            row += 1
        if pos != end:
            fail[0] = BATCH_SIZE
            return -1 - k, n_errors
        state[b, TOP] = top
        if parts[k, COUNT] > 0:
            state[b, SEEN] = 1
    return 0, n_errors


def _why(fail: list[int]) -> str:
    """Kafka's message for a malformed record (``DefaultRecord.readFrom``)."""
    reason, a, b = fail
    return {
        RECORD_SIZE: f"Invalid record size: expected to read {a} bytes in record payload, "
        f"but instead read {b}",
        HEADER_COUNT: f"Found invalid number of record headers {a}",
        HEADER_KEY: f"Invalid negative header key size {a}",
        BATCH_SIZE: "Incorrect declared batch size, records still remaining in file",
    }.get(reason, "Found invalid record structure")


class _Scratch(threading.local):
    """One thread's arrays for :class:`RecordChecks`, reused from append to append so a
    check allocates nothing for a request of a few batches; ``busy`` while one holds
    them (a second check in the same thread meanwhile gets its own)."""

    def __init__(self) -> None:
        self.busy = False
        self.rows = 0
        self.capacity = 0
        self.rules = np.empty(4, np.int64)
        self.fail = np.zeros(3, np.int64)
        self.grow(8, 1024)

    def grow(self, rows: int, capacity: int) -> None:
        """Room for ``rows`` batches or parts and ``capacity`` errors."""
        if rows > self.rows:
            self.rows = max(rows, 2 * self.rows)
            self.meta = np.empty((self.rows, 5), np.int64)
            self.state = np.empty((self.rows, 2), np.int64)
            self.parts = np.empty((self.rows, 5), np.int64)
        if capacity > self.capacity:
            self.capacity = capacity
            self.errors = np.empty((capacity, 4), np.int64)


_SCRATCH = _Scratch()


class RecordChecks:
    """The state of one record set's check: each batch's largest timestamp and the
    records in error, filled by :meth:`walk` (the kernel) and :meth:`add` (a record read
    elsewhere, e.g. one larger than a streamed chunk).

    Only the first ``capacity`` errors are kept; :attr:`n_errors` counts them all, so a
    caller that must list every error can check again with a larger capacity. The
    arrays are the thread's, reused: :meth:`close` (or leaving a ``with`` block) returns
    them, and the results are read before that."""

    def __init__(
        self,
        batches: Sequence[RecordBatch],
        compact: bool,
        create_time: bool,
        lo: int,
        hi: int,
        capacity: int,
    ):
        n = len(batches)
        scratch = _SCRATCH
        if scratch.busy:  # a check already running in this thread keeps its arrays
            scratch = _Scratch()
        scratch.busy = True
        scratch.grow(n, capacity)
        self._scratch = scratch
        self.batches = batches
        self.rules = scratch.rules
        self.rules[:] = (compact, create_time, lo, hi)
        self.meta = meta = scratch.meta[:n]
        for i, b in enumerate(batches):
            h = b.header
            meta[i] = (
                h.base_offset,
                h.base_timestamp,
                h.max_timestamp,
                h.attributes & TIMESTAMP_TYPE_BIT,
                h.compression,
            )
        self.state = scratch.state[:n]
        self.state[:] = (_LONG_MIN, 0)
        self.errors = scratch.errors[:capacity]
        self.n_errors = 0
        self._fail = scratch.fail

    def close(self) -> None:
        """Give the arrays back to the thread for its next check."""
        self._scratch.busy = False

    def __enter__(self) -> RecordChecks:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def walk(self, buf: np.ndarray, parts: Sequence[tuple[int, int, int, int, int]]) -> None:
        """Check the records of each part, (start, end, count, batch index, first row)
        (see :func:`check_records`); a malformed part raises :class:`CorruptRecordError`
        naming its batch."""
        scratch = self._scratch
        scratch.grow(len(parts), 0)
        table = scratch.parts[: len(parts)]
        for k, part in enumerate(parts):
            table[k] = part
        bad, self.n_errors = check_records(
            buf, table, self.meta, self.rules, self.state, self.errors, self.n_errors, self._fail
        )
        if bad < 0:
            raise malformed(self.batches[int(table[-1 - bad, BATCH])], _why(self._fail.tolist()))

    def add(self, row: int, b: int, offset_delta: int, ts_delta: int, key_len: int) -> None:
        """Check one record of batch ``b`` read outside the kernel (its deltas as read)."""
        base_offset, base_ts, max_ts, appended, _codec = self.meta[b].tolist()
        ts = max_ts if appended else base_ts + ts_delta
        self.n_errors = note(
            row,
            base_offset + offset_delta,
            ts,
            key_len,
            bool(appended),
            self.rules,
            self.errors,
            self.n_errors,
        )
        self.state[b, TOP] = max(int(self.state[b, TOP]), ts)
        self.state[b, SEEN] = 1

    @property
    def complete(self) -> bool:
        """Whether every error found is kept."""
        return self.n_errors <= len(self.errors)

    def found(self) -> list[tuple[int, int, int, int]]:
        """The errors kept, as (row, kind, offset, timestamp), in row order."""
        if not self.n_errors:
            return []
        return sorted(map(tuple, self.errors[: min(self.n_errors, len(self.errors))].tolist()))

    def batch_maxima(self) -> list[int | None]:
        """Each batch's largest record timestamp; None for a batch with no record checked."""
        return [top if seen else None for top, seen in self.state.tolist()]
