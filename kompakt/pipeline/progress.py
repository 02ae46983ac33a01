"""Spark job progress as ``(tasks done, tasks known)`` for the cleaner's progress callback.

A compaction job is a few Spark stages (scan, shuffle, group rewrite); the tasks they
finish are the only honest progress Spark reports. The jobs run under a job group of
their own (thread-local with PySpark's pinned threads), and a daemon thread polls the
status tracker, so the CLI's bar moves while ``collect()`` blocks.
"""

from __future__ import annotations

import itertools
import threading
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
    sc = spark.sparkContext
    group = f"kompakt-{next(_ids)}"
    sc.setJobGroup(group, description)
    stop = threading.Event()

    def poll() -> None:
        while not stop.wait(interval_s):
            done, total = task_counts(spark, group)
            if total:
                progress(done, total)

    poller = threading.Thread(target=poll, name="kompakt-spark-progress", daemon=True)
    poller.start()
    try:
        yield
    finally:
        stop.set()
        poller.join()
        sc.setLocalProperty("spark.jobGroup.id", None)
        sc.setLocalProperty("spark.job.description", None)
    # stages Spark skipped (shuffle reuse) never complete their tasks: finished is total
    _done, total = task_counts(spark, group)
    if total:
        progress(total, total)
