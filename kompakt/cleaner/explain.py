"""What the next clean does to one key: the engine's own code as a dry run.

The console's key inspector asks "which records of this key does the next clean
remove, and why?". The answer must be the cleaner's, not a second copy of its rules, so
:func:`explain_key` runs the local engine's steps on the log as a "compact now" at
``now`` would, with a key filter and writing nothing:

- the dirty range is :meth:`LogCleanerManager.log_to_clean`'s rule
  (:func:`kompakt.cleaner.cleanable.log_to_clean`, Kafka's ``cleanableOffsets``);
- the key map is :meth:`LocalEngine.build_offset_map` fed only the key's records
  (Kafka's ``buildOffsetMap``: what feeds it, where its range ends);
- the rewrite is :func:`kompakt.cleaner.rewrite.plan_segment` and
  :func:`~kompakt.cleaner.rewrite.decide_batch` (Kafka's ``shouldRetainRecord``,
  ``CleanedTransactionMetadata`` and ``checkBatchRetention``) through one transaction
  pass from the log start to the map's end, as the rewrite makes it.

A segment holding none of the key's records only advances the transaction pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from kompakt.cleaner import cleanable
from kompakt.cleaner.cleanable import LogToClean
from kompakt.cleaner.engine import CleanJob
from kompakt.cleaner.local_engine import LocalEngine, key_rows, rewrite_tracker
from kompakt.cleaner.offset_map import BYTES_PER_ENTRY
from kompakt.cleaner.rewrite import decide_batch, plan_segment
from kompakt.cleaner.segment_io import segment_buffer, summarize_producers
from kompakt.cleaner.transactions import ProducerSummary
from kompakt.errors import SegmentsChangedError
from kompakt.log.partition_log import PartitionLog
from kompakt.log.segment import LogSegment
from kompakt.record.scan import payload_expansion, scan_records

EXPANSION_BUDGET = 2 << 30
"""Decompressed bytes one dry run reads: a segment scan holds at most
:data:`kompakt.record.scan.HELD` of them at once, so this bounds the time a look takes
(a few KiB of zstd may expand to GiB), not its memory."""

# why a record is kept or removed by the next clean
PAST_RANGE = "past_range"  # kept: at or past the key map's end (not rewritten)
NOT_DUE = "not_due"  # kept: no clean is due (not compacted, or nothing cleanable)
ABORTED = "aborted"  # removed: data of an aborted transaction
SUPERSEDED = "superseded"  # removed: a later record of the key is in the map
HORIZON_PASSED = "horizon_passed"  # removed: a tombstone past its delete horizon
LATEST = "latest"  # kept: the latest record of its key
TOMBSTONE_KEPT = "tombstone_kept"  # kept: a tombstone before its delete horizon


@dataclass
class Verdict:
    """The next clean's decision on one record of the key."""

    offset: int
    segment: int  # base offset of the segment holding it
    batch_position: int  # byte position of its batch in that segment
    removed: bool
    reason: str
    latest: int = -1  # the key's latest offset in the key map (-1: not in it)
    stamps_horizon: bool = False  # the clean sets now + delete.retention.ms on its batch


@dataclass
class KeyExplanation:
    """The dry run's answer for one key of one log."""

    compacted: bool
    first_dirty_offset: int | None = None
    first_uncleanable_offset: int | None = None
    map_end_offset: int | None = None  # the next clean rewrites offsets below this
    eligible: bool = False  # "compact now" would clean (force)
    due: bool = False  # the background cleaner would (Kafka's eligibility)
    cleanable_ratio: float = 0.0
    dirty_records: int = 0
    verdicts: list[Verdict] = field(default_factory=list)
    bytes_scanned: int = 0
    bytes_expanded: int = 0  # what the compressed batches read expand to
    complete: bool = True  # False: the log was larger than a budget
    expansion_spent: bool = False  # the expansion budget, not the byte budget, stopped it
    read_until: int | None = None  # base offset of the first segment not read


def _never_aborted() -> None:
    return None


def explain_key(
    plog: PartitionLog,
    key: bytes,
    checkpoint: int | None,
    now: int,
    *,
    max_scan_bytes: int,
    max_expanded_bytes: int = EXPANSION_BUDGET,
) -> KeyExplanation:
    """Every record of ``key`` in ``plog`` with the next clean's verdict (see the module
    doc); ``checkpoint`` is the partition's cleaner checkpoint. At most
    ``max_scan_bytes`` of the log are read, and its compressed batches expand to at
    most ``max_expanded_bytes``; the segments past either are left out and the map is
    fed only from those read (``complete`` is then False)."""
    planned = plog.segments_snapshot()  # one snapshot: what a clean now would plan
    out = KeyExplanation(plog.config.compact)
    try:
        readable = _readable(planned, max_scan_bytes, max_expanded_bytes, out)
        if plog.config.compact:
            _dry_run(plog, key, checkpoint, now, planned, readable, out)
        else:
            _list_only(key, readable, out)
    except OSError as exc:  # a segment replaced by a clean or removed by retention
        raise SegmentsChangedError(
            f"the log changed while it was read ({exc.strerror or exc}): try again"
        ) from None
    out.verdicts.sort(key=lambda v: v.offset)
    return out


