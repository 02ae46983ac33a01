"""Producer state of one partition (Kafka's ``ProducerStateManager``), owned by its log.

One object holds what the log knows of its producers:

- each producer's epoch and the metadata of its last 5 appended batches (Kafka's
  ``ProducerStateEntry``), what idempotence checks a batch against (:meth:`check`): an
  older epoch is INVALID_PRODUCER_EPOCH, a newer one must start at sequence 0, a batch
  equal to a retained one is a retried duplicate, any other must follow the last
  sequence (wrapping at Int32.MAX) or it is OUT_OF_ORDER_SEQUENCE_NUMBER;
- the open ("ongoing") transactions and so the last stable offset (Kafka's
  ``ongoingTxns``/``firstUnstableOffset``), fed as transactional batches are appended
  (:meth:`on_batch`, Kafka's ``ProducerAppendInfo.append``), an ABORT marker giving the
  :class:`~kompakt.log.txn_index.AbortedTxn` the log writes to its ``.txnindex``;
- the entries of a ``<offset>.snapshot`` (:meth:`snapshot_entries`, the file codec is
  :mod:`kompakt.log.producer_snapshot`), and each active producer's last records for the
  cleaner (:meth:`last_records_of_active_producers`, KIP-360).

The two parts load lazily and apart, as the log asks (:class:`~kompakt.log.partition_log.
PartitionLog`): the open transactions from the batch headers after the cleaner
checkpoint, the producers' batches from the latest snapshot and the batches after it.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from kompakt.errors import KompaktError
from kompakt.log.producer_snapshot import NO_OFFSET, SnapshotEntry
from kompakt.log.txn_index import AbortedTxn
from kompakt.record.header import CONTROL_ABORT, NO_PRODUCER_ID, Header

NUM_BATCHES_TO_RETAIN = 5
"""Kafka's ``ProducerStateEntry.NUM_BATCHES_TO_RETAIN``."""

PRODUCER_ID_EXPIRATION_MS = 86_400_000
"""Kafka's ``producer.id.expiration.ms`` default."""

INT32_MAX = 2**31 - 1


class OutOfOrderSequenceError(KompaktError, code="out_of_order_sequence_number"):
    """A batch's first sequence does not follow the producer's last one."""


class InvalidProducerEpochError(KompaktError, code="invalid_producer_epoch"):
    """A batch from an epoch older than the producer's last."""


class InvalidTxnStateError(KompaktError, code="invalid_txn_state"):
    """A transactional batch whose transaction ended while it was on its way."""


@dataclass(frozen=True)
class LastRecord:
    """Kafka's ``LastRecord``: a producer's last data offset (None: only markers since
    its epoch began) and epoch, what the cleaner keeps of it."""

    last_data_offset: int | None
    producer_epoch: int


@dataclass
class BatchMeta:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass
class ProducerEntry:
    epoch: int
    batches: deque[BatchMeta] = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    timestamp: int = -1
    """Of the producer's last batch or marker (Kafka's ``ProducerStateEntry.lastTimestamp``,
    what ``producer.id.expiration.ms`` counts from)."""

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


def _next_seq(seq: int) -> int:
    return 0 if seq == INT32_MAX else seq + 1


def _decrement_seq(seq: int, by: int) -> int:
    """Kafka's ``DefaultRecordBatch.decrementSequence`` (wrapping at Int32.MAX)."""
    return INT32_MAX - (by - seq) + 1 if seq < by else seq - by


def _last_seq(h: Header) -> int:
    last = h.base_sequence + h.last_offset_delta
    return last - INT32_MAX - 1 if last > INT32_MAX else last


def expired(timestamp: int, txn_first_offset: int, now: int) -> bool:
    """Kafka's ``isProducerExpired``: idle for ``producer.id.expiration.ms`` and no open
    transaction."""
    return txn_first_offset < 0 and now - timestamp >= PRODUCER_ID_EXPIRATION_MS


