"""Which records feed the key map, in one place; both engines call it.

Kafka ``Cleaner.buildOffsetMapForSegment``: a record goes into the offset map unless its
batch is a control batch (a transaction marker) or belongs to an aborted transaction
(``CleanedTransactionMetadata.onBatchRead``, fed with the aborted transactions of the
range from the ``.txnindex``), or it has no key; and only records from the first dirty
offset on and below the first uncleanable offset (Kafka's ``LogCleaner``: "we do not
clean beyond the last stable offset", so every record the map sees is decided: a record
of a transaction still open past it would otherwise supersede a committed one and take
it with it when that transaction aborts). Transactions are judged by the aborted list alone, as Kafka's cleaner does: a
transactional batch whose COMMIT marker a later clean removed is still committed data.
(The Spark source's ``read_committed`` is a consumer's view and looks for the marker
instead; the cleaner must not use it.)

The in-process engine feeds the mask into its bounded offset map, segment after segment
(:mod:`kompakt.cleaner.local_engine`); the Spark engine applies it in the map tasks of
its one-pass digest shuffle (:mod:`kompakt.pipeline.survivors`). A segment part is
judged alone with the aborted transactions that overlap it, which is what one pass over
the range decides too: a transaction ending before it was closed by its ABORT marker.
"""

from __future__ import annotations

import numpy as np

from kompakt.cleaner.transactions import TxnTracker
from kompakt.record.header import CONTROL_BIT
from kompakt.record.scan import RecordScan


def feeds_key_map(
    scan: RecordScan, buf: np.ndarray, txn: TxnTracker, start: int, end: int
) -> np.ndarray:
    """Mask of ``scan``'s records that go into the key map (see the module doc).

    ``txn`` sees every batch of the scan in order (its state carries over to the next
    segment of the same pass); ``[start, end)`` is the dirty range: the first dirty
    offset up to the first uncleanable one.
    """
    use = (scan.batch_attributes & CONTROL_BIT) == 0
    use &= ~txn.read_scan(scan, buf)
    return use[scan.batch_index] & ~scan.key_null & (scan.offset >= start) & (scan.offset < end)
