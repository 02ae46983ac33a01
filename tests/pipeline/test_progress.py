"""`kompakt compact --engine spark` shows Spark's own job progress (tasks done / known)."""

from __future__ import annotations

from engine_kit import write_log

from kompakt.cleaner import Cleaner
from kompakt.log.manager import LogManager
from kompakt.pipeline.engine import SparkEngine
from kompakt.pipeline.progress import spark_progress, task_counts


def test_spark_clean_reports_task_progress(spark, tmp_path):
    write_log(tmp_path, [([(b"k%d" % (i % 5), b"v%d" % i)], 0, False) for i in range(60)])
    calls: list[tuple[int, int]] = []
    with LogManager(tmp_path) as logs:
        cleaner = Cleaner(logs, engine=SparkEngine())
        stats = cleaner.clean_partition(
            logs.get_log("t", 0), progress=lambda d, t: calls.append((d, t))
        )
    assert stats is not None and stats.records_read > stats.records_written
    assert calls, "no progress reported"
    done, total = calls[-1]
    assert 0 < total and done == total
    assert all(0 <= d <= t for d, t in calls)


def test_progress_counts_only_its_own_job_group(spark):
    seen: list[tuple[int, int]] = []
    spark.range(10).count()  # a job outside the group
    with spark_progress(spark, lambda d, t: seen.append((d, t)), "test"):
        spark.sparkContext.parallelize(range(100), 3).map(lambda x: x * 2).collect()
    assert seen[-1] == (3, 3)
    assert task_counts(spark, "no-such-group") == (0, 0)
