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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from kompakt.cleaner import cleanable, report
from kompakt.cleaner.cleanable import LogToClean
from kompakt.cleaner.manager import CleaningAbortedError, CleaningStates
from kompakt.cleaner.offset_map import OffsetMap, hash_keys
from kompakt.cleaner.rewrite import GroupStats, RoundContext, clean_group
from kompakt.cleaner.transactions import (
    ProducerSummary,
    SummaryBuilder,
    TxnTracker,
    control_type_of,
)
from kompakt.errors import (
    CorruptRecordError,
    InvalidConfigError,
    KompaktError,
    SegmentsChangedError,
)
from kompakt.log.partition_log import PartitionLog
from kompakt.log.segment import (
    CLEANED_SUFFIX,
    LogSegment,
    segment_files,
)
from kompakt.record.header import CONTROL_BIT, TRANSACTIONAL_BIT
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


def _never_aborted(tp: tuple[str, int]) -> None:
    return None


class Engine(Protocol):
    """The mechanism: finds the latest offset per key and rewrites segment groups.

    ``check_done(tp)`` is set by the :class:`Cleaner` before each run (Kafka passes
    ``checkDone`` to its ``Cleaner``): the engine calls it between segments and it raises
    :class:`~kompakt.cleaner.manager.CleaningAbortedError` once the clean is aborted.
    """

    name: str
    check_done: Callable[[tuple[str, int]], None]

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
    for path in segment_files(directory, base, CLEANED_SUFFIX):
        path.unlink(missing_ok=True)
    return LogSegment(directory, base, suffix=CLEANED_SUFFIX, **seg_kwargs)


def write_cleaned_group(
    directory: Path,
    sources: Sequence[tuple[int, str | os.PathLike, int]],
    lookup: Callable,
    ctx: RoundContext,
    seg_kwargs: dict,
    dry_run: bool,
    group_end: int,
    check_done: Callable[[], None] | None = None,
) -> tuple[GroupStats, LogSegment | None]:
    """Clean ``sources`` ((base, path, size), in order) into ``<first base>.log.cleaned``.

    Flushed and with the last source's mtime, as Kafka leaves it before the swap. The
    half-written file is removed if anything fails (an abort raised by ``check_done``
    too).
    """
    bufs = (segment_buffer(path, size) for _base, path, size in sources)
    first = sources[0][0]
    if dry_run:
        hold_for_tests(first, check_done)
        return clean_group(list(bufs), lookup, ctx, None, first, group_end, check_done), None
    dest = new_cleaned_segment(directory, first, **seg_kwargs)
    try:
        hold_for_tests(first, check_done)
        stats = clean_group(list(bufs), lookup, ctx, dest, first, group_end, check_done)
        dest.on_become_inactive()
        dest.flush()
        mtime = int(os.stat(sources[-1][1]).st_mtime * 1000)
        dest.set_last_modified_ms(mtime)
    except BaseException:
        dest.delete_files()
        raise
    return stats, dest


HOLD_ENV = "KOMPAKT_TEST_HOLD_CLEAN"


def hold_for_tests(base: int, check_done: Callable[[], None] | None) -> None:
    """Test hook, off unless ``KOMPAKT_TEST_HOLD_CLEAN=DIR`` is set: the rewrite of the
    group starting at ``base``, once begun (its ``.cleaned`` file exists), touches
    ``DIR/held-<base>`` and waits, polling ``check_done``, until ``DIR/release`` or
    ``DIR/release-<base>`` exists (at most 120 s). Tests use it to stop or race a clean
    at a known point in a real engine, including inside Spark tasks."""
    where = os.environ.get(HOLD_ENV)
    if not where:
        return
    d = Path(where)
    (d / f"held-{base}").touch()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if (d / "release").exists() or (d / f"release-{base}").exists():
            return
        if check_done is not None:
            check_done()
        time.sleep(0.02)


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


def log_changed(
    plog: PartitionLog,
    start_offset: int,
    planned: Sequence[LogSegment],
    start_counts: bool = True,
) -> str | None:
    """Why ``plog`` is no longer the log a clean planned (None if it still is): planned
    segments were removed by retention or DeleteRecords (or, with ``start_counts``, its
    log start offset moved on). Kafka lets retention, DeleteRecords and the cleaner run
    side by side; what one removes, the other must neither need nor bring back."""
    live = {id(s) for s in plog.segments_snapshot()}
    gone = [s.base_offset for s in planned if id(s) not in live]
    now = plog.log_start_offset
    if not gone and not (start_counts and now > start_offset):
        return None
    what = f"log start offset {start_offset} -> {now}"
    if gone:
        what += f", {len(gone)} planned segments removed (first {gone[0]})"
    return (
        f"{plog.name} changed during the clean ({what}: retention or DeleteRecords); "
        "the clean is abandoned and retried at the next pass"
    )


