"""Producer and transaction state the cleaner needs (Kafka ``CleanedTransactionMetadata``).

Aborted transactions come from the log's ``.txnindex`` (the log owns them: Kafka's
``collectAbortedTransactions``), written when each ABORT marker was appended, so a
COMMIT marker a clean removed can never make a committed record look aborted. A
producer's last records come from the log's producer state (Kafka's
``lastRecordsOfActiveProducers``).

:class:`TxnTracker` is one pass of Kafka's ``CleanedTransactionMetadata`` through the
batches of a clean, carried across every segment group of that clean as Kafka's
``Cleaner.doClean`` carries one instance across its ``cleanSegments`` calls: a COMMIT
marker that starts a group still knows the data of its transaction was read in the
group before. An engine that rewrites groups apart (Spark tasks) starts each group
from :func:`states_at`, the tracker as the pass reaches that group.
"""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from kompakt.log.producer_state import LastRecord
from kompakt.log.txn_index import AbortedTxn
from kompakt.record.decode import RecordBatch
from kompakt.record.header import CONTROL_BIT, TRANSACTIONAL_BIT
from kompakt.record.scan import RecordScan

ABORT = 0
COMMIT = 1


@dataclass
class ProducerSummary:
    """What the cleaner knows of a log's producers: their last records (the log's
    producer state) and the aborted transactions (the log's ``.txnindex``)."""

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


def control_type_of(buffer: bytes | memoryview) -> int | None:
    """Marker type from a control batch's bytes (None for an empty, cleaned batch)."""
    return control_type(RecordBatch.from_bytes(buffer))


class TxnTracker:
    """Kafka's ``CleanedTransactionMetadata`` over one pass through batches in order."""

    def __init__(self, aborted: Iterable[AbortedTxn]):
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

    def copy(self) -> TxnTracker:
        """This pass's state as it stands (a group's starting state for a Spark task)."""
        return copy.deepcopy(self)

    def read_batches(
        self,
        buf: np.ndarray | memoryview,
        producer_id: np.ndarray,
        last_offset: np.ndarray,
        attributes: np.ndarray,
        position: np.ndarray,
        size: np.ndarray,
        record_count: np.ndarray,
    ) -> np.ndarray:
        """Feed a segment's batches in order by their header columns (a
        :class:`~kompakt.record.scan.RecordScan`'s ``batch_*`` or a
        :class:`~kompakt.record.scan.BatchHeaders`'), reading only the markers' types
        from ``buf``; returns, per batch, whether it is aborted data (``onBatchRead``).
        A plain batch changes nothing a later decision reads, so only transactional and
        control batches are fed (aborted entries are taken from the queue by offset)."""
        aborted = np.zeros(len(attributes), bool)
        for i in np.flatnonzero(attributes & (CONTROL_BIT | TRANSACTIONAL_BIT)):
            pid, last = int(producer_id[i]), int(last_offset[i])
            if attributes[i] & CONTROL_BIT:
                pos, n = int(position[i]), int(size[i])
                ctype = control_type_of(buf[pos : pos + n]) if record_count[i] else None
                self.on_control_batch(pid, last, ctype)
            else:
                aborted[i] = self.on_batch(pid, last, True)
        self.retained_aborts.clear()  # only a rewrite writes them to a .txnindex
        return aborted

    def read_scan(self, scan: RecordScan, buf: np.ndarray | memoryview) -> np.ndarray:
        """:meth:`read_batches` over a scanned segment's batches."""
        return self.read_batches(
            buf,
            scan.batch_producer_id,
            scan.batch_last_offset,
            scan.batch_attributes,
            scan.batch_position,
            scan.batch_size,
            scan.batch_record_count,
        )
