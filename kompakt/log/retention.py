"""Which segments retention deletes: Kafka's ``UnifiedLog.deleteOldSegments`` family as
decision functions over a partition's segment list.

Each rule is a predicate over (segment, next segment or None) and
:func:`deletable_segments` takes the prefix of the log for which it holds;
:meth:`PartitionLog.apply_retention` runs the rules in Kafka's order and does the
deleting.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kompakt.log.segment import LogSegment

SegmentPredicate = Callable[[LogSegment, LogSegment | None], bool]


def log_start_offset_breached(log_start_offset: int) -> SegmentPredicate:
    """Kafka's ``deleteLogStartOffsetBreachedSegments``: segments wholly below the log
    start offset. Never the last segment: the log start offset may equal the log end
    offset."""

    def breached(seg: LogSegment, nxt: LogSegment | None) -> bool:
        return nxt is not None and nxt.base_offset <= log_start_offset

    return breached


def retention_ms_breached(retention_ms: int, now: int) -> SegmentPredicate | None:
    """Kafka's ``deleteRetentionMsBreachedSegments``: segments whose newest record is
    older than ``retention.ms``; None when retention by time is off (negative)."""
    if retention_ms < 0:
        return None
    return lambda seg, _nxt: now - seg.largest_timestamp > retention_ms


def retention_size_breached(
    segments: Sequence[LogSegment], retention_bytes: int
) -> SegmentPredicate | None:
    """Kafka's ``deleteRetentionSizeBreachedSegments``: the oldest segments while the log
    stays at least ``retention.bytes`` without them (so the active segment goes only
    with ``retention.bytes=0``); None when the log is within its size or there is no
    limit."""
    size = sum(s.size for s in segments)
    if retention_bytes < 0 or size < retention_bytes:
        return None
    diff = size - retention_bytes

    def breached(seg: LogSegment, _nxt: LogSegment | None) -> bool:
        nonlocal diff
        if diff - seg.size >= 0:
            diff -= seg.size
            return True
        return False

    return breached


def deletable_segments(
    segments: Sequence[LogSegment],
    predicate: SegmentPredicate,
    high_watermark: int,
    log_end_offset: int,
) -> list[LogSegment]:
    """Kafka's ``UnifiedLog.deletableSegments``: from the oldest segment while
    ``predicate`` holds. A segment qualifies only if all its offsets are below the
    high watermark (the log start offset never passes it); a last segment that is
    empty never does."""
    out: list[LogSegment] = []
    for i, seg in enumerate(segments):
        nxt = segments[i + 1] if i + 1 < len(segments) else None
        last_and_empty = nxt is None and seg.size == 0
        upper = nxt.base_offset if nxt is not None else log_end_offset
        if high_watermark >= upper and predicate(seg, nxt) and not last_and_empty:
            out.append(seg)
        else:
            break
    return out
