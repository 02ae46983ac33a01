"""Kafka's ``LogDirFailureChannel``: an I/O error takes its log dir offline, once.

Whoever meets an ``OSError`` while appending, rolling, flushing, writing a checkpoint,
deleting for retention or cleaning reports it here with the dir it happened in. The
first report of a dir marks it offline, logs one ERROR naming the dir and tells the
listeners (the broker: metrics, DescribeLogDirs, and the halt when no dir is left);
later reports of the same dir are dropped, so a failed dir never turns into a retry
loop. An offline dir stays offline until the process restarts (Kafka has no way back
either); the next start recovers its partitions as after a crash.

:func:`disk_error` decides what counts: an ``OSError`` anywhere in the exception's
chain, or, for errors that crossed a process boundary as text (a Spark task's
``PythonException``), ``[Errno N]`` in the message. Process-wide limits (too many
open files, no memory) say nothing about the disk and are not counted, unlike Kafka,
which takes a dir offline on any ``IOException``.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import threading
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

# the disk is full (or the process may write no more): the data already there is fine
SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
# limits of this process, not faults of the disk
NOT_DISK_ERRNOS = frozenset(
    {
        errno.EMFILE,
        errno.ENFILE,
        errno.ENOMEM,
        errno.EINTR,
        errno.EAGAIN,
        errno.ENOENT,  # a file removed under a reader (retention, a swap)
        errno.EBADF,  # a descriptor closed under a reader
    }
)
_ERRNO_TEXT = re.compile(r"\[Errno (\d+)\] ([^\n'\"]*)")


def disk_error(exc: BaseException | None) -> OSError | None:
    """The disk fault behind ``exc``, or None when it is not one."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno is not None:
            return None if exc.errno in NOT_DISK_ERRNOS else exc
        exc = exc.__cause__ or exc.__context__
    return None


def disk_error_in_text(text: str) -> OSError | None:
    """``[Errno N] message`` in an error that arrived as text (a Spark task failure)."""
    for m in _ERRNO_TEXT.finditer(text):
        code = int(m.group(1))
        if code not in NOT_DISK_ERRNOS:
            return OSError(code, m.group(2).strip() or os.strerror(code))
    return None


def find_disk_error(exc: BaseException) -> OSError | None:
    """:func:`disk_error`, else :func:`disk_error_in_text` of the exception's text."""
    return disk_error(exc) or disk_error_in_text(str(exc))


Listener = Callable[[Path, str], None]


class LogDirFailureChannel:
    """The offline log dirs of one process, and who to tell when one goes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # never held while calling out
        self._offline: dict[Path, str] = {}
        self.listeners: list[Listener] = []

    def offline(self) -> dict[Path, str]:
        """Each offline dir and the error that took it offline."""
        with self._lock:
            return dict(self._offline)

    def is_offline(self, path: Path) -> bool:
        return path in self._offline

    def error_of(self, path: Path) -> str | None:
        return self._offline.get(path)

    def add_offline(self, path: Path, exc: OSError, what: str) -> bool:
        """Kafka's ``maybeAddOfflineLogDir``: True the first time ``path`` fails."""
        reason = f"{what}: {exc.strerror or exc}" if what else str(exc.strerror or exc)
        with self._lock:
            if path in self._offline:
                return False
            self._offline[path] = reason
        log.error(
            "log dir %s is offline: I/O error while %s; its partitions answer "
            "KAFKA_STORAGE_ERROR until a restart after the disk is fixed",
            path,
            reason,
        )
        for listener in list(self.listeners):
            try:
                listener(path, reason)
            except Exception:
                log.exception("a log dir failure listener failed")
        return True
