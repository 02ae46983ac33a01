"""The log cleaner: picks a log, runs an engine over it, swaps and checkpoints.

Kafka's ``Cleaner.doClean`` and ``CleanerThread`` split in two: the *engine* finds the
latest offset of every key in the dirty range (in-process: a bounded offset map; Spark:
a shuffle) and rewrites segment groups into ``.cleaned`` files; this module does what
must happen on one machine, in order: choose the filthiest log, swap each cleaned
group in (crash-safe, :meth:`PartitionLog.replace_segments`) and write the cleaner
checkpoint last.
"""

from __future__ import annotations

import logging
import mmap
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from kompakt.cleaner import cleanable
from kompakt.cleaner.cleanable import LogToClean
from kompakt.cleaner.offset_map import OffsetMap, hash_keys
from kompakt.cleaner.rewrite import GroupStats, RoundContext, clean_group
from kompakt.cleaner.transactions import (
    ProducerSummary,
    SummaryBuilder,
    TxnTracker,
    control_type_of,
)
from kompakt.errors import KompaktError, SegmentsChangedError
from kompakt.log.partition_log import PartitionLog
from kompakt.log.segment import (
    CLEANED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIMEINDEX_SUFFIX,
    LogSegment,
    filename_prefix,
)
from kompakt.record.batch import CONTROL_BIT, TRANSACTIONAL_BIT
from kompakt.record.scan import scan_batch_headers, scan_records

log = logging.getLogger(__name__)
Clock = Callable[[], int]
Progress = Callable[[int, int], None]


@dataclass
class CleanStats:
    """One clean of one partition: what Kafka's cleaner log line reports, and more."""

    topic: str
    partition: int
    engine: str
    dry_run: bool = False
    first_dirty_offset: int = 0
    first_uncleanable_offset: int = 0
    end_offset: int = 0  # the new first dirty offset (checkpoint)
    records_read: int = 0
    bytes_read: int = 0
    records_written: int = 0
    bytes_written: int = 0
    tombstones_removed: int = 0
    unkeyed_removed: int = 0
    batches_copied: int = 0
    map_records_read: int = 0
    map_bytes_read: int = 0
    map_utilization: float = 0.0
    map_entries: int = 0
    partial: bool = False
    segments_before: int = 0
    segments_after: int = 0
    started_ms: int = 0
    duration_s: float = 0.0
    dirty_ratio: float = 0.0

    @property
    def mb_per_s(self) -> float:
        return self.bytes_read / 1e6 / self.duration_s if self.duration_s > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["mb_per_s"] = round(self.mb_per_s, 2)
        return out

    def log_line(self) -> str:
        """Like Kafka's ``Cleaner`` summary."""
        kind = "Dry run of clean" if self.dry_run else "Cleaned"
        reduction = 100 * (1 - self.bytes_written / self.bytes_read) if self.bytes_read else 0
        return (
            f"{kind} {self.topic}-{self.partition} offsets [{self.first_dirty_offset}, "
            f"{self.end_offset}) with engine {self.engine}: {self.bytes_read / 1e6:.1f} MB, "
            f"{self.records_read} records read, {self.bytes_written / 1e6:.1f} MB, "
            f"{self.records_written} records written ({reduction:.1f}% size reduction), "
            f"{self.tombstones_removed} tombstones removed, in {self.duration_s:.3f} s "
            f"({self.mb_per_s:.1f} MB/s); map {100 * self.map_utilization:.1f}% full"
            f"{' (partial pass)' if self.partial else ''}; segments "
            f"{self.segments_before} -> {self.segments_after}"
        )


@dataclass
class DirtyRange:
    """What the engine's dedup stage found: where this round ends and how to look up."""

    end_offset: int
    lookup: Callable | None  # LatestLookup for the in-process engine
    map_utilization: float = 0.0
    map_entries: int = 0
    records_read: int = 0
    bytes_read: int = 0
    partial: bool = False
    extra: dict = field(default_factory=dict)


class Engine(Protocol):
    name: str

    def dedup(self, ltc: LogToClean, producers: ProducerSummary) -> DirtyRange: ...

    def rewrite(
        self,
        plog: PartitionLog,
        groups: list[list[LogSegment]],
        dirty: DirtyRange,
        ctx: RoundContext,
        dry_run: bool,
        progress: Progress | None,
    ) -> list[tuple[GroupStats, LogSegment | None, list[LogSegment]]]:
        """(stats, ``.cleaned`` segment or None on a dry run, source group) per group."""
        ...


