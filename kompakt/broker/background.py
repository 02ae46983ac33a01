"""Background work of a broker: log cleaning, retention, flushes and checkpoints.

Each job is a daemon thread that sleeps on a condition so ``wake()`` (an on-demand
compaction, a shutdown) interrupts the wait at once. The cleaner thread cleans the
filthiest eligible partition, then the next, and backs off ``log.cleaner.backoff.ms``
when nothing is eligible, as Kafka's ``CleanerThread`` does. The cleaner itself is
built lazily, so a broker with no compacted topic never starts Spark.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from kompakt.log.manager import LogManager

if TYPE_CHECKING:
    from kompakt.cleaner.cleaner import Cleaner

log = logging.getLogger(__name__)


class PeriodicThread:
    """Runs ``job()`` every ``interval_ms``; ``job`` returns True to run again at once."""

    def __init__(
        self,
        name: str,
        interval_ms: int,
        job: Callable[[], bool],
        on_stop: Callable[[], None] | None = None,
        on_exit: Callable[[], None] | None = None,
    ):
        """``on_stop``: called by :meth:`stop` before the join, to interrupt a long job;
        ``on_exit``: called by this thread as it ends, once no job runs any more."""
        self.name = name  # immutable
        self.on_stop = on_stop  # immutable
        self.on_exit = on_exit  # immutable
        self.interval_ms = interval_ms  # immutable
        self.job = job  # immutable
        self._cv = threading.Condition()  # guards _stop and _woken
        self._stop = False  # guarded by _cv
        self._woken = False  # guarded by _cv
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)  # set once
        # the four below are owned by this thread (written only by _run); other threads
        # (the admin listener's status page) read them as single values, never mutate
        self.last_error: str | None = None  # owned by this thread: the last job's error
        self.runs = 0  # owned by this thread: how many times job() ran (an idle job must not spin)
        self.running = False  # owned by this thread: job() is running now
        self.next_run_s: float | None = None  # owned by this thread: time.time() of the next run

    def start(self) -> None:
        self.thread.start()

    def wake(self) -> None:
        with self._cv:
            self._woken = True
            self._cv.notify_all()

    def stop(self, timeout: float = 30.0) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        if self.on_stop is not None:
            self.on_stop()
        if self.thread.is_alive():
            self.thread.join(timeout)

    def _run(self) -> None:
        try:
            self._loop()
        finally:
            if self.on_exit is not None:
                try:
                    self.on_exit()
                except Exception:  # the broker is stopping: said, not raised
                    log.exception("%s: stopping failed", self.name)

    def _loop(self) -> None:
        while True:
            with self._cv:
                if self._stop:
                    return
                self._woken = False
            again = False
            self.runs += 1
            self.running, self.next_run_s = True, None
            try:
                again = bool(self.job())
                self.last_error = None
            except Exception as exc:  # a failing job is logged and retried, never fatal
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.exception("%s failed", self.name)
            finally:
                self.running = False
            with self._cv:
                if self._stop:
                    return
                if not again and not self._woken:
                    self.next_run_s = time.time() + self.interval_ms / 1000
                    self._cv.wait(self.interval_ms / 1000)
                self.next_run_s = None


class BackgroundTasks:
    """The broker's background threads over one :class:`LogManager`."""

    def __init__(
        self,
        logs: LogManager,
        cleaner_factory: Callable[[], Cleaner] | None,
        *,
        cleaner_enabled: bool = True,
        cleaner_backoff_ms: int = 15_000,
        retention_check_interval_ms: int = 300_000,
        flush_interval_ms: int | None = None,
        checkpoint_interval_ms: int = 60_000,
        on_cleaner: Callable[[Cleaner], None] | None = None,
    ):
        """``on_cleaner`` is called with the cleaner once it is built (the console's
        history subscribes to its cleans)."""
        self.logs = logs
        self._on_cleaner = on_cleaner
        self._cleaner_factory = cleaner_factory
        self._cleaner: Cleaner | None = None  # set once, under _cleaner_lock
        self._cleaner_lock = threading.Lock()
        self.threads: list[PeriodicThread] = []
        if cleaner_enabled and cleaner_factory is not None:
            self.cleaner_thread: PeriodicThread | None = PeriodicThread(
                "kompakt-cleaner", cleaner_backoff_ms, self._clean_once
            )
            self.threads.append(self.cleaner_thread)
        else:
            self.cleaner_thread = None
        self.threads.append(
            PeriodicThread("kompakt-retention", retention_check_interval_ms, self._retention)
        )
        self.threads.append(
            PeriodicThread("kompakt-checkpoint", checkpoint_interval_ms, self._checkpoint)
        )
        if flush_interval_ms is not None:
            self.threads.append(PeriodicThread("kompakt-flush", flush_interval_ms, self._flush))

    # -- the cleaner, built on first use -------------------------------------------------
    def has_compacted_topics(self) -> bool:
        return any(plog.config.compact for plog in self.logs.logs())

    def cleaner(self) -> Cleaner:
        with self._cleaner_lock:
            if self._cleaner is None:
                if self._cleaner_factory is None:
                    raise RuntimeError("log cleaning is not configured")
                cleaner = self._cleaner_factory()
                if self._on_cleaner is not None:
                    self._on_cleaner(cleaner)
                self._cleaner = cleaner
            return self._cleaner

    def cleaner_if_started(self) -> Cleaner | None:
        return self._cleaner

    def _clean_once(self) -> bool:
        if not self.has_compacted_topics():
            return False
        t0 = time.monotonic()
        cleaned = bool(self.cleaner().clean_once())
        if cleaned:
            log.debug("clean took %.1f s", time.monotonic() - t0)
        return cleaned

    def _retention(self) -> bool:
        deleted = self.logs.apply_retention()
        if deleted:
            log.info("retention deleted %d segments", deleted)
        return False

    def _checkpoint(self) -> bool:
        self.logs.checkpoint()
        return False

    def _flush(self) -> bool:
        for plog in self.logs.logs():
            plog.flush()
        return False

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> None:
        for t in self.threads:
            t.start()

    def wake_cleaner(self) -> None:
        if self.cleaner_thread is not None:
            self.cleaner_thread.wake()

    def stop(self) -> None:
        """Abort a running clean first (Kafka's ``LogCleaner.shutdown`` interrupts its
        threads' cleans), so neither the cleaner thread nor a "compact now" request holds
        the shutdown up or touches the logs once they are closed."""
        cleaner = self._cleaner
        if cleaner is not None and hasattr(cleaner, "abort_all"):
            cleaner.abort_all("broker shutting down")
        for t in self.threads:
            t.stop()
        if cleaner is not None and hasattr(cleaner, "close"):
            cleaner.close()
