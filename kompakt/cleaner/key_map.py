"""Which records feed the key map, in one place; both engines call it.

Kafka ``Cleaner.buildOffsetMapForSegment``: a record goes into the offset map unless its
batch is a control batch (a transaction marker) or belongs to an aborted transaction
(``CleanedTransactionMetadata.onBatchRead``, fed with the aborted transactions of the
range from the ``.txnindex``), or it has no key; and only records from the first dirty
offset on. Transactions are judged by the aborted list alone, as Kafka's cleaner does: a
transactional batch whose COMMIT marker a later clean removed is still committed data.
(The Spark source's ``read_committed`` is a consumer's view and looks for the marker
instead; the cleaner must not use it.)

The in-process engine feeds the mask into its bounded offset map, segment after segment
(:mod:`kompakt.cleaner.local_engine`); the Spark engine runs :func:`segment_key_map`
once per dirty segment in its tasks and shuffles the keys
(:mod:`kompakt.pipeline.dedup`). A segment is judged alone with the aborted
transactions that overlap it, which is what one pass over the range decides too: a
transaction ending before the segment was closed by its ABORT marker there.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kompakt.cleaner.segment_io import segment_buffer
from kompakt.cleaner.transactions import AbortedTxn, TxnTracker, control_type_of
from kompakt.record.header import CONTROL_BIT, TRANSACTIONAL_BIT
from kompakt.record.scan import RecordScan, scan_records


def feeds_key_map(scan: RecordScan, buf: np.ndarray, txn: TxnTracker, start: int) -> np.ndarray:
    """Mask of ``scan``'s records that go into the key map (see the module doc).

    ``txn`` sees every batch of the scan in order (its state carries over to the next
    segment of the same pass); ``start`` is the first dirty offset.
    """
    attrs = scan.batch_attributes
    use = (attrs & CONTROL_BIT) == 0
    if (attrs & (CONTROL_BIT | TRANSACTIONAL_BIT)).any():
        for b in range(len(scan.batch_position)):
            pid = int(scan.batch_producer_id[b])
            last = int(scan.batch_last_offset[b])
            if attrs[b] & CONTROL_BIT:
                pos, size = int(scan.batch_position[b]), int(scan.batch_size[b])
                empty = not scan.batch_record_count[b]
                txn.on_control_batch(
                    pid, last, None if empty else control_type_of(buf[pos : pos + size])
                )
            elif txn.on_batch(pid, last, bool(attrs[b] & TRANSACTIONAL_BIT)):
                use[b] = False
    return use[scan.batch_index] & ~scan.key_null & (scan.offset >= start)


def aborted_in(aborted: Sequence[AbortedTxn], start: int, end: int) -> list[AbortedTxn]:
    """The aborted transactions overlapping ``[start, end)`` (Kafka
    ``collectAbortedTransactions``)."""
    return [t for t in aborted if t.last_offset >= start and t.first_offset < end]


@dataclass
class SegmentKeys:
    """One segment's scan and the mask of the records a task selected from it."""

    scan: RecordScan
    mask: np.ndarray


def segment_key_map(
    path: str | os.PathLike, aborted: Sequence[AbortedTxn], start: int
) -> SegmentKeys:
    """One dirty segment on its own (a Spark task): the records that feed the key map,
    judged with the aborted transactions that overlap the segment."""
    buf = segment_buffer(path)
    scan = scan_records(buf, 0, len(buf), verify_crc=True)
    return SegmentKeys(scan, feeds_key_map(scan, buf, TxnTracker(list(aborted)), start))


def segment_lookups(path: str | os.PathLike, start: int, end: int) -> SegmentKeys:
    """The records of one segment to be rewritten that need their key's latest offset:
    data records with a key in ``[start, end)``. Aborted ones are included (the rewrite
    drops them whatever their lookup says); that keeps transaction rules out of it."""
    buf = segment_buffer(path)
    scan = scan_records(buf, 0, len(buf), verify_crc=True)
    data = ((scan.batch_attributes & CONTROL_BIT) == 0)[scan.batch_index]
    return SegmentKeys(scan, data & ~scan.key_null & (scan.offset >= start) & (scan.offset < end))