def reraise_classified(
    plog: PartitionLog, start_offset: int, planned: Sequence[LogSegment], exc: Exception
) -> None:
    """Classify an engine failure after the fact: a clean whose log changed under it
    failed because of that (a segment file gone, a range now below the log start
    offset; a Spark task's error says so only as text) and is abandoned, raised as
    :class:`SegmentsChangedError`, not a reason to mark the partition uncleanable.
    Returns (the caller re-raises ``exc``) when the log did not change."""
    if isinstance(exc, KompaktError) and not isinstance(exc, CorruptRecordError):
        return  # an abort, or already classified
    why = log_changed(plog, start_offset, planned)
    if why is None:
        return
    log.info("%s (the engine failed with %s: %s)", why, type(exc).__name__, exc)
    raise SegmentsChangedError(why) from exc


def remove_cleaned_files(directory: Path, groups: Sequence[Sequence[LogSegment]]) -> None:
    """Drop the ``.cleaned`` files of a rewrite that failed part-way (Spark tasks that
    finished before another one failed leave theirs): on a full disk they hold the
    space a retry needs, and only a swap may turn them into segments."""
    for group in groups:
        if group:
            for path in segment_files(directory, group[0].base_offset, CLEANED_SUFFIX):
                path.unlink(missing_ok=True)


# -- the in-process engine ----------------------------------------------------------------


class LocalEngine:
    """Offset map in this process, bounded by ``log.cleaner.dedupe.buffer.size``."""

    name = "local"

    def __init__(self, dedupe_buffer_size: int = 128 << 20, load_factor: float = 0.9):
        self.map = OffsetMap(dedupe_buffer_size, load_factor)
        self.check_done: Callable[[tuple[str, int]], None] = _never_aborted

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
            self.check_done(ltc.topic_partition)
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
        tp = (plog.topic, plog.partition)

        def check() -> None:
            self.check_done(tp)

        try:
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
                        check,
                    )
                    + (group,)
                )
                done += sum(s.size for s in group)
                if progress:
                    progress(done, total)
        except BaseException:
            for _stats, dest, _group in results:  # groups finished before the failure
                if dest is not None:
                    dest.delete_files()
            raise
        return results


# -- the cleaner ---------------------------------------------------------------------------


