"""Loads of a private log dir, kept out of the broker's log.

A remote clean (:mod:`kompakt.cleaner.remote_clean`) builds a private log dir from the
remote segments on every pass and opens it with the log layer's own code: a topic
created, the active segment's index files rebuilt, partitions loaded. At INFO those
lines read like a topic creation or a recovery of the broker's own logs, so while the
private log is built and cleaned the log layer's INFO lines *of this thread* are
dropped (warnings and errors still go through, and other threads are not touched);
the remote clean logs its own one line.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

# the log layer's loggers that announce a topic, a rebuilt index and a load
LOADER_LOGGERS = ("kompakt.log.topic_store", "kompakt.log.loader", "kompakt.log.manager")


class _ThisThreadsInfo(logging.Filter):
    """Drops records at INFO and below logged by the thread that made it."""

    def __init__(self) -> None:
        super().__init__()
        self.thread = threading.get_ident()

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno > logging.INFO or record.thread != self.thread


@contextmanager
def quiet_private_log() -> Iterator[None]:
    """Within: this thread's INFO lines of the log layer's loaders are not logged."""
    quiet = _ThisThreadsInfo()
    loggers = [logging.getLogger(name) for name in LOADER_LOGGERS]
    for logger in loggers:
        logger.addFilter(quiet)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(quiet)
