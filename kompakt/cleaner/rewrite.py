"""Rewrite one group of segments into one cleaned segment (Kafka ``cleanSegments``).

This is the part both engines run: the in-process engine in the cleaner thread, the
Spark engine in one task per group. Records are decided in bulk by :mod:`rule`; Python
touches each *batch* once. A batch with nothing dropped and no horizon to stamp is
copied byte for byte; otherwise it is rebuilt like Kafka's ``buildRetainedRecordsInto``:
same base offset, original ``lastOffset``, codec, producer fields, flags and leader
epoch, retained records re-encoded by a numba kernel that only rewrites each record's
timestamp delta.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from kompakt.cleaner import rule
from kompakt.cleaner.transactions import ProducerSummary, TxnTracker, control_type_of
from kompakt.log.txn_index import AbortedTxn
from kompakt.record import codecs
from kompakt.record.decode import RecordBatch
from kompakt.record.encode import assemble_batch, build_batch_like, build_empty_batch
from kompakt.record.header import (
    CONTROL_BIT,
    DELETE_HORIZON_BIT,
    HEADER_SIZE,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    Header,
    read_header,
)
from kompakt.record.kernel import LAYOUT, copy_retained, locate_records
from kompakt.record.scan import HELD, RecordScan, scan_records
from kompakt.record.stream_scan import retained_records
from kompakt.record.varint import MAX_VARINT_BYTES

LatestLookup = Callable[[RecordScan], np.ndarray]
IoReport = Callable[[int], object]  # bytes read or written, to the I/O throttle
FLUSH_BYTES = 4 << 20
# how often a rewrite reports the bytes it has read to the throttle (Kafka's cleaner
# reports each read buffer: log.cleaner.io.buffer.size, 512 KiB)
IO_REPORT_BYTES = 512 << 10


@dataclass(frozen=True)
class RoundContext:
    """Everything a group clean needs besides its segments; picklable for Spark."""

    map_latest_offset: int  # records past it are kept (partial clean)
    upper_bound: int  # first uncleanable offset of this round
    now: int
    delete_retention_ms: int
    producers: ProducerSummary


@dataclass
class GroupStats:
    records_read: int = 0
    bytes_read: int = 0
    records_written: int = 0
    bytes_written: int = 0
    batches_read: int = 0
    batches_written: int = 0
    batches_copied: int = 0
    tombstones_removed: int = 0
    unkeyed_removed: int = 0

    def add(self, other: GroupStats) -> None:
        for k, v in asdict(other).items():
            setattr(self, k, getattr(self, k) + v)


class Sink:
    """Where cleaned batches go: ``append(data, [(relative position, header)])``, and
    the aborted transactions of the ABORT markers kept (``update_txn_index``; a
    :class:`~kompakt.log.segment.LogSegment` writes them to its ``.txnindex``)."""

    def append(self, data: bytes | memoryview, headers: list[tuple[int, Header]]) -> None:
        pass

    def update_txn_index(self, txn: AbortedTxn) -> None:
        pass


def rebuild_batch(
    batch: RecordBatch,
    keep: np.ndarray,
    timestamps: np.ndarray,
    horizon: int | None,
) -> bytes:
    """Kafka's ``buildRetainedRecordsInto`` for one batch and a keep mask of its records."""
    h = batch.header
    if h.is_control:
        recs = [r for r, k in zip(batch.records(), keep, strict=True) if k]
        return build_batch_like(h, recs, delete_horizon=horizon)
    raw = batch.buffer[HEADER_SIZE:]
    payload = codecs.decompress_bounded(h.compression, raw, HELD) if h.compression else raw
    kept_ts = timestamps[keep]
    base_ts = horizon if horizon is not None else int(kept_ts[0])
    if payload is None:  # expands past what a scan holds: re-encoded a chunk at a time
        kept = retained_records(batch, keep, timestamps, base_ts)
        body = b"".join(codecs.compress_chunks(h.compression, kept))
    else:
        src = np.frombuffer(payload, np.uint8)
        out = np.empty(len(src) + MAX_VARINT_BYTES * h.record_count, np.uint8)
        loc = locate_records(src, [0], [len(src)], [batch], [0], LAYOUT)
        n = copy_retained(
            src, loc.body_pos, loc.tail_pos, loc.rec_end, keep, timestamps, base_ts, out
        )
        body = out[:n].tobytes()
        if h.compression:
            body = codecs.compress(h.compression, body)
    log_append = bool(h.attributes & TIMESTAMP_TYPE_BIT)
    max_ts = h.max_timestamp if log_append else int(kept_ts.max())
    attributes = h.attributes | (DELETE_HORIZON_BIT if horizon is not None else 0)
    return assemble_batch(
        h.base_offset,
        h.partition_leader_epoch,
        attributes,
        h.last_offset_delta,
        base_ts,
        max_ts,
        h.producer_id,
        h.producer_epoch,
        h.base_sequence,
        int(keep.sum()),
        body,
    )


