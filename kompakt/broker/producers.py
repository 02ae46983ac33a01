"""Idempotent-producer state: producer ids and per-partition sequence checks.

Follows Kafka's ``ProducerStateManager``/``ProducerAppendInfo`` for non-transactional
idempotent producers:

- InitProducerId without a transactional id always hands out a fresh producer id with
  epoch 0 (Kafka does the same; librdkafka's epoch bump after a fatal sequence error is
  thereby a new id).
- For each partition and producer id the metadata of the last 5 appended batches is kept.
  A batch whose (epoch, first seq, last seq) equals one of them is a retried duplicate:
  it is not appended again and the original base offset is returned (DUPLICATE_SEQUENCE
  handled as success, like Kafka).
- An older epoch than the last seen is INVALID_PRODUCER_EPOCH; a newer epoch must
  start at sequence 0; otherwise the first sequence must follow the last one (wrapping at
  Int32.MAX) or the batch is OUT_OF_ORDER_SEQUENCE_NUMBER.
- State is kept in memory and built lazily, per partition, the first time an idempotent
  producer writes to it after start (or retention is about to delete its head): from the
  latest producer snapshot at or below the log end (:mod:`kompakt.log.producer_snapshot`,
  Kafka's ``<offset>.snapshot`` files), then the producer fields of the batches after it.
  Once built, the log writes a snapshot at each roll, before head segments go and at a
  clean shutdown, so the state outlives the batches it was built from (KIP-360). A
  snapshot holds an entry for each of a producer's last 5 batches, oldest first (Kafka
  writes only the last; its reader keeps the last entry of a producer id, so it reads
  our files as its own): after a restart a retry of any of them is still a duplicate,
  where Kafka answers OUT_OF_ORDER_SEQUENCE_NUMBER for all but the last (with segments
  small enough to roll between two in-flight batches, an idempotent client that resets
  its producer id on that answer, as librdkafka does, would send the earlier batch
  again as a new one).
  Producers idle for ``producer.id.expiration.ms`` are neither written nor loaded.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from kompakt.cleaner.transactions import PRODUCER_ID_EXPIRATION_MS
from kompakt.errors import KompaktError
from kompakt.log.partition_log import PartitionLog
from kompakt.log.producer_snapshot import NO_OFFSET, SnapshotEntry, load_latest
from kompakt.record.header import NO_PRODUCER_ID, Header

NUM_BATCHES_TO_RETAIN = 5
INT32_MAX = 2**31 - 1


# RecordBatch.NO_PRODUCER_EPOCH: no epoch (InitProducerId's answer when it fails).
NO_PRODUCER_EPOCH = -1


class OutOfOrderSequenceError(KompaktError, code="out_of_order_sequence_number"):
    """A batch's first sequence does not follow the producer's last one."""


class InvalidProducerEpochError(KompaktError, code="invalid_producer_epoch"):
    """A batch from an epoch older than the producer's last."""


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


class PartitionProducers:
    def __init__(self) -> None:
        self.entries: dict[int, ProducerEntry] = {}

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
        e = self.entries.get(pid)
        if e is None or h.producer_epoch != e.epoch:
            e = ProducerEntry(h.producer_epoch)
            self.entries[pid] = e
        e.batches.append(
            BatchMeta(
                h.base_sequence,
                _last_seq(h),
                first_offset,
                first_offset + h.last_offset_delta,
                h.max_timestamp,
            )
        )
        e.timestamp = h.max_timestamp

    def load(self, entry: SnapshotEntry) -> None:
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

    def snapshot(self, ongoing: dict[int, int], now: int) -> list[SnapshotEntry]:
        """The entries of a snapshot (Kafka's ``writeSnapshot``): an entry for each
        batch a producer's state retains, oldest first (its last batch last: the one
        Kafka's reader keeps), with the first offset of its open transaction
        (``ongoing``, from the log's transaction tracker); a producer idle past
        ``producer.id.expiration.ms`` without an open transaction is left out (Kafka's
        ``isProducerExpired``)."""
        out = []
        for pid, e in list(self.entries.items()):
            txn = ongoing.get(pid, NO_OFFSET)
            if _expired(e.timestamp, txn, now):
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


