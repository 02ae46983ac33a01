"""Opening one partition's directory: Kafka's ``LogLoader``.

Half-done cleaner swaps are finished or rolled back (the ``.cleaned`` -> ``.swap`` ->
``.deleted`` suffix protocol of :meth:`PartitionLog.replace_segments`), stray and orphan
files removed, missing indexes rebuilt, and after an unclean shutdown every segment from
the recovery point on is re-validated, its indexes rebuilt and a torn tail truncated.
Segments whose ``.txnindex`` must be rebuilt are marked ``txn_index_stale``; the
rebuild needs the open transactions of the segments before them, which
:class:`PartitionLog` replays once it has them all.
The loader only decides what the directory holds; :class:`PartitionLog` owns the result.

``read_only`` loads the same segments without changing a byte (a dry run): leftovers of
a finished swap (``.deleted``, ``.cleaned``, ``.tmp``) and orphan indexes are passed
over instead of removed, and recovery and index rebuilds happen in memory
(:class:`LogSegment` ``read_only``). An interrupted swap (``.swap`` files) is refused:
only a writable open may finish or roll it back.
"""

from __future__ import annotations

import bisect
import logging
import os
from pathlib import Path
from typing import Any

from kompakt.errors import KafkaStorageError
from kompakt.log.clock import Clock
from kompakt.log.open_segments import OpenSegments
from kompakt.log.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIMEINDEX_SUFFIX,
    TXNINDEX_SUFFIX,
    LogSegment,
    filename_prefix,
    offset_from_name,
)

log = logging.getLogger(__name__)