@dataclass
class SegmentPlan:
    """One source segment's bytes with the survive/discard rule applied to its records
    (vectorised): what :func:`decide_batch` and :func:`clean_segment` work from."""

    buf: np.ndarray
    scan: RecordScan
    headers: list[Header]
    horizon: np.ndarray  # per batch: its delete horizon (KIP-534), -1 if none
    latest: np.ndarray  # per record: its key's latest offset in the key map (-1: absent)
    keep: np.ndarray  # per record: Kafka's shouldRetainRecord
    row_start: np.ndarray  # per batch: its first record's row (and one past the last)
    kept_per_batch: np.ndarray
    tomb_per_batch: np.ndarray


def plan_segment(
    data: bytes | memoryview | np.ndarray, lookup: LatestLookup, ctx: RoundContext
) -> SegmentPlan:
    """Scan a segment (CRCs checked) and decide each record by the key map."""
    buf = np.frombuffer(data, np.uint8) if not isinstance(data, np.ndarray) else data
    view = memoryview(buf)
    scan = scan_records(buf, 0, len(buf), verify_crc=True)
    nb = len(scan.batch_position)
    headers = [read_header(view, int(p)) for p in scan.batch_position]
    horizon = np.array(
        [h.base_timestamp if h.attributes & DELETE_HORIZON_BIT else -1 for h in headers],
        np.int64,
    )
    latest = lookup(scan) if len(scan) else np.empty(0, np.int64)
    keep = rule.retain_records(
        scan.offset,
        latest,
        scan.key_null,
        scan.value_null,
        horizon[scan.batch_index],
        map_latest_offset=ctx.map_latest_offset,
        now=ctx.now,
    )
    return SegmentPlan(
        buf,
        scan,
        headers,
        horizon,
        latest,
        keep,
        np.searchsorted(scan.batch_index, np.arange(nb + 1)),
        np.bincount(scan.batch_index[keep], minlength=nb),
        np.bincount(scan.batch_index[keep & scan.value_null], minlength=nb),
    )


@dataclass(frozen=True)
class BatchDecision:
    """What a clean does with one batch (Kafka ``MemoryRecords.filterTo`` per batch)."""

    is_control: bool
    can_discard: bool  # CleanedTransactionMetadata's verdict (aborted data, idle marker)
    discard: bool  # every record of the batch goes
    retention: rule.BatchRetention
    kept: int  # records kept
    need_horizon: bool  # the clean stamps now + delete.retention.ms on it


def decide_batch(
    plan: SegmentPlan, b: int, ctx: RoundContext, txn: TxnTracker, sink: Sink | None
) -> BatchDecision:
    """Batch ``b`` of ``plan`` through the clean's transaction pass ``txn`` (batches in
    log order) and Kafka's ``checkBatchRetention``; a kept ABORT marker's entry goes to
    ``sink``'s ``.txnindex``."""
    h = plan.headers[b]
    is_control = bool(h.attributes & CONTROL_BIT)
    if is_control:
        pos = int(plan.scan.batch_position[b])
        view = memoryview(plan.buf)
        ctype = control_type_of(view[pos : pos + h.size]) if h.record_count else None
        can_discard = txn.on_control_batch(h.producer_id, h.last_offset, ctype)
        if txn.retained_aborts:
            # Kafka's CleanedTransactionMetadata.onControlBatchRead: a kept ABORT
            # marker's AbortedTxn is appended to the cleaned segment's index
            for aborted in txn.retained_aborts:
                if sink is not None:
                    sink.update_txn_index(aborted)
            txn.retained_aborts.clear()
        discard = rule.control_batch_discardable(can_discard, int(plan.horizon[b]), ctx.now)
    else:
        can_discard = txn.on_batch(
            h.producer_id, h.last_offset, bool(h.attributes & TRANSACTIONAL_BIT)
        )
        discard = can_discard
    retention = rule.batch_retention(
        is_last_of_producer=ctx.producers.is_last_of_producer(
            h.producer_id, h.last_offset, is_control, h.producer_epoch
        ),
        ends_cleaning_round=h.last_offset + 1 == ctx.upper_bound,
        discard_records=discard,
    )
    if discard:
        kept = 0
    elif is_control:
        kept = h.record_count
    else:
        kept = int(plan.kept_per_batch[b])
    need_horizon = kept > 0 and rule.needs_delete_horizon(
        has_horizon=plan.horizon[b] >= 0,
        retained_tombstone=not is_control and plan.tomb_per_batch[b] > 0,
        discardable_marker=is_control and can_discard,
    )
    return BatchDecision(is_control, can_discard, discard, retention, kept, need_horizon)