def _expired(timestamp: int, txn_first_offset: int, now: int) -> bool:
    return txn_first_offset < 0 and now - timestamp >= PRODUCER_ID_EXPIRATION_MS


PRODUCER_ID_BLOCK_SIZE = 1000
"""Ids reserved on disk at a time (Kafka's ``ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE``)."""

PRODUCER_ID_BLOCK_FILE = "kompakt-producer-id-block"
"""In the data dir: the end of the last reserved block of producer ids."""


class ProducerStateManager:
    """Producer ids and each partition's idempotence state.

    With a ``data_dir``, ids are handed out from blocks reserved on disk before use, as
    Kafka's ``ProducerIdManager`` reserves ``ProducerIdsBlock``s through the controller:
    an id is never handed out twice, across restarts too, even if the clock went back.
    A transactional id keeps its producer id in ``__transaction_state``; a restarted
    broker handing it to another producer would let the two fence each other."""

    def __init__(self, data_dir: str | os.PathLike[str] | None = None) -> None:
        self._block_path = Path(data_dir) / PRODUCER_ID_BLOCK_FILE if data_dir else None
        start = int(time.time() * 1000) * 1000
        if self._block_path is not None:
            start = max(start, _read_block_end(self._block_path))
        self._next = start
        self._block_end = start if self._block_path is not None else None
        self._lock = threading.Lock()
        self._partitions: dict[int, tuple[PartitionLog, PartitionProducers]] = {}

    def new_producer_id(self) -> int:
        with self._lock:
            if self._block_end is not None and self._next >= self._block_end:
                self._reserve(self._next + PRODUCER_ID_BLOCK_SIZE)
            pid = self._next
            self._next += 1
            return pid

    def ensure_above(self, producer_id: int) -> None:
        """Never hand out ``producer_id`` or a smaller one (ids loaded from
        ``__transaction_state`` at start)."""
        with self._lock:
            self._next = max(self._next, producer_id + 1)

    def _reserve(self, end: int) -> None:
        """Write the new block end, fsynced, before any id of it is used."""
        assert self._block_path is not None
        tmp = self._block_path.with_name(self._block_path.name + ".tmp")
        with open(tmp, "w") as f:
            f.write(f"{end}\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._block_path)
        self._block_end = end

    def for_log(self, plog: PartitionLog) -> PartitionProducers:
        """The partition's state, built on first use (call under plog.lock): from the
        latest snapshot at or below the log end, if one is readable (a corrupt one is
        logged, deleted and the next older one tried), then the batches after it (Kafka's
        ``LogLoader.rebuildProducerState``). From then on the log writes snapshots of it."""
        key = id(plog)
        with self._lock:
            found = self._partitions.get(key)
            if found is not None and found[0] is plog:
                return found[1]
        state = PartitionProducers()
        start = 0
        loaded = load_latest(plog.dir, plog.log_end_offset)
        if loaded is not None:
            start, entries = loaded
            now = plog.clock()
            for entry in entries:
                if not _expired(entry.timestamp, entry.current_txn_first_offset, now):
                    state.load(entry)
        for b in plog.iter_batches(start):
            h = b.header
            if h.producer_id > NO_PRODUCER_ID and h.base_offset >= start:
                state.update(h, h.base_offset)
        with self._lock:
            self._partitions[key] = (plog, state)
        plog.producer_state = self._snapshot_entries
        return state

    def _snapshot_entries(self, plog: PartitionLog) -> list[SnapshotEntry] | None:
        with self._lock:
            found = self._partitions.get(id(plog))
        if found is None or found[0] is not plog:
            return None
        return found[1].snapshot(plog.transactions.snapshot(), plog.clock())

    def forget(self, plog: PartitionLog) -> None:
        with self._lock:
            self._partitions.pop(id(plog), None)
        plog.producer_state = None


def _read_block_end(path: Path) -> int:
    """The reserved block end written by :meth:`ProducerStateManager._reserve`; 0 if
    none was written yet."""
    try:
        return int(path.read_text().strip())
    except FileNotFoundError:
        return 0
