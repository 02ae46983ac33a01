"""Spark job progress as ``(tasks done, tasks known)`` for the cleaner's progress callback.

A compaction job is a few Spark stages (scan, shuffle, group rewrite); the tasks they
finish are the only honest progress Spark reports. The jobs run under a job group of
their own (thread-local with PySpark's pinned threads), and a daemon thread polls the
status tracker, so the CLI's bar moves while ``collect()`` blocks.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from pyspark.sql import SparkSession

Progress = Callable[[int, int], None]

_ids = itertools.count()


def task_counts(spark: SparkSession, group: str) -> tuple[int, int]:
    """(completed, total) tasks over every stage of every job in ``group`` so far."""
    tracker = spark.sparkContext.statusTracker()
    done = total = 0
    for job_id in tracker.getJobIdsForGroup(group):
        job = tracker.getJobInfo(job_id)
        if job is None:
            continue
        for stage_id in job.stageIds:
            stage = tracker.getStageInfo(stage_id)
            if stage is None:  # skipped or already forgotten
                continue
            done += stage.numCompletedTasks
            total += stage.numTasks
    return done, total


@contextmanager
def spark_progress(
    spark: SparkSession, progress: Progress | None, description: str, interval_s: float = 0.25
) -> Iterator[None]:
    """Run the block's Spark jobs in a job group and report their task progress."""
    if progress is None:
        yield
        return
    with spark_job(spark, description, progress, interval_s=interval_s):
        yield


@contextmanager
def spark_job(
    spark: SparkSession,
    description: str,
    progress: Progress | None = None,
    check_done: Callable[[], None] | None = None,
    interval_s: float = 0.25,
) -> Iterator[None]:
    """Run the block's Spark jobs in a job group of their own; report their progress and
    cancel them once ``check_done`` raises.

    A Spark job cannot poll Kafka's ``checkDone`` itself, so a thread polls it and
    cancels the group (tasks interrupted). The block's error then becomes the one
    ``check_done`` raised, but only after every task of the group has ended, so a task
    still writing cannot leave a file behind the caller's clean-up. Spark's log4j is
    turned off from the cancel until those tasks have ended (the killed tasks' errors
    are expected, not worth Java stack traces), then set back to the level it had,
    kompakt's quiet default (``kompakt.spark.log.level``, ERROR) unless the user
    asked for another, so a later job logs as any other.
    """
    sc = spark.sparkContext
    group = f"kompakt-{next(_ids)}"
    sc.setJobGroup(group, description, interruptOnCancel=True)
    stop = threading.Event()
    aborted: list[BaseException] = []
    level: list[str | None] = []  # the log level before the cancel silenced Spark

    def poll() -> None:
        while not stop.wait(interval_s):
            if check_done is not None and not aborted:
                try:
                    check_done()
                except BaseException as exc:  # noqa: BLE001 (re-raised by the block)
                    aborted.append(exc)
                    level.append(_silence_log(sc))
                    sc.cancelJobGroup(group)
            if progress is not None:
                done, total = task_counts(spark, group)
                if total:
                    progress(done, total)

    poller = threading.Thread(target=poll, name="kompakt-spark-job", daemon=True)
    poller.start()
    failed = False
    try:
        yield
    except BaseException:
        if not aborted:
            raise
        failed = True  # cancelled: raised below as the abort, once the tasks ended
    finally:
        stop.set()
        poller.join()
        sc.setLocalProperty("spark.jobGroup.id", None)
        sc.setLocalProperty("spark.job.description", None)
        sc.setLocalProperty("spark.job.interruptOnCancel", None)
        if aborted:
            wait_for_tasks(spark, group)
            if level and level[0] is not None:
                _set_log_level(sc, level[0])
    if failed:  # the block failed because it was cancelled
        raise aborted[0] from None
    # stages Spark skipped (shuffle reuse) never complete their tasks: finished is total
    if progress is not None:
        _done, total = task_counts(spark, group)
        if total:
            progress(total, total)


def wait_for_tasks(spark: SparkSession, group: str, timeout_s: float = 60.0) -> bool:
    """Wait until no task of ``group`` runs any more (a killed Python worker is gone)."""
    tracker = spark.sparkContext.statusTracker()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        active = 0
        for job_id in tracker.getJobIdsForGroup(group):
            job = tracker.getJobInfo(job_id)
            for stage_id in job.stageIds if job is not None else ():
                stage = tracker.getStageInfo(stage_id)
                active += stage.numActiveTasks if stage is not None else 0
        if not active:
            return True
        time.sleep(0.05)
    return False


def log_level(sc) -> str | None:
    """The root level of Spark's log4j (None when the JVM cannot say: stopped)."""
    try:
        root = sc._jvm.org.apache.logging.log4j.LogManager.getRootLogger()
        return str(root.getLevel().toString())
    except Exception:  # noqa: BLE001
        return None


def _set_log_level(sc, level: str) -> None:
    try:
        sc.setLogLevel(level)
    except Exception:  # noqa: BLE001 (a stopped context: nothing to set)
        pass


def _silence_log(sc) -> str | None:
    """Turn Spark's log4j off; returns the level it had."""
    before = log_level(sc)
    _set_log_level(sc, "OFF")
    return before
