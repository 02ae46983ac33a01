"""The Spark compaction engine: the cleaner's dedup and rewrite stages as one Spark job.

Dedup: :func:`kompakt.pipeline.survivors.superseded` reads the range to rewrite once and
exchanges one 128-bit key digest per keyed record (Kafka's ``SkimpyOffsetMap`` keys by a
16-byte MD5 digest) to mark every record that a later record of its key, fed to the map
by the cleaner's rule (:func:`kompakt.cleaner.key_map.feeds_key_map`), supersedes — any
number of keys, one pass, so a round always reaches the first uncleanable offset (no
offset map, no partial cleans). Rewrite: each segment group goes to a task with only
its slice of that bitmap (:mod:`kompakt.pipeline.groups`), which runs the cleaner's own
group rewrite (:func:`kompakt.cleaner.segment_io.write_cleaned_group`, so the
survive/discard rule is the same code) and leaves a ``.cleaned`` segment next to the
originals. The driver then does the crash-safe swap and the checkpoint, as for the
in-process engine. Data dirs must be on a path every executor sees. An abort
(``check_done`` raising) cancels the job group and waits for its tasks to end, so the
cleaner's removal of ``.cleaned`` files is not raced by a task still writing one.

The cleaner's I/O throttle (``log.cleaner.io.max.bytes.per.second``, raised by the
backlog rule) is honoured in the tasks, where the reads and writes happen: each task
gets an equal share of the rate in force when the job starts, the rate divided by the
number of tasks that can run at once (``min(tasks, defaultParallelism)``), and runs
Kafka's ``Throttler`` on it over the bytes it reads (dedup map tasks, rewrite) and
writes. The bytes and sleep of every task come back through Spark accumulators to the
cleaner's throttle counters (``kompakt_log_cleaner_throttle_seconds_total``).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Mapping
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from kompakt.cleaner.engine import CleanJob, EngineRun, GroupResult
from kompakt.cleaner.rewrite import GroupStats, RoundContext
from kompakt.cleaner.segment_io import CleanFaults, tracker_states, write_cleaned_group
from kompakt.cleaner.stats import DirtyRange
from kompakt.cleaner.throttle import Throttler
from kompakt.log.segment import CLEANED_SUFFIX, LogSegment, segment_file


def _group_cleaner(
    ctx: RoundContext,
    seg_kwargs: dict[str, Any],
    dry_run: bool,
    throttle: Throttler | None = None,
    faults: CleanFaults | None = None,
) -> Callable:
    """The executor side of one group: Kafka ``cleanSegments`` with the group's bits as
    the offset map; ``throttle`` is this task's share of the cleaner's I/O limit,
    ``faults`` the engine's (shipped with the task)."""

    def clean(task) -> dict[str, Any]:
        directory = Path(task.dir)
        sources = [(b, segment_file(directory, b), None) for b in task.bases]
        stats, dest = write_cleaned_group(
            directory,
            sources,
            task.superseded.latest_lookup(),
            ctx,
            seg_kwargs,
            dry_run,
            task.txn,
            None,
            throttle.maybe_throttle if throttle is not None else None,
            faults,
        )
        if dest is not None:
            dest.close()
        if throttle is not None:
            throttle.settle()  # this task's share, however short the task
        return asdict(stats)

    return clean


