"""One partition's log (Kafka's ``UnifiedLog``) on its segments (:mod:`kompakt.log.
local_log`, Kafka's ``LocalLog``: the segment list, roll, flush, read).

``PartitionLog`` coordinates: it checks and stamps produced records with
:mod:`kompakt.log.validator` (``LogValidator``), assigns offsets, owns the producer state
and open transactions (:mod:`kompakt.log.producer_state`) and the aborted ones
(``.txnindex``), deletes the segments :mod:`kompakt.log.retention` picks and swaps in
cleaned segments.
"""

from __future__ import annotations

import bisect
import errno
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kompakt.errors import (
    KafkaStorageError,
    OffsetOutOfRangeError,
    SegmentsChangedError,
)
from kompakt.log import retention, validator
from kompakt.log.checkpoint import fsync_dir
from kompakt.log.clock import Clock
from kompakt.log.config import TopicConfig
from kompakt.log.local_log import LocalLog
from kompakt.log.open_segments import OpenSegments
from kompakt.log.producer_snapshot import (
    ProducerSnapshotFile,
    delete_snapshots_above,
    delete_snapshots_at,
    delete_snapshots_before,
    load_latest,
)
from kompakt.log.producer_state import LastRecord, ProducerStateManager
from kompakt.log.segment import (
    DELETED_SUFFIX,
    SWAP_SUFFIX,
    LogSegment,
)
from kompakt.log.transactions import marker_type, replay_segments
from kompakt.log.txn_index import AbortedTxn, TxnIndexCorruptError
from kompakt.record.decode import RecordBatch
from kompakt.record.header import TRANSACTIONAL_BIT

log = logging.getLogger(__name__)


@dataclass(slots=True)
class AppendInfo:
    first_offset: int
    last_offset: int
    max_timestamp: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int
    record_count: int
    batch_count: int


