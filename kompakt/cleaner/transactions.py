"""Producer and transaction state the cleaner needs (Kafka ``CleanedTransactionMetadata``).

Kafka reads aborted transactions from ``.txnindex`` and active producers from its
producer-state snapshots. kompakt derives both from batch headers of the log: a
transactional batch opens a transaction of its producer, the next marker (control
batch) closes it, and an ABORT marker makes the range aborted.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from kompakt.log.txn_index import AbortedTxn as LogAbortedTxn
from kompakt.record.decode import RecordBatch
from kompakt.record.header import CONTROL_BIT, TRANSACTIONAL_BIT
from kompakt.record.scan import BatchHeaders

ABORT = 0
COMMIT = 1
PRODUCER_ID_EXPIRATION_MS = 86_400_000  # Kafka's producer.id.expiration.ms default


@dataclass(frozen=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int  # offset of the ABORT marker
    last_stable_offset: int = -1  # the partition's LSO once aborted (-1: not known)

    def index_entry(self) -> LogAbortedTxn:
        """The ``.txnindex`` entry a cleaned segment keeps for it (Kafka's cleaner
        appends the ``AbortedTxn`` of every ABORT marker it retains)."""
        lso = self.last_stable_offset if self.last_stable_offset >= 0 else self.last_offset + 1
        return LogAbortedTxn(self.producer_id, self.first_offset, self.last_offset, lso)


@dataclass(frozen=True)
class LastRecord:
    """Kafka's ``LastRecord``: a producer's last data offset (None: only markers)."""

    last_data_offset: int | None
    producer_epoch: int


@dataclass
class ProducerSummary:
    """What one pass over a log's headers tells the cleaner about producers."""

    last_records: dict[int, LastRecord] = field(default_factory=dict)
    aborted: list[AbortedTxn] = field(default_factory=list)
    segment_records: dict[int, int] = field(default_factory=dict)  # base offset -> records

    def is_last_of_producer(
        self, producer_id: int, last_offset: int, is_control: bool, epoch: int
    ) -> bool:
        last = self.last_records.get(producer_id)
        if producer_id < 0 or last is None:
            return False
        if last.last_data_offset is not None:
            return last_offset == last.last_data_offset
        return is_control and epoch == last.producer_epoch

    def aborted_between(self, start: int, end: int) -> list[AbortedTxn]:
        """Kafka ``collectAbortedTransactions(start, end)``."""
        return [t for t in self.aborted if t.last_offset >= start and t.first_offset < end]


def control_type(batch: RecordBatch) -> int | None:
    rec = batch.control_record()
    return None if rec is None else rec.type


class SummaryBuilder:
    """Feed batch headers in log order; ``finish(now)`` gives the summary."""

    def __init__(self) -> None:
        self._last: dict[int, tuple[int | None, int, int]] = {}  # pid -> (data off, epoch, ts)
        self._open: dict[int, int] = {}  # pid -> first offset of its open transaction
        self.aborted: list[AbortedTxn] = []

    def add(self, headers: BatchHeaders, control_types: dict[int, int | None]) -> None:
        """``control_types`` maps a control batch's position to its marker type."""
        pid = headers.producer_id
        if not (pid >= 0).any():
            return
        attrs = headers.attributes
        for i in np.nonzero(pid >= 0)[0]:
            p = int(pid[i])
            epoch = int(headers.producer_epoch[i])
            ts = int(headers.max_timestamp[i])
            if attrs[i] & CONTROL_BIT:
                prev = self._last.get(p)
                self._last[p] = (prev[0] if prev else None, epoch, ts)
                first = self._open.pop(p, None)
                ctype = control_types.get(int(headers.position[i]))
                if ctype == ABORT and first is not None:
                    marker = int(headers.base_offset[i])
                    lso = min(self._open.values(), default=marker + 1)
                    self.aborted.append(AbortedTxn(p, first, marker, lso))
            else:
                self._last[p] = (int(headers.last_offset[i]), epoch, ts)
                if attrs[i] & TRANSACTIONAL_BIT and p not in self._open:
                    self._open[p] = int(headers.base_offset[i])

    def finish(self, now: int, expiration_ms: int = PRODUCER_ID_EXPIRATION_MS) -> ProducerSummary:
        last = {
            p: LastRecord(off, epoch)
            for p, (off, epoch, ts) in self._last.items()
            if p in self._open or ts >= now - expiration_ms
        }
        return ProducerSummary(last, sorted(self.aborted, key=lambda t: t.first_offset))


def control_type_of(buffer: bytes | memoryview) -> int | None:
    """Marker type from a control batch's bytes (None for an empty, cleaned batch)."""
    return control_type(RecordBatch.from_bytes(buffer))


class TxnTracker:
    """Kafka's ``CleanedTransactionMetadata`` over one pass through batches in order."""

    def __init__(self, aborted: list[AbortedTxn]):
        self._queue = deque(sorted(aborted, key=lambda t: t.first_offset))
        self._aborted: dict[int, list] = {}  # pid -> [txn, last observed batch offset]
        self._committed: set[int] = set()
        self.retained_aborts: list[AbortedTxn] = []
        """ABORT markers kept because data of their transaction was read in this pass:
        their entries go to the cleaned segment's ``.txnindex``."""

    def _consume_up_to(self, offset: int) -> None:
        while self._queue and self._queue[0].first_offset <= offset:
            t = self._queue.popleft()
            self._aborted[t.producer_id] = [t, None]

    def on_control_batch(self, producer_id: int, last_offset: int, ctype: int | None) -> bool:
        """True when the marker may be discarded (``onControlBatchRead``)."""
        self._consume_up_to(last_offset)
        if ctype is None:
            return True  # an empty control batch was cleaned before
        if ctype == ABORT:
            entry = self._aborted.pop(producer_id, None)
            # keep the marker until every batch of the transaction is gone
            if entry is not None and entry[1] is not None:
                self.retained_aborts.append(entry[0])
                return False
            return True
        if ctype == COMMIT:
            if producer_id in self._committed:
                self._committed.discard(producer_id)
                return False
            return True
        return False

    def on_batch(self, producer_id: int, last_offset: int, transactional: bool) -> bool:
        """True when the data batch belongs to an aborted transaction (``onBatchRead``)."""
        self._consume_up_to(last_offset)
        if not transactional:
            return False
        entry = self._aborted.get(producer_id)
        if entry is not None:
            entry[1] = last_offset
            return True
        self._committed.add(producer_id)
        return False