def _readable(
    planned: list[LogSegment], max_bytes: int, max_expanded: int, out: KeyExplanation
) -> list[LogSegment]:
    """The segments from the log start that fit both budgets; each segment's expansion
    is counted, streaming, before it is read (see :data:`EXPANSION_BUDGET`)."""
    readable: list[LogSegment] = []
    segments = [s for s in planned if s.size]
    for seg in segments:
        if out.bytes_scanned + seg.size > max_bytes:
            break
        left = max_expanded - out.bytes_expanded
        grown = payload_expansion(segment_buffer(seg.log_path, seg.size), left)
        if grown > left:
            out.expansion_spent = True
            break
        readable.append(seg)
        out.bytes_scanned += seg.size
        out.bytes_expanded += grown
    if len(readable) < len(segments):
        out.complete, out.read_until = False, segments[len(readable)].base_offset
    return readable


def _dry_run(
    plog: PartitionLog,
    key: bytes,
    checkpoint: int | None,
    now: int,
    planned: list[LogSegment],
    readable: list[LogSegment],
    out: KeyExplanation,
) -> None:
    ltc = cleanable.log_to_clean(plog, checkpoint, now)
    out.first_dirty_offset = ltc.first_dirty_offset
    out.first_uncleanable_offset = ltc.first_uncleanable_offset
    out.cleanable_ratio = ltc.cleanable_ratio
    out.eligible = cleanable.is_eligible(ltc, force=True)
    out.due = cleanable.is_eligible(ltc)
    if not out.eligible:
        _list_only(key, readable, out)
        return
    producers = summarize_producers(plog, planned, now)
    if out.read_until is not None:  # the map sees only what was read (the old budget)
        end = max(ltc.first_dirty_offset, min(ltc.first_uncleanable_offset, out.read_until))
        ltc = replace(ltc, first_uncleanable_offset=end)
    dirty_segs = cleanable.segments_between(
        planned, ltc.first_dirty_offset, ltc.first_uncleanable_offset
    )
    out.dirty_records = sum(producers.segment_records.get(s.base_offset, 0) for s in dirty_segs)
    engine = LocalEngine(dedupe_buffer_size=16 * BYTES_PER_ENTRY)
    dirty = engine.build_offset_map(ltc, producers, only_key=key)
    out.map_end_offset = dirty.end_offset
    job = _job(ltc, planned, plog, producers, now)
    rewritten = {id(s) for s in job.to_clean(dirty.end_offset)}
    ctx = job.round_context(dirty.end_offset)
    txn = rewrite_tracker(producers, job.to_clean(dirty.end_offset))
    for seg in readable:
        buf = segment_buffer(seg.log_path, seg.size)
        scan = scan_records(buf, verify_crc=False)
        rows = np.flatnonzero(key_rows(scan, key))
        if id(seg) not in rewritten:
            out.verdicts += [_kept(scan, r, seg, PAST_RANGE) for r in rows]
            continue
        if not len(rows):
            txn.read_scan(scan, buf)  # the pass goes on through this segment
            continue
        plan = plan_segment(buf, dirty.lookup, ctx)
        wanted = set(int(plan.scan.batch_index[r]) for r in rows)
        for b in range(len(plan.headers)):
            d = decide_batch(plan, b, ctx, txn, None)
            if b not in wanted:
                continue
            for r in rows[plan.scan.batch_index[rows] == b]:
                v = Verdict(
                    int(plan.scan.offset[r]),
                    seg.base_offset,
                    int(plan.scan.batch_position[b]),
                    removed=d.discard or not bool(plan.keep[r]),
                    reason="",
                    latest=int(plan.latest[r]),
                )
                tomb = bool(plan.scan.value_null[r])
                if d.discard:
                    v.reason = ABORTED
                elif v.removed:
                    later = v.latest > v.offset
                    v.reason = SUPERSEDED if later else HORIZON_PASSED
                elif tomb:
                    v.reason, v.stamps_horizon = TOMBSTONE_KEPT, d.need_horizon
                else:
                    v.reason = LATEST
                out.verdicts.append(v)


def _job(
    ltc: LogToClean,
    planned: list[LogSegment],
    plog: PartitionLog,
    producers: ProducerSummary,
    now: int,
) -> CleanJob:
    """The :class:`CleanJob` a dry run of "compact now" would hand the engine."""
    return CleanJob(ltc, planned, plog.log_start_offset, producers, now, True, _never_aborted)


def _list_only(key: bytes, readable: list[LogSegment], out: KeyExplanation) -> None:
    """No clean is due: every record of the key is kept."""
    for seg in readable:
        buf = segment_buffer(seg.log_path, seg.size)
        scan = scan_records(buf, verify_crc=False)
        out.verdicts += [_kept(scan, r, seg, NOT_DUE) for r in np.flatnonzero(key_rows(scan, key))]


def _kept(scan, row: int, seg: LogSegment, reason: str) -> Verdict:
    b = int(scan.batch_index[row])
    return Verdict(
        int(scan.offset[row]),
        seg.base_offset,
        int(scan.batch_position[b]),
        removed=False,
        reason=reason,
    )
