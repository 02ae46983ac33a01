"""Transactions as one partition's log sees them: the last stable offset and the
aborted transactions a READ_COMMITTED fetch must name.

Kafka keeps the open ("ongoing") transactions of a partition in its
``ProducerStateManager`` (``firstUnstableOffset``) and the aborted ones in each segment's
``TransactionIndex`` (``.txnindex``, entries of :class:`AbortedTxn`). This tracker holds
both in memory, fed by the partition's batches in offset order: a transactional data
batch opens its producer's transaction (at its base offset) unless one is open, a
control batch (COMMIT/ABORT marker) closes it, and an ABORT records an
:class:`AbortedTxn`. It is brought up to date lazily, from the last offset it saw, so
it is rebuilt by one scan after a restart and costs nothing on logs without
transactions beyond that scan.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass

from kompakt.record.decode import RecordBatch
from kompakt.record.header import CONTROL_ABORT, CONTROL_KEY


@dataclass(frozen=True)
class AbortedTxn:
    """Kafka's ``AbortedTxn``: a producer's aborted transaction in this partition, from
    its first data offset to its ABORT marker, and the partition's last stable offset
    once it was aborted."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TransactionTracker:
    """Open and aborted transactions of one partition (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.ongoing: dict[int, int] = {}
        """First offset of each producer's open transaction."""
        self.aborted: list[AbortedTxn] = []
        self.next_offset = 0
        """The offset after the last batch seen."""

    def observe(self, batches: Iterable[RecordBatch]) -> None:
        """Apply batches at or after :attr:`next_offset`, in offset order (Kafka's
        ``ProducerAppendInfo.append`` for transactional batches and markers)."""
        with self._lock:
            for b in batches:
                h = b.header
                if h.last_offset < self.next_offset:
                    continue
                self.next_offset = h.last_offset + 1
                if not h.is_transactional:
                    continue
                if not h.is_control:
                    self.ongoing.setdefault(h.producer_id, h.base_offset)
                    continue
                first = self.ongoing.pop(h.producer_id, None)
                if first is not None and control_type(b) == CONTROL_ABORT:
                    lso = min(self.ongoing.values(), default=h.last_offset + 1)
                    self.aborted.append(AbortedTxn(h.producer_id, first, h.last_offset, lso))

    def first_unstable_offset(self) -> int | None:
        """The first offset of the earliest open transaction (Kafka's
        ``ProducerStateManager.firstUnstableOffset``), None when none is open."""
        with self._lock:
            return min(self.ongoing.values(), default=None)

    def collect_aborted(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping ``[fetch_offset, upper_bound)`` (Kafka's
        ``TransactionIndex.collectAbortedTxns``: ``lastOffset >= fetchOffset`` and
        ``firstOffset < upperBoundOffset``)."""
        with self._lock:
            return [
                a
                for a in self.aborted
                if a.last_offset >= fetch_offset and a.first_offset < upper_bound
            ]


def control_type(batch: RecordBatch) -> int | None:
    """COMMIT or ABORT from a marker's key (Kafka's ``ControlRecordType.parse``)."""
    for r in batch.records():
        if r.key is not None and len(r.key) >= CONTROL_KEY.size:
            return CONTROL_KEY.unpack_from(bytes(r.key))[1]
    return None
