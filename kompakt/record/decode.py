"""Decoding v2 batches in Python: batch views, the batch iterator, records as objects.

Kafka's ``DefaultRecordBatch`` / ``DefaultRecord.readFrom``: the slow, complete path
(every field as a Python object) for the broker, the CLI and tests. Bulk readers (the
cleaner, the Spark source) use the numba kernel in :mod:`kompakt.record.kernel`, which
follows the same record layout.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from kompakt.errors import CorruptRecordError
from kompakt.record import codecs
from kompakt.record.header import (
    ATTRIBUTES_POS,
    CONTROL_KEY,
    CONTROL_VALUE,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    MAGIC_POS,
    TIMESTAMP_TYPE_BIT,
    Header,
    batch_size,
    crc32c,
    header_of,
)
from kompakt.record.varint import read_varint


class Record(NamedTuple):
    """One record with absolute offset and timestamp. ``key``/``value`` None means null."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


class ControlRecord(NamedTuple):
    """The key/value of a transaction marker (commit or abort)."""

    type: int  # CONTROL_ABORT or CONTROL_COMMIT
    coordinator_epoch: int
    version: int = 0


class RecordBatch:
    """A view of one batch inside a larger buffer (a segment file, a produce request)."""

    __slots__ = ("buffer", "header", "position")

    def __init__(self, header: Header, buffer: memoryview, position: int = 0):
        self.header = header
        self.buffer = buffer  # exactly this batch's bytes
        self.position = position  # where it starts in the buffer it came from

    def __repr__(self) -> str:
        h = self.header
        return (
            f"RecordBatch(base={h.base_offset}, last={h.last_offset}, count={h.record_count}, "
            f"codec={codecs.NAMES.get(h.compression)}, pos={self.position})"
        )

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview) -> RecordBatch:
        """The one whole batch ``data`` holds; anything else is corrupt."""
        batches = leading_batches(data)
        if len(batches) != 1 or batches[0].header.size != len(data):
            raise CorruptRecordError("expected exactly one record batch")
        return batches[0]

    def compute_crc(self) -> int:
        """The CRC-32C of this batch's bytes from ``attributes`` on (what ``crc`` stores)."""
        return crc32c(self.buffer[ATTRIBUTES_POS:])

    def is_valid(self) -> bool:
        """Magic 2 and a matching CRC, without raising."""
        return self.header.magic == MAGIC and self.compute_crc() == self.header.crc

    def ensure_valid(self) -> None:
        """Raise :class:`CorruptRecordError` (with the byte position) unless ``is_valid``."""
        h = self.header
        if h.magic != MAGIC:
            raise CorruptRecordError(
                f"unsupported magic {h.magic} in batch at offset {h.base_offset}",
                position=self.position,
            )
        crc = self.compute_crc()
        if crc != h.crc:
            raise CorruptRecordError(
                f"CRC mismatch in batch at offset {h.base_offset}: stored {h.crc:#010x}, "
                f"computed {crc:#010x}",
                position=self.position,
            )

    def records_payload(self) -> bytes | memoryview:
        """The (decompressed) records section."""
        raw = self.buffer[HEADER_SIZE:]
        if self.header.compression == codecs.NONE:
            return raw
        return codecs.decompress(self.header.compression, raw)

    def records(self) -> list[Record]:
        """Decode every record (Python objects: the slow, complete path)."""
        h = self.header
        if h.record_count == 0:
            return []  # Kafka: count 0 is an empty iterator, the payload is never decompressed
        return records_of_payload(h, self.records_payload())

    def control_record(self) -> ControlRecord | None:
        """The marker of a control batch, or None for a data batch."""
        if not self.header.is_control:
            return None
        recs = self.records()
        if not recs or recs[0].key is None or len(recs[0].key) < CONTROL_KEY.size:
            raise CorruptRecordError("control batch without a valid control record")
        version, ctype = CONTROL_KEY.unpack_from(recs[0].key)
        epoch = -1
        if recs[0].value is not None and len(recs[0].value) >= CONTROL_VALUE.size:
            _v, epoch = CONTROL_VALUE.unpack_from(recs[0].value)
        return ControlRecord(ctype, epoch, version)


