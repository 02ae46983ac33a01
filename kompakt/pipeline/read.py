"""Executor side of the source: one offset range of one partition to Arrow batches.

A range is read segment by segment straight from the files. If a segment vanishes (a
clean swapped it, retention deleted it) the folder is listed again and reading goes on
from the next offset not yet returned, so no record is returned twice; offsets never
change under compaction, which is what makes resuming by offset safe.

Transactions are read as ``read_committed``: a transactional batch is returned only if
the next control marker of its producer is a COMMIT. The marker may sit beyond the
range, so :class:`CommitMarkers` scans batch headers ahead until it is found; a
transaction without a marker yet is still open and is not returned (Kafka's
last-stable-offset rule). This is a consumer's view of transactions; the cleaner does
not use it (its rule, :mod:`kompakt.cleaner.key_map`, goes by aborted transactions
only, as Kafka's ``CleanedTransactionMetadata`` does).
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa

from kompakt.pipeline.columns import decode_batches
from kompakt.pipeline.layout import list_segments, read_segment, segment_path, segments_covering
from kompakt.pipeline.schema import to_record_batch
from kompakt.record.decode import RecordBatch, iter_batches
from kompakt.record.header import CONTROL_ABORT

CHUNK_BYTES = 16 << 20  # decode this much batch payload per Arrow batch
RELIST_ATTEMPTS = 20
AFTER_ANY_MARKER_TYPE = 1 << 30  # sorts after (offset, every control type) in bisect
END_OF_LOG = 1 << 62  # an offset past every segment


@dataclass(frozen=True)
class RangeToRead:
    """An offset range [start, end) of one partition, with the segments planned for it."""

    topic: str
    partition: int
    dir: str
    start: int
    end: int
    bases: tuple[int, ...]


@dataclass
class CommitMarkers:
    """Commit/abort decisions for transactional batches of one partition, read ahead lazily."""

    dir: str
    markers: dict[int, list[tuple[int, int]]] = field(default_factory=dict)  # pid -> [(off, type)]
    scanned: set[int] = field(default_factory=set)

    def feed(self, base: int, batches: list[RecordBatch]) -> None:
        if base in self.scanned:
            return
        self.scanned.add(base)
        for b in batches:
            h = b.header
            if h.is_control:
                ctl = b.control_record()
                if ctl is not None:
                    self.markers.setdefault(h.producer_id, []).append((h.base_offset, ctl.type))
        for marks in self.markers.values():
            marks.sort()

    def _marker_after(self, pid: int, offset: int) -> int | None:
        marks = self.markers.get(pid, [])
        i = bisect.bisect_right(marks, (offset, AFTER_ANY_MARKER_TYPE))
        return marks[i][1] if i < len(marks) else None

    def committed(self, pid: int, offset: int) -> bool:
        while True:
            found = self._marker_after(pid, offset)
            if found is not None:
                return found != CONTROL_ABORT
            if not self._scan_next(offset):
                return False  # still open: beyond the last stable offset

    def _scan_next(self, offset: int) -> bool:
        """Feed the next unscanned segment after ``offset``; False when none is left."""
        for _attempt in range(RELIST_ATTEMPTS):
            bases = list_segments(self.dir)
            todo = [
                b for b in segments_covering(bases, offset, END_OF_LOG) if b not in self.scanned
            ]
            if not todo:
                return False
            try:
                data = read_segment(self.dir, todo[0])
            except FileNotFoundError:
                time.sleep(0.01)
                continue
            self.feed(todo[0], list(iter_batches(data)))
            return True
        return False


def _visible_mask(batches: list[RecordBatch], tracker: CommitMarkers) -> list[bool]:
    return [
        (not b.header.is_transactional)
        or tracker.committed(b.header.producer_id, b.header.last_offset)
        for b in batches
    ]


def _chunks(batches: list[RecordBatch]) -> Iterator[list[RecordBatch]]:
    chunk: list[RecordBatch] = []
    size = 0
    for b in batches:
        chunk.append(b)
        size += b.header.size
        if size >= CHUNK_BYTES:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


def read_range(
    r: RangeToRead, include_headers: bool = True, read_committed: bool = True
) -> Iterator[pa.RecordBatch]:
    """Arrow batches of the records in ``r`` (control batches and aborted data left out)."""
    tracker = CommitMarkers(r.dir)
    cursor = r.start
    bases = list(r.bases)
    attempts = 0
    while cursor < r.end:
        todo = segments_covering(bases, cursor, r.end)
        if not todo:
            return
        base = todo[0]
        try:
            data = read_segment(r.dir, base)
        except FileNotFoundError:
            attempts += 1
            if attempts > RELIST_ATTEMPTS:
                raise
            time.sleep(0.01 * attempts)
            bases = list_segments(r.dir)
            continue
        later = [b for b in bases if b > base]
        # stop at the next listed base even if this file holds more (a merge since the
        # listing): those offsets are read again, once, after re-listing
        seg_end = min(later[0], r.end) if later else r.end
        all_batches = list(iter_batches(data))
        for b in all_batches:
            b.ensure_valid()
        tracker.feed(base, all_batches)
        wanted = [
            b
            for b in all_batches
            if not b.header.is_control
            and b.header.record_count > 0
            and b.header.last_offset >= cursor
            and b.header.base_offset < seg_end
        ]
        if read_committed and any(b.header.is_transactional for b in wanted):
            keep = _visible_mask(wanted, tracker)
            wanted = [b for b, k in zip(wanted, keep, strict=True) if k]
        for chunk in _chunks(wanted):
            cols = decode_batches(chunk)
            rb = to_record_batch(cols, r.topic, r.partition, include_headers)
            mask = (cols.offset >= cursor) & (cols.offset < seg_end)
            if not mask.all():
                rb = rb.filter(pa.array(mask))
            if rb.num_rows:
                yield rb
        if not later:
            return
        cursor = max(cursor, later[0])  # offsets below the next base live in this segment


def count_partition_bytes(dir_: str, bases: list[int]) -> list[int]:
    """Sizes of segment files (0 for one that vanished), for planning input partitions."""
    out = []
    for base in bases:
        try:
            out.append(segment_path(dir_, base).stat().st_size)
        except FileNotFoundError:
            out.append(0)
    return out
