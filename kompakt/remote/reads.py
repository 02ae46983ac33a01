"""Reads of a remote segment as a Fetch needs them: whole batches from the one holding
an offset, and the aborted transactions of its ``.txnindex``.

Kafka's ``RemoteLogManager.read`` looks the offset up in the segment's remote offset
index, range-reads the ``.log`` from there and returns whole batches up to the fetch's
max bytes (at least one when the fetch may return an oversized first batch); for
READ_COMMITTED it collects the aborted transactions from the ``.txnindex`` of that
segment and the ones after it (``collectAbortedTransactions``). The bytes are the
uploaded file's, so a consumer reads exactly what was tiered. Indexes and ``.txnindex``
are fetched whole (SHA-256 checked) and kept parsed in a small LRU; the ``.log`` goes
through the chunk cache of :class:`~kompakt.remote.storage.RemoteStorageManager`.
"""

from __future__ import annotations

import bisect
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TypeVar

from kompakt.log.segment import INDEX_SUFFIX, LOG_SUFFIX, TIMEINDEX_SUFFIX, TXNINDEX_SUFFIX
from kompakt.log.txn_index import AbortedTxn, TransactionIndex, parse_entries
from kompakt.record.decode import RecordBatch, iter_batches
from kompakt.record.stream_scan import first_at_or_after
from kompakt.remote.layout import file_base_offset
from kompakt.remote.manifest import RemoteSegment
from kompakt.remote.storage import RemoteStorageManager

T = TypeVar("T")
_INDEX_ENTRY = struct.Struct(">ii")  # the local .index format: relative offset, position
_TIME_ENTRY = struct.Struct(">qi")  # the local .timeindex format: timestamp, relative offset
PARSED_CACHE_ENTRIES = 1024


class _TxnEntries(TransactionIndex):
    """A remote ``.txnindex``'s entries behind the local index's lookup rule (one owner
    of ``collectAbortedTxns``)."""

    def __init__(self, entries: list[AbortedTxn]):
        super().__init__(Path("remote.txnindex"), 0, read_only=True)
        self._entries = entries


class RemoteSegmentReader:
    """Batches and aborted transactions of remote segments (thread-safe)."""

    def __init__(self, segments: RemoteStorageManager, cache_entries: int = PARSED_CACHE_ENTRIES):
        self.segments = segments  # immutable (thread-safe)
        self._parsed: OrderedDict[tuple[str, str], object] = OrderedDict()  # guarded by _lock
        self._lock = threading.Lock()  # guards _parsed
        self._cache_entries = cache_entries  # immutable

    def _cached(self, segment: RemoteSegment, suffix: str, parse: Callable[[bytes], T]) -> T:
        key = (segment.segment_id, suffix)
        with self._lock:
            if key in self._parsed:
                self._parsed.move_to_end(key)
                return self._parsed[key]  # type: ignore[return-value]
        value = parse(self.segments.fetch_file(segment, suffix))
        with self._lock:
            self._parsed[key] = value
            while len(self._parsed) > self._cache_entries:
                self._parsed.popitem(last=False)
        return value

    def _start_position(self, segment: RemoteSegment, offset: int) -> int:
        """Where to start scanning for ``offset``: the largest index entry at or below it
        (0 without an index)."""
        if INDEX_SUFFIX not in segment.files:
            return 0
        base = file_base_offset(segment.files[LOG_SUFFIX].key)
        offsets, positions = self._cached(segment, INDEX_SUFFIX, _offset_entries)
        i = bisect.bisect_right(offsets, offset - base) - 1
        return positions[i] if i >= 0 else 0

    def _batches(self, segment: RemoteSegment, pos: int) -> Iterator[tuple[int, RecordBatch]]:
        """(position in the ``.log``, batch) of each whole batch from ``pos`` on, read a
        chunk window at a time (a window doubled for a batch larger than it)."""
        window = segment.chunk_bytes
        while pos < segment.size:
            data = self.segments.fetch_log_range(segment, pos, pos + window)
            end = 0
            for b in iter_batches(data):
                yield pos + b.position, b
                end = b.position + b.header.size
            if end == 0:
                if pos + window >= segment.size:
                    return  # a torn tail: no whole batch left
                window *= 2
            pos += end

    def read(
        self, segment: RemoteSegment, offset: int, max_bytes: int, min_one_batch: bool
    ) -> bytes:
        """Whole batches from the first one whose last offset is at least ``offset``, up
        to ``max_bytes`` (the first one even if larger, with ``min_one_batch``)."""
        start = self._start_position(segment, offset)
        found = next(
            (
                (p, b.header.size)
                for p, b in self._batches(segment, start)
                if b.header.last_offset >= offset
            ),
            None,
        )
        if found is None:
            return b""
        start, first_size = found
        if first_size > max_bytes and not min_one_batch:
            return b""
        data = self.segments.fetch_log_range(segment, start, start + max(max_bytes, first_size))
        last = 0
        for b in iter_batches(data):
            last = b.position + b.header.size
        return data[:last]

    def offset_for_timestamp(
        self, segment: RemoteSegment, timestamp: int
    ) -> tuple[int, int] | None:
        """(offset, timestamp) of the segment's first record whose timestamp is at least
        ``timestamp`` (Kafka's ``RemoteLogManager.lookupTimestamp``), from the time
        index's entry at or below it on."""
        start = 0
        if TIMEINDEX_SUFFIX in segment.files:
            times, rels = self._cached(segment, TIMEINDEX_SUFFIX, _time_entries)
            i = bisect.bisect_right(times, timestamp) - 1
            if i >= 0:
                base = file_base_offset(segment.files[LOG_SUFFIX].key)
                start = self._start_position(segment, base + rels[i])
        for _pos, b in self._batches(segment, start):
            if b.header.max_timestamp >= timestamp and (found := first_at_or_after(b, timestamp)):
                return found
        return None

    def aborted(
        self, segments: Iterable[RemoteSegment], start_offset: int, upper_bound: int
    ) -> tuple[list[AbortedTxn], bool]:
        """The aborted transactions overlapping ``[start_offset, upper_bound)`` from the
        ``.txnindex`` of ``segments`` (the one holding the start and those after it),
        and whether the search is complete (Kafka's ``collectAbortedTransactions``)."""
        out: list[AbortedTxn] = []
        for seg in segments:
            if seg.base_offset >= upper_bound:
                return out, True
            if TXNINDEX_SUFFIX not in seg.files:
                continue
            index = self._cached(
                seg,
                TXNINDEX_SUFFIX,
                lambda d, k=seg.files[TXNINDEX_SUFFIX].key: _TxnEntries(parse_entries(d, k)),
            )
            found, complete = index.collect_aborted(start_offset, upper_bound)
            out += found
            if complete:
                return out, True
        return out, False


def _ascending(entry: struct.Struct, data: bytes) -> tuple[list[int], list[int]]:
    """An index file's entries as two lists, while the first field ascends: a ``.index``
    (relative offset, position) or a ``.timeindex`` (timestamp, relative offset); a
    zero-filled tail slot ends it."""
    keys: list[int] = []
    values: list[int] = []
    for key, value in entry.iter_unpack(data[: len(data) - len(data) % entry.size]):
        if keys and key <= keys[-1]:
            break
        keys.append(key)
        values.append(value)
    return keys, values


def _offset_entries(data: bytes) -> tuple[list[int], list[int]]:
    return _ascending(_INDEX_ENTRY, data)


def _time_entries(data: bytes) -> tuple[list[int], list[int]]:
    return _ascending(_TIME_ENTRY, data)