class SparkEngine:
    """Runs on :func:`kompakt.pipeline.session` (local ``local[*]`` or a cluster)."""

    name = "spark"

    def __init__(self, config: Mapping[str, str] | None = None, faults: CleanFaults | None = None):
        self.config = dict(config or {})
        self.faults = faults or CleanFaults()
        """What a test injects into the group rewrites (shipped with each task)."""

    def _session(self) -> Any:
        """The session, keeping the caller's SIGINT handler: creating a SparkContext in
        the main thread installs PySpark's own (cancel every job, raise
        KeyboardInterrupt anywhere), which would bypass the CLI's abort of the clean."""
        from kompakt.pipeline import session

        main = threading.current_thread() is threading.main_thread()
        before = signal.getsignal(signal.SIGINT) if main else None
        spark = session(self.config)
        custom = before not in (None, signal.SIG_DFL, signal.SIG_IGN, signal.default_int_handler)
        if main and custom and signal.getsignal(signal.SIGINT) is not before:
            signal.signal(signal.SIGINT, before)
        return spark

    def clean(self, job: CleanJob) -> EngineRun:
        """One pass always covers the whole dirty range: the exchange has no size limit,
        so the round ends at the first uncleanable offset (no partial clean)."""
        end = job.ltc.first_uncleanable_offset
        groups = job.groups_to(end)
        ctx = job.round_context(end)
        return EngineRun(DirtyRange(end_offset=end), self._rewrite(job, groups, ctx))

    def _rewrite(
        self, job: CleanJob, groups: list[list[LogSegment]], ctx: RoundContext
    ) -> list[GroupResult]:
        from kompakt.pipeline import survivors
        from kompakt.pipeline.groups import GroupTask, run_groups, run_groups_in_one_task
        from kompakt.pipeline.progress import spark_job

        if not groups:
            return []
        plog, dry_run, end = job.log, job.dry_run, job.ltc.first_uncleanable_offset
        job.check_done()
        spark = self._session()
        part = plog.partition
        start = max(groups[0][0].base_offset, plog.log_start_offset)
        first_dirty = job.ltc.first_dirty_offset
        bases = [[s.base_offset for s in g] for g in groups]
        sc = spark.sparkContext
        io_bytes, io_sleep = sc.accumulator(0.0), sc.accumulator(0.0)

        def share(n_tasks: int) -> Throttler | None:
            """One task's share of the throttle when ``n_tasks`` run in a stage."""
            if job.throttle is None:
                return None

            def report(observed: float, slept: float) -> None:
                io_bytes.add(observed)
                io_sleep.add(slept)

            return job.throttle.share(min(n_tasks, max(1, sc.defaultParallelism)), report)

        aborted = job.producers.aborted_between(start, end)
        # each task starts from the clean's one transaction pass as it reaches its group
        states = tracker_states(
            groups, job.producers.aborted_between(start, groups[-1][-1].next_offset)
        )
        tasks = [
            GroupTask(
                plog.topic, part, str(plog.dir), i, tuple(bases[i]), g[-1].next_offset, None, txn
            )
            for i, (g, txn) in enumerate(zip(groups, states, strict=True))
        ]
        with spark_job(spark, f"kompakt clean {plog.name}", job.progress, job.check_done):
            reads = survivors.plan_reads(plog.dir, [b for g in bases for b in g])
            try:
                if survivors.task_bytes_total(reads) <= survivors.SINGLE_TASK_BYTES:
                    # A small range: decide and rewrite in one Spark task, same functions.
                    one = share(1)
                    io = one.maybe_throttle if one is not None else None

                    def decide() -> survivors.Superseded:
                        return survivors.superseded_here(
                            reads, start, first_dirty, end, aborted, io=io
                        )

                    clean = _group_cleaner(ctx, plog.segment_kwargs(), dry_run, one, self.faults)
                    rows = run_groups_in_one_task(spark, decide, tasks, clean)
                else:
                    bits = survivors.superseded(
                        spark,
                        plog.dir,
                        start,
                        first_dirty,
                        end,
                        bases,
                        aborted,
                        throttle=share(len(reads)),
                    )
                    sliced = [replace(t, superseded=bits.slice(t.bases[0], t.end)) for t in tasks]
                    clean = _group_cleaner(
                        ctx, plog.segment_kwargs(), dry_run, share(len(tasks)), self.faults
                    )
                    rows = run_groups(spark, sliced, clean)
            finally:
                if job.throttle is not None:
                    job.throttle.add(io_bytes.value, io_sleep.value)
        out: list[GroupResult] = []
        for row, group in zip(rows, groups, strict=True):
            stats = GroupStats(**{k: row[k] for k in asdict(GroupStats())})
            dest = None
            if not dry_run:
                dest = LogSegment(
                    plog.dir,
                    group[0].base_offset,
                    suffix=CLEANED_SUFFIX,
                    writable=False,
                    **plog.segment_kwargs(),
                )
            out.append((stats, dest, group))
        return out


def warm_up(
    config: Mapping[str, str] | None = None, busy: Callable[[], bool] = lambda: False
) -> tuple[float, float]:
    """Start the process's SparkSession and, on a local master, clean a throwaway topic
    of a few records with this engine, so the first real clean finds the Python
    workers, the data source and the job's code paths started too (on a loaded 2-core
    machine that first job costs as much as the session). Returns (seconds for the
    session, seconds for the warm-up clean). The throwaway clean is skipped when
    ``busy()`` says a real clean is already under way (it warms Spark itself; a second
    job would only slow it down), and on a cluster master: its executors cannot see a
    local temporary dir."""
    import tempfile
    import time

    from kompakt.cleaner.cleaner import Cleaner
    from kompakt.log.manager import LogManager
    from kompakt.pipeline import DEFAULT_MASTER, MASTER_KEY, session

    config = dict(config or {})
    t0 = time.monotonic()
    session(config)
    t1 = time.monotonic()
    if busy() or not config.get(MASTER_KEY, DEFAULT_MASTER).startswith("local"):
        return t1 - t0, 0.0
    with tempfile.TemporaryDirectory(prefix="kompakt-warm-up-") as tmp:
        with LogManager(Path(tmp)) as logs:
            throwaway_topic(logs, "warm-up")
            Cleaner(logs, engine=SparkEngine(config), config=config).compact_now("warm-up")
    return t1 - t0, time.monotonic() - t1


def throwaway_topic(logs: Any, name: str) -> Any:
    """A compacted topic of 40 records over 4 keys in small rolled segments: something
    for a warm-up clean to do (:func:`warm_up`, the worker daemon's preload)."""
    import time

    from kompakt.record.encode import build_simple_batch

    logs.create_topic(name, 1, {"cleanup.policy": "compact", "segment.bytes": "1024"})
    plog = logs.get_log(name, 0)
    now = int(time.time() * 1000)
    for i in range(40):
        plog.append(build_simple_batch([(b"k%d" % (i % 4), b"v%d" % i)], timestamp=now))
    plog.roll()
    return plog
