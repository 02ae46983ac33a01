"""Which part of a log may be cleaned, and which log to clean next.

Kafka's ``LogCleanerManager.cleanableOffsets``, ``maxCompactionDelay``,
``grabFilthiestCompactedLog`` and ``Cleaner.groupSegmentsBySize``, over
:class:`~kompakt.log.partition_log.PartitionLog`.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from kompakt.log.partition_log import PartitionLog
from kompakt.log.segment import LogSegment

log = logging.getLogger(__name__)
INT32_MAX = 2**31 - 1


@dataclass
class LogToClean:
    """Kafka's ``LogToClean``: a log with its dirty range and byte counts."""

    log: PartitionLog
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    need_compaction_now: bool
    checkpoint_reset: bool = False

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0

    @property
    def topic_partition(self) -> tuple[str, int]:
        return (self.log.topic, self.log.partition)


def segments_between(segments: list[LogSegment], start: int, end: int) -> list[LogSegment]:
    """Kafka ``logSegments(from, to)``: from the segment holding ``start`` to base < ``end``."""
    if start >= end:
        return []
    i = max(0, bisect.bisect_right([s.base_offset for s in segments], start) - 1)
    return [s for s in segments[i:] if s.base_offset < end]


def non_active_from(segments: list[LogSegment], start: int) -> list[LogSegment]:
    """Kafka ``nonActiveLogSegmentsFrom``."""
    return segments_between(segments, start, segments[-1].base_offset)


def cleanable_offsets(
    plog: PartitionLog, checkpoint: int | None, now: int
) -> tuple[int, int, bool]:
    """(first dirty, first uncleanable, checkpoint was reset) per Kafka's rules."""
    segments = plog.segments_snapshot()
    start, end = plog.log_start_offset, plog.log_end_offset
    reset = False
    first_dirty = start if checkpoint is None else checkpoint
    if first_dirty < start:
        # Kafka warns unless retention moves the log start (compact,delete); a tiered
        # topic's local retention moves the local log start on every pass the same way
        if not (plog.config.delete or plog.config.remote_storage_enable):
            log.warning(
                "%s: cleaner checkpoint %d is below the log start offset %d; resetting",
                plog.name,
                first_dirty,
                start,
            )
        first_dirty, reset = start, True
    elif first_dirty > end:
        log.warning(
            "%s: cleaner checkpoint %d is past the log end offset %d; cleaning the whole log",
            plog.name,
            first_dirty,
            end,
        )
        first_dirty, reset = start, True
    bound, _why = uncleanable_bound(plog, segments, first_dirty, now)
    return first_dirty, max(first_dirty, bound), reset


# why the cleanable range ends where it does (Kafka's cleanableOffsets' three bounds)
BOUND_LSO = "last stable offset (an open transaction)"
BOUND_ACTIVE = "active segment"
BOUND_MIN_LAG = "min.compaction.lag.ms"


def uncleanable_bound(
    plog: PartitionLog, segments: list[LogSegment], first_dirty: int, now: int
) -> tuple[int, str]:
    """The first offset the cleaner may not touch and why: the lowest of the last stable
    offset, the active segment's base offset and the first segment with a record younger
    than ``min.compaction.lag.ms`` (Kafka ``LogCleanerManager.cleanableOffsets``)."""
    bounds = [(plog.last_stable_offset, BOUND_LSO), (segments[-1].base_offset, BOUND_ACTIVE)]
    lag = max(plog.config.min_compaction_lag_ms, 0)
    if lag > 0:
        for seg in non_active_from(segments, first_dirty):
            if seg.largest_timestamp > now - lag:
                bounds.append((seg.base_offset, BOUND_MIN_LAG))
                break
    return min(bounds, key=lambda b: b[0])