# -- reading segment bytes ---------------------------------------------------------------


def segment_buffer(path: str | os.PathLike, size: int | None = None) -> np.ndarray:
    """The bytes of a segment file, memory-mapped (empty array for an empty file)."""
    with open(path, "rb") as f:
        n = os.fstat(f.fileno()).st_size if size is None else size
        if n == 0:
            return np.empty(0, np.uint8)
        m = mmap.mmap(f.fileno(), n, access=mmap.ACCESS_READ)
    return np.frombuffer(m, np.uint8)


def summarize_producers(segments: Sequence[LogSegment], now: int) -> ProducerSummary:
    builder = SummaryBuilder()
    counts: dict[int, int] = {}
    for seg in segments:
        if not seg.size:
            continue
        buf = segment_buffer(seg.log_path, seg.size)
        h = scan_batch_headers(buf)
        counts[seg.base_offset] = int(h.record_count.sum())
        controls = {}
        for i in np.nonzero((h.attributes & CONTROL_BIT) != 0)[0]:
            pos, size = int(h.position[i]), int(h.size[i])
            controls[pos] = control_type_of(buf[pos : pos + size]) if h.record_count[i] else None
        builder.add(h, controls)
    summary = builder.finish(now)
    summary.segment_records = counts
    return summary


def new_cleaned_segment(directory: Path, base: int, **seg_kwargs: Any) -> LogSegment:
    for suffix in (".log", ".index", ".timeindex"):
        (directory / f"{base:020d}{suffix}{CLEANED_SUFFIX}").unlink(missing_ok=True)
    return LogSegment(directory, base, suffix=CLEANED_SUFFIX, **seg_kwargs)


def write_cleaned_group(
    directory: Path,
    sources: Sequence[tuple[int, str | os.PathLike, int]],
    lookup: Callable,
    ctx: RoundContext,
    seg_kwargs: dict,
    dry_run: bool,
    group_end: int,
) -> tuple[GroupStats, LogSegment | None]:
    """Clean ``sources`` ((base, path, size), in order) into ``<first base>.log.cleaned``.

    Flushed and with the last source's mtime, as Kafka leaves it before the swap. The
    half-written file is removed if anything fails.
    """
    bufs = (segment_buffer(path, size) for _base, path, size in sources)
    if dry_run:
        return clean_group(list(bufs), lookup, ctx, None, sources[0][0], group_end), None
    dest = new_cleaned_segment(directory, sources[0][0], **seg_kwargs)
    try:
        stats = clean_group(list(bufs), lookup, ctx, dest, sources[0][0], group_end)
        dest.on_become_inactive()
        dest.flush()
        mtime = int(os.stat(sources[-1][1]).st_mtime * 1000)
        dest.set_last_modified_ms(mtime)
    except BaseException:
        dest.delete_files()
        raise
    return stats, dest


IO_ERROR_MARKERS = ("[Errno 28]", "[Errno 27]", "[Errno 122]", "No space left on device")


