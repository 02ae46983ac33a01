"""The records of one compressed batch, walked in bounded memory (Produce validation).

A compressed payload may expand far beyond its size (32 KiB of zstd can hold 1 GiB of
zeros), and Kafka's ``LogValidator`` never holds a batch's expansion: it walks the
records with a streaming iterator (``skipKeyValueIterator``). Here the payload is
decompressed in chunks (:func:`codecs.decompress_chunks`); each chunk's whole records go
as one run to the record kernel (the validator's compiled pass, :mod:`kompakt.record.
checks`, or :func:`kernel.locate_records` for columns), a partial record is carried into
the next chunk, and a record larger than a chunk is read field by field with its key,
value and headers skipped unread. At most about two chunks are held at a time.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import numba
import numpy as np

from kompakt.errors import CorruptRecordError
from kompakt.record import codecs
from kompakt.record.decode import RecordBatch
from kompakt.record.header import HEADER_SIZE, TIMESTAMP_TYPE_BIT
from kompakt.record.kernel import (
    KEY_DATA,
    KEYS,
    LAYOUT,
    VALUE_SIZES,
    copy_retained,
    decode_varint,
    locate_records,
    malformed,
)
from kompakt.record.varint import MAX_VARINT_BYTES, TRUNCATED, write_varint
from kompakt.record.varint import decode_varint as py_varint

CHUNK = 1 << 20  # decompressed bytes per step: the kernel's call stays ~1 ms

Rows = tuple[np.ndarray, np.ndarray, np.ndarray]  # offset, timestamp, key is null
MAX_RECORD_LENGTH = 2**31 - 1
"""Kafka reads a record's length as an int varint (``ByteUtils.readVarint``, at most
32 bits): a longer one never reads back as the record it claims to be, so it is
corrupt. Only a streamed record can be this long; in memory the payload bounds it."""


@numba.njit(cache=True, nogil=True)
def _whole_records(buf, pos, end, limit):
    """How many (at most ``limit``) records lie whole in ``buf[pos:end]`` by their
    length prefix, and the position after them."""
    n = 0
    while n < limit:
        length, p = decode_varint(buf, pos, end)
        if p < 0 or length < 0 or p + length > end:
            break
        pos = p + length
        n += 1
    return n, pos


class ChunkSource:
    """Decompressed bytes from ``buf[pos:]`` on, refilled a chunk at a time."""

    def __init__(self, pieces: Iterator[bytes]):
        self._pieces = pieces
        self.buf = b""
        self.pos = 0

    def avail(self) -> int:
        return len(self.buf) - self.pos

    def fill(self) -> bool:
        """Append the next chunk (dropping what was consumed); False at the end."""
        piece = next(self._pieces, None)
        if piece is None:
            return False
        self.buf = self.buf[self.pos :] + piece if self.pos < len(self.buf) else piece
        self.pos = 0
        return True

    def ensure(self, n: int) -> None:
        while self.avail() < n and self.fill():
            pass

    def skip(self, n: int) -> bool:
        """Pass ``n`` bytes without keeping them; False if the stream ends first."""
        while n > self.avail():
            n -= self.avail()
            self.buf, self.pos = b"", 0
            if not self.fill():
                return False
        self.pos += n
        return True


class Run(NamedTuple):
    """``count`` whole records in ``buf[start:end]``: what the record kernel walks."""

    buf: np.ndarray
    start: int
    end: int
    count: int


class RawRecord(NamedTuple):
    """A record longer than a chunk, left in ``src`` for the caller to read (its length
    varint included) before it asks for the next part: :func:`stream_parts` ``raw``."""

    src: ChunkSource
    bad: CorruptRecordError


class BigRecord(NamedTuple):
    """A record longer than a chunk, read with its value and headers skipped (and its
    key, unless asked for)."""

    offset_delta: int
    timestamp_delta: int
    key_len: int  # < 0: null
    value_len: int = -1  # < 0: null
    key: bytes | None = None  # only when asked for (stream_parts' ``keys``)


def stream_parts(
    batch: RecordBatch, chunk: int = CHUNK, keys: bool = False, raw: bool = False
) -> Iterator[Run | BigRecord | RawRecord]:
    """``batch``'s records in order, as runs of whole records in a decompressed chunk
    and the single records larger than a chunk (with their key bytes if ``keys``; left
    unread as a :class:`RawRecord` if ``raw``).

    Raises :class:`CorruptRecordError` as the kernel does for a record cut by the end
    of the batch, or bytes left after the last record; a run's records themselves are
    checked by whoever walks them.
    """
    h = batch.header
    src = ChunkSource(codecs.decompress_chunks(h.compression, batch.buffer[HEADER_SIZE:], chunk))
    bad = malformed(batch)
    remaining = h.record_count
    while remaining:
        arr = np.frombuffer(src.buf, np.uint8)
        n, after = _whole_records(arr, src.pos, len(arr), remaining)
        if n:
            yield Run(arr, src.pos, after, n)
            src.pos = after
            remaining -= n
            continue
        length, p = py_varint(src.buf, src.pos, len(src.buf))
        if p == TRUNCATED or (p >= 0 and 0 <= length and p - src.pos + length <= chunk):
            if not src.fill():  # a record (or its length) cut by the end of the batch
                raise bad
            continue
        if p < 0 or length < 0 or length > MAX_RECORD_LENGTH:
            raise bad
        yield RawRecord(src, bad) if raw else _big_record(src, bad, keys)
        remaining -= 1
    if src.avail() or src.fill():  # Kafka: "Incorrect declared batch size"
        raise bad


def stream_records(batch: RecordBatch, batch_id: int, chunk: int = CHUNK) -> Iterator[Rows]:
    """(offset, timestamp, key-is-null) columns of ``batch``'s records, a chunk at a time
    (:func:`stream_parts` with each run located by :func:`kernel.locate_records`)."""
    h = batch.header
    log_append = bool(h.attributes & TIMESTAMP_TYPE_BIT)
    for part in stream_parts(batch, chunk):
        if isinstance(part, Run):
            sub = RecordBatch(h._replace(record_count=part.count), batch.buffer, batch.position)
            loc = locate_records(part.buf, [part.start], [part.end], [sub], [batch_id], KEYS)
            yield loc.offset, loc.timestamp, loc.key_len < 0
        else:
            ts = h.max_timestamp if log_append else h.base_timestamp + part.timestamp_delta
            yield (
                np.array([h.base_offset + part.offset_delta], np.int64),
                np.array([ts], np.int64),
                np.array([part.key_len < 0], np.bool_),
            )


def first_at_or_after(batch: RecordBatch, timestamp: int) -> tuple[int, int] | None:
    """(offset, timestamp) of ``batch``'s first record whose timestamp is at least
    ``timestamp`` (Kafka's ``LogSegment.findOffsetByTimestamp`` over one batch), walked
    a chunk at a time as Kafka's record iterator streams a compressed batch: a
    ListOffsets never holds a batch's expansion."""
    if not batch.header.record_count:  # an empty batch a clean kept: no payload to read
        return None
    for offsets, stamps, _null in stream_records(batch, 0):
        hit = np.flatnonzero(stamps >= timestamp)
        if len(hit):
            return int(offsets[hit[0]]), int(stamps[hit[0]])
    return None


class RecordFields:
    """One streamed record's fields, read from ``src`` within its ``left`` bytes: what
    Kafka's ``DefaultRecord.readFrom`` checks of them (a field past the record, or a
    varint cut by it, is ``bad``). Shared by validation (:func:`_big_record`) and the
    console's reading (:mod:`kompakt.record.preview`)."""

    def __init__(self, src: ChunkSource, left: int, bad: Exception):
        self.src, self.left, self.bad = src, left, bad

    def varint(self) -> int:
        src = self.src
        src.ensure(min(self.left, MAX_VARINT_BYTES))
        value, p = py_varint(src.buf, src.pos, src.pos + min(self.left, src.avail()))
        if p < 0:
            raise self.bad
        self.left -= p - src.pos
        src.pos = p
        return value

    def skip(self, n: int) -> None:
        if n > self.left or not self.src.skip(n):
            raise self.bad
        self.left -= n

    def data(self, keep: int) -> tuple[bytes | None, int]:
        """A length-prefixed field: its first ``keep`` bytes (None if null) and size."""
        n = self.varint()
        if n < 0:
            return None, -1
        if n > self.left:
            raise self.bad
        k = min(n, keep)
        src = self.src
        src.ensure(k)
        if src.avail() < k:
            raise self.bad
        out = bytes(src.buf[src.pos : src.pos + k])
        src.pos += k
        self.left -= k
        self.skip(n - k)
        return out, n


def _big_record(src: ChunkSource, bad: CorruptRecordError, keys: bool = False) -> BigRecord:
    """One record longer than a chunk, read as ``walk_records`` reads it (the key and
    value must fit in the record) but with only its leading fields (and key) held."""
    length, src.pos = py_varint(src.buf, src.pos, len(src.buf))
    f = RecordFields(src, length, bad)
    f.skip(1)  # the record's attributes byte (unused)
    ts_delta = f.varint()
    off_delta = f.varint()
    key, key_len = f.data(MAX_RECORD_LENGTH if keys else 0)
    value_len = f.varint()
    if max(value_len, 0) > f.left:
        raise bad
    f.skip(f.left)  # the value and headers, unread
    return BigRecord(off_delta, ts_delta, key_len, value_len, key if keys else None)


class Columns(NamedTuple):
    """:func:`kompakt.record.scan.scan_records`' columns of one streamed batch."""

    offset: np.ndarray  # int64
    timestamp: np.ndarray  # int64
    key_len: np.ndarray  # int32, -1 for null
    value_len: np.ndarray  # int32, -1 for null
    batch: np.ndarray  # int32
    key_data: np.ndarray  # uint8, the keys one after another
    key_offsets: np.ndarray  # int64, len n+1


def stream_columns(batch: RecordBatch, batch_id: int, chunk: int = CHUNK) -> Columns:
    """What a segment scan needs of ``batch``'s records (offset, timestamp, key, value
    size), decompressed a chunk at a time: the keys are held, the values only measured,
    so a batch whose values expand to GiB costs about two chunks and its keys."""
    h = batch.header
    log_append = bool(h.attributes & TIMESTAMP_TYPE_BIT)
    cols: list[tuple[np.ndarray, ...]] = []
    for part in stream_parts(batch, chunk, keys=True):
        if isinstance(part, Run):
            sub = RecordBatch(h._replace(record_count=part.count), batch.buffer, batch.position)
            loc = locate_records(
                part.buf, [part.start], [part.end], [sub], [batch_id], KEY_DATA | VALUE_SIZES
            )
            keys = loc.key_data[: int(loc.key_offsets[-1])].copy()  # not the chunk's room
            cols.append((loc.offset, loc.timestamp, loc.key_len, loc.value_len, keys))
        else:
            ts = h.max_timestamp if log_append else h.base_timestamp + part.timestamp_delta
            cols.append(
                (
                    np.array([h.base_offset + part.offset_delta], np.int64),
                    np.array([ts], np.int64),
                    np.array([part.key_len], np.int32),
                    np.array([part.value_len], np.int32),
                    np.frombuffer(part.key or b"", np.uint8),
                )
            )
    offset, ts, key_len, value_len, key_data = (
        np.concatenate([c[k] for c in cols]) if cols else np.empty(0, t)
        for k, t in enumerate((np.int64, np.int64, np.int32, np.int32, np.uint8))
    )
    offsets = np.zeros(len(key_len) + 1, np.int64)
    np.cumsum(np.maximum(key_len, 0), out=offsets[1:])
    return Columns(
        offset, ts, key_len, value_len, np.full(len(offset), batch_id, np.int32), key_data, offsets
    )


def retained_records(
    batch: RecordBatch, keep: np.ndarray, ts: np.ndarray, base_ts: int, chunk: int = CHUNK
) -> Iterator[bytes]:
    """The kept records of ``batch`` re-encoded against ``base_ts`` (the cleaner's
    :func:`kernel.copy_retained`, Kafka's ``buildRetainedRecordsInto``), decompressed
    and given out a chunk at a time: a kept record longer than a chunk is copied
    through in pieces, only its length and timestamp delta rewritten."""
    i = 0
    for part in stream_parts(batch, chunk, raw=True):
        if isinstance(part, Run):
            n = part.count
            sub = RecordBatch(batch.header._replace(record_count=n), batch.buffer, batch.position)
            loc = locate_records(part.buf, [part.start], [part.end], [sub], [0], LAYOUT)
            out = np.empty(part.end - part.start + MAX_VARINT_BYTES * n, np.uint8)
            k, t = keep[i : i + n], ts[i : i + n]
            w = copy_retained(part.buf, loc.body_pos, loc.tail_pos, loc.rec_end, k, t, base_ts, out)
            if w:
                yield out[:w].tobytes()
            i += n
        elif isinstance(part, RawRecord):
            yield from _raw_retained(part, bool(keep[i]), int(ts[i]) - base_ts, chunk)
            i += 1


def _raw_retained(part: RawRecord, kept: bool, delta: int, chunk: int) -> Iterator[bytes]:
    """One record longer than a chunk, from its length varint on: skipped, or copied
    with its timestamp delta rewritten (its length with it)."""
    src = part.src
    length, src.pos = py_varint(src.buf, src.pos, len(src.buf))
    f = RecordFields(src, length, part.bad)
    src.ensure(1)
    if not src.avail():
        raise part.bad
    attributes = src.buf[src.pos : src.pos + 1]
    f.skip(1)
    f.varint()  # the old timestamp delta
    if not kept:
        f.skip(f.left)
        return
    head = bytearray(attributes)
    write_varint(head, delta)
    size = bytearray()
    write_varint(size, len(head) + f.left)
    yield bytes(size + head)
    while f.left:
        src.ensure(1)
        piece = bytes(src.buf[src.pos : src.pos + min(f.left, src.avail(), chunk)])
        if not piece:
            raise part.bad
        src.pos += len(piece)
        f.left -= len(piece)
        yield piece
