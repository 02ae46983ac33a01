"""Executor side of the source: one offset range of one partition to Arrow batches.

A range is read segment by segment straight from the files. If a segment vanishes (a
clean swapped it, retention deleted it) the folder is listed again and reading goes on
from the next offset not yet returned, so no record is returned twice; offsets never
change under compaction, which is what makes resuming by offset safe.

Transactions are read as ``read_committed`` exactly as the broker serves a
READ_COMMITTED fetch: the driver ends every range at the partition's last stable offset
and hands each range the aborted transactions that overlap it (both from
:func:`kompakt.pipeline.plan.committed_view`: the ``.txnindex`` files and the producer
state, as the log rebuilds them at open); a reader drops a transactional batch of a
producer whose aborted transaction covers it (Kafka's consumer ``Fetcher``: from the
aborted transaction's first offset to its ABORT marker). This is a consumer's view of
transactions; the cleaner does not use it (its rule, :mod:`kompakt.cleaner.key_map`,
goes by aborted transactions only, as Kafka's ``CleanedTransactionMetadata`` does).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from kompakt.log.syncs import file_batches
from kompakt.log.txn_index import aborted_spans, in_aborted_transaction
from kompakt.pipeline.columns import decode_batches
from kompakt.pipeline.layout import list_segments, read_segment, segment_path, segments_covering
from kompakt.pipeline.schema import to_record_batch
from kompakt.record.decode import RecordBatch

CHUNK_BYTES = 16 << 20  # decode this much batch payload per Arrow batch
RELIST_ATTEMPTS = 20


@dataclass(frozen=True)
class RangeToRead:
    """An offset range [start, end) of one partition, with the segments planned for it."""

    topic: str
    partition: int
    dir: str
    start: int
    end: int
    bases: tuple[int, ...]
    aborted: tuple[tuple[int, int, int], ...] = ()
    """(producer id, first offset, ABORT marker offset) of the aborted transactions
    overlapping the range, for ``read_committed``."""


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
    aborted = aborted_spans(r.aborted)
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
        all_batches = file_batches(data)  # the active segment's: without its zeros
        for b in all_batches:
            b.ensure_valid()
        wanted = [
            b
            for b in all_batches
            if not b.header.is_control
            and b.header.record_count > 0
            and b.header.last_offset >= cursor
            and b.header.base_offset < seg_end
        ]
        if read_committed and aborted:
            wanted = [b for b in wanted if not in_aborted_transaction(b.header, aborted)]
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