class PartitionLog(LocalLog):
    """One partition (Kafka's ``UnifiedLog``); every method that reads or changes the
    segment list holds ``lock``."""

    def __init__(
        self,
        directory: Path,
        topic: str,
        partition: int,
        config: TopicConfig,
        *,
        clock: Clock,
        recovery_point: int | None = None,
        needs_recovery: bool = False,
        log_start_offset: int = 0,
        schedule_delete: Callable[..., None] | None = None,
        cleaned_offset: int = 0,
        handles: OpenSegments | None = None,
        offline: str | None = None,
        read_only: bool = False,
    ):
        """``offline`` (the reason) makes the stand-in of a partition whose log dir was
        unusable at start (Kafka's ``loadLogs`` skips such a dir): nothing on disk is
        made or read, it holds no segments, and every use answers KAFKA_STORAGE_ERROR
        (:meth:`check_online`) until a restart finds the dir again.

        ``read_only`` (a dry run) loads and recovers in memory and never writes: no
        folder, index, ``.txnindex`` or snapshot is made, rebuilt or removed on disk,
        and :meth:`close` only closes (:class:`~kompakt.log.loader.LogLoader`)."""
        # Thread ownership: appends (the event loop or its executor), the cleaner thread,
        # retention and the admin thread all use a log; ``lock`` guards every field
        # that changes after construction unless its comment says otherwise.
        self.dir = Path(directory)  # immutable
        self.read_only = read_only  # immutable
        if offline is None and not read_only:
            self.dir.mkdir(parents=True, exist_ok=True)
        self.topic = topic  # immutable
        self.partition = partition  # immutable
        # owned by the LogManager: replaced whole under its lock on a config change and
        # read without one (one attribute read sees the old or the new TopicConfig)
        self.config = config
        self.clock = clock  # immutable
        self.lock = threading.RLock()  # guards the segment list, offsets and producer state
        # set once by the broker before it serves (appended to at start, never after)
        self.append_listeners: list[Callable[[PartitionLog], None]] = []
        self._producers = ProducerStateManager()  # guarded by lock
        self._transactions_loaded = False  # guarded by lock
        self._cleaned_at_open = cleaned_offset  # immutable
        self._schedule_delete = schedule_delete  # immutable
        self.handles = handles
        """The open-segment cap this log's segments count against (None: no cap);
        immutable, and thread-safe (it takes its own lock)."""
        self.segments: list[LogSegment] = []  # guarded by lock
        self._bases: list[int] = []  # guarded by lock: the segments' base offsets
        if offline is None:
            self._load(needs_recovery, recovery_point, cleaned_offset)
            # guarded by lock (the log start and the recovery point, here and below)
            self.log_start_offset = max(log_start_offset, self.segments[0].base_offset)
            if self.log_start_offset > self.log_end_offset:
                self.log_start_offset = self.segments[0].base_offset  # guarded by lock
            self.recovery_point = self.log_end_offset  # guarded by lock
            self.durable_offset = self.recovery_point  # guarded by lock
        else:
            self._transactions_loaded = True  # guarded by lock; nothing to read
            # guarded by lock
            self.log_start_offset = self.recovery_point = log_start_offset
            self.durable_offset = log_start_offset  # guarded by lock
        self.last_flush_ms = clock()  # guarded by lock
        # owned by the cleaner manager: written only under its lock
        # (LogCleanerManager.mark_uncleanable), read as one value by status pages
        self.uncleanable_reason: str | None = None
        # owned by the log dir failure channel: set once when this log's dir went
        # offline (the reason), never cleared; every append then fails
        self.offline: str | None = offline
        # set once by the LogManager when it adopts the log: told of an I/O error in
        # append, roll or flush (Kafka's LogDirFailureChannel), with (log, error, what)
        self.on_io_error: Callable[[PartitionLog, OSError, str], None] | None = None
        # set once by the LogManager when it adopts the log; called (under the log's
        # lock) before batches leave the log (segments leaving its head, a clean's swap),
        # while they can still be read: the idempotent producers' state is built from
        # them first, as Kafka keeps producer state when the log start moves (KIP-360)
        # and builds it at load, before any clean
        self.before_batch_removal: Callable[[PartitionLog], None] | None = None

    # -- loading -------------------------------------------------------------------------
    @property
    def transactions(self) -> ProducerStateManager:
        """The producer state with its open transactions, rebuilt on first use (:meth:`_load_transactions`): a
        start-up of 10,000 partitions does not walk every log's batch headers before the
        broker listens; the first append, last-stable-offset question (a fetch, the
        cleaner), aborted-transaction lookup or segment removal does it for its log."""
        if not self._transactions_loaded:
            with self.lock:
                if not self._transactions_loaded:
                    try:
                        self._load_transactions(self._cleaned_at_open)
                    except OSError as exc:  # a failing disk: the dir goes offline (Kafka)
                        self.io_failed(exc, f"reading {self.name}")
                        raise KafkaStorageError(f"I/O error reading {self.name}: {exc}") from exc
                    self._transactions_loaded = True
        return self._producers

    @property
    def producers(self) -> ProducerStateManager:
        """The producer state with its producers' last batches too (Kafka's
        ``ProducerStateManager``), for whoever keeps it (the broker's idempotence
        checks; call under :attr:`lock`): built on first use (:meth:`_build_producers`);
        from then on every append feeds it and a snapshot of it is written at each roll,
        before head segments go and at close."""
        state = self._build_producers()
        state.keep_snapshots = True
        return state

    def _build_producers(self) -> ProducerStateManager:
        """The producer state, its producers built on first use: from the latest
        readable snapshot at or below the log end (a corrupt one is logged, deleted and
        the next older one tried), then the batches after it (Kafka's
        ``LogLoader.rebuildProducerState``)."""
        state = self.transactions
        if not state.entries_loaded:
            with self.lock:
                if not state.entries_loaded:
                    start, entries = 0, []
                    loaded = load_latest(
                        self.dir, self.log_end_offset, delete_corrupt=not self.read_only
                    )
                    if loaded is not None:
                        start, entries = loaded
                    headers = (b.header for b in self.iter_batches(start))
                    state.load_entries(entries, headers, start, self.clock())
        return state

    def last_records_of_active_producers(self, now: int | None = None) -> dict[int, LastRecord]:
        """Producer id -> last data offset and epoch of each producer still active
        (Kafka's ``UnifiedLog.lastRecordsOfActiveProducers``): what the cleaner must keep
        so the state outlives a clean (KIP-360). Asked of the producer state, not read
        from the segments: its cost does not grow with the log."""
        with self.lock:
            state = self._build_producers()
            return state.last_records_of_active_producers(self.clock() if now is None else now)

    def _load_transactions(self, cleaned: int = 0) -> None:
        """Rebuild the open transactions from the batch headers (Kafka's ``LogLoader``
        rebuilding the ``ProducerStateManager``)
        and repair each ``.txnindex`` from the same walk: rewritten when the loader
        recovered its segment or its tail is torn (as Kafka's ``LogSegment.recover``
        rebuilds it), completed when an abort the batches show is missing (a lost
        file). Entries the cleaner copied for markers whose data it removed are kept:
        the batches can no longer show them.

        ``cleaned`` is the cleaner checkpoint: a transaction with data below it was
        complete when cleaned (the cleaner stops at the LSO), even if the cleaner has
        since removed its marker (Kafka never replays such data: it restarts from
        producer snapshots). So the walk starts at the segment holding it, or at the
        first segment whose index must be rebuilt if that comes earlier: a compacted
        log is read back from its dirty part only."""
        for seg in self.segments:
            try:
                seg.check_txn_index()
            except TxnIndexCorruptError as exc:
                log.warning("%s: %s; rebuilding it", self.name, exc)
                seg.txn_index_stale = True
        first = max(0, bisect.bisect_right(self._bases, cleaned) - 1)
        stale = [i for i, seg in enumerate(self.segments) if seg.txn_index_stale]
        walked = self.segments[min([first, *stale]) :]
        # producer snapshots past a truncated end or below the log start (but the newest)
        # describe batches the log no longer has (Kafka's LogLoader, removeStraySnapshots);
        # done here, on first use but before the first append moves the end past them
        if not self.read_only:
            delete_snapshots_above(self.dir, self.log_end_offset)
            delete_snapshots_before(self.dir, self.log_start_offset)
        self._seed_open_transactions(walked[0].base_offset, cleaned)
        expected = replay_segments(walked, self._producers, cleaned)
        for seg in walked:
            want = expected[seg.base_offset]
            if not want and not seg.txn_index_stale and seg.txn_index_absent:
                continue  # no file, none wanted: nothing to read or write
            idx = seg.txn_index
            if seg.txn_index_stale:
                seg.txn_index_stale = False
                try:
                    have = idx.entries
                except TxnIndexCorruptError:
                    have = []
                if have != want:
                    idx.replace(want)
                continue
            marks = {(e.producer_id, e.last_offset) for e in idx.entries}
            missing = [e for e in want if (e.producer_id, e.last_offset) not in marks]
            if missing:
                log.warning(
                    "%s: %s lacks %d aborted transactions; rebuilding it",
                    self.name,
                    idx.path.name,
                    len(missing),
                )
                idx.replace(sorted(idx.entries + missing, key=lambda e: e.last_offset))

    def _seed_open_transactions(self, walk_from: int, cleaned: int) -> None:
        """Start from the open transactions of the latest producer snapshot whose first
        offset lies before the walk (``walk_from``) (the snapshot's
        ``current_txn_first_offset``s, as Kafka's ``loadProducerEntry`` fills
        ``ongoingTxns``): one whose first batches retention deleted still holds the
        last stable offset back after a restart. The walk finds the others itself.
        Only a snapshot at or past the walk's start and the cleaner checkpoint is used:
        every marker after it is replayed, none removed by the cleaner, and none of a
        seeded producer lies between the walk's start and the snapshot (its transaction
        was open all along)."""
        loaded = load_latest(self.dir, self.log_end_offset, delete_corrupt=not self.read_only)
        if loaded is None or loaded[0] < max(walk_from, cleaned):
            return
        self._producers.restore(
            {
                e.producer_id: e.current_txn_first_offset
                for e in loaded[1]
                if 0 <= e.current_txn_first_offset < walk_from
            }
        )

    # -- offsets -------------------------------------------------------------------------
    @property
    def high_watermark(self) -> int:
        return self.log_end_offset  # single node: everything appended is replicated

    @property
    def last_stable_offset(self) -> int:
        """Kafka's ``UnifiedLog.lastStableOffset``: the first offset of the earliest
        open transaction, else the high watermark; never below the log start offset
        (``maybeIncrementFirstUnstableOffset``)."""
        with self.lock:
            hw = self.high_watermark
            first = self.transactions.first_unstable_offset()
            start = self.log_start_offset
        return hw if first is None else min(max(first, start), hw)

    def collect_aborted_transactions(self, start_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping ``[start_offset, upper_bound)``, from the
        ``.txnindex`` of the segment holding ``start_offset`` and the ones after it until
        an entry's last stable offset reaches ``upper_bound`` (Kafka's
        ``LocalLog.collectAbortedTransactions``)."""
        with self.lock:
            _ = self.transactions  # each .txnindex repaired first
            segments = self.segments[max(0, bisect.bisect_right(self._bases, start_offset) - 1) :]
        out: list[AbortedTxn] = []
        for seg in segments:
            found, complete = seg.collect_aborted(start_offset, upper_bound)
            out += found
            if complete:
                break
        return out

    # -- append --------------------------------------------------------------------------
    def validate(
        self, records: bytes | bytearray | memoryview, now_ms: int | None = None
    ) -> list[RecordBatch]:
        """Kafka's ``LogValidator`` checks; nothing is written when any batch fails."""
        now = self.clock() if now_ms is None else now_ms
        return validator.validate(records, self.config, self.name, now)[0]

    def append(
        self,
        records: bytes | bytearray | memoryview,
        now_ms: int | None = None,
        trusted: bool = False,
    ) -> AppendInfo:
        """Validate, assign offsets and append a produce request's record set
        (:mod:`kompakt.log.validator`), then flush if ``flush.messages`` or
        ``flush.ms`` says so. A ``trusted`` set was built by the broker itself (what
        Kafka appends with ``AppendOrigin.COORDINATOR``: a coordinator's records, a
        transaction marker) and skips the client checks; Kafka's LogValidator still
        runs over those, kompakt made the bytes and has nothing to find."""
        now = self.clock() if now_ms is None else now_ms
        cfg = self.config
        # read in place: the stamp writes new headers beside it, not into a copy
        if trusted:
            batches = validator.batches_of(records, self.name)
            maxes: list[int | None] = [None] * len(batches)
        else:
            batches, maxes = validator.validate(records, cfg, self.name, now)
        buf, batches = validator.to_topic_codec(records, batches, cfg)
        log_append = cfg.message_timestamp_type == "LogAppendTime"
        with self.lock:
            if self.offline is not None:
                self.check_online()
            if not self._transactions_loaded:
                _ = self.transactions  # rebuilt from the log as it was before this append
            first = self.log_end_offset
            stamped = validator.assign_offsets_and_timestamps(
                batches, maxes, first, now, log_append
            )
            try:
                seg = self._maybe_roll(len(buf), stamped.next_offset - 1, first, now)
                seg.append(stamped.pieces, stamped.headers)
                self._update_transactions(seg, buf, stamped.headers)
            except OSError as exc:  # the segment has cut itself back to `before`
                self.io_failed(exc, f"appending to {self.name}")
                raise KafkaStorageError(f"cannot append to {self.name}: {exc.strerror}") from exc
            self._flush_if_due(now, stamped.next_offset)
        for listener in list(self.append_listeners):
            listener(self)
        # in the fields' order: keywords cost the dataclass 0.4 us more, on every append
        return AppendInfo(
            first,  # first_offset
            stamped.next_offset - 1,  # last_offset
            stamped.max_timestamp,
            now if log_append else -1,  # log_append_time
            self.log_start_offset,
            stamped.record_count,
            len(stamped.headers),  # batch_count
        )

    def _update_transactions(
        self, seg: LogSegment, buf: bytes | bytearray | memoryview, headers: list
    ) -> None:
        """Feed the appended batches to the producer state (its producers' batches once
        built, :attr:`producers`); an ABORT marker's transaction goes to the
        ``.txnindex`` of the segment it was appended to (Kafka's ``UnifiedLog.append``:
        ``segment.updateTxnIndex(completedTxn, lastStableOffset)``)."""
        view = memoryview(buf)
        state = self._producers
        for rel_pos, h in headers:
            if state.entries_loaded:
                state.update(h, h.base_offset)
            if not h.attributes & TRANSACTIONAL_BIT:  # the flag without a property's frame
                continue
            marker = marker_type(view[rel_pos : rel_pos + h.size], h) if h.is_control else None
            aborted = self.transactions.on_batch(h, marker)
            if aborted is not None:
                seg.update_txn_index(aborted)

    def _before_roll(self, base: int) -> None:
        self.take_producer_snapshot(base)  # UnifiedLog.roll -> takeSnapshot

    def take_producer_snapshot(self, offset: int | None = None) -> None:
        """Write the producer state as the ``<offset>.snapshot`` (default: the log end),
        once the state is built (:attr:`producers`). The batches below ``offset`` must
        be flushed first: a snapshot past the end recovered after a crash is deleted."""
        if self.read_only or not self._producers.keep_snapshots:
            return
        at = self.log_end_offset if offset is None else offset
        ProducerSnapshotFile(self.dir, at).write(self._producers.snapshot_entries(self.clock()))

    # -- retention -----------------------------------------------------------------------
    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: move the log start offset forward (never back)."""
        with self.lock:
            if offset > self.high_watermark or offset < 0:
                raise OffsetOutOfRangeError(
                    f"cannot delete records before {offset}: high watermark is "
                    f"{self.high_watermark} for {self.name}"
                )
            if offset > self.log_start_offset:
                self.log_start_offset = offset
            self._delete_old_segments(retention.log_start_offset_breached(self.log_start_offset))
            return self.log_start_offset

    def apply_retention(self, now_ms: int | None = None) -> int:
        """Kafka's ``UnifiedLog.deleteOldSegments``: segments below the log start offset,
        then (with ``delete`` in ``cleanup.policy``) those past ``retention.bytes`` and
        those past ``retention.ms``; returns the number of segments deleted.

        Each pass takes a prefix of the log (:meth:`_deletable_segments`), and that
        includes the active segment when it breaches too and is not empty: Kafka then
        rolls a new, empty active segment first, so an idle topic's records expire and
        its log start offset becomes the log end offset.
        """
        now = self.clock() if now_ms is None else now_ms
        with self.lock:
            deleted = self._delete_old_segments(
                retention.log_start_offset_breached(self.log_start_offset)
            )
            # a tiered log's retention.* is the remote log manager's, which deletes local
            # segments only once uploaded (kompakt.broker.tiering, as Kafka's)
            if self.config.delete and not self.config.remote_storage_enable:
                deleted += self._delete_old_segments(
                    retention.retention_size_breached(self.segments, self.config.retention_bytes)
                )
                deleted += self._delete_old_segments(
                    retention.retention_ms_breached(self.config.retention_ms, now), now
                )
            return deleted

    def _delete_old_segments(
        self, predicate: retention.SegmentPredicate | None, now: int | None = None
    ) -> int:
        """Delete the prefix of the log that ``predicate`` picks (None: nothing)."""
        if predicate is None:
            return 0
        doomed = retention.deletable_segments(
            self.segments, predicate, self.high_watermark, self.log_end_offset
        )
        if doomed:
            self._delete_segments(doomed, now)
        return len(doomed)

    def _delete_segments(self, doomed: list[LogSegment], now: int | None = None) -> None:
        """Remove a prefix of the log (Kafka's ``UnifiedLog.deleteSegments``). There is
        always at least one segment: deleting them all rolls a new active one first, at
        the log end offset, which becomes the log start offset."""
        if not doomed:
            return
        _ = self.transactions  # rebuilt while the removed batches still exist
        if self.before_batch_removal is not None:
            self.before_batch_removal(self)
        if self._producers.keep_snapshots:
            # the state built from the doomed batches survives a restart too (KIP-360)
            self.flush()
            self.take_producer_snapshot()
        if len(doomed) == len(self.segments):
            new = self.roll(now=now)
            if doomed[-1] is new:  # an empty active segment stays as the new one
                doomed = doomed[:-1]
                if not doomed:
                    return
        for seg in doomed:
            self._remove(seg)
        self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
        delete_snapshots_before(self.dir, self.log_start_offset)
        paths: list[Path] = []
        for seg in doomed:
            seg.close()
            for p in seg.files():
                if p.exists():
                    target = p.with_name(p.name + DELETED_SUFFIX)
                    os.replace(p, target)
                    paths.append(target)
            log.info("%s: deleted segment %d (%d bytes)", self.name, seg.base_offset, seg.size)
        if self._schedule_delete is not None:
            self._schedule_delete(paths, self.config.file_delete_delay_ms)
        else:
            for p in paths:
                p.unlink(missing_ok=True)

    # -- cleaner swap --------------------------------------------------------------------
    def replace_segments(self, new: LogSegment, old: list[LogSegment]) -> None:
        """Swap a cleaned segment in for ``old`` (Kafka's ``LocalLog.replaceSegments``).

        ``new`` arrives flushed with suffix ``.cleaned``. Order on disk: ``.cleaned`` ->
        ``.swap``; old files -> ``.deleted``; ``.swap`` -> final name; fsync the dir. A crash
        at any step is finished or rolled back by :meth:`LogLoader.complete_swaps` on the
        next open. Old segments stay open for readers until ``file.delete.delay.ms`` has passed.
        The partition lock is held only for the renames.
        """
        with self.lock:
            _ = self.transactions  # rebuilt before the markers the clean removed go
            if self.before_batch_removal is not None:
                # a batch retried after a restart must still be found a duplicate when
                # this clean removes its original (the fault campaign, seed 112526: a
                # clean right after a restart dropped a batch whose answer the kill
                # lost; the state built after it did not know the batch, and the retry
                # was appended again, 7 offsets later)
                self.before_batch_removal(self)
            live = {id(s) for s in self.segments}
            if not old or any(id(s) not in live for s in old):
                raise SegmentsChangedError(
                    f"{self.name}: segments changed during the clean (retention or "
                    "DeleteRecords removed some); the clean is abandoned"
                )
            new.change_suffix(SWAP_SUFFIX)
            fsync_dir(self.dir)
            for seg in old:
                self._remove(seg)
            self._add(new)
            deleted: list[Path] = []
            for seg in old:
                seg.change_suffix(DELETED_SUFFIX)
                deleted += seg.files()
            new.handles = self.handles  # made by an engine: counts against the cap now
            new.change_suffix("")
            fsync_dir(self.dir)
            # the snapshots of merged-away segments go (Kafka's UnifiedLog.replaceSegments
            # -> deleteProducerSnapshots): one a segment, plus the newest, as after a roll
            delete_snapshots_at(
                self.dir, [s.base_offset for s in old if s.base_offset != new.base_offset]
            )

        def close_old() -> None:
            for seg in old:
                seg.close()

        if self._schedule_delete is not None:
            self._schedule_delete(deleted, self.config.file_delete_delay_ms, close_old)
        else:
            close_old()
            for p in deleted:
                p.unlink(missing_ok=True)

    # -- lifecycle -----------------------------------------------------------------------
    def close(self) -> None:
        """Flush and close every segment, then write the producer-state snapshot at the
        log end (Kafka's ``UnifiedLog.close``: a clean shutdown's snapshot saves the
        replay at the next start), if the state is kept (:attr:`producers`)."""
        with self.lock:
            if self.read_only:
                for seg in self.segments:
                    seg.close()
                return
            if self.offline is None:
                try:  # a crash before the flush below: the loader deletes it (past the end)
                    self.take_producer_snapshot()
                except (OSError, KafkaStorageError) as exc:  # costs only a replay at start
                    log.warning("%s: cannot write the producer snapshot: %s", self.name, exc)
            for seg in self.segments:
                try:
                    seg.trim_to_size()  # before the fsync, which then covers the cut
                    seg.flush()
                    seg.trim_indexes()
                except OSError as exc:
                    if exc.errno != errno.EBADF:
                        raise
                seg.close()

    def __repr__(self) -> str:
        return (
            f"PartitionLog({self.name}, start={self.log_start_offset}, "
            f"end={self.log_end_offset}, segments={len(self.segments)})"
        )
