"""Faults a test passes to the coordinators: crash or error points on their write
threads, handed in at start-up (the broker passes none). Kafka's own tests get the same
effect by giving the coordinator a failing ``ReplicaManager``; nothing here reads the
environment, so production code carries no test switch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class CoordinatorFaults:
    """Hooks run on a coordinator's write thread just before the write they name; a hook
    may raise (the write fails as a disk error would) or end the process (a crash)."""

    before_group_write: Callable[[str, int], None] | None = None
    """Called with (group id, generation) before a group metadata record is appended
    to ``__consumer_offsets``."""
    before_txn_markers: Callable[[int], None] | None = None
    """Called with the producer id before a transaction's markers are written."""


NO_FAULTS = CoordinatorFaults()
"""What the broker runs with."""