class Cleaner:
    """Cleans the compacted logs of a :class:`~kompakt.log.manager.LogManager`.

    Policy in the manner of Kafka's ``LogCleanerManager``: :attr:`states` holds the
    partitions being cleaned, so the background pass (:meth:`clean_once`) and "compact
    now" (:meth:`compact_now`, called by the CLI offline and by ``POST /v1/compact``)
    never clean one partition twice at once; a partition is taken *before* its clean is
    planned. The engine (mechanism) runs one clean at a time, under :attr:`lock`.
    """

    def __init__(
        self,
        logs: Any,
        engine: Engine | None = None,
        clock: Clock | None = None,
        config: Mapping[str, str] | None = None,
    ):
        self.logs = logs
        self.config = dict(logs.broker_config if config is None else config)
        self.engine = engine or LocalEngine(
            int(self.config.get("log.cleaner.dedupe.buffer.size", 128 << 20))
        )
        self._engines: dict[str, Engine] = {}
        self.clock = clock or logs.clock
        self.lock = threading.Lock()  # one engine run at a time, like one cleaner thread
        self.states = CleaningStates()
        self._checkpoint_lock = threading.Lock()
        self._corrupt_at: dict[tuple[str, int], tuple[str, int]] = {}
        self.last_stats: dict[tuple[str, int], CleanStats] = {}
        self.compactions_total = 0
        self.cleaned_bytes_total = 0
        self.last_run_ms: int | None = None
        register = getattr(logs, "register_cleaning", None)
        if register is not None:  # partition deletion aborts and waits for our cleans
            register(self.states)

    def engine_named(self, name: str | None) -> Engine:
        """This cleaner's engine, or another one by name (built once, then kept)."""
        if name is None or name == self.engine.name:
            return self.engine
        check_engine(name)
        if name not in self._engines:
            self._engines[name] = build_engine(name, self.config)
        return self._engines[name]

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

        def choose(skip: set[tuple[str, int]]) -> LogToClean | None:
            return cleanable.grab_filthiest(
                self.logs.logs(),
                self.checkpoints(),
                self.clock(),
                skip=skip,
                on_reset=self._update_checkpoint,
            )

        ltc = self.states.grab(choose, lambda t: t.topic_partition)
        if ltc is None:
            return False
        try:
            result = self._plan_and_clean(ltc.log, force=False)
        except CleaningAbortedError as exc:
            log.info("%s", exc)
            return False
        except Exception as exc:  # I/O: logged, retried after the backoff
            log.error(
                "I/O error while cleaning %s; its segments are unchanged: %s", ltc.log.name, exc
            )
            return False
        finally:
            self.states.done(ltc.topic_partition)
        return result.status == report.CLEANED

    def due(self, force: bool = False, update_resets: bool = True) -> list[LogToClean]:
        """Every compacted log that a pass would clean (``force``: ignore the ratio);
        checkpoints that had to be reset are rewritten unless ``update_resets`` is off
        (a dry run writes nothing)."""
        cps = self.checkpoints()
        now = self.clock()
        out = []
        for plog in self.logs.logs():
            if not plog.config.compact or plog.uncleanable_reason:
                continue
            ltc = cleanable.log_to_clean(plog, cps.get((plog.topic, plog.partition)), now)
            if ltc.checkpoint_reset and update_resets:
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
        """Clean one log now (``force``: whatever its dirty ratio); None if nothing to do.
        Errors are raised, not turned into an uncleanable mark (the embedded API)."""
        tp = (plog.topic, plog.partition)
        self.states.begin(tp)
        try:
            with self.lock:
                ltc = self.log_to_clean(plog)
                if not cleanable.is_eligible(ltc, force=force):
                    return None
                return self._clean(ltc, dry_run, progress, self.engine)
        finally:
            self.states.done(tp)

    def clean(
        self, ltc: LogToClean, *, dry_run: bool = False, progress: Progress | None = None
    ) -> CleanStats:
        """Kafka ``doClean`` for an already planned log: dedup, rewrite, swap, checkpoint."""
        self.states.begin(ltc.topic_partition)
        try:
            with self.lock:
                return self._clean(ltc, dry_run, progress, self.engine)
        finally:
            self.states.done(ltc.topic_partition)

    def compact_now(
        self,
        topic: str | None = None,
        partition: int | None = None,
        *,
        dry_run: bool = False,
        engine: str | None = None,
        progress: Callable[[PartitionLog], Progress | None] | None = None,
    ) -> report.CompactReport:
        """Clean now: the one implementation behind ``kompakt compact`` (offline) and
        ``POST /v1/compact`` (the broker, and ``kompakt compact`` through it).

        A named topic (or one partition of it) is cleaned whatever its dirty ratio;
        without a topic it is one background pass over every partition Kafka's rules say
        is due, filthiest first. A partition with a corrupt batch is marked uncleanable
        (Kafka's ``markPartitionUncleanable``), reported with the file and byte position,
        and the others are still cleaned. A partition that another clean is working on is
        waited for, then planned afresh, so the figures reported are this request's own.
        An I/O error or an abort (:class:`CleaningAbortedError`) ends the request.
        """
        eng = self.engine_named(engine)
        out = report.CompactReport(engine=eng.name, dry_run=dry_run)
        if topic is not None:
            plogs = self._named(topic, partition)
        else:
            due = [ltc.log for ltc in self.due(update_resets=not dry_run)]
            known = [p for p in self.logs.logs() if p.config.compact and p.uncleanable_reason]
            plogs = known + due
        for plog in plogs:
            pprogress = progress(plog) if progress is not None else None
            try:
                result = self._compact_one(plog, topic is not None, dry_run, eng, pprogress)
            except CleaningAbortedError as exc:
                exc.report = out.results  # what was done before the abort
                raise
            out.results.append(result)
        return out

    def _named(self, topic: str, partition: int | None) -> list[PartitionLog]:
        count = self.logs.partition_count(topic)  # UnknownTopicError
        config = self.logs.topic_config(topic)
        if not config.compact:
            policy = ",".join(config.cleanup_policy)
            raise NotCompactedError(
                f"topic '{topic}' has cleanup.policy={policy}: nothing to compact"
            )
        parts = [partition] if partition is not None else range(count)
        return [self.logs.get_log(topic, p) for p in parts]  # UnknownTopicError

    def _compact_one(
        self,
        plog: PartitionLog,
        force: bool,
        dry_run: bool,
        engine: Engine,
        progress: Progress | None,
    ) -> report.PartitionResult:
        tp = (plog.topic, plog.partition)
        if plog.uncleanable_reason:
            return self._uncleanable_result(plog)
        self.states.begin(tp)
        try:
            return self._plan_and_clean(
                plog, force=force, dry_run=dry_run, engine=engine, progress=progress
            )
        finally:
            self.states.done(tp)

    def _plan_and_clean(
        self,
        plog: PartitionLog,
        *,
        force: bool,
        dry_run: bool = False,
        engine: Engine | None = None,
        progress: Progress | None = None,
    ) -> report.PartitionResult:
        """Plan and clean a partition this thread owns in :attr:`states`.

        Like Kafka's ``CleanerThread.cleanLog``: an aborted clean and an I/O error are
        raised (the partition stays cleanable); anything else marks it uncleanable.
        """
        tp = (plog.topic, plog.partition)
        with self.lock:
            if not self._is_live(plog):  # deleted while this request waited for it
                return report.PartitionResult(
                    plog.topic,
                    plog.partition,
                    report.SKIPPED,
                    reason=f"{plog.name} was deleted; nothing to clean",
                )
            ltc = self.log_to_clean(plog)
            if ltc.checkpoint_reset and not dry_run:
                self._update_checkpoint(tp, ltc.first_dirty_offset)
            result = report.PartitionResult(
                plog.topic,
                plog.partition,
                report.SKIPPED,
                first_dirty_offset=ltc.first_dirty_offset,
                first_uncleanable_offset=ltc.first_uncleanable_offset,
            )
            if not cleanable.is_eligible(ltc, force=force):
                result.reason = "nothing to clean"
                return result
            try:
                result.stats = self._clean(ltc, dry_run, progress, engine or self.engine)
            except SegmentsChangedError as exc:
                log.info("%s", exc)
                result.reason = str(exc)
                return result
            except CleaningAbortedError:
                raise
            except Exception as exc:
                if is_io_error(exc):
                    raise
                self._mark_uncleanable(plog, exc)
                return self._uncleanable_result(plog)
        result.status = report.DRY_RUN if dry_run else report.CLEANED
        return result

    def _is_live(self, plog: PartitionLog) -> bool:
        """Still the log of its topic-partition (not deleted, not deleted and re-created)."""
        try:
            return self.logs.get_log(plog.topic, plog.partition) is plog
        except KompaktError:
            return False

    def _mark_uncleanable(self, plog: PartitionLog, exc: BaseException) -> None:
        """Kafka ``markPartitionUncleanable``, with the corrupt batch's file and position
        when there is one (found again by a scan when the engine lost them)."""
        found = None
        if isinstance(exc, CorruptRecordError) and exc.file and exc.position is not None:
            found = (exc.file, exc.position, str(exc))
        if found is None:
            found = locate_corruption(plog.segments_snapshot())
        if found is not None:
            file, position, message = found
            self._corrupt_at[(plog.topic, plog.partition)] = (file, position)
            reason = f"corrupt batch in {file} at byte position {position}: {message}"
        else:
            reason = f"{type(exc).__name__}: {exc}"
        plog.uncleanable_reason = reason
        log.error("marking %s uncleanable: %s", plog.name, reason)

    def _uncleanable_result(self, plog: PartitionLog) -> report.PartitionResult:
        file, position = self._corrupt_at.get((plog.topic, plog.partition), (None, None))
        return report.PartitionResult(
            plog.topic,
            plog.partition,
            report.UNCLEANABLE,
            reason=plog.uncleanable_reason,
            file=file,
            position=position,
        )

    def abort_all(self, why: str) -> None:
        """Abort every running clean and refuse new ones (shutdown, Ctrl-C); the engines
        stop at their next check and leave each partition as it was."""
        self.states.close(why)

    def _clean(
        self, ltc: LogToClean, dry_run: bool, progress: Progress | None, engine: Engine
    ) -> CleanStats:
        plog = ltc.log
        t0 = time.monotonic()
        now = self.clock()
        tp = (plog.topic, plog.partition)

        def check_done(tp: tuple[str, int]) -> None:
            try:
                self.states.check_done(tp)
            except CleaningAbortedError as exc:
                if exc.shutdown:
                    raise
                # this partition only (LogManager.delete_topic: abortAndPauseCleaning)
                raise SegmentsChangedError(
                    f"{plog.name} {exc.why}; the clean is abandoned"
                ) from None
            if not self._is_live(plog):  # Kafka's deleteLog aborts the clean first
                raise SegmentsChangedError(
                    f"{plog.name} was deleted during the clean; the clean is abandoned"
                )

        engine.check_done = check_done
        check_done(tp)
        start_offset = plog.log_start_offset
        planned = plog.segments_snapshot()

        def check_unchanged(segments: Sequence[LogSegment]) -> None:
            """Kafka ``LocalLog.replaceSegments`` never brings back a segment that
            retention or DeleteRecords removed: a clean whose planned segments went
            meanwhile is abandoned (the next pass plans it afresh)."""
            why = log_changed(plog, start_offset, segments, start_counts=False)
            if why is not None:
                raise SegmentsChangedError(why)

        stats = CleanStats(
            plog.topic,
            plog.partition,
            engine.name,
            dry_run=dry_run,
            first_dirty_offset=ltc.first_dirty_offset,
            first_uncleanable_offset=ltc.first_uncleanable_offset,
            started_ms=now,
            dirty_ratio=ltc.cleanable_ratio,
        )
        segments = planned
        stats.segments_before = len(segments)
        try:
            producers = summarize_producers(segments, now)
            dirty = engine.dedup(ltc, producers)
        except Exception as exc:
            reraise_classified(plog, start_offset, segments, exc)
            raise
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
            try:
                check_unchanged(to_clean)
                results = engine.rewrite(plog, groups, dirty, ctx, dry_run, progress)
            except Exception as exc:
                reraise_classified(plog, start_offset, to_clean, exc)
                raise
            check_done(tp)  # the last point to stop: swapping is not undone
            check_unchanged(to_clean)
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

    def close(self, timeout: float = 30.0) -> None:
        """Abort what still runs and wait for it to stop (Kafka's shutdown of the cleaner
        threads aborts their cleans)."""
        self.abort_all("shutting down")
        if not self.states.wait_idle(timeout):
            log.warning("a clean did not stop within %.0f s", timeout)


