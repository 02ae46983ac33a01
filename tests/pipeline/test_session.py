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


def test_session_is_one_per_process_configured_and_has_the_source(spark):
    again = pipeline.session({"kompakt.spark.master": "local[1]"})
    assert again is spark
    conf = spark.sparkContext.getConf()
    assert conf.get("spark.master") == "local[2]"
    assert conf.get("spark.pyspark.python") == sys.executable
    assert spark.conf.get("spark.sql.shuffle.partitions") == "2"
    assert pipeline.register(spark) is spark  # registering twice is harmless


def test_readme_example(spark, tmp_path):
    # --- README example (docs: "Reading and writing topics with Spark") ---
    from kompakt.log.manager import LogManager
    from kompakt.pipeline import attach_manager, session
    from kompakt.record.batch import build_simple_batch

    data_dir = str(tmp_path / "data")
    with LogManager(data_dir) as logs:
        logs.create_topic("users", partitions=2, configs={"cleanup.policy": "compact"})
        logs.get_log("users", 0).append(
            build_simple_batch([(b"alice", b"London"), (b"alice", b"Paris")], timestamp=1)
        )
        attach_manager(logs)  # Spark writes commit through this process's LogManager

        spark = session()  # local[*] unless kompakt.spark.master says otherwise
        df = (
            spark.read.format("kompakt")
            .option("path", data_dir)
            .option("subscribe", "users")
            .load()
        )
        latest = df.groupBy("key").agg({"offset": "max"}).collect()
        spark.createDataFrame([("bob", "Rome")], "key string, value string").write.format(
            "kompakt"
        ).option("path", data_dir).option("topic", "users").mode("append").save()
    # --- end of example ---
    assert [(bytes(r.key), r["max(offset)"]) for r in latest] == [(b"alice", 1)]
    with LogManager(data_dir) as logs:
        assert sum(logs.get_log("users", p).log_end_offset for p in range(2)) == 3
