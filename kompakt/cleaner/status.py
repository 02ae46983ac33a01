"""Cleaning status of a partition, computed in one place.

Kafka's ``LogCleanerManager`` answers the cleaner's gauges (``max-dirty-percent``,
``uncleanable-partitions-count``, ``time-since-last-run-ms``) from its own state; here
:class:`CleaningStatus` does it for ``GET /v1/partitions`` (what ``kompakt topic
describe`` shows), the Prometheus collector and the embedded API alike: dirty ratio and
cleanable bytes (:func:`kompakt.cleaner.cleanable.log_to_clean`, the rule the cleaner
itself plans with), the last clean's stats, tombstones still in the log and the reason
a partition is uncleanable. It needs no running cleaner: a broker whose cleaner is not
built yet still reports the ratios.
"""

from __future__ import annotations

import os
import struct
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from kompakt.cleaner.cleanable import is_eligible, log_to_clean, uncleanable_bound
from kompakt.cleaner.stats import CleanStats
from kompakt.errors import CorruptRecordError, KompaktError
from kompakt.log.partition_log import PartitionLog
from kompakt.record.header import BASE_TIMESTAMP_POS, DELETE_HORIZON_BIT
from kompakt.record.scan import scan_records

TopicPartition = tuple[str, int]
LastStats = Callable[[], Mapping[TopicPartition, CleanStats]]


def _no_stats() -> Mapping[TopicPartition, CleanStats]:
    return {}


@dataclass
class PartitionStatus:
    """One partition's cleaning status; the compaction fields are None unless the log
    is compacted (``cleanup.policy`` has ``compact``)."""

    topic: str
    partition: int
    uncleanable_reason: str | None
    compacted: bool
    dirty_ratio: float | None = None
    cleanable_bytes: int | None = None
    first_dirty_offset: int | None = None
    first_uncleanable_offset: int | None = None
    last_clean: CleanStats | None = None
    tombstones_pending: int | None = None
    records: int | None = None  # records in the log (with tombstones), when counted
    # not in /v1/partitions: the console's "why" and queue
    first_uncleanable_reason: str | None = None
    due: bool = False  # a background pass would clean it (Kafka's eligibility)
    need_compaction_now: bool = False  # max.compaction.lag.ms has passed
    clean_bytes: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The ``/v1/partitions`` fields (compaction fields only for a compacted log)."""
        if not self.compacted:
            return {"uncleanable_reason": self.uncleanable_reason}
        last = self.last_clean
        return {
            "uncleanable_reason": self.uncleanable_reason,
            "dirty_ratio": round(self.dirty_ratio or 0.0, 4),
            "cleanable_bytes": self.cleanable_bytes,
            "first_dirty_offset": self.first_dirty_offset,
            "first_uncleanable_offset": self.first_uncleanable_offset,
            "last_compaction_ms": last.started_ms if last else None,
            "last_compaction": last.to_json() if last else None,
            "tombstones_pending": self.tombstones_pending,
        }


@dataclass(frozen=True)
class SegmentTombstones:
    """The records and tombstones of one segment, the tombstones by KIP-534 delete
    horizon: none yet (the next clean sets one) or the horizon in ms (a batch's base
    timestamp once it has the delete-horizon bit)."""

    records: int
    no_horizon: int
    horizons: Mapping[int, int]  # horizon ms -> tombstones

    @property
    def tombstones(self) -> int:
        return self.no_horizon + sum(self.horizons.values())


def segment_tombstones(data: Any) -> SegmentTombstones:
    """Count one segment's bytes: a vectorised scan, then one header read per batch
    whose tombstones carry a horizon."""
    scan = scan_records(data, verify_crc=False)
    tomb = np.nonzero(scan.value_null)[0]
    if not len(tomb):
        return SegmentTombstones(len(scan.value_null), 0, {})
    batches = scan.batch_index[tomb]
    with_horizon = (scan.batch_attributes[batches] & DELETE_HORIZON_BIT) != 0
    horizons: dict[int, int] = {}
    view = memoryview(data)
    for b in batches[with_horizon]:
        (ms,) = struct.unpack_from(">q", view, int(scan.batch_position[b]) + BASE_TIMESTAMP_POS)
        horizons[ms] = horizons.get(ms, 0) + 1
    return SegmentTombstones(len(scan.value_null), int((~with_horizon).sum()), horizons)


class TombstoneCounter:
    """Tombstones (and records) still in a log, per segment: what ``/v1/partitions``
    counts and the console's horizons view breaks down (one cache for both).

    A sealed segment's bytes never change (a clean writes a new file), so its count is
    cached by (path, inode, size) and a request scans only new bytes.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # guarded by _lock (request threads and the metrics scrape count at once): per
        # partition folder, (segment path, inode, size) -> counts, so forgetting
        # replaced segments costs one partition's entries, not the whole cache
        self._cache: dict[str, dict[tuple[str, int, int], SegmentTombstones]] = {}

    def segments(self, plog: PartitionLog) -> list[SegmentTombstones]:
        """The counts of each non-empty segment of the log (a segment deleted meanwhile,
        by a clean's swap or retention, is left out). A segment is scanned outside the
        lock; only the cache is read and changed under it."""
        folder = str(plog.dir)
        out = []
        live = set()
        for seg in plog.segments_snapshot():
            if not seg.size:
                continue
            try:
                key = (str(seg.log_path), os.stat(seg.log_path).st_ino, seg.size)
                with self._lock:
                    counts = self._cache.get(folder, {}).get(key)
                if counts is None:
                    counts = segment_tombstones(seg.read_all())
                    with self._lock:
                        self._cache.setdefault(folder, {})[key] = counts
            except (OSError, CorruptRecordError):  # removed, closed or damaged: not counted
                continue
            live.add(key)
            out.append(counts)
        with self._lock:
            cache = self._cache.get(folder, {})
            for key in [k for k in cache if k not in live]:
                del cache[key]
        return out

    def pending(self, plog: PartitionLog) -> int:
        return self.counts(plog)[0]

    def counts(self, plog: PartitionLog) -> tuple[int, int]:
        """(tombstones, records) in the log."""
        segs = self.segments(plog)
        return sum(s.tombstones for s in segs), sum(s.records for s in segs)

    def keep_only(self, dirs: set[str]) -> None:
        """Forget partitions whose folder is not in ``dirs`` (deleted ones)."""
        with self._lock:
            for d in [d for d in self._cache if d not in dirs]:
                del self._cache[d]


