"""kompakt.pipeline.session() / register(): the one SparkSession kompakt uses."""

from __future__ import annotations

import sys

import kompakt.pipeline as pipeline
from kompakt.pipeline import spark_conf


def test_spark_conf_defaults_to_local_star_and_passes_only_spark_keys():
    conf = spark_conf({"kompakt.cleaner.engine": "spark", "spark.executor.memory": "2g"})
    assert conf["spark.master"] == "local[*]"
    assert conf["spark.executor.memory"] == "2g"
    assert "kompakt.cleaner.engine" not in conf
    assert conf["spark.pyspark.python"] == sys.executable
    assert conf["spark.pyspark.driver.python"] == sys.executable
    assert (
        spark_conf({"kompakt.spark.master": "spark://h:7077"})["spark.master"] == "spark://h:7077"
    )


def test_a_local_masters_jvm_gets_c1_and_serial_gc_unless_the_user_chose():
    """On a local master the driver JVM is the executor, beside the Python workers on the
    same cores: C1 only and serial GC by default; the user's own JIT or GC options win,
    and a cluster's driver is left alone."""
    local = spark_conf({"kompakt.spark.master": "local[2]"})["spark.driver.extraJavaOptions"]
    assert "-XX:TieredStopAtLevel=1" in local.split()
    assert "-XX:+UseSerialGC" in local.split()
    mine = spark_conf(
        {
            "kompakt.spark.master": "local[2]",
            "spark.driver.extraJavaOptions": "-XX:+UseG1GC -XX:-TieredCompilation",
        }
    )["spark.driver.extraJavaOptions"].split()
    assert "-XX:+UseG1GC" in mine and "-XX:-TieredCompilation" in mine
    assert "-XX:+UseSerialGC" not in mine and "-XX:TieredStopAtLevel=1" not in mine
    cluster = spark_conf({"kompakt.spark.master": "spark://h:7077"})
    assert "-XX:" not in cluster.get("spark.driver.extraJavaOptions", "")


def test_session_is_one_per_process_configured_and_has_the_source(spark):
    again = pipeline.session({"kompakt.spark.master": "local[1]"})
    assert again is spark
    conf = spark.sparkContext.getConf()
    assert conf.get("spark.master") == "local[2]"
    assert conf.get("spark.pyspark.python") == sys.executable
    assert spark.conf.get("spark.sql.shuffle.partitions") == "2"
    assert pipeline.register(spark) is spark  # registering twice is harmless


def test_a_local_session_starts_its_python_workers_while_its_sql_side_starts(spark):
    """The first clean after a start should not pay the context's first Python job (the
    JVM's cold job path, the workers' daemon): a local session runs a one-task job of
    its own meanwhile, in a job group of its own."""
    from shared_kit import wait_for

    tracker = spark.sparkContext.statusTracker()
    jobs = wait_for(
        lambda: tracker.getJobIdsForGroup(pipeline.WARM_UP_GROUP), "the warm-up job", 120
    )
    wait_for(
        lambda: all(tracker.getJobInfo(j).status == "SUCCEEDED" for j in jobs),
        "the warm-up job to succeed",
        120,
    )


def test_readme_example(spark, tmp_path, monkeypatch):
    """The Spark example of docs/spark.md, run from the page's text itself."""
    import re
    import tempfile
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "docs" / "spark.md").read_text()
    block = next(b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "session()" in b)
    data_dir = str(tmp_path / "data")
    monkeypatch.setattr(tempfile, "mkdtemp", lambda *a, **k: data_dir)
    scope: dict = {}
    exec(compile(block, "docs/spark.md", "exec"), scope)
    latest = scope["latest"]
    from kompakt.log.manager import LogManager

    assert [(bytes(r.key), r["max(offset)"]) for r in latest] == [(b"alice", 1)]
    with LogManager(data_dir) as logs:
        assert sum(logs.get_log("users", p).log_end_offset for p in range(2)) == 3
