"""The cleaner's policy state under one lock: Kafka's ``LogCleanerManager``.

:class:`LogCleanerManager` owns what Kafka's does: the cleaner checkpoints (read, and
updated last after a swap: ``updateCheckpoints``), the uncleanable partitions
(``markPartitionUncleanable``, with the corrupt batch's file and position), the
in-progress / aborted / paused states and the choice of the filthiest log
(``grabFilthiestCompactedLog``), all under its one lock, so a partition is chosen and
marked in progress in one step and a checkpoint is never rewritten by two threads.
The :class:`~kompakt.cleaner.cleaner.Cleaner` keeps the pass and the swap.

Kafka's ``LogCleanerManager`` keeps an ``inProgress`` map (``LogCleaningInProgress``,
``LogCleaningAborted``, ``LogCleaningPaused``): ``grabFilthiestCompactedLog`` skips a
partition that is in it and puts the one it picks there *before* the clean is planned;
``abortAndPauseCleaning`` flips a running clean to aborted and waits for it;
``checkCleaningAborted`` (the ``checkDone`` callback the ``Cleaner`` polls between
segments) throws ``LogCleaningAbortedException``; ``doneCleaning`` takes the partition
out and wakes waiters. The manager's states are that map for kompakt, shared by the
background pass and every "compact now" request, so two cleans of one partition never
overlap: a second request waits for the running one and then plans afresh.

The paused state is Kafka's ``LogCleaningPaused``, for what must not run under a clean:
``abort_and_pause`` (``LogCleanerManager.abortAndPauseCleaning``, called by
``LogManager.asyncDelete`` before a partition is deleted) aborts a running clean of the
partition, waits until it has stopped and keeps new ones out until ``resume``
(``resumeCleaning``). ``close`` aborts every clean and refuses new ones, for a broker
shutdown or a Ctrl-C.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from kompakt.cleaner import cleanable
from kompakt.cleaner.cleanable import LogToClean
from kompakt.cleaner.segment_io import locate_corruption
from kompakt.errors import CorruptRecordError, KompaktError
from kompakt.log.partition_log import PartitionLog

log = logging.getLogger(__name__)
TopicPartition = tuple[str, int]
Clock = Callable[[], int]


class CleaningState(enum.Enum):
    IN_PROGRESS = "in-progress"  # Kafka LogCleaningInProgress
    ABORTED = "aborted"  # Kafka LogCleaningAborted


class CleaningAbortedError(KompaktError):
    """Kafka's ``LogCleaningAbortedException``: the clean stopped at a safe point and
    left the partition as it was (no ``.cleaned`` file, checkpoint unchanged)."""

    error_code = ErrorCode.unknown_server_error

    def __init__(self, tp: TopicPartition | None, why: str, shutdown: bool = True):
        self.tp = tp
        self.why = why
        # False: only this partition's clean was aborted (abort_and_pause), not all
        self.shutdown = shutdown
        self.report: list = []  # results of a "compact now" finished before the abort
        name = f"{tp[0]}-{tp[1]}" if tp else "compaction"
        super().__init__(f"{why}: compaction of {name} cancelled, nothing changed")


class LogCleanerManager:
    """Kafka's ``LogCleanerManager`` for the logs of one
    :class:`~kompakt.log.manager.LogManager`; thread-safe (see the module doc)."""

    def __init__(self, logs: Any, clock: Clock) -> None:
        self.logs = logs  # set once; thread-safe (LogManager guards its own maps)
        self.clock = clock  # immutable
        # Kafka's LogCleanerManager.lock: guards every field below and the checkpoint
        # update; reentrant, as a choice rewrites a reset checkpoint while holding it
        self._cv = threading.Condition(threading.RLock())
        self._states: dict[TopicPartition, CleaningState] = {}  # guarded by _cv
        self._closed: str | None = None  # guarded by _cv: why every clean is aborted now
        self._paused: dict[TopicPartition, int] = {}  # guarded by _cv: LogCleaningPaused(n)
        self._abort_why: dict[TopicPartition, str] = {}  # guarded by _cv
        # guarded by _cv: where an uncleanable partition's corrupt batch is; the reason
        # itself is the log's ``uncleanable_reason`` (it goes with the log when the
        # partition is deleted), written only by mark_uncleanable under _cv
        self._corrupt_at: dict[TopicPartition, tuple[str, int]] = {}

    # -- checkpoints (Kafka allCleanerCheckpoints / updateCheckpoints) --------------------
    def checkpoints(self) -> dict[TopicPartition, int]:
        with self._cv:
            return self.logs.cleaner_checkpoint().read()

    def update_checkpoint(self, tp: TopicPartition, offset: int) -> None:
        """Written last, via ``.tmp`` + fsync + rename (OffsetCheckpointFile); entries
        of partitions no longer live are dropped."""
        with self._cv:
            cp = self.logs.cleaner_checkpoint()
            entries = cp.read()
            entries[tp] = offset
            live = {(p.topic, p.partition) for p in self.logs.logs()}
            cp.write({k: v for k, v in entries.items() if k in live})

    def log_to_clean(self, plog: PartitionLog) -> LogToClean:
        """Kafka's ``LogToClean`` of ``plog`` now, from its checkpoint."""
        cps = self.checkpoints()
        return cleanable.log_to_clean(plog, cps.get((plog.topic, plog.partition)), self.clock())

    # -- uncleanable partitions (Kafka markPartitionUncleanable) --------------------------
    def mark_uncleanable(self, plog: PartitionLog, exc: BaseException) -> str:
        """Mark ``plog`` uncleanable with the corrupt batch's file and position when
        there is one (found again by a scan when the engine lost them); the reason."""
        found = None
        if isinstance(exc, CorruptRecordError) and exc.file and exc.position is not None:
            found = (exc.file, exc.position, str(exc))
        if found is None:
            found = locate_corruption(plog.segments_snapshot())
        with self._cv:
            if found is not None:
                file, position, message = found
                self._corrupt_at[(plog.topic, plog.partition)] = (file, position)
                reason = f"corrupt batch in {file} at byte position {position}: {message}"
            else:
                reason = f"{type(exc).__name__}: {exc}"
            plog.uncleanable_reason = reason
        log.error("marking %s uncleanable: %s", plog.name, reason)
        return reason

    def corrupt_at(self, tp: TopicPartition) -> tuple[str | None, int | None]:
        """(file, byte position) of an uncleanable partition's corrupt batch, if known."""
        with self._cv:
            return self._corrupt_at.get(tp, (None, None))

    def uncleanable(self) -> dict[TopicPartition, str]:
        with self._cv:
            return {
                (p.topic, p.partition): p.uncleanable_reason
                for p in self.logs.logs()
                if p.uncleanable_reason
            }

    # -- choosing a log -----------------------------------------------------------------
    def grab_filthiest(self) -> LogToClean | None:
        """Kafka ``grabFilthiestCompactedLog``: the filthiest eligible compacted log not
        in progress, paused or uncleanable, in progress before the lock is let go; a
        checkpoint that had to be reset is rewritten (``forceUpdateCheckpoint``)."""
        with self._cv:
            if self._closed is not None:
                return None
            chosen = cleanable.grab_filthiest(
                self.logs.logs(),
                self.checkpoints(),
                self.clock(),
                skip=set(self._states) | set(self._paused),
                on_reset=self.update_checkpoint,
            )
            if chosen is not None:
                self._states[chosen.topic_partition] = CleaningState.IN_PROGRESS
            return chosen

    def due(self, force: bool = False, update_resets: bool = True) -> list[LogToClean]:
        """Every compacted log that a pass would clean (``force``: ignore the ratio),
        filthiest first; checkpoints that had to be reset are rewritten unless
        ``update_resets`` is off (a dry run writes nothing)."""
        with self._cv:
            cps = self.checkpoints()
            now = self.clock()
            out = []
            for plog in self.logs.logs():
                if not plog.config.compact or plog.uncleanable_reason:
                    continue
                ltc = cleanable.log_to_clean(plog, cps.get((plog.topic, plog.partition)), now)
                if ltc.checkpoint_reset and update_resets:
                    self.update_checkpoint(ltc.topic_partition, ltc.first_dirty_offset)
                if cleanable.is_eligible(ltc, force=force):
                    out.append(ltc)
        return sorted(out, key=lambda t: -t.cleanable_ratio)

    # -- taking a partition ---------------------------------------------------------------
    def begin(self, tp: TopicPartition) -> None:
        """Own ``tp`` for a clean, first waiting for a running clean of it to finish
        (a "compact now" while the background cleaner is on the same partition)."""
        with self._cv:
            while (tp in self._states or tp in self._paused) and self._closed is None:
                self._cv.wait()
            if self._closed is not None:
                raise CleaningAbortedError(tp, self._closed)
            self._states[tp] = CleaningState.IN_PROGRESS

    def done(self, tp: TopicPartition) -> None:
        """Kafka ``doneCleaning``: ``tp`` may be cleaned again; waiters wake."""
        with self._cv:
            self._states.pop(tp, None)
            self._abort_why.pop(tp, None)
            self._cv.notify_all()

    # -- stopping ---------------------------------------------------------------------------
    def check_done(self, tp: TopicPartition) -> None:
        """Kafka ``checkCleaningAborted``: what an engine polls between segments."""
        with self._cv:
            if self._states.get(tp) is CleaningState.ABORTED:
                if self._closed is not None:
                    raise CleaningAbortedError(tp, self._closed)
                raise CleaningAbortedError(tp, self._abort_why.get(tp, "aborted"), shutdown=False)

    def abort_and_pause(self, tp: TopicPartition, why: str, timeout: float = 300.0) -> bool:
        """Kafka ``abortAndPauseCleaning``: abort a running clean of ``tp`` (its engine
        stops at the next check and leaves the partition as it was), wait until it has
        stopped, and keep ``tp`` from being cleaned until :meth:`resume`. ``why`` ends
        up in the abandoned clean's report. False if the clean did not stop in time."""
        deadline = time.monotonic() + timeout
        with self._cv:
            self._paused[tp] = self._paused.get(tp, 0) + 1
            if tp in self._states:
                self._states[tp] = CleaningState.ABORTED
                self._abort_why.setdefault(tp, why)
            while tp in self._states:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cv.wait(left)
            return True

    def resume(self, tp: TopicPartition) -> None:
        """Kafka ``resumeCleaning``: undo one :meth:`abort_and_pause`."""
        with self._cv:
            count = self._paused.get(tp, 0) - 1
            if count > 0:
                self._paused[tp] = count
            else:
                self._paused.pop(tp, None)
            self._cv.notify_all()

    def is_paused(self, tp: TopicPartition) -> bool:
        with self._cv:
            return tp in self._paused

    def is_aborted(self, tp: TopicPartition) -> bool:
        with self._cv:
            return self._states.get(tp) is CleaningState.ABORTED

    def close(self, why: str) -> None:
        """Abort every running clean and refuse new ones (shutdown, Ctrl-C)."""
        with self._cv:
            if self._closed is None:
                self._closed = why
            for tp in self._states:
                self._states[tp] = CleaningState.ABORTED
            self._cv.notify_all()

    @property
    def closed(self) -> str | None:
        with self._cv:
            return self._closed

    def wait_idle(self, timeout: float) -> bool:
        """Kafka ``abortAndPauseCleaning`` waits for the cleaner to acknowledge; True when
        no clean is running any more."""
        deadline = time.monotonic() + timeout
        with self._cv:
            while self._states:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cv.wait(left)
            return True

    def in_progress(self) -> dict[TopicPartition, CleaningState]:
        with self._cv:
            return dict(self._states)
