"""What the tiering task says when a partition's pass fails, and how often.

Each pass of the remote log manager's task retries every partition, so a lasting
failure (a manifest gone from the store, a damaged object, a store unreachable) logged
every pass buried the broker's log in one line every task interval.
"""

from __future__ import annotations

import logging
import time

from kompakt.remote.manifest import PartitionManifest
from kompakt.remote.store import RemoteStorageError

log = logging.getLogger("kompakt.broker.tiering")

REPEAT_FAILURE_S = 600.0
"""How often a partition's lasting failure is logged again."""


class FailureLog:
    """Each failing partition's last logged cause: a failure is logged once, again when
    its cause changes or every :data:`REPEAT_FAILURE_S`, and at DEBUG in between."""

    def __init__(self) -> None:
        self._said: dict[tuple[str, int], tuple[str, float]] = {}  # owned by the task thread

    def failed(self, key: tuple[str, int], exc: Exception) -> None:
        said, now = f"{exc}", time.monotonic()
        last = self._said.get(key)
        if last is not None and last[0] == said and now - last[1] < REPEAT_FAILURE_S:
            log.debug("tiering %s-%d: %s", *key, said)
            return
        self._said[key] = (said, now)
        log.warning("tiering %s-%d: %s", *key, said)

    def ok(self, key: tuple[str, int]) -> None:
        self._said.pop(key, None)


def vanished(name: str, had: PartitionManifest) -> RemoteStorageError:
    """A manifest gone from the store while it named segments: a new remote log started
    over it would drop the offsets it held from the log, and its objects to the sweep."""
    return RemoteStorageError(
        f"{name}: its manifest is gone from the remote tier, which held offsets "
        f"{had.log_start_offset}..{had.end_offset - 1}: tiering of it stops (its local "
        "segments stay) until the manifest is restored"
    )
