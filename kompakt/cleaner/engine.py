"""The mechanism's interface: what the :class:`~kompakt.cleaner.cleaner.Cleaner` hands an
engine and what it gets back.

Kafka's ``LogCleanerManager`` (policy) picks a log and hands its ``LogToClean`` to a
``Cleaner`` (mechanism) with a ``checkDone`` callback; the ``Cleaner`` builds the offset
map, groups the segments up to where the map reaches and rewrites each group. Here an
:class:`Engine` is that ``Cleaner`` with ONE call, :meth:`Engine.clean`: the in-process
engine (:mod:`kompakt.cleaner.local_engine`) builds a bounded offset map, the Spark
engine (:mod:`kompakt.pipeline.engine`) a shuffle; both group with
:meth:`CleanJob.groups_to` and rewrite each group with the cleaner's own
:func:`~kompakt.cleaner.segment_io.write_cleaned_group`. Swapping the ``.cleaned``
groups in and the checkpoint stay with the policy (they must happen on one machine, in
order). Engines are chosen by name in :mod:`kompakt.engines`, above this layer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from kompakt.cleaner import cleanable
from kompakt.cleaner.cleanable import LogToClean
from kompakt.cleaner.rewrite import GroupStats, RoundContext
from kompakt.cleaner.stats import DirtyRange
from kompakt.cleaner.throttle import Throttler
from kompakt.cleaner.transactions import ProducerSummary
from kompakt.errors import SegmentsChangedError
from kompakt.log.partition_log import PartitionLog
from kompakt.log.segment import LogSegment

Progress = Callable[[int, int], None]
GroupResult = tuple[GroupStats, LogSegment | None, list[LogSegment]]


def log_changed(
    plog: PartitionLog,
    start_offset: int,
    planned: Sequence[LogSegment],
    start_counts: bool = True,
) -> str | None:
    """Why ``plog`` is no longer the log a clean planned (None if it still is): planned
    segments were removed by retention or DeleteRecords (or, with ``start_counts``, its
    log start offset moved on). Kafka lets retention, DeleteRecords and the cleaner run
    side by side; what one removes, the other must neither need nor bring back."""
    live = {id(s) for s in plog.segments_snapshot()}
    gone = [s.base_offset for s in planned if id(s) not in live]
    now = plog.log_start_offset
    if not gone and not (start_counts and now > start_offset):
        return None
    what = f"log start offset {start_offset} -> {now}"
    if gone:
        what += f", {len(gone)} planned segments removed (first {gone[0]})"
    return (
        f"{plog.name} changed during the clean ({what}: retention or DeleteRecords); "
        "the clean is abandoned and retried at the next pass"
    )


@dataclass
class CleanJob:
    """One clean handed from the policy to an engine (Kafka: ``Cleaner.clean(LogToClean)``
    with ``checkDone``). ``check_done`` raises once the clean is aborted; an engine calls
    it between segments (and a Spark engine while its job runs)."""

    ltc: LogToClean
    segments: list[LogSegment]  # the log's segments when the clean was planned
    log_start_offset: int  # ... and its log start offset then
    producers: ProducerSummary
    now: int
    dry_run: bool
    check_done: Callable[[], None]
    progress: Progress | None = None
    # the cleaner's I/O throttle (log.cleaner.io.max.bytes.per.second); None: unlimited
    throttle: Throttler | None = None

    def io(self, nbytes: int) -> None:
        """Report bytes read or written by the clean to the throttle (Kafka's
        ``throttler.maybeThrottle``); may sleep."""
        if self.throttle is not None:
            self.throttle.maybe_throttle(nbytes)

    @property
    def log(self) -> PartitionLog:
        return self.ltc.log

    def to_clean(self, end_offset: int) -> list[LogSegment]:
        """The planned segments a round ending at ``end_offset`` rewrites (Kafka rewrites
        the whole log from its start up to the end of the key map's range)."""
        return [s for s in self.segments if s.base_offset < end_offset]

    def groups_to(self, end_offset: int) -> list[list[LogSegment]]:
        """Kafka ``groupSegmentsBySize`` over :meth:`to_clean`; abandons the clean
        (:class:`SegmentsChangedError`) if retention or DeleteRecords removed one of
        them meanwhile: Kafka's ``replaceSegments`` never brings a removed segment back."""
        segments = self.to_clean(end_offset)
        why = log_changed(self.log, self.log_start_offset, segments, start_counts=False)
        if why is not None:
            raise SegmentsChangedError(why)
        config = self.log.config
        return cleanable.group_segments_by_size(
            segments,
            config.segment_bytes,
            config.segment_index_bytes,
            self.ltc.first_uncleanable_offset,
        )

    def round_context(self, end_offset: int) -> RoundContext:
        """What the survive/discard rule needs for a round whose key map ends there."""
        return RoundContext(
            map_latest_offset=end_offset - 1,
            upper_bound=self.ltc.first_uncleanable_offset,
            now=self.now,
            delete_retention_ms=self.log.config.delete_retention_ms,
            producers=self.producers,
        )


@dataclass
class EngineRun:
    """What an engine did: its key map's range and, per group, (stats, the ``.cleaned``
    segment or None on a dry run, the source segments it replaces)."""

    dirty: DirtyRange
    groups: list[GroupResult]


class Engine(Protocol):
    """The mechanism: clean this job's log up to where its key map reaches.

    Leaves one ``.cleaned`` segment per group (none on a dry run) and removes those it
    wrote if it fails; the caller swaps them in and writes the checkpoint.
    """

    name: str

    def clean(self, job: CleanJob) -> EngineRun: ...
