"""The in-process engine: Kafka's ``Cleaner`` with its bounded offset map.

:meth:`LocalEngine.clean` builds the map over the dirty range (Kafka
``buildOffsetMap``: when the map is full the round stops early, a partial clean, and
the next round goes on from there), groups the segments up to where the map reaches
and rewrites each group into a ``.cleaned`` segment in this process.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kompakt.cleaner import cleanable
from kompakt.cleaner.cleanable import LogToClean
from kompakt.cleaner.config import DEDUPE_BUFFER_SIZE_DEFAULT, IO_BUFFER_LOAD_FACTOR_DEFAULT
from kompakt.cleaner.engine import CleanJob, EngineRun, GroupResult, Progress
from kompakt.cleaner.key_map import feeds_key_map
from kompakt.cleaner.offset_map import OffsetMap, hash_keys
from kompakt.cleaner.rewrite import RoundContext
from kompakt.cleaner.segment_io import CleanFaults, segment_buffer, write_cleaned_group
from kompakt.cleaner.stats import DirtyRange
from kompakt.cleaner.transactions import ProducerSummary, TxnTracker
from kompakt.log.partition_log import PartitionLog
from kompakt.log.segment import LogSegment
from kompakt.record.scan import RecordScan, scan_records


def _never_aborted() -> None:
    return None


def rewrite_tracker(producers: ProducerSummary, segments: list[LogSegment]) -> TxnTracker:
    """The one transaction pass of a rewrite through ``segments`` (Kafka's ``doClean``
    carries one ``CleanedTransactionMetadata`` through every group)."""
    if not segments:
        return TxnTracker(())
    start, end = segments[0].base_offset, segments[-1].next_offset
    return TxnTracker(producers.aborted_between(start, end))


def key_rows(scan: RecordScan, key: bytes) -> np.ndarray:
    """Mask of ``scan``'s records whose key is exactly ``key`` (vectorised, with a
    bounded temporary of candidates x key length)."""
    n = len(key)
    lengths = np.diff(scan.key_offsets)
    mask = (lengths == n) & ~scan.key_null
    cand = np.flatnonzero(mask)
    if not len(cand) or n == 0:
        return mask
    want = np.frombuffer(key, np.uint8)
    starts = scan.key_offsets[cand]
    step = max(1, (8 << 20) // n)
    for i in range(0, len(cand), step):
        idx = starts[i : i + step, None] + np.arange(n)
        mask[cand[i : i + step]] = (scan.key_data[idx] == want).all(axis=1)
    return mask


class LocalEngine:
    """Offset map in this process, bounded by ``log.cleaner.dedupe.buffer.size``."""

    name = "local"

    def __init__(
        self,
        dedupe_buffer_size: int = DEDUPE_BUFFER_SIZE_DEFAULT,
        load_factor: float = IO_BUFFER_LOAD_FACTOR_DEFAULT,
        faults: CleanFaults | None = None,
    ):
        self.map = OffsetMap(dedupe_buffer_size, load_factor)
        self.faults = faults or CleanFaults()  # what a test injects into the rewrites
        # the running clean's abort check: one clean at a time (the Cleaner's lock)
        self._check_done: Callable[[], None] = _never_aborted
        self._io: Callable[[int], None] | None = None  # the running clean's throttle

    def clean(self, job: CleanJob) -> EngineRun:
        """Kafka ``Cleaner.doClean``: offset map, then the groups up to its end."""
        self._check_done = job.check_done
        self._io = job.io if job.throttle is not None else None
        try:
            dirty = self.build_offset_map(job.ltc, job.producers)
            groups = job.groups_to(dirty.end_offset)
            ctx = job.round_context(dirty.end_offset)
            results = self.rewrite(job.log, groups, dirty, ctx, job.dry_run, job.progress)
        finally:
            self._check_done = _never_aborted
            self._io = None
        return EngineRun(dirty, results)

    def build_offset_map(
        self, ltc: LogToClean, producers: ProducerSummary, only_key: bytes | None = None
    ) -> DirtyRange:
        """Kafka ``buildOffsetMap``: stop when the map is full (partial clean).

        ``only_key``: feed only that key's records (the map's range is the same; what a
        dry run explaining one key needs, :mod:`kompakt.cleaner.explain`)."""
        m = self.map
        start, end = ltc.first_dirty_offset, ltc.first_uncleanable_offset
        segments = cleanable.segments_between(ltc.log.segments_snapshot(), start, end)
        # no pass can put more keys than it has records: size the table to that
        counts = producers.segment_records
        if only_key is not None:
            m.clear(1)
        elif all(s.base_offset in counts or not s.size for s in segments):
            m.clear(sum(counts.get(s.base_offset, 0) for s in segments))
        else:  # a segment the summary did not see: no bound known, use the whole buffer
            m.clear()
        txn = TxnTracker(producers.aborted_between(start, end))
        out = DirtyRange(end_offset=start, lookup=None)
        full = False
        for i, seg in enumerate(segments):
            self._check_done()
            next_base = segments[i + 1].base_offset if i + 1 < len(segments) else end
            buf = segment_buffer(seg.log_path, seg.size)
            scan = scan_records(buf, 0, len(buf), verify_crc=True)
            out.bytes_read += len(buf)
            if self._io is not None:  # Kafka's buildOffsetMap: throttler.maybeThrottle(read)
                self._io(len(buf))
            nb = len(scan.batch_position)
            mask = feeds_key_map(scan, buf, txn, start, end)
            if only_key is not None:
                mask &= key_rows(scan, only_key)
            h1, h2 = hash_keys(scan.key_offsets, scan.key_data)
            consumed = m.put(h1, h2, scan.offset, mask)
            if consumed < len(scan.offset):
                # full: the map covers whole batches before the one that did not fit
                b = int(scan.batch_index[consumed])
                if b > 0 and scan.batch_last_offset[b - 1] >= start:
                    m.latest_offset = max(m.latest_offset, int(scan.batch_last_offset[b - 1]))
                out.records_read += consumed
                full = True
                break
            out.records_read += len(scan.offset)
            if nb:
                last = int(scan.batch_last_offset[-1])
                if last >= start:
                    m.latest_offset = max(m.latest_offset, last)
            m.latest_offset = max(m.latest_offset, next_base - 1)
        # a batch the last segment holds past the first uncleanable offset (an open
        # transaction's, beyond the LSO) fed nothing: the range ends where it may
        m.latest_offset = min(m.latest_offset, end - 1)
        out.end_offset = m.latest_offset + 1 if m.latest_offset >= 0 else start
        out.partial = full
        out.map_utilization = m.utilization
        out.map_entries = m.size

        def lookup(scan: RecordScan) -> np.ndarray:
            h1, h2 = hash_keys(scan.key_offsets, scan.key_data)
            return m.get(h1, h2)

        out.lookup = lookup
        return out

    def rewrite(
        self,
        plog: PartitionLog,
        groups: list[list[LogSegment]],
        dirty: DirtyRange,
        ctx: RoundContext,
        dry_run: bool,
        progress: Progress | None,
    ) -> list[GroupResult]:
        """Each group into its ``.cleaned`` segment, in order; on a failure the groups
        already written are removed."""
        results: list[GroupResult] = []
        total = sum(s.size for g in groups for s in g) or 1
        done = 0
        txn = rewrite_tracker(ctx.producers, [s for g in groups for s in g])
        try:
            for group in groups:
                sources = [(s.base_offset, s.log_path, s.size) for s in group]
                results.append(
                    write_cleaned_group(
                        plog.dir,
                        sources,
                        dirty.lookup,
                        ctx,
                        plog.segment_kwargs(),
                        dry_run,
                        txn,
                        self._check_done,
                        self._io,
                        self.faults,
                    )
                    + (group,)
                )
                done += sum(s.size for s in group)
                if progress:
                    progress(done, total)
        except BaseException:
            for _stats, dest, _group in results:  # groups finished before the failure
                if dest is not None:
                    dest.delete_files()
            raise
        return results
