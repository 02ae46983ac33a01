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
from kompakt.record.kernel import KEYS, decode_varint, locate_records, malformed
from kompakt.record.varint import MAX_VARINT_BYTES, TRUNCATED
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


class BigRecord(NamedTuple):
    """A record longer than a chunk, read with its key, value and headers skipped."""

    offset_delta: int
    timestamp_delta: int
    key_len: int  # < 0: null


def stream_parts(batch: RecordBatch, chunk: int = CHUNK) -> Iterator[Run | BigRecord]:
    """``batch``'s records in order, as runs of whole records in a decompressed chunk
    and the single records larger than a chunk.

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
        yield _big_record(src, bad)
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


def _big_record(src: ChunkSource, bad: CorruptRecordError) -> BigRecord:
    """One record longer than a chunk, read as ``walk_records`` reads it (the key and
    value must fit in the record) but with only its leading fields held."""
    length, src.pos = py_varint(src.buf, src.pos, len(src.buf))
    f = RecordFields(src, length, bad)
    f.skip(1)  # the record's attributes byte (unused)
    ts_delta = f.varint()
    off_delta = f.varint()
    key_len = f.varint()
    f.skip(max(key_len, 0))
    if max(f.varint(), 0) > f.left:  # the value's length
        raise bad
    f.skip(f.left)  # the value and headers, unread
    return BigRecord(off_delta, ts_delta, key_len)
