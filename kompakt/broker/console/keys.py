"""The key inspector page's data: what the next clean does to one key.

The verdicts are the cleaner's own: :func:`kompakt.cleaner.explain.explain_key` runs
the local engine's key map and the rewrite's record and transaction decisions as a dry
run with a key filter; this module reads each record's value and headers and says why
in words, with the delete horizon (KIP-534) of each tombstone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kompakt.broker.console.browse import (
    KEY_SCAN_BYTES,
    BrowseInputError,
    duration,
    header_pairs,
    iso,
    render_bytes,
)
from kompakt.cleaner import explain
from kompakt.errors import SegmentsChangedError
from kompakt.log.partition_log import PartitionLog
from kompakt.record.decode import iter_batches
from kompakt.record.preview import Allowance, preview_records


@dataclass
class KeyRecord:
    offset: int
    timestamp: int
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    segment: int  # base offset of the segment holding it
    removed: bool = False
    why: str = ""
    delete_horizon_ms: int | None = None  # set on the batch (KIP-534)
    horizon_note: str = ""

    @property
    def tombstone(self) -> bool:
        return self.value is None

    def to_json(self) -> dict[str, Any]:
        return {
            "offset": self.offset,
            "timestamp": self.timestamp,
            "value": render_bytes(self.value),
            "tombstone": self.tombstone,
            "headers": header_pairs(self.headers),
            "segment": self.segment,
            "removed_by_next_clean": self.removed,
            "why": self.why,
            "delete_horizon_ms": self.delete_horizon_ms,
            "horizon_note": self.horizon_note,
        }


@dataclass
class KeyReport:
    topic: str
    partition: int
    key: bytes
    now: int
    compacted: bool
    delete_retention_ms: int
    first_dirty_offset: int | None = None
    first_uncleanable_offset: int | None = None
    map_end_offset: int | None = None  # the next clean rewrites offsets below this
    records: list[KeyRecord] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    bytes_scanned: int = 0
    complete: bool = True
    where: str = ""  # which partition was read and why (kompakt.broker.console.key_find)

    @property
    def removed(self) -> int:
        return sum(r.removed for r in self.records)

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "key": render_bytes(self.key),
            "compacted": self.compacted,
            "first_dirty_offset": self.first_dirty_offset,
            "first_uncleanable_offset": self.first_uncleanable_offset,
            "map_end_offset": self.map_end_offset,
            "delete_retention_ms": self.delete_retention_ms,
            "records": [r.to_json() for r in self.records],
            "removed_by_next_clean": self.removed,
            "notes": self.notes,
            "complete": self.complete,
            "where": self.where,
        }


def inspect_key(
    logs: Any,
    plog: PartitionLog,
    key: bytes,
    now: int,
    *,
    max_scan_bytes: int = KEY_SCAN_BYTES,
    map_entries: int | None = None,
) -> KeyReport:
    """Every record of ``key`` in ``plog`` and what the next clean does with each.

    "The next clean" is the one a "compact now" would run at ``now``
    (:func:`kompakt.cleaner.explain.explain_key`). A tombstone kept by a clean gets its
    delete horizon (KIP-534: the clean's time plus ``delete.retention.ms``) and goes at
    the first clean after that. ``map_entries`` (:func:`key_map_entries`) bounds the
    key map, to say when a clean would be partial.
    """
    cfg = plog.config
    rep = KeyReport(plog.topic, plog.partition, key, now, cfg.compact, cfg.delete_retention_ms)
    checkpoint = logs.cleaner_checkpoint().read().get((plog.topic, plog.partition))
    try:
        ex = explain.explain_key(plog, key, checkpoint, now, max_scan_bytes=max_scan_bytes)
    except SegmentsChangedError as exc:  # replaced by a clean or removed meanwhile
        raise BrowseInputError(str(exc)) from None
    rep.first_dirty_offset = ex.first_dirty_offset
    rep.first_uncleanable_offset = ex.first_uncleanable_offset
    rep.map_end_offset = ex.map_end_offset
    rep.bytes_scanned, rep.complete = ex.bytes_scanned, ex.complete
    rep.notes += _notes(ex, cfg, map_entries, max_scan_bytes)
    try:
        rep.records = _records(plog, ex, now, cfg.delete_retention_ms)
    except OSError as exc:  # replaced by a clean or removed by retention meanwhile
        raise BrowseInputError(
            f"the log changed while it was read ({exc.strerror or exc}): try again"
        ) from None
    return rep


def key_map_entries(settings: Any) -> int | None:
    """How many keys one clean's key map holds: the local engine's bounded offset map
    (Kafka's ``SkimpyOffsetMap``: ``log.cleaner.dedupe.buffer.size`` / 24 bytes x
    ``log.cleaner.io.buffer.load.factor``); None for the Spark engine (no bound)."""
    from kompakt.cleaner.config import ENGINE_DEFAULT, ENGINE_KEY, dedupe_buffer_size, load_factor
    from kompakt.cleaner.offset_map import BYTES_PER_ENTRY

    if settings.get(ENGINE_KEY, ENGINE_DEFAULT) != "local":
        return None
    return int(dedupe_buffer_size(settings) // BYTES_PER_ENTRY * load_factor(settings))


def _notes(ex: explain.KeyExplanation, cfg: Any, fits: int | None, budget: int) -> list[str]:
    out = []
    if not ex.compacted:
        out.append(
            f"cleanup.policy={','.join(cfg.cleanup_policy)}: the cleaner never compacts this "
            "topic; records leave only by retention"
        )
    elif not ex.eligible:
        out.append(
            "nothing is cleanable now (no dirty records outside the active segment, "
            "min.compaction.lag.ms and open transactions); the next clean removes "
            "nothing until there are"
        )
    elif not ex.due:
        out.append(
            f"dirty ratio {ex.cleanable_ratio:.2f} is not above "
            f"min.cleanable.dirty.ratio {cfg.min_cleanable_dirty_ratio}: the background "
            "cleaner waits; 'compact now' would clean as shown"
        )
    if ex.eligible and fits is not None and ex.dirty_records > fits:
        # Kafka's bounded offset map: a dirty range with more records than it holds is
        # cleaned in several passes, and the first one stops early
        out.append(
            f"the dirty range has {ex.dirty_records} records, more than the local engine's "
            f"key map holds ({fits}, log.cleaner.dedupe.buffer.size): the next clean is "
            "partial and may stop before some records shown as removed"
        )
    if not ex.complete:
        why = (
            f"the batches of the segment at offset {ex.read_until} expand past what the "
            f"inspector decompresses ({explain.EXPANSION_BUDGET} bytes with those before it)"
            if ex.expansion_spent
            else f"the inspector reads at most {budget}"
        )
        out.append(
            f"only the first {ex.bytes_scanned} bytes of the log were read ({why}); "
            f"records of the key from offset {ex.read_until} on are not shown and the "
            "verdicts may be wrong"
        )
    return out


def _records(
    plog: PartitionLog, ex: explain.KeyExplanation, now: int, retention: int
) -> list[KeyRecord]:
    """The key's records with their values and headers, read batch by batch."""
    by_segment = {s.base_offset: s for s in plog.segments_snapshot()}
    batches: dict[tuple[int, int], Any] = {}
    # a subset of the batches the dry run read, whose size and expansion it bounded
    allowance = Allowance(ex.bytes_scanned + ex.bytes_expanded)
    out = []
    for v in ex.verdicts:
        where = (v.segment, v.batch_position)
        if where not in batches:
            seg = by_segment.get(v.segment)
            if seg is None:
                raise FileNotFoundError(f"segment {v.segment} is gone")
            header = seg.read_header_at(v.batch_position)
            if header is None:
                raise FileNotFoundError(f"segment {v.segment} was cut short")
            batch = next(iter_batches(seg.read_at(v.batch_position, header.size)))
            recs = preview_records(batch, allowance)
            batches[where] = (header, {r.offset: r for r in recs})
        header, recs = batches[where]
        rec = recs.get(v.offset)
        kr = KeyRecord(
            v.offset,
            rec.timestamp if rec else header.base_timestamp,
            rec.value if rec else None,
            rec.headers if rec else (),
            v.segment,
            removed=v.removed,
            delete_horizon_ms=header.delete_horizon,
        )
        _say_why(kr, v, now, retention)
        out.append(kr)
    return out


def _say_why(kr: KeyRecord, v: explain.Verdict, now: int, retention: int) -> None:
    """The verdict in words, and the tombstone's horizon note."""
    if kr.tombstone:
        if kr.delete_horizon_ms is not None:
            left = kr.delete_horizon_ms - now
            kr.horizon_note = f"delete horizon {iso(kr.delete_horizon_ms)} " + (
                f"(in {duration(left)})" if left > 0 else "(passed)"
            )
        else:
            kr.horizon_note = (
                "no delete horizon yet: the first clean that keeps it sets "
                f"clean time + delete.retention.ms ({duration(retention)})"
            )
    if v.reason == explain.TOMBSTONE_KEPT and v.stamps_horizon:
        kr.why = "kept: the latest record of its key (the clean stamps its delete horizon)"
        kr.horizon_note = (
            f"the next clean sets its delete horizon to about "
            f"{iso(now + retention)} (now + delete.retention.ms {duration(retention)})"
        )
        return
    if v.reason == explain.SUPERSEDED:
        kr.why = f"removed: superseded by offset {v.latest}"
        return
    kr.why = WHY[v.reason]


WHY = {
    explain.PAST_RANGE: "kept: past the range the next clean rewrites",
    explain.NOT_DUE: "kept: no clean is due to rewrite it",
    explain.ABORTED: "removed: part of an aborted transaction",
    explain.HORIZON_PASSED: "removed: tombstone past its delete horizon",
    explain.LATEST: "kept: the latest record of its key",
    explain.TOMBSTONE_KEPT: "kept: tombstone until its delete horizon passes",
}