class LogLoader:
    """Loads the segments of ``directory`` (Kafka's ``LogLoader.load``).

    ``segment_kwargs`` are the index settings every opened segment gets; ``clock`` stamps
    the first segment of an empty directory.
    """

    def __init__(
        self,
        directory: Path,
        segment_kwargs: dict[str, Any],
        clock: Clock,
        handles: OpenSegments | None = None,
        read_only: bool = False,
    ):
        self.dir = directory
        self.segment_kwargs = {**segment_kwargs, "read_only": read_only}
        self.clock = clock
        self.handles = handles
        self.read_only = read_only

    def load(self, needs_recovery: bool, recovery_point: int | None) -> list[LogSegment]:
        """The partition's segments in offset order, the last one writable; never empty.

        Segments are loaded lazily (:class:`LogSegment` ``lazy``): after a clean shutdown
        nothing but the active segment's tail is read, and each index is checked when it
        is first mapped (Kafka trusts the indexes below the recovery point and skips their
        sanity check at load, KAFKA-7283); one directory listing serves every decision.
        """
        try:
            names = set(os.listdir(self.dir))
        except FileNotFoundError:
            if not self.read_only:
                raise
            names = set()  # a partition with no folder yet: empty, and none is made
        if self.read_only:
            if any(n.endswith(SWAP_SUFFIX) for n in names):
                raise KafkaStorageError(
                    f"{self.dir} holds an interrupted segment swap (.swap files), which "
                    "only a writable open finishes; a read-only open changes nothing"
                )
        elif any(n.endswith((DELETED_SUFFIX, ".tmp", CLEANED_SUFFIX, SWAP_SUFFIX)) for n in names):
            self.complete_swaps()
            names = set(os.listdir(self.dir))
        bases = sorted(offset_from_name(n) for n in names if n.endswith(LOG_SUFFIX))
        known = set(bases)
        for n in names:  # orphan index files, like Kafka's LogLoader
            if n.endswith((INDEX_SUFFIX, TIMEINDEX_SUFFIX, TXNINDEX_SUFFIX)):
                if offset_from_name(n) not in known and not self.read_only:
                    (self.dir / n).unlink()
        segments: list[LogSegment] = []
        for i, base in enumerate(bases):
            prefix = filename_prefix(base)
            last = i == len(bases) - 1
            seg = LogSegment(
                self.dir,
                base,
                writable=last,
                handles=self.handles,
                lazy=True,
                **self.segment_kwargs,
            )
            if prefix + TXNINDEX_SUFFIX not in names:
                seg.mark_txn_index_absent()
            segments.append(seg)
            if prefix + INDEX_SUFFIX not in names or prefix + TIMEINDEX_SUFFIX not in names:
                log.info("%s: rebuilding missing index files", seg.log_path)
                seg.recover()
                seg.txn_index_stale = True
                if not last:
                    seg.trim_indexes()
        if not segments:
            return [
                LogSegment(
                    self.dir,
                    0,
                    created_ms=self.clock(),
                    handles=self.handles,
                    **self.segment_kwargs,
                )
            ]
        if needs_recovery:
            return self.recover(segments, recovery_point)
        active = segments[-1]
        if active.whole_batches_end != active.size:
            # Beyond Kafka, which trusts the clean-shutdown marker: a file restored or
            # copied mid-write ends in a partial batch; appending after it would hide
            # every later batch from readers. Recovery cuts it at the last valid batch.
            log.warning(
                "%s: ends in a partial batch at byte %d despite a clean shutdown; recovering",
                active.log_path,
                active.whole_batches_end,
            )
            return self.recover(segments, active.base_offset)
        return segments

    def recover(self, segments: list[LogSegment], recovery_point: int | None) -> list[LogSegment]:
        """Kafka's ``LogLoader.recoverLog``: re-validate segments past the recovery point;
        the segments after a truncated one are deleted. Returns the segments kept."""
        start = 0
        if recovery_point is not None:
            bases = [s.base_offset for s in segments]
            start = max(0, bisect.bisect_right(bases, recovery_point) - 1)
        for i in range(start, len(segments)):
            seg = segments[i]
            truncated = seg.recover()
            seg.txn_index_stale = True  # rebuilt by PartitionLog with the producer state
            if truncated:
                rest = segments[i + 1 :]
                if rest:
                    log.warning(
                        "%s: corrupt segment %s; deleting %d later segments",
                        self.dir.name,
                        seg.log_path.name,
                        len(rest),
                    )
                for later in rest:
                    later.close() if self.read_only else later.delete_files()
                segments = segments[: i + 1]
                break
        for seg in segments[:-1]:
            seg.trim_indexes()
        return segments

    def complete_swaps(self) -> None:
        """Resolve a cleaner swap interrupted by a crash (Kafka ``LogLoader``).

        ``.deleted`` files go; every ``.cleaned`` file goes, with any ``.swap`` at or
        beyond the smallest ``.cleaned`` offset (the swap had not finished writing);
        remaining ``.swap`` files replace the segments they cover.
        """
        names = list(self.dir.iterdir())
        for p in names:
            if p.name.endswith(DELETED_SUFFIX) or p.name.endswith(".tmp"):
                p.unlink(missing_ok=True)
        cleaned = [p for p in names if p.name.endswith(CLEANED_SUFFIX)]
        min_cleaned = min((offset_from_name(p.name) for p in cleaned), default=None)
        for p in cleaned:
            p.unlink(missing_ok=True)
        swaps = [p for p in self.dir.iterdir() if p.name.endswith(SWAP_SUFFIX)]
        for p in swaps:
            if min_cleaned is not None and offset_from_name(p.name) >= min_cleaned:
                p.unlink(missing_ok=True)
        swap_logs = sorted(
            p for p in self.dir.iterdir() if p.name.endswith(LOG_SUFFIX + SWAP_SUFFIX)
        )
        # an index .swap without its .log.swap: the crash came inside the final rename,
        # after the log got its name; drop it and let the index be rebuilt (Kafka
        # deletes index swap files and rebuilds indexes too)
        swap_bases = {offset_from_name(p.name) for p in swap_logs}
        for p in list(self.dir.iterdir()):
            if p.name.endswith(SWAP_SUFFIX) and offset_from_name(p.name) not in swap_bases:
                p.unlink(missing_ok=True)
        for p in swap_logs:
            base = offset_from_name(p.name)
            seg = LogSegment(
                self.dir, base, suffix=SWAP_SUFFIX, writable=False, **self.segment_kwargs
            )
            seg.recover()
            end = seg.next_offset
            seg.close()
            for q in self.dir.iterdir():
                if q.name.endswith(
                    (LOG_SUFFIX, INDEX_SUFFIX, TIMEINDEX_SUFFIX, TXNINDEX_SUFFIX)
                ) and not q.name.endswith(SWAP_SUFFIX):
                    if base <= offset_from_name(q.name) < end:
                        q.unlink()
            for q in list(self.dir.iterdir()):
                if q.name.endswith(SWAP_SUFFIX) and offset_from_name(q.name) == base:
                    q.rename(q.with_name(q.name[: -len(SWAP_SUFFIX)]))
            log.info("%s: completed interrupted swap of segment %d", self.dir.name, base)
