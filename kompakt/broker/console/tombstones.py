"""When the tombstones of a partition go (KIP-534 delete horizons), for the partition page.

Kafka keeps a tombstone for ``delete.retention.ms`` after the clean that first reaches it:
that clean writes the batch with the delete-horizon bit and the horizon (clean time +
``delete.retention.ms``) as its base timestamp, and the first clean after the horizon
drops the tombstone (:func:`kompakt.cleaner.rule.survives`). A tombstone is thus in one of
three states, read from the per-segment counts of the broker's
:class:`~kompakt.cleaner.status.TombstoneCounter` (the cache ``/v1/partitions`` uses):
no horizon yet (the next clean sets one), a horizon still ahead, a horizon passed (the
next clean removes it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kompakt.cleaner.status import TombstoneCounter


@dataclass
class Horizons:
    no_horizon: int = 0
    waiting: int = 0  # horizon ahead
    passed: int = 0  # horizon passed: the next clean removes them
    next_ms: int | None = None  # the earliest horizon still ahead
    last_ms: int | None = None  # the latest horizon

    @property
    def total(self) -> int:
        return self.no_horizon + self.waiting + self.passed


def horizons_of(counter: TombstoneCounter, plog: Any, now: int) -> Horizons:
    """The log's tombstones by horizon state at ``now``, from the status's counts."""
    out = Horizons()
    for seg in counter.segments(plog):
        out.no_horizon += seg.no_horizon
        for ms, n in seg.horizons.items():
            if ms <= now:
                out.passed += n
            else:
                out.waiting += n
                out.next_ms = ms if out.next_ms is None else min(out.next_ms, ms)
            out.last_ms = ms if out.last_ms is None else max(out.last_ms, ms)
    return out
