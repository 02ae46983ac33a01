"""The broker's background threads back off when idle, as Kafka's CleanerThread does."""

from __future__ import annotations

import threading

from kompakt.broker.background import BackgroundTasks, PeriodicThread
from kompakt.cleaner import Cleaner, LocalEngine
from kompakt.log.manager import LogManager

TIMEOUT_S = 60


class RecordingCondition(threading.Condition):
    """A condition that records the timeout of every wait and signals the first one."""

    def __init__(self) -> None:
        super().__init__()
        self.timeouts: list[float | None] = []
        self.waited = threading.Event()

    def wait(self, timeout: float | None = None) -> bool:
        if threading.current_thread().name == "under-test":
            self.timeouts.append(timeout)
            self.waited.set()
        return super().wait(timeout)


def test_a_pass_with_nothing_to_clean_reports_idle(tmp_path):
    """Regression: a pass that found nothing to clean was taken as 'cleaned', so the
    thread re-ran at once and starved the event loop. Kafka's CleanerThread sleeps
    ``log.cleaner.backoff.ms`` when no log is eligible (``grabFilthiestCompactedLog``
    returned nothing)."""
    with LogManager(tmp_path) as logs:
        logs.create_topic("idle-compacted", 3, {"cleanup.policy": "compact"})
        background = BackgroundTasks(logs, lambda: Cleaner(logs, engine=LocalEngine(1 << 20)))
        assert background.has_compacted_topics()
        assert background._clean_once() is False
        assert background.cleaner_if_started() is not None  # the pass did run the cleaner


def test_an_idle_job_waits_its_interval_before_running_again():
    """``PeriodicThread`` runs a job that reports idle (False) once, then waits the whole
    interval (``log.cleaner.backoff.ms``) instead of calling it again."""
    runs: list[int] = []

    def idle() -> bool:
        runs.append(1)
        return False

    thread = PeriodicThread("under-test", 60_000, idle)
    cv = RecordingCondition()
    thread._cv = cv
    thread.start()
    try:
        assert cv.waited.wait(TIMEOUT_S), "the thread never went idle"
        with cv:  # the thread is inside wait(): it let go of the lock
            assert cv.timeouts == [60.0]
            assert len(runs) == 1
    finally:
        thread.stop()
