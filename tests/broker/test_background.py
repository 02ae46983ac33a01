"""The broker's background threads back off when idle, as Kafka's CleanerThread does."""

from __future__ import annotations

from shared_kit import condition_wait_frame, wait_for

from kompakt.broker.app import start_test_broker


def test_idle_cleaner_backs_off_instead_of_spinning(tmp_path):
    """Regression: a pass that found nothing to clean was taken as 'cleaned' and the thread
    re-ran at once, starving the event loop. Kafka's CleanerThread sleeps
    ``log.cleaner.backoff.ms`` when no log is eligible: after the woken pass the thread
    is parked in a wait of exactly that long (a spinning thread never gets there)."""
    b = start_test_broker(tmp_path, **{"log.cleaner.backoff.ms": "60000"})
    try:
        b.logs.create_topic("idle-compacted", 3, {"cleanup.policy": "compact"})
        assert b.broker.background is not None
        thread = b.broker.background.cleaner_thread
        assert thread is not None
        before = thread.runs
        thread.wake()
        wait = wait_for(
            lambda: thread.runs > before and condition_wait_frame(thread.thread),
            "the woken cleaner pass to end in a back-off wait",
        )
        assert wait.f_locals["timeout"] == 60.0  # log.cleaner.backoff.ms, in seconds
    finally:
        b.stop()