def max_compaction_delay(plog: PartitionLog, first_dirty: int, now: int) -> int:
    """How long past ``max.compaction.lag.ms`` the oldest dirty segment is (0: not)."""
    stamps = [
        s.rolling_timestamp
        for s in non_active_from(plog.segments_snapshot(), first_dirty)
        if s.rolling_timestamp is not None and s.rolling_timestamp > 0
    ]
    if not stamps:
        return 0
    until = now - max(plog.config.max_compaction_lag_ms, 0)
    earliest = min(stamps)
    return until - earliest if earliest < until else 0


def log_to_clean(plog: PartitionLog, checkpoint: int | None, now: int) -> LogToClean:
    first_dirty, first_uncleanable, reset = cleanable_offsets(plog, checkpoint, now)
    segments = plog.segments_snapshot()
    non_active = non_active_from(segments, first_uncleanable)
    boundary = non_active[0].base_offset if non_active else segments[-1].base_offset
    clean = [s for s in segments if s.base_offset < first_dirty]
    cleanable = segments_between(segments, min(first_dirty, boundary), boundary)
    return LogToClean(
        plog,
        first_dirty,
        first_uncleanable,
        sum(s.size for s in clean),
        sum(s.size for s in cleanable),
        max_compaction_delay(plog, first_dirty, now) > 0,
        reset,
    )


def is_eligible(ltc: LogToClean, force: bool = False) -> bool:
    """Kafka: needs compaction now with bytes to clean, or ratio strictly above the min."""
    if ltc.total_bytes == 0 or ltc.cleanable_bytes == 0:
        return False
    if force or ltc.need_compaction_now:
        return True
    return ltc.cleanable_ratio > ltc.log.config.min_cleanable_dirty_ratio


def grab_filthiest(
    logs: Iterable[PartitionLog],
    checkpoints: Mapping[tuple[str, int], int],
    now: int,
    skip: set[tuple[str, int]] = frozenset(),  # type: ignore[assignment]
    on_reset: Callable[[tuple[str, int], int], None] | None = None,
) -> LogToClean | None:
    """The compacted log with the highest cleanable ratio among those eligible.

    ``on_reset`` is told of every checkpoint that had to be reset, so it can be
    rewritten whether or not that log is cleaned (Kafka's ``forceUpdateCheckpoint``).
    """
    best = None
    for plog in logs:
        tp = (plog.topic, plog.partition)
        if not plog.config.compact or tp in skip or plog.uncleanable_reason:
            continue
        ltc = log_to_clean(plog, checkpoints.get(tp), now)
        if ltc.checkpoint_reset and on_reset is not None:
            on_reset(tp, ltc.first_dirty_offset)
        if is_eligible(ltc) and (best is None or ltc.cleanable_ratio > best.cleanable_ratio):
            best = ltc
    return best


def group_segments_by_size(
    segments: list[LogSegment], max_size: int, max_index_size: int, first_uncleanable: int
) -> list[list[LogSegment]]:
    """Kafka ``groupSegmentsBySize``: neighbours merged while the log, both indexes and
    the int32 relative offset range fit in one segment."""
    groups: list[list[LogSegment]] = []
    i = 0
    while i < len(segments):
        group = [segments[i]]
        log_size = segments[i].size
        index_size = segments[i].offset_index.size_bytes()
        time_size = segments[i].time_index.size_bytes()
        i += 1
        while i < len(segments):
            seg = segments[i]
            last = _last_offset_for_first(segments, i, first_uncleanable)
            if not (
                log_size + seg.size <= max_size
                and index_size + seg.offset_index.size_bytes() <= max_index_size
                and time_size + seg.time_index.size_bytes() <= max_index_size
                and (seg.size == 0 or last - group[0].base_offset <= INT32_MAX)
            ):
                break
            group.append(seg)
            log_size += seg.size
            index_size += seg.offset_index.size_bytes()
            time_size += seg.time_index.size_bytes()
            i += 1
        groups.append(group)
    return groups


def _last_offset_for_first(segments: list[LogSegment], i: int, first_uncleanable: int) -> int:
    """Kafka ``lastOffsetForFirstSegment``: next segment's base - 1, or the round's end."""
    if i + 1 < len(segments):
        return segments[i + 1].base_offset - 1
    return first_uncleanable - 1