def is_live(logs: Any, plog: PartitionLog) -> bool:
    """Still the log of its topic-partition (not deleted, nor deleted and re-created)."""
    try:
        return logs.get_log(plog.topic, plog.partition) is plog
    except KompaktError:
        return False


class CleaningStatus:
    """The status of every partition of a :class:`~kompakt.log.manager.LogManager`.

    ``last_stats`` gives the last clean of each partition (the cleaner's, once it runs).
    """

    def __init__(self, logs: Any, last_stats: LastStats = _no_stats) -> None:
        self.logs = logs  # set once; thread-safe (LogManager guards its own maps)
        self.last_stats = last_stats  # set once: a callable the cleaner owns
        self.tombstones = TombstoneCounter()
        """Per-segment tombstone counts, shared with the console's horizons view; set
        once, and thread-safe (its cache is guarded by its own lock)."""

    def partitions(self, tombstones: bool = True) -> Iterator[tuple[PartitionLog, PartitionStatus]]:
        """(log, status) of every partition; ``tombstones=False`` skips the tombstone
        count (a metrics scrape does not need it and must stay cheap). A partition
        deleted while it is looked at is left out."""
        checkpoints = self.logs.cleaner_checkpoint().read()
        now = self.logs.clock()
        last = self.last_stats()
        dirs = set()
        for plog in self.logs.logs():
            dirs.add(str(plog.dir))
            try:
                st = self.of(plog, checkpoints, now, last, tombstones)
            except (KompaktError, OSError):
                if is_live(self.logs, plog):
                    raise
                continue  # deleted during the walk
            yield plog, st
        if tombstones:
            self.tombstones.keep_only(dirs)

    def of(
        self,
        plog: PartitionLog,
        checkpoints: Mapping[TopicPartition, int],
        now: int,
        last: Mapping[TopicPartition, CleanStats],
        tombstones: bool = True,
    ) -> PartitionStatus:
        tp = (plog.topic, plog.partition)
        out = PartitionStatus(plog.topic, plog.partition, plog.uncleanable_reason, False)
        if not plog.config.compact:
            return out
        ltc = log_to_clean(plog, checkpoints.get(tp), now)
        out.compacted = True
        out.dirty_ratio = ltc.cleanable_ratio
        out.cleanable_bytes = ltc.cleanable_bytes
        out.first_dirty_offset = ltc.first_dirty_offset
        out.first_uncleanable_offset = ltc.first_uncleanable_offset
        out.last_clean = last.get(tp)
        out.clean_bytes = ltc.clean_bytes
        out.due = is_eligible(ltc)
        out.need_compaction_now = ltc.need_compaction_now
        segments = plog.segments_snapshot()
        out.first_uncleanable_reason = uncleanable_bound(
            plog, segments, ltc.first_dirty_offset, now
        )[1]
        if tombstones:
            out.tombstones_pending, out.records = self.tombstones.counts(plog)
        return out

    def of_log(self, plog: PartitionLog) -> PartitionStatus:
        """One partition's status, now."""
        checkpoints = self.logs.cleaner_checkpoint().read()
        return self.of(plog, checkpoints, self.logs.clock(), self.last_stats())
