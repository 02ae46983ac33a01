"""Which partitions are being cleaned now, and how a clean is stopped.

Kafka's ``LogCleanerManager`` keeps an ``inProgress`` map (``LogCleaningInProgress``,
``LogCleaningAborted``, ``LogCleaningPaused``): ``grabFilthiestCompactedLog`` skips a
partition that is in it and puts the one it picks there *before* the clean is planned;
``abortAndPauseCleaning`` flips a running clean to aborted and waits for it;
``checkCleaningAborted`` (the ``checkDone`` callback the ``Cleaner`` polls between
segments) throws ``LogCleaningAbortedException``; ``doneCleaning`` takes the partition
out and wakes waiters. :class:`CleaningStates` is that map for kompakt, shared by the
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
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from kio.schema.errors import ErrorCode

from kompakt.errors import KompaktError

TopicPartition = tuple[str, int]
T = TypeVar("T")


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


class CleaningStates:
    """The partitions being cleaned and their state; thread-safe."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._states: dict[TopicPartition, CleaningState] = {}
        self._closed: str | None = None  # why every clean is aborted from now on
        self._paused: dict[TopicPartition, int] = {}  # Kafka LogCleaningPaused(count)
        self._abort_why: dict[TopicPartition, str] = {}

    # -- taking a partition ---------------------------------------------------------------
    def grab(self, choose: Callable[[set[TopicPartition]], T | None], tp_of) -> T | None:
        """Kafka ``grabFilthiestCompactedLog``: ``choose`` sees the partitions to skip;
        the one it returns is in progress before the lock is let go."""
        with self._cv:
            if self._closed is not None:
                return None
            chosen = choose(set(self._states) | set(self._paused))
            if chosen is not None:
                self._states[tp_of(chosen)] = CleaningState.IN_PROGRESS
            return chosen

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