class NotCompactedError(KompaktError):
    """A clean was asked for on a topic whose policy has no ``compact``."""

    error_code = 40


ENGINES = ("spark", "local")


def check_engine(name: str) -> str:
    """``name`` if it is an engine kompakt has; else the one-line error users see."""
    if name not in ENGINES:
        raise InvalidConfigError(f"unknown engine {name!r}: expected one of {', '.join(ENGINES)}")
    return name


def build_engine(name: str, config: Mapping[str, str] | None = None) -> Engine:
    """An engine by name, configured from broker-style settings."""
    config = dict(config or {})
    if check_engine(name) == "local":
        return LocalEngine(int(config.get("log.cleaner.dedupe.buffer.size", 128 << 20)))
    from kompakt.pipeline.engine import SparkEngine

    return SparkEngine(config)


def build_cleaner(logs: Any, config: dict[str, str] | None = None, clock: Clock | None = None):
    """The cleaner a broker runs: engine from ``kompakt.cleaner.engine`` (spark|local)."""
    config = dict(config or {})
    engine = build_engine(config.get("kompakt.cleaner.engine", "spark"), config)
    return Cleaner(logs, engine=engine, clock=clock, config=config)


def locate_corruption(segments: Sequence[LogSegment]) -> tuple[str, int, str] | None:
    """(file, byte position, message) of the first batch that fails its CRC or framing:
    names the damage for an uncleanable mark when the engine's error lost it (a Spark
    task's error is text)."""
    for seg in segments:
        if not seg.size:
            continue
        try:
            buf = segment_buffer(seg.log_path, seg.size)
            scan_records(buf, 0, len(buf), verify_crc=True)
        except CorruptRecordError as exc:
            return str(seg.log_path), int(exc.position or 0), str(exc)
        except (OSError, ValueError):
            continue
    return None