class ProducerStateManager:
    """The producers and open transactions of one partition.

    ``entries`` is guarded by the owning log's ``lock`` (appends, loads and checks run
    under it); ``ongoing`` by this object's own lock (the last stable offset is asked
    from fetches without the log's lock)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.entries: dict[int, ProducerEntry] = {}
        self.entries_loaded = False
        """Set once ``entries`` were built from the snapshot and the log (by the log)."""
        self.keep_snapshots = False
        """Set by the log once someone keeps this state (the broker's idempotence
        checks): from then on it is written to a snapshot at each roll, before head
        segments go and at close. A state built only to answer the cleaner writes none
        (an offline compact, even a cancelled one, leaves no new file)."""
        self.ongoing: dict[int, int] = {}
        """First offset of each producer's open transaction."""
        self.markers: dict[int, int] = {}
        """How many markers of each producer this partition took since it was opened
        (guarded by this object's lock): a transactional write verified against its
        transaction is appended only if none came in between (Kafka's verification
        guard, ``VerificationStateEntry``)."""

    # -- idempotence ---------------------------------------------------------------------
    def check(self, h: Header) -> BatchMeta | None:
        """Validate one batch; returns the original batch if it is a duplicate."""
        pid = h.producer_id
        if pid <= NO_PRODUCER_ID:  # RecordBatch.hasProducerId
            return None
        e = self.entries.get(pid)
        if e is None:
            return None  # unknown producer (state lost, e.g. retention): accept
        if h.producer_epoch < e.epoch:
            raise InvalidProducerEpochError(
                f"Epoch of producer {pid} at offset is {h.producer_epoch}, which is smaller "
                f"than the last seen epoch {e.epoch}"
            )
        last = _last_seq(h)
        if h.producer_epoch == e.epoch:
            for b in e.batches:
                if b.first_seq == h.base_sequence and b.last_seq == last:
                    return b
        if h.producer_epoch > e.epoch:
            if h.base_sequence != 0:
                raise OutOfOrderSequenceError(
                    f"Invalid sequence number for new epoch of producer {pid}: "
                    f"{h.producer_epoch} (request epoch), {h.base_sequence} (seq. number), "
                    f"{e.epoch} (current producer epoch)"
                )
            return None
        if e.batches and h.base_sequence != _next_seq(e.last_seq):
            raise OutOfOrderSequenceError(
                f"Out of order sequence number for producer {pid}: {h.base_sequence} "
                f"(incoming seq. number), {e.last_seq} (current end sequence number)"
            )
        return None

    def update(self, h: Header, first_offset: int) -> None:
        """Record one appended batch of a producer (Kafka's ``ProducerAppendInfo``). The
        log feeds every append once ``entries`` are loaded; a batch already recorded
        (the same or a later last offset) changes nothing, so a second feed is harmless."""
        pid = h.producer_id
        if pid <= NO_PRODUCER_ID:
            return
        if h.is_control:
            # Kafka's ``appendEndTxnMarker``: a marker's epoch becomes the producer's
            # (``maybeUpdateProducerEpoch``), so a zombie's later batch with the epoch
            # the coordinator fenced is INVALID_PRODUCER_EPOCH, not appended after the
            # ABORT as an open transaction that would hold the LSO back for ever
            e = self.entries.get(pid)
            if e is None or h.producer_epoch > e.epoch:
                e = self.entries[pid] = ProducerEntry(h.producer_epoch)
            e.timestamp = h.max_timestamp
            return
        last_offset = first_offset + h.last_offset_delta
        e = self.entries.get(pid)
        if e is None or h.producer_epoch != e.epoch:
            e = ProducerEntry(h.producer_epoch)
            self.entries[pid] = e
        elif e.batches and e.batches[-1].last_offset >= last_offset:
            return  # fed already
        e.batches.append(
            BatchMeta(h.base_sequence, _last_seq(h), first_offset, last_offset, h.max_timestamp)
        )
        e.timestamp = h.max_timestamp

    def load_entry(self, entry: SnapshotEntry) -> None:
        """One snapshot entry (Kafka's ``loadProducerEntry``): a producer's epoch and one
        of its batches; the entries of one producer come oldest first, and a later one
        of the same epoch adds its batch to the earlier ones."""
        e = self.entries.get(entry.producer_id)
        if e is None or e.epoch != entry.epoch:
            e = ProducerEntry(entry.epoch)
        e.timestamp = entry.timestamp
        if entry.last_offset >= 0:
            e.batches.append(
                BatchMeta(
                    _decrement_seq(entry.last_sequence, entry.offset_delta),
                    entry.last_sequence,
                    entry.last_offset - entry.offset_delta,
                    entry.last_offset,
                    entry.timestamp,
                )
            )
        self.entries[entry.producer_id] = e

    def load_entries(
        self, snapshot: Iterable[SnapshotEntry], batches: Iterable[Header], start: int, now: int
    ) -> None:
        """Build ``entries`` (Kafka's ``LogLoader.rebuildProducerState``): the unexpired
        entries of the snapshot at ``start``, then the batches from ``start`` on."""
        for entry in snapshot:
            if not expired(entry.timestamp, entry.current_txn_first_offset, now):
                self.load_entry(entry)
        for h in batches:
            if h.producer_id > NO_PRODUCER_ID and h.base_offset >= start:
                self.update(h, h.base_offset)
        self.entries_loaded = True

    def snapshot_entries(self, now: int) -> list[SnapshotEntry]:
        """The entries of a snapshot (Kafka's ``writeSnapshot``): an entry for each
        batch a producer's state retains, oldest first (its last batch last: the one
        Kafka's reader keeps), with the first offset of its open transaction; a
        producer idle past ``producer.id.expiration.ms`` without an open transaction is
        left out (Kafka's ``isProducerExpired``).

        Kafka writes only the last batch; its reader keeps the last entry of a producer
        id, so it reads these files as its own, and after a restart a retry of any of
        the 5 is still a duplicate."""
        ongoing = self.snapshot()
        out = []
        for pid, e in list(self.entries.items()):
            txn = ongoing.get(pid, NO_OFFSET)
            if expired(e.timestamp, txn, now):
                continue
            batches: list[BatchMeta | None] = list(e.batches) or [None]
            for i, b in enumerate(batches):
                last = i == len(batches) - 1
                out.append(
                    SnapshotEntry(
                        producer_id=pid,
                        epoch=e.epoch,
                        last_sequence=b.last_seq if b else -1,
                        last_offset=b.last_offset if b else NO_OFFSET,
                        offset_delta=b.last_offset - b.first_offset if b else 0,
                        # the producer's own time on its last entry (what expiry counts)
                        timestamp=e.timestamp if last or b is None else b.timestamp,
                        current_txn_first_offset=txn,
                    )
                )
        return out

    def last_records_of_active_producers(self, now: int) -> dict[int, LastRecord]:
        """Kafka's ``UnifiedLog.lastRecordsOfActiveProducers``: producer id -> its last
        data batch's last offset (None when its epoch has only markers) and epoch, for
        every producer with an open transaction or not idle past
        ``producer.id.expiration.ms``. The cleaner keeps these batches (KIP-360)."""
        ongoing = self.snapshot()
        return {
            pid: LastRecord(e.batches[-1].last_offset if e.batches else None, e.epoch)
            for pid, e in list(self.entries.items())
            if not expired(e.timestamp, ongoing.get(pid, NO_OFFSET), now)
        }

    # -- transactions --------------------------------------------------------------------
    def on_batch(
        self, header: Header, marker: int | None = None, complete_below: int = 0
    ) -> AbortedTxn | None:
        """Apply one appended transactional batch; ``marker`` is a control batch's type
        (COMMIT or ABORT). Returns the aborted transaction an ABORT marker closes, with
        the partition's last stable offset once it is closed (Kafka's
        ``ProducerStateManager.lastStableOffset(completedTxn)``: the first offset of the
        earliest other open transaction, else the offset after the marker).
        A data batch below ``complete_below`` belongs to a transaction known to be
        complete and opens none (replay after a clean)."""
        h = header
        if not h.is_transactional:
            return None
        with self._lock:
            if not h.is_control:
                if h.last_offset >= complete_below:
                    self.ongoing.setdefault(h.producer_id, h.base_offset)
                return None
            self.markers[h.producer_id] = self.markers.get(h.producer_id, 0) + 1
            first = self.ongoing.pop(h.producer_id, None)
            if first is None or marker != CONTROL_ABORT:
                return None
            lso = min(self.ongoing.values(), default=h.last_offset + 1)
            return AbortedTxn(h.producer_id, first, h.last_offset, lso)

    def markers_of(self, producer_id: int) -> int:
        """:attr:`markers` of one producer: read before a transactional write is
        verified, compared when it is appended."""
        with self._lock:
            return self.markers.get(producer_id, 0)

    def first_unstable_offset(self) -> int | None:
        """The first offset of the earliest open transaction (Kafka's
        ``ProducerStateManager.firstUnstableOffset``), None when none is open."""
        with self._lock:
            return min(self.ongoing.values(), default=None)

    def snapshot(self) -> dict[int, int]:
        """The open transactions: producer id -> first offset."""
        with self._lock:
            return dict(self.ongoing)

    def restore(self, ongoing: dict[int, int]) -> None:
        with self._lock:
            self.ongoing = dict(ongoing)
