"""Run a pipeline job against a given Spark master in a fresh process; print JSON.

A process has one SparkContext, and the test session's is local: the cluster run
therefore happens here, started by test_cluster.py. Usage:
``python cluster_job.py MASTER DATA_DIR TOPIC ACTION...`` with ACTION ``read`` (the data
source over TOPIC) or ``compact=DIR`` (the cleaner's Spark engine on DIR, cleaned as
test_engine.py's differential test cleans it, so the caller compares the files).
"""

from __future__ import annotations

import json
import sys
import time


def main() -> None:
    master, data_dir, topic = sys.argv[1:4]
    actions = sys.argv[4:]
    t0 = time.monotonic()
    import kompakt.pipeline as pipeline
    from kompakt.pipeline.standalone import FAST_START_JAVA_OPTS

    config = {
        "kompakt.spark.master": master,
        "spark.sql.shuffle.partitions": "4",
        "spark.executor.memory": "1g",
        "spark.executor.cores": "1",
        "spark.driver.extraJavaOptions": FAST_START_JAVA_OPTS,
        "spark.executor.extraJavaOptions": FAST_START_JAVA_OPTS,
    }
    spark = pipeline.session(config)
    spark.sparkContext.setLogLevel("ERROR")
    out: dict = {"session_s": round(time.monotonic() - t0, 1)}
    out |= {"executors": spark.sparkContext.getConf().get("spark.master")}
    for action in actions:
        out |= run_action(spark, config, action, data_dir, topic)
    out["job_s"] = round(time.monotonic() - t0, 1)
    pipeline.stop()
    print("RESULT " + json.dumps(out))


def run_action(spark, config: dict, action: str, data_dir: str, topic: str) -> dict:
    out: dict = {}
    if action == "read":
        df = (
            spark.read.format("kompakt")
            .option("path", data_dir)
            .option("subscribe", topic)
            .option("maxBytesPerPartition", "500")
            .load()
        )
        out["input_partitions"] = df.rdd.getNumPartitions()
        out["rows"] = sorted(
            [
                r.partition,
                r.offset,
                bytes(r.key).hex(),
                None if r.value is None else bytes(r.value).hex(),
            ]
            for r in df.collect()
        )
        out["hosts"] = sorted(
            set(
                spark.sparkContext.parallelize(range(8), 8)
                .map(lambda _: __import__("os").getpid())
                .collect()
            )
        ).__len__()
    elif action.startswith("compact="):
        from pathlib import Path

        from engine_kit import clean_twice  # this script's folder is first on sys.path

        from kompakt.pipeline.engine import SparkEngine

        t1 = time.monotonic()
        clean_twice(Path(action.split("=", 1)[1]), SparkEngine(config))
        out["compact_s"] = round(time.monotonic() - t1, 1)
    else:
        raise SystemExit(f"unknown action {action}")
    return out


if __name__ == "__main__":
    main()
