"""What the broker says when a tiering pass or a remote read fails, and how often.

Each pass of the remote log manager's task retries every partition, and consumers
retry a failed fetch at once, so a lasting failure (a manifest gone from the store, a
damaged object, a store unreachable) logged each time buried the broker's log; logged
never (a fetch's), an operator saw only the clients' KAFKA_STORAGE_ERROR.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Hashable

from kompakt.remote.manifest import PartitionManifest
from kompakt.remote.store import RemoteStorageError

log = logging.getLogger("kompakt.broker.tiering")

REPEAT_FAILURE_S = 600.0
"""How often a lasting failure is logged again."""
MAX_KEYS = 10_000


class FailureLog:
    """Each failing thing's last logged message: a failure is logged once, again when
    its message changes or every :data:`REPEAT_FAILURE_S`, and at DEBUG in between.
    Thread-safe (the task thread and the fetches' handler threads use it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._said: dict[Hashable, tuple[str, float]] = {}  # guarded by _lock

    def failed(self, key: Hashable, message: str) -> None:
        now = time.monotonic()
        with self._lock:
            last = self._said.get(key)
            again = last is None or last[0] != message or now - last[1] >= REPEAT_FAILURE_S
            if again:
                if len(self._said) >= MAX_KEYS:  # a bound on what is remembered
                    self._said.clear()
                self._said[key] = (message, now)
        log.log(logging.WARNING if again else logging.DEBUG, "%s", message)

    def ok(self, key: Hashable) -> None:
        with self._lock:
            self._said.pop(key, None)


def vanished(name: str, had: PartitionManifest) -> RemoteStorageError:
    """A manifest gone from the store while it named segments: a new remote log started
    over it would drop the offsets it held from the log, and its objects to the sweep."""
    return RemoteStorageError(
        f"{name}: its manifest is gone from the remote tier, which held offsets "
        f"{had.log_start_offset}..{had.end_offset - 1}: tiering of it stops (its local "
        "segments stay) until the manifest is restored"
    )


def overlaps(name: str) -> RemoteStorageError:
    """A local log whose records overlap its remote log's offsets (an older copy of its
    folder): tiering it would let local retention delete them as already tiered."""
    return RemoteStorageError(
        f"{name}: its local log overlaps its remote log's offsets: not tiered, its local "
        "segments kept (see the error at start)"
    )
