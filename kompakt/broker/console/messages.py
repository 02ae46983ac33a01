"""The message browser page's data: records from an offset or a timestamp.

ListOffsets' rule finds a timestamp's offset (the first offset whose timestamp is at or
after it); an optional key filter; values as text / JSON / hex. It reads through
:meth:`PartitionLog.read`, the Fetch handler's read path, and stops at a record count,
a page byte budget and a scan byte budget, so a page never holds the broker's log lock
for long nor reads a whole log. It shows what a READ_COMMITTED consumer reads (as
``kompakt consume`` does by default): the records of aborted transactions are left
out (the log's aborted transactions, :meth:`PartitionLog.collect_aborted_transactions`)
and a page stops at the last stable offset, with a note for each.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from kompakt.broker.console.browse import (
    MAX_PAGE_RECORDS,
    PAGE_BYTES,
    PAGE_EXPANSION,
    PAGE_RECORDS,
    READ_CHUNK,
    SCAN_BYTES,
    header_pairs,
    iso,
    parse_int,
    parse_timestamp,
    render_bytes,
)
from kompakt.errors import KompaktError
from kompakt.log.partition_log import PartitionLog
from kompakt.log.txn_index import aborted_by_producer, consumer_records
from kompakt.record.decode import RecordBatch, iter_batches
from kompakt.record.header import Header
from kompakt.record.preview import Allowance, preview_records


@dataclass
class Message:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    value_size: int = -1  # the value's whole size (-1: null)

    def value_as(self, mode: str, limit: int = 4000) -> str:
        shown = render_bytes(self.value, mode, limit)
        if self.value is not None and len(self.value) < self.value_size:
            shown += f"\n(a value of {self.value_size} bytes: its first {len(self.value)} read)"
        return shown

    def to_json(self, mode: str = "text") -> dict[str, Any]:
        return {
            "offset": self.offset,
            "timestamp": self.timestamp,
            "key": render_bytes(self.key),
            "value": self.value_as(mode),
            "headers": header_pairs(self.headers),
        }


@dataclass
class MessagePage:
    topic: str
    partition: int
    start_offset: int  # where reading began
    log_start_offset: int
    high_watermark: int
    messages: list[Message] = field(default_factory=list)
    next_offset: int | None = None  # where the next page starts (None: end of log)
    bytes_scanned: int = 0
    notes: list[str] = field(default_factory=list)
    aborted_skipped: int = 0  # records of aborted transactions left out


def resolve_start(
    plog: PartitionLog, offset: str | None, timestamp: str | None
) -> tuple[int, str | None]:
    """Where to start: an offset typed (clamped into the log, with a note) or the first
    offset whose timestamp is at or after one typed (ListOffsets by timestamp, Kafka's
    ``fetchOffsetByTimestamp``). Neither: the log start offset."""
    start, hw = plog.log_start_offset, plog.high_watermark
    if timestamp not in (None, ""):
        ts = parse_timestamp(timestamp)
        found = plog.offset_for_timestamp(ts)
        if found is None:
            return hw, f"no record at or after {iso(ts)}: starting at the end of the log ({hw})"
        return found[0], None
    if offset in (None, ""):
        return start, None
    off = parse_int(offset, "offset")
    if off < start:
        return start, f"offset {off} is below the log start offset {start}: starting there"
    if off > hw:
        return hw, f"offset {off} is past the end of the log ({hw}): nothing to show"
    return off, None


def _records_from(
    plog: PartitionLog, offset: int, end: int, budget: int, page: MessagePage
) -> Iterator[Any]:
    """Records at or after ``offset`` below ``end`` as a consumer reads them
    (:func:`consumer_records`), until ``budget`` bytes are read;
    ``page.aborted_skipped`` counts the records of aborted transactions left out."""

    def skipped(h: Header) -> None:
        page.aborted_skipped += h.record_count

    allowance = Allowance(PAGE_EXPANSION)
    aborted = aborted_by_producer(plog.collect_aborted_transactions(offset, end))
    batches = _batches_from(plog, offset, end, budget, page)
    return consumer_records(
        batches, offset, end, aborted, skipped, lambda b: preview_records(b, allowance)
    )


def _batches_from(
    plog: PartitionLog, offset: int, end: int, budget: int, page: MessagePage
) -> Iterator[RecordBatch]:
    """Batches from the one holding ``offset`` on, through :meth:`PartitionLog.read` one
    chunk at a time, until ``end`` or ``budget`` bytes read (``page.bytes_scanned``)."""
    pos = offset
    while pos < end and page.bytes_scanned < budget:
        data = plog.read(pos, min(READ_CHUNK, budget - page.bytes_scanned) or 1)
        if not data:
            return
        page.bytes_scanned += len(data)
        last = pos - 1
        for b in iter_batches(data):
            last = b.header.last_offset
            yield b
        if last < pos:
            return
        pos = last + 1


def browse_messages(
    plog: PartitionLog,
    *,
    offset: str | None = None,
    timestamp: str | None = None,
    key: bytes | None = None,
    limit: str | int | None = None,
    max_scan_bytes: int = SCAN_BYTES,
    max_page_bytes: int = PAGE_BYTES,
) -> MessagePage:
    """A page of records of ``plog`` (see the module doc): at most ``limit`` records
    (default :data:`PAGE_RECORDS`) and ``max_page_bytes`` of keys and values, reading at
    most ``max_scan_bytes`` of the log; ``key`` keeps only records with that key."""
    n = (
        PAGE_RECORDS
        if limit in (None, "")
        else parse_int(limit, "records per page", minimum=1, maximum=MAX_PAGE_RECORDS)
    )
    first, note = resolve_start(plog, offset, timestamp)
    hw = plog.high_watermark
    page = MessagePage(plog.topic, plog.partition, first, plog.log_start_offset, hw)
    if note:
        page.notes.append(note)
    size = 0
    next_offset = first
    end = plog.last_stable_offset  # READ_COMMITTED: nothing of a transaction still open
    try:
        for r in _records_from(plog, first, end, max_scan_bytes, page):
            next_offset = r.offset + 1
            if key is not None and (r.key != key or r.key_cut):
                continue
            page.messages.append(
                Message(r.offset, r.timestamp, r.key, r.value, r.headers, r.value_size)
            )
            size += len(r.key or b"") + len(r.value or b"")
            if len(page.messages) >= n or size >= max_page_bytes:
                break
    except KompaktError as exc:  # out of range after a retention, a corrupt batch
        page.notes.append(f"reading stopped at offset {next_offset}: {exc}")
    if page.messages and (len(page.messages) >= n or size >= max_page_bytes):
        page.next_offset = page.messages[-1].offset + 1
    elif page.bytes_scanned >= max_scan_bytes and next_offset < end:
        page.next_offset = next_offset
        page.notes.append(
            f"read {page.bytes_scanned} bytes of the log (the most one page reads); "
            f"continue from offset {next_offset}"
        )
    if page.next_offset is not None and page.next_offset >= end:
        page.next_offset = None
    if page.aborted_skipped:
        page.notes.append(
            f"{page.aborted_skipped} records of aborted transactions are left out, as a "
            "read_committed consumer leaves them out"
        )
    if end < hw and (page.next_offset is None or page.next_offset >= end):
        page.notes.append(
            f"records from offset {end} on belong to a transaction still open (the last "
            f"stable offset): shown once it ends, as to a read_committed consumer"
        )
    return page