def is_io_error(exc: BaseException) -> bool:
    """An OSError, or one reported through an engine that loses its type (a Spark task's
    ``PythonException`` carries only the worker's traceback text)."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) or any(m in str(e) for m in IO_ERROR_MARKERS):
            return True
        e = e.__cause__ or e.__context__
    return False


def remove_cleaned_files(directory: Path, groups: Sequence[Sequence[LogSegment]]) -> None:
    """Drop the ``.cleaned`` files of a rewrite that failed part-way (Spark tasks that
    finished before another one failed leave theirs): on a full disk they hold the
    space a retry needs, and only a swap may turn them into segments."""
    for group in groups:
        if group:
            prefix = directory / filename_prefix(group[0].base_offset)
            for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIMEINDEX_SUFFIX):
                Path(f"{prefix}{suffix}{CLEANED_SUFFIX}").unlink(missing_ok=True)


# -- the in-process engine ----------------------------------------------------------------


class LocalEngine:
    """Offset map in this process, bounded by ``log.cleaner.dedupe.buffer.size``."""

    name = "local"

    def __init__(self, dedupe_buffer_size: int = 128 << 20, load_factor: float = 0.9):
        self.map = OffsetMap(dedupe_buffer_size, load_factor)

    def dedup(self, ltc: LogToClean, producers: ProducerSummary) -> DirtyRange:
        """Kafka ``buildOffsetMap``: stop when the map is full (partial clean)."""
        m = self.map
        start, end = ltc.first_dirty_offset, ltc.first_uncleanable_offset
        segments = cleanable.segments_between(ltc.log.segments_snapshot(), start, end)
        # no pass can put more keys than it has records: size the table to that
        counts = producers.segment_records
        if all(s.base_offset in counts or not s.size for s in segments):
            m.clear(sum(counts.get(s.base_offset, 0) for s in segments))
        else:  # a segment the summary did not see: no bound known, use the whole buffer
            m.clear()
        txn = TxnTracker(producers.aborted_between(start, end))
        out = DirtyRange(end_offset=start, lookup=None)
        full = False
        for i, seg in enumerate(segments):
            next_base = segments[i + 1].base_offset if i + 1 < len(segments) else end
            buf = segment_buffer(seg.log_path, seg.size)
            scan = scan_records(buf, 0, len(buf), verify_crc=True)
            out.bytes_read += len(buf)
            # which batches feed the map: not control, not aborted
            nb = len(scan.batch_position)
            use = (scan.batch_attributes & CONTROL_BIT) == 0
            if (scan.batch_attributes & (CONTROL_BIT | TRANSACTIONAL_BIT)).any():
                for b in range(nb):
                    pid = int(scan.batch_producer_id[b])
                    last = int(scan.batch_last_offset[b])
                    if scan.batch_attributes[b] & CONTROL_BIT:
                        pos = int(scan.batch_position[b])
                        size = int(scan.batch_size[b])
                        ctype = (
                            control_type_of(buf[pos : pos + size])
                            if scan.batch_record_count[b]
                            else None
                        )
                        txn.on_control_batch(pid, last, ctype)
                    elif txn.on_batch(pid, last, bool(scan.batch_attributes[b] & 0x10)):
                        use[b] = False
            mask = use[scan.batch_index] & ~scan.key_null & (scan.offset >= start)
            h1, h2 = hash_keys(scan.key_offsets, scan.key_data)
            consumed = m.put(h1, h2, scan.offset, mask)
            if consumed < len(scan.offset):
                # full: the map covers whole batches before the one that did not fit
                b = int(scan.batch_index[consumed])
                if b > 0 and scan.batch_last_offset[b - 1] >= start:
                    m.latest_offset = max(m.latest_offset, int(scan.batch_last_offset[b - 1]))
                out.records_read += consumed
                full = True
                break
            out.records_read += len(scan.offset)
            if nb:
                last = int(scan.batch_last_offset[-1])
                if last >= start:
                    m.latest_offset = max(m.latest_offset, last)
            m.latest_offset = max(m.latest_offset, next_base - 1)
        out.end_offset = m.latest_offset + 1 if m.latest_offset >= 0 else start
        out.partial = full
        out.map_utilization = m.utilization
        out.map_entries = m.size

        def lookup(scan):
            h1, h2 = hash_keys(scan.key_offsets, scan.key_data)
            return m.get(h1, h2)

        out.lookup = lookup
        return out

    def rewrite(self, plog, groups, dirty, ctx, dry_run, progress):
        results = []
        total = sum(s.size for g in groups for s in g) or 1
        done = 0
        for group in groups:
            sources = [(s.base_offset, s.log_path, s.size) for s in group]
            end = group[-1].next_offset
            results.append(
                write_cleaned_group(
                    plog.dir,
                    sources,
                    dirty.lookup,
                    ctx,
                    plog._segment_kwargs(),
                    dry_run,
                    end,
                )
                + (group,)
            )
            done += sum(s.size for s in group)
            if progress:
                progress(done, total)
        return results


# -- the cleaner ---------------------------------------------------------------------------


class Cleaner:
    """Cleans the compacted logs of a :class:`~kompakt.log.manager.LogManager`."""

    def __init__(self, logs: Any, engine: Engine | None = None, clock: Clock | None = None):
        self.logs = logs
        self.engine = engine or LocalEngine(
            int(logs.broker_config.get("log.cleaner.dedupe.buffer.size", 128 << 20))
        )
        self.clock = clock or logs.clock
        self.lock = threading.Lock()  # one clean at a time, like one cleaner thread
        self._checkpoint_lock = threading.Lock()
        self.last_stats: dict[tuple[str, int], CleanStats] = {}
        self.compactions_total = 0
        self.cleaned_bytes_total = 0
        self.last_run_ms: int | None = None

    # -- checkpoints ----------------------------------------------------------------------
    def checkpoints(self) -> dict[tuple[str, int], int]:
        return self.logs.cleaner_checkpoint().read()

    def _update_checkpoint(self, tp: tuple[str, int], offset: int) -> None:
        """Written last, via ``.tmp`` + fsync + rename (OffsetCheckpointFile)."""
        with self._checkpoint_lock:
            cp = self.logs.cleaner_checkpoint()
            entries = cp.read()
            entries[tp] = offset
            live = {(p.topic, p.partition) for p in self.logs.logs()}
            cp.write({k: v for k, v in entries.items() if k in live})

    # -- status ---------------------------------------------------------------------------
    def uncleanable(self) -> dict[tuple[str, int], str]:
        return {
            (p.topic, p.partition): p.uncleanable_reason
            for p in self.logs.logs()
            if p.uncleanable_reason
        }

    def log_to_clean(self, plog: PartitionLog) -> LogToClean:
        cps = self.checkpoints()
        return cleanable.log_to_clean(plog, cps.get((plog.topic, plog.partition)), self.clock())

    # -- cleaning -------------------------------------------------------------------------
    def clean_once(self) -> bool:
        """One background pass: clean the filthiest eligible log.

        False when nothing was eligible or the clean failed, so the caller backs off for
        ``log.cleaner.backoff.ms`` instead of retrying a failing log in a tight loop.
        """
        self.last_run_ms = self.clock()
        ltc = cleanable.grab_filthiest(
            self.logs.logs(), self.checkpoints(), self.clock(), on_reset=self._update_checkpoint
        )
        if ltc is None:
            return False
        return self._clean_guarded(ltc) is not None

    def due(self, force: bool = False) -> list[LogToClean]:
        """Every compacted log that a pass would clean (``force``: ignore the ratio)."""
        cps = self.checkpoints()
        now = self.clock()
        out = []
        for plog in self.logs.logs():
            if not plog.config.compact or plog.uncleanable_reason:
                continue
            ltc = cleanable.log_to_clean(plog, cps.get((plog.topic, plog.partition)), now)
            if ltc.checkpoint_reset:
                self._update_checkpoint((plog.topic, plog.partition), ltc.first_dirty_offset)
            if cleanable.is_eligible(ltc, force=force):
                out.append(ltc)
        return sorted(out, key=lambda t: -t.cleanable_ratio)

    def clean_partition(
        self,
        plog: PartitionLog,
        *,
        dry_run: bool = False,
        force: bool = True,
        progress: Progress | None = None,
    ) -> CleanStats | None:
        """Clean one log now (``force``: whatever its dirty ratio); None if nothing to do."""
        ltc = self.log_to_clean(plog)
        if not cleanable.is_eligible(ltc, force=force):
            return None
        return self.clean(ltc, dry_run=dry_run, progress=progress)

    def _clean_guarded(self, ltc: LogToClean) -> CleanStats | None:
        plog = ltc.log
        try:
            return self.clean(ltc)
        except SegmentsChangedError as exc:
            log.info("%s", exc)
        except Exception as exc:
            if is_io_error(exc):  # a full disk: retried after the backoff, not uncleanable
                log.error(
                    "I/O error while cleaning %s; its segments are unchanged: %s", plog.name, exc
                )
                return None
            reason = f"{type(exc).__name__}: {exc}"
            plog.uncleanable_reason = reason
            log.error("marking %s uncleanable: %s", plog.name, reason)
        return None

    def clean(
        self, ltc: LogToClean, *, dry_run: bool = False, progress: Progress | None = None
    ) -> CleanStats:
        """Kafka ``doClean`` for one log: dedup, rewrite each group, swap, checkpoint."""
        with self.lock:
            return self._clean(ltc, dry_run, progress)

    def _clean(self, ltc: LogToClean, dry_run: bool, progress: Progress | None) -> CleanStats:
        plog = ltc.log
        t0 = time.monotonic()
        now = self.clock()
        tp = (plog.topic, plog.partition)
        stats = CleanStats(
            plog.topic,
            plog.partition,
            self.engine.name,
            dry_run=dry_run,
            first_dirty_offset=ltc.first_dirty_offset,
            first_uncleanable_offset=ltc.first_uncleanable_offset,
            started_ms=now,
            dirty_ratio=ltc.cleanable_ratio,
        )
        segments = plog.segments_snapshot()
        stats.segments_before = len(segments)
        producers = summarize_producers(segments, now)
        dirty = self.engine.dedup(ltc, producers)
        stats.end_offset = dirty.end_offset
        stats.partial = dirty.partial
        stats.map_utilization = dirty.map_utilization
        stats.map_entries = dirty.map_entries
        stats.map_records_read = dirty.records_read
        stats.map_bytes_read = dirty.bytes_read
        to_clean = [s for s in segments if s.base_offset < dirty.end_offset]
        groups = cleanable.group_segments_by_size(
            to_clean,
            plog.config.segment_bytes,
            plog.config.segment_index_bytes,
            ltc.first_uncleanable_offset,
        )
        ctx = RoundContext(
            map_latest_offset=dirty.end_offset - 1,
            upper_bound=ltc.first_uncleanable_offset,
            now=now,
            delete_retention_ms=plog.config.delete_retention_ms,
            producers=producers,
        )
        try:
            results = self.engine.rewrite(plog, groups, dirty, ctx, dry_run, progress)
        except BaseException:
            if not dry_run:
                remove_cleaned_files(plog.dir, groups)
            raise
        total = GroupStats()
        try:
            for gstats, dest, group in results:
                total.add(gstats)
                if dest is not None:
                    plog.replace_segments(dest, group)
                    dest = None
        finally:
            for _g, dest, _group in results:
                if dest is not None and dest.suffix == CLEANED_SUFFIX:
                    dest.delete_files()
        for k in (
            "records_read",
            "bytes_read",
            "records_written",
            "bytes_written",
            "tombstones_removed",
            "unkeyed_removed",
            "batches_copied",
        ):
            setattr(stats, k, getattr(total, k))
        if dry_run:
            stats.segments_after = len(segments) - len(to_clean) + len(groups)
        else:
            self._update_checkpoint(tp, dirty.end_offset)
            stats.segments_after = len(plog.segments_snapshot())
            self.compactions_total += 1
            self.cleaned_bytes_total += stats.bytes_read
        stats.duration_s = time.monotonic() - t0
        if not dry_run:
            self.last_stats[tp] = stats
        log.info("%s", stats.log_line())
        return stats

    def compact(self, topic: str, partition: int | None, dry_run: bool) -> list[dict[str, Any]]:
        """Clean ``topic`` (one or all partitions) now, whatever the dirty ratio; JSON-able
        results per partition (the admin endpoint's ``POST /v1/compact``)."""
        if not self.logs.topic_config(topic).compact:
            policy = ",".join(self.logs.topic_config(topic).cleanup_policy)
            raise NotCompactedError(f"topic '{topic}' has cleanup.policy={policy}")
        parts = [partition] if partition is not None else range(self.logs.partition_count(topic))
        out = []
        for p in parts:
            plog = self.logs.get_log(topic, p)
            if plog.uncleanable_reason:
                out.append(
                    {
                        "topic": topic,
                        "partition": p,
                        "status": "skipped",
                        "reason": f"uncleanable: {plog.uncleanable_reason}",
                    }
                )
                continue
            stats = self.clean_partition(plog, dry_run=dry_run)
            if stats is None:
                out.append(
                    {
                        "topic": topic,
                        "partition": p,
                        "status": "skipped",
                        "reason": "nothing to clean",
                    }
                )
            else:
                out.append({"status": "dry-run" if dry_run else "cleaned", **stats.to_json()})
        return out

    def partition_status(self, plog: PartitionLog) -> dict[str, Any]:
        """Dirty ratio, cleanable bytes, last clean and uncleanable reason of one log."""
        out: dict[str, Any] = {"uncleanable_reason": plog.uncleanable_reason}
        if not plog.config.compact:
            return out
        ltc = self.log_to_clean(plog)
        last = self.last_stats.get((plog.topic, plog.partition))
        out.update(
            dirty_ratio=round(ltc.cleanable_ratio, 4),
            cleanable_bytes=ltc.cleanable_bytes,
            first_dirty_offset=ltc.first_dirty_offset,
            first_uncleanable_offset=ltc.first_uncleanable_offset,
            last_compaction_ms=last.started_ms if last else None,
            last_compaction=last.to_json() if last else None,
        )
        return out

    def close(self) -> None:
        pass


class NotCompactedError(KompaktError):
    """A clean was asked for on a topic whose policy has no ``compact``."""

    error_code = 40


def build_cleaner(logs: Any, config: dict[str, str] | None = None, clock: Clock | None = None):
    """The cleaner a broker runs: engine from ``kompakt.cleaner.engine`` (spark|local)."""
    config = dict(config or {})
    engine_name = config.get("kompakt.cleaner.engine", "spark")
    if engine_name == "local":
        engine: Engine = LocalEngine(int(config.get("log.cleaner.dedupe.buffer.size", 128 << 20)))
    else:
        from kompakt.pipeline.engine import SparkEngine

        engine = SparkEngine(config)
    return Cleaner(logs, engine=engine, clock=clock)