def clean_segment(
    data: bytes | memoryview | np.ndarray,
    lookup: LatestLookup,
    ctx: RoundContext,
    txn: TxnTracker,
    sink: Sink | None,
    stats: GroupStats,
    io: IoReport | None = None,
) -> None:
    """Clean one source segment's bytes into ``sink`` (None: dry run, count only).
    ``io`` is told the bytes read (every :data:`IO_REPORT_BYTES`) and written (every
    flush), as Kafka's ``cleanInto`` reports both to its throttler."""
    plan = plan_segment(data, lookup, ctx)
    if not plan.headers:
        return
    scan, keep, latest = plan.scan, plan.keep, plan.latest
    view = memoryview(plan.buf)

    out = bytearray()
    out_headers: list[tuple[int, Header]] = []

    def emit(chunk: bytes | memoryview, h: Header) -> None:
        out_headers.append((len(out), h))
        out.extend(chunk)
        stats.batches_written += 1
        stats.bytes_written += len(chunk)
        stats.records_written += h.record_count
        if sink is not None and len(out) >= FLUSH_BYTES:
            flush()

    def flush() -> None:
        if sink is not None and out:
            sink.append(bytes(out), list(out_headers))
            if io is not None:
                io(len(out))
        out.clear()
        out_headers.clear()

    unreported = 0
    for b, h in enumerate(plan.headers):
        pos = int(scan.batch_position[b])
        size = h.size
        if io is not None:
            unreported += size
            if unreported >= IO_REPORT_BYTES:
                io(unreported)
                unreported = 0
        stats.batches_read += 1
        stats.bytes_read += size
        stats.records_read += h.record_count
        d = decide_batch(plan, b, ctx, txn, sink)
        r0, r1 = int(plan.row_start[b]), int(plan.row_start[b + 1])
        if not d.is_control:
            dropped = np.ones(r1 - r0, bool) if d.discard else ~keep[r0:r1]
            # a tombstone counts as removed when it was its key's latest record (the
            # delete itself is finished), not when a later record superseded it
            expired = dropped & scan.value_null[r0:r1] & (scan.offset[r0:r1] >= latest[r0:r1])
            stats.tombstones_removed += int(expired.sum())
            stats.unkeyed_removed += int((dropped & scan.key_null[r0:r1]).sum())
        if d.retention is rule.BatchRetention.DELETE:
            continue
        if d.kept:
            if d.kept == h.record_count and not d.need_horizon:
                emit(view[pos : pos + size], h)
                stats.batches_copied += 1
                continue
            new_horizon = (
                ctx.now + ctx.delete_retention_ms
                if d.need_horizon
                else (int(plan.horizon[b]) if plan.horizon[b] >= 0 else None)
            )
            batch = RecordBatch(h, view[pos : pos + size], pos)
            if d.is_control:
                mask = np.ones(h.record_count, bool)
                ts = np.zeros(h.record_count, np.int64)
            else:
                mask = keep[r0:r1]
                ts = scan.timestamp[r0:r1]
            rebuilt = rebuild_batch(batch, mask, ts, new_horizon)
            emit(rebuilt, read_header(rebuilt))
        elif d.retention is rule.BatchRetention.RETAIN_EMPTY:
            empty = build_empty_batch(h)
            emit(empty, read_header(empty))
    flush()
    if io is not None and unreported:
        io(unreported)


def clean_group(
    sources: Sequence[bytes | memoryview | np.ndarray],
    lookup: LatestLookup,
    ctx: RoundContext,
    sink: Sink | None,
    txn: TxnTracker,
    check_done: Callable[[], None] | None = None,
    io: IoReport | None = None,
) -> GroupStats:
    """Clean a group's source segments (in offset order) into one sink.

    ``txn`` is the clean's one transaction pass (Kafka's ``CleanedTransactionMetadata``,
    one per ``doClean``, fed by every group in order): it goes on from the groups before
    and on to the next. A fresh tracker per group forgot that a COMMIT marker starting
    the group closes data read before it, let the marker go and, once the producer
    aborted a later transaction, lost the committed record. ``check_done`` is polled
    before each segment and raises to stop the clean (Kafka's ``Cleaner.checkDone``)."""
    stats = GroupStats()
    for data in sources:
        if check_done is not None:
            check_done()
        clean_segment(data, lookup, ctx, txn, sink, stats, io)
    return stats
