"""The log cleaner's pass: what happens around a clean.

Kafka splits its cleaner in two: ``LogCleanerManager`` (policy: checkpoints, the
in-progress / aborted / paused / uncleanable state, the filthiest log; here
:class:`~kompakt.cleaner.manager.LogCleanerManager`) and ``Cleaner`` (mechanism: offset
map and rewrite of one ``LogToClean``). :class:`Cleaner` here is Kafka's
``CleanerThread.cleanLog`` around the mechanism: it takes the log the manager chose,
hands a :class:`~kompakt.cleaner.engine.CleanJob` to an :class:`~kompakt.cleaner.engine.Engine`
(the mechanism: :class:`~kompakt.cleaner.local_engine.LocalEngine` or the Spark engine),
swaps each cleaned group in (crash-safe, :meth:`PartitionLog.replace_segments`) and
writes the cleaner checkpoint last. "Compact now" (:meth:`Cleaner.compact_now`) is the
one implementation behind the broker's ``POST /v1/compact`` and ``kompakt compact``
(online and offline). Engines by name come from :mod:`kompakt.engines`, above this layer.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from kompakt.cleaner import cleanable, report
from kompakt.cleaner.config import (
    IO_CHECK_INTERVAL_DEFAULT,
    IO_CHECK_INTERVAL_KEY,
    IO_MAX_BYTES_PER_SECOND_KEY,
    dedupe_buffer_size,
)
from kompakt.cleaner.engine import CleanJob, Engine, Progress, log_changed
from kompakt.cleaner.local_engine import LocalEngine
from kompakt.cleaner.manager import CleaningAbortedError, LogCleanerManager
from kompakt.cleaner.rewrite import GroupStats
from kompakt.cleaner.segment_io import remove_cleaned_files, summarize_producers
from kompakt.cleaner.stats import CleanStats, RunningClean
from kompakt.cleaner.status import CleaningStatus, is_live
from kompakt.cleaner.throttle import BacklogController, BacklogSettings, Throttler
from kompakt.errors import (
    CorruptRecordError,
    InvalidConfigError,
    KompaktError,
    SegmentsChangedError,
)
from kompakt.log.partition_log import PartitionLog
from kompakt.log.segment import CLEANED_SUFFIX, LogSegment

log = logging.getLogger(__name__)
Clock = Callable[[], int]
EngineFactory = Callable[[str], Engine]


# ENOSPC, EFBIG, EDQUOT, EIO, EROFS as a Spark task's traceback text shows them
IO_ERROR_MARKERS = (
    "[Errno 28]",
    "[Errno 27]",
    "[Errno 122]",
    "[Errno 5]",
    "[Errno 30]",
    "No space left on device",
)


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


# -- the cleaner ---------------------------------------------------------------------------


class Cleaner:
    """Cleans the compacted logs of a :class:`~kompakt.log.manager.LogManager`.

    :attr:`manager` (Kafka's ``LogCleanerManager``) holds the partitions being cleaned,
    so the background pass (:meth:`clean_once`), "compact now" (:meth:`compact_now`,
    called by the CLI offline and by ``POST /v1/compact``) and the embedded
    :meth:`clean_partition` never clean one partition twice at once; a partition is
    taken *before* its clean is planned. All three go through :meth:`_plan_and_clean`,
    the one entry to the pass and the swap; the engine (mechanism) runs one clean at a
    time, under :attr:`lock`.

    :attr:`throttle` is Kafka's cleaner ``Throttler`` (``log.cleaner.io.max.bytes.per.second``;
    unlimited unless the config names it: the broker always does), its rate raised by
    :attr:`backlog` (:class:`~kompakt.cleaner.throttle.BacklogController`) when the
    dirty-bytes backlog of the compacted partitions passes its setpoint. A test may hand
    in its own ``throttle`` (on a manual time).
    """

    def __init__(
        self,
        logs: Any,
        engine: Engine | None = None,
        clock: Clock | None = None,
        config: Mapping[str, str] | None = None,
        engine_factory: EngineFactory | None = None,
        throttle: Throttler | None = None,
    ):
        self.logs = logs
        self.config = dict(logs.broker_config if config is None else config)
        self.engine = engine or LocalEngine(dedupe_buffer_size(self.config))
        # other engines by name, for "compact now --engine" (kompakt.engines builds them)
        self._engine_factory = engine_factory
        self._engines: dict[str, Engine] = {}
        self.clock = clock or logs.clock
        self.lock = threading.Lock()  # one engine run at a time, like one cleaner thread
        self.manager = LogCleanerManager(logs, self.clock)
        # written by the thread holding self.lock (the one clean at a time); other
        # threads read a copy (dict(...)): the last clean of each partition ...
        self.last_stats: dict[tuple[str, int], CleanStats] = {}
        # ... and the cleans under way with their progress; the listeners (the broker's
        # console history) hear of each finished clean, background or on demand
        self.running: dict[tuple[str, int], RunningClean] = {}
        self.listeners: list[Callable[[CleanStats], None]] = []
        self.status = CleaningStatus(logs, lambda: self.last_stats)
        self.compactions_total = 0
        self.cleaned_bytes_total = 0
        self.last_run_ms: int | None = None
        self.backlog = BacklogController(
            BacklogSettings.from_config(self.config), self.backlog_bytes, self.clock
        )
        interval = int(self.config.get(IO_CHECK_INTERVAL_KEY, IO_CHECK_INTERVAL_DEFAULT))
        self.throttle = throttle or Throttler(check_interval_ms=interval)
        self.throttle.update_desired_rate(self._io_max(self.config, self.throttle.desired_rate))
        self.throttle.rate_source = self.backlog
        register = getattr(logs, "register_cleaning", None)
        if register is not None:  # partition deletion aborts and waits for our cleans
            register(self.manager)

    @staticmethod
    def _io_max(config: Mapping[str, str], default: float) -> float:
        raw = config.get(IO_MAX_BYTES_PER_SECOND_KEY)
        return default if raw is None else float(raw)

    def reconfigure(self, changed: Mapping[str, str]) -> None:
        """A dynamic broker config changed (Kafka ``LogCleaner.reconfigure``: the
        throttler's ``updateDesiredRatePerSec``); other keys apply at the next build."""
        self.config.update(changed)
        if IO_MAX_BYTES_PER_SECOND_KEY in changed:
            self.throttle.update_desired_rate(float(changed[IO_MAX_BYTES_PER_SECOND_KEY]))
            log.info(
                "log cleaner I/O limit is now %s bytes/s", changed[IO_MAX_BYTES_PER_SECOND_KEY]
            )

    def backlog_bytes(self) -> int:
        """The dirty-bytes backlog: cleanable bytes (Kafka's ``LogToClean.cleanableBytes``)
        summed over the compacted partitions the cleaner may clean."""
        total = 0
        for _plog, st in self.status.partitions(tombstones=False):
            if st.compacted and not st.uncleanable_reason:
                total += st.cleanable_bytes or 0
        return total

    def engine_named(self, name: str | None) -> Engine:
        """This cleaner's engine, or another one by name (built once, then kept)."""
        if name is None or name == self.engine.name:
            return self.engine
        if name not in self._engines:
            if self._engine_factory is None:
                raise InvalidConfigError(
                    f"unknown engine {name!r}: this cleaner has only {self.engine.name!r}"
                )
            self._engines[name] = self._engine_factory(name)
        return self._engines[name]

    # -- the manager's state, for callers of the cleaner ------------------------------
    @property
    def states(self) -> LogCleanerManager:
        """:attr:`manager`, by the name the broker and the CLI read its states with."""
        return self.manager

    def checkpoints(self) -> dict[tuple[str, int], int]:
        return self.manager.checkpoints()

    def _update_checkpoint(self, tp: tuple[str, int], offset: int) -> None:
        self.manager.update_checkpoint(tp, offset)  # (a crash test writes one directly)

    def uncleanable(self) -> dict[tuple[str, int], str]:
        return self.manager.uncleanable()

    def log_to_clean(self, plog: PartitionLog) -> cleanable.LogToClean:
        return self.manager.log_to_clean(plog)

    # -- cleaning -------------------------------------------------------------------------
    def clean_once(self) -> bool:
        """One background pass: clean the filthiest eligible log.

        False when nothing was eligible or the clean failed, so the caller backs off for
        ``log.cleaner.backoff.ms`` instead of retrying a failing log in a tight loop.
        """
        self.last_run_ms = self.clock()
        ltc = self.manager.grab_filthiest()  # in progress from here
        if ltc is None:
            return False
        try:
            result = self._plan_and_clean(ltc.log, force=False)
        except CleaningAbortedError as exc:
            log.info("%s", exc)
            return False
        except Exception as exc:  # I/O (is_io_error): logged, retried after the backoff
            log.error(
                "I/O error while cleaning %s; its segments are unchanged: %s", ltc.log.name, exc
            )
            return False
        finally:
            self.manager.done(ltc.topic_partition)
        return result.status == report.CLEANED

    def due(self, force: bool = False, update_resets: bool = True) -> list[cleanable.LogToClean]:
        """:meth:`LogCleanerManager.due`: the logs a pass would clean, filthiest first."""
        return self.manager.due(force, update_resets)

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
        result = self._compact_one(plog, force, dry_run, self.engine, progress, embedded=True)
        return result.stats

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
            policy = ",".join(config.cleanup_policy) or "'' (no cleanup at all)"
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
        embedded: bool = False,
    ) -> report.PartitionResult:
        tp = (plog.topic, plog.partition)
        if plog.uncleanable_reason and not embedded:
            return self._uncleanable_result(plog)
        self.manager.begin(tp)
        try:
            return self._plan_and_clean(
                plog,
                force=force,
                dry_run=dry_run,
                engine=engine,
                progress=progress,
                embedded=embedded,
            )
        finally:
            self.manager.done(tp)

    def _plan_and_clean(
        self,
        plog: PartitionLog,
        *,
        force: bool,
        dry_run: bool = False,
        engine: Engine | None = None,
        progress: Progress | None = None,
        embedded: bool = False,
    ) -> report.PartitionResult:
        """Plan and clean a partition this thread owns in :attr:`manager`: the one
        entry to the pass and the swap.

        Like Kafka's ``CleanerThread.cleanLog``: an aborted clean and an I/O error are
        raised (the partition stays cleanable); anything else marks it uncleanable,
        unless ``embedded`` (:meth:`clean_partition`), which raises every error.
        """
        tp = (plog.topic, plog.partition)
        with self.lock:
            if not embedded and not is_live(self.logs, plog):  # deleted while it waited
                return report.PartitionResult(
                    plog.topic,
                    plog.partition,
                    report.SKIPPED,
                    reason=f"{plog.name} was deleted; nothing to clean",
                )
            ltc = self.manager.log_to_clean(plog)
            if ltc.checkpoint_reset and not dry_run:
                self.manager.update_checkpoint(tp, ltc.first_dirty_offset)
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
                if embedded:
                    raise
                log.info("%s", exc)
                result.reason = str(exc)
                return result
            except CleaningAbortedError:
                raise
            except Exception as exc:  # classified here: I/O, else uncleanable (Kafka)
                if is_io_error(exc):
                    # Kafka's LogCleaner: an IOException takes the log dir offline
                    # (LogDirFailureChannel), in either engine; no retry loop on it
                    report_io = getattr(self.logs, "report_io_error", None)
                    if report_io is not None:
                        report_io(plog.topic, plog.partition, exc, f"cleaning {plog.name}")
                    raise
                if embedded:
                    raise
                self.manager.mark_uncleanable(plog, exc)
                return self._uncleanable_result(plog)
        result.status = report.DRY_RUN if dry_run else report.CLEANED
        return result

    def _uncleanable_result(self, plog: PartitionLog) -> report.PartitionResult:
        file, position = self.manager.corrupt_at((plog.topic, plog.partition))
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
        self.manager.close(why)
        self.throttle.close()  # a throttle sleep under way ends now

    def _clean(
        self, ltc: cleanable.LogToClean, dry_run: bool, progress: Progress | None, engine: Engine
    ) -> CleanStats:
        """:meth:`_run_clean`, shown in :attr:`running` while it runs and told to the
        :attr:`listeners` when a real (not dry-run) clean has finished."""
        tp = ltc.topic_partition
        if hasattr(engine, "choose"):  # auto: local or spark, named in stats and log line
            engine = engine.choose(ltc)
        running = RunningClean(tp[0], tp[1], engine.name, dry_run, self.clock())

        def tick(done: int, total: int) -> None:
            running.done, running.total = done, total
            if progress is not None:
                progress(done, total)

        self.running[tp] = running
        try:
            stats = self._run_clean(ltc, dry_run, tick, engine)
        finally:
            if self.running.get(tp) is running:
                del self.running[tp]
        if not dry_run:
            for listener in list(self.listeners):
                try:
                    listener(stats)
                except Exception:  # an observer must never fail a clean
                    log.exception("clean listener failed")
        return stats

    def _run_clean(
        self, ltc: cleanable.LogToClean, dry_run: bool, progress: Progress | None, engine: Engine
    ) -> CleanStats:
        """Kafka ``CleanerThread.cleanLog`` around ``Cleaner.clean``: hand the planned
        log to the engine, swap its cleaned groups in, then write the checkpoint."""
        plog = ltc.log
        t0 = time.monotonic()
        now = self.clock()
        tp = (plog.topic, plog.partition)

        def check_done() -> None:
            try:
                self.manager.check_done(tp)
            except CleaningAbortedError as exc:
                if exc.shutdown:
                    raise
                # this partition only (LogManager.delete_topic: abortAndPauseCleaning)
                raise SegmentsChangedError(
                    f"{plog.name} {exc.why}; the clean is abandoned"
                ) from None
            if not is_live(self.logs, plog):  # Kafka's deleteLog aborts the clean first
                raise SegmentsChangedError(
                    f"{plog.name} was deleted during the clean; the clean is abandoned"
                )

        check_done()
        start_offset = plog.log_start_offset
        segments = plog.segments_snapshot()
        stats = CleanStats(
            plog.topic,
            plog.partition,
            engine.name,
            dry_run=dry_run,
            first_dirty_offset=ltc.first_dirty_offset,
            first_uncleanable_offset=ltc.first_uncleanable_offset,
            started_ms=now,
            dirty_ratio=ltc.cleanable_ratio,
            segments_before=len(segments),
        )
        try:
            try:
                job = CleanJob(
                    ltc,
                    segments,
                    start_offset,
                    summarize_producers(plog, segments, now),
                    now,
                    dry_run,
                    check_done,
                    progress,
                    self.throttle,
                )
                run = engine.clean(job)
            except Exception as exc:
                reraise_classified(plog, start_offset, segments, exc)
                raise
            to_clean = job.to_clean(run.dirty.end_offset)
            check_done()  # the last point to stop: swapping is not undone
            why = log_changed(plog, start_offset, to_clean, start_counts=False)
            if why is not None:
                raise SegmentsChangedError(why)
        except BaseException:
            if not dry_run:  # what a failed or abandoned run left (a Spark task's too)
                remove_cleaned_files(plog.dir, [[s] for s in segments])
            raise
        stats.add_dirty(run.dirty)
        total = GroupStats()
        try:
            for gstats, dest, group in run.groups:
                total.add(gstats)
                if dest is not None:
                    plog.replace_segments(dest, group)
                    dest = None
        finally:
            for _g, dest, _group in run.groups:
                if dest is not None and dest.suffix == CLEANED_SUFFIX:
                    dest.delete_files()
        stats.add_groups(total)
        # what this clean made of the log it started from (a segment rolled meanwhile is not)
        stats.segments_after = len(segments) - len(to_clean) + len(run.groups)
        if not dry_run:
            self.manager.update_checkpoint(tp, run.dirty.end_offset)
            self.compactions_total += 1
            self.cleaned_bytes_total += stats.bytes_read
        stats.duration_s = time.monotonic() - t0
        if not dry_run:
            self.last_stats[tp] = stats
        log.info("%s", stats.log_line())
        return stats

    def close(self, timeout: float = 30.0) -> None:
        """Abort what still runs and wait for it to stop (Kafka's shutdown of the cleaner
        threads aborts their cleans)."""
        self.abort_all("shutting down")
        if not self.manager.wait_idle(timeout):
            log.warning("a clean did not stop within %.0f s", timeout)


class NotCompactedError(KompaktError):
    """A clean was asked for on a topic whose policy has no ``compact``."""

    error_code = ErrorCode.invalid_config
