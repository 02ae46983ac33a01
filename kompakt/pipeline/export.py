"""Latest-state export: a compacted topic as a table, one row per live key.

This is what a consumer gets by folding the topic into a dict: per partition and key
the record with the highest offset, and keys whose latest record is a tombstone left
out. The dirty head is included (the export does not wait for the cleaner) and
aborted transactions are not (the source reads ``read_committed``).
"""

from __future__ import annotations

import os

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from kompakt.log.names import validate_topic_name
from kompakt.pipeline import register

COLUMNS = ("key", "value", "partition", "offset", "timestamp", "headers")


def latest_state(spark: SparkSession, data_dir: str | os.PathLike, topic: str) -> DataFrame:
    """DataFrame of the latest non-tombstone record per (partition, key)."""
    validate_topic_name(topic)
    register(spark)
    df = (
        spark.read.format("kompakt")
        .option("path", str(data_dir))
        .option("subscribe", topic)
        .load()
        .where(F.col("key").isNotNull())
    )
    latest = df.groupBy("partition", "key").agg(
        F.max_by(F.struct(*[c for c in COLUMNS if c not in ("key", "partition")]), "offset").alias(
            "r"
        )
    )
    return latest.select(
        "key", "r.value", "partition", "r.offset", "r.timestamp", "r.headers"
    ).where(F.col("value").isNotNull())


def export_latest(
    spark: SparkSession,
    data_dir: str | os.PathLike,
    topic: str,
    out_path: str | os.PathLike,
    format: str = "parquet",
    mode: str = "overwrite",
) -> int:
    """Write the latest state of ``topic`` to ``out_path``; returns the rows written.

    CSV has no binary or nested types: there ``key``/``value`` are base64 (lossless, as
    Spark's JSON writer already does) and ``headers`` a JSON string.
    """
    table = latest_state(spark, data_dir, topic)
    if format == "csv":
        table = table.select(
            F.base64("key").alias("key"),
            F.base64("value").alias("value"),
            "partition",
            "offset",
            "timestamp",
            F.to_json("headers").alias("headers"),
        )
    table = table.cache()
    try:
        rows = table.count()
        table.write.format(format).mode(mode).save(str(out_path))
    finally:
        table.unpersist()
    return rows