def records_of_payload(h: Header, buf: bytes | memoryview) -> list[Record]:
    """The records of the batch of header ``h`` from its (decompressed) records section."""
    out: list[Record] = []
    pos = 0
    log_append = h.attributes & TIMESTAMP_TYPE_BIT
    for _ in range(h.record_count):
        length, pos = read_varint(buf, pos)
        end = pos + length
        if length < 0 or end > len(buf):
            raise CorruptRecordError(f"record overruns batch at offset {h.base_offset}")
        pos += 1  # record attributes, unused
        ts_delta, pos = read_varint(buf, pos)
        off_delta, pos = read_varint(buf, pos)
        key, pos = _read_bytes(buf, pos)
        value, pos = _read_bytes(buf, pos)
        n_headers, pos = read_varint(buf, pos)
        headers = []
        for _h in range(n_headers):
            hk, pos = _read_bytes(buf, pos)
            hv, pos = _read_bytes(buf, pos)
            headers.append(((hk or b"").decode("utf-8", "replace"), hv))
        if pos != end:
            raise CorruptRecordError(f"record length mismatch in batch at {h.base_offset}")
        ts = h.max_timestamp if log_append else h.base_timestamp + ts_delta
        out.append(Record(h.base_offset + off_delta, ts, key, value, tuple(headers)))
    if pos != len(buf):
        raise CorruptRecordError(f"trailing bytes after records in batch at {h.base_offset}")
    return out


def _read_bytes(buf: bytes | memoryview, pos: int) -> tuple[bytes | None, int]:
    n, pos = read_varint(buf, pos)
    if n < 0:
        return None, pos
    end = pos + n
    if end > len(buf):
        raise CorruptRecordError("record field overruns batch")
    return bytes(buf[pos:end]), end


def iter_batches(
    data: bytes | bytearray | memoryview, position: int = 0, end: int | None = None
) -> Iterator[RecordBatch]:
    """Yield the whole batches in ``data[position:end]``.

    A partial batch at the end (a fetch cut by ``max.bytes``, a torn write) ends the
    iteration quietly, as Kafka's batch iterator does; callers that need every byte
    accounted for compare the last batch's end with the buffer's end. A batch whose
    length field is impossible raises :class:`CorruptRecordError`.
    """
    view = memoryview(data)
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    end = len(view) if end is None else end
    pos = position
    unpack = HEADER.unpack_from
    while pos + LOG_OVERHEAD <= end:
        # the length from the header's own unpack when it is all there: one call a batch
        fields = unpack(view, pos) if pos + HEADER_SIZE <= end else None
        size = fields[1] + LOG_OVERHEAD if fields is not None else batch_size(view, pos)
        if size < HEADER_SIZE:
            raise CorruptRecordError(
                f"batch length {size - LOG_OVERHEAD} smaller than the header", position=pos
            )
        if pos + size > end:
            if fields is not None and view[pos + MAGIC_POS] != MAGIC:
                raise CorruptRecordError(f"unsupported magic {view[pos + MAGIC_POS]}", position=pos)
            return
        yield RecordBatch(header_of(fields), view[pos : pos + size], pos)
        pos += size


def leading_batches(data: bytes | bytearray | memoryview) -> list[RecordBatch]:
    """``list(iter_batches(data))``, with one header unpack and no generator when
    ``data`` is exactly one whole batch, as most produce requests and every control
    batch are; callers that need every byte accounted for compare the last batch's end
    (:func:`batches_end`) with the buffer's end."""
    view = memoryview(data)
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    if len(view) >= HEADER_SIZE:
        fields = HEADER.unpack_from(view)
        if fields[1] + LOG_OVERHEAD == len(view):
            return [RecordBatch(header_of(fields), view, 0)]
    return list(iter_batches(view))


def batches_end(batches: list[RecordBatch]) -> int:
    """Where the last of ``batches`` ends in their buffer (0 for none): a batch's buffer
    is exactly its bytes, so its length is the header's size with the frame."""
    return batches[-1].position + len(batches[-1].buffer) if batches else 0
