"""The broker's background threads back off when idle, as Kafka's CleanerThread does."""

from __future__ import annotations

import time

from kompakt.broker.app import start_test_broker


def test_idle_cleaner_backs_off_instead_of_spinning(tmp_path):
    """Regression: a pass that found nothing to clean was taken as 'cleaned' and the thread
    re-ran at once, starving the event loop. Kafka's CleanerThread sleeps
    ``log.cleaner.backoff.ms`` when no log is eligible."""
    b = start_test_broker(tmp_path, **{"log.cleaner.backoff.ms": "60000"})
    try:
        b.logs.create_topic("idle-compacted", 3, {"cleanup.policy": "compact"})
        assert b.broker.background is not None
        thread = b.broker.background.cleaner_thread
        assert thread is not None
        thread.wake()
        time.sleep(1.0)
        assert thread.runs <= 3
    finally:
        b.stop()
