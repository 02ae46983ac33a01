"""A batch's records for a person to look at, in bounded memory (the console's pages).

:meth:`RecordBatch.records` holds a batch's whole expansion and every record's bytes
again. Kafka checks ``max.message.bytes`` against a batch's compressed size, so 16 KiB
of zstd may hold a record of 2 GiB, and one page that decoded it that way held twice
that. Here a batch that expands to at most :data:`WHOLE` bytes is decoded as before; a
larger one is read a chunk at a time (:class:`~kompakt.record.stream_scan.ChunkSource`),
and each key, value and header value keeps at most ``keep`` bytes, with its full size.
Every byte decompressed is taken from an :class:`Allowance`, so one page stops after a
bounded amount of work however far the batches it reads expand.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from kompakt.errors import KompaktError
from kompakt.record import codecs
from kompakt.record.decode import RecordBatch, records_of_payload
from kompakt.record.header import HEADER_SIZE, TIMESTAMP_TYPE_BIT
from kompakt.record.kernel import malformed
from kompakt.record.stream_scan import CHUNK, MAX_RECORD_LENGTH, ChunkSource, RecordFields
from kompakt.record.varint import MAX_VARINT_BYTES

WHOLE = 8 << 20
"""A batch expanding to at most this is decoded whole, as :meth:`RecordBatch.records`."""
KEEP = 64 << 10
"""Bytes of one key, value or header value a streamed batch keeps."""
KEPT_HEADERS = 100
"""Headers a streamed record keeps; the rest of the record is skipped unread."""


class PreviewBudgetError(KompaktError, code="invalid_request"):
    """The bytes one look may decompress are spent."""


class Allowance:
    """Decompressed bytes a caller may still spend, over all the batches it reads."""

    def __init__(self, limit: int):
        self.limit = limit
        self.left = limit

    def spend(self, n: int) -> None:
        self.left -= n
        if self.left < 0:
            raise PreviewBudgetError(
                f"the batches read so far expand to more than {self.limit} bytes, the most "
                "one page decompresses"
            )


class Shown(NamedTuple):
    """A record as shown: ``key`` and ``value`` hold at most ``keep`` bytes of
    ``key_size`` and ``value_size`` (-1: null)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    key_size: int
    value_size: int

    @property
    def key_cut(self) -> bool:
        return self.key is not None and len(self.key) < self.key_size

    @property
    def value_cut(self) -> bool:
        return self.value is not None and len(self.value) < self.value_size


def preview_records(
    batch: RecordBatch, allowance: Allowance, keep: int = KEEP, chunk: int = CHUNK
) -> Iterator[Shown]:
    """``batch``'s records (see the module doc). Raises ``CorruptRecordError`` for a
    malformed record, :class:`PreviewBudgetError` when ``allowance`` runs out."""
    h = batch.header
    if h.record_count == 0:
        return
    raw = batch.buffer[HEADER_SIZE:]
    if h.compression == codecs.NONE:
        payload: bytes | memoryview | None = raw
    else:
        payload = codecs.decompress_bounded(h.compression, raw, min(WHOLE, allowance.left))
    if payload is not None:
        allowance.spend(len(payload))
        for r in records_of_payload(h, payload):
            yield Shown(*r, _size(r.key), _size(r.value))
        return
    yield from _streamed(batch, allowance, keep, chunk)


def _size(data: bytes | None) -> int:
    return -1 if data is None else len(data)


def _spent(pieces: Iterator[bytes], allowance: Allowance) -> Iterator[bytes]:
    for piece in pieces:
        allowance.spend(len(piece))
        yield piece


def _streamed(batch: RecordBatch, allowance: Allowance, keep: int, chunk: int) -> Iterator[Shown]:
    h = batch.header
    pieces = codecs.decompress_chunks(h.compression, batch.buffer[HEADER_SIZE:], chunk)
    src = ChunkSource(_spent(pieces, allowance))
    bad = malformed(batch)
    log_append = bool(h.attributes & TIMESTAMP_TYPE_BIT)
    for _ in range(h.record_count):
        length = RecordFields(src, MAX_VARINT_BYTES, bad).varint()
        if length < 0 or length > MAX_RECORD_LENGTH:
            raise bad
        f = RecordFields(src, length, bad)
        f.skip(1)  # the record's attributes, unused
        ts_delta = f.varint()
        off_delta = f.varint()
        key, key_size = f.data(keep)
        value, value_size = f.data(keep)
        headers = []
        count = f.varint()
        for _h in range(min(max(count, 0), KEPT_HEADERS)):
            hk, _n = f.data(keep)
            hv, _n = f.data(keep)
            headers.append(((hk or b"").decode("utf-8", "replace"), hv))
        if count <= KEPT_HEADERS and f.left:
            raise bad  # Kafka: the record's declared size against what it read
        f.skip(f.left)
        ts = h.max_timestamp if log_append else h.base_timestamp + ts_delta
        yield Shown(h.base_offset + off_delta, ts, key, value, tuple(headers), key_size, value_size)
    if src.avail() or src.fill():  # Kafka: "Incorrect declared batch size"
        raise bad
