"""Spark stages of a clean that need no cleaner policy: the key map and its lookup.

Kafka builds an in-memory offset map (key hash -> latest offset) over the dirty range
and, when the map is full, cleans only part of it per pass. Here the map is a Spark
aggregation: ``groupBy(partition, key).max(offset)`` shuffles exact keys, so any
number of distinct keys is handled in one pass and no two keys can collide. The
lookup joins every record of the range being rewritten with that map, so each record
carries the latest dirty offset of its key (null: the key is not in the dirty range).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from kompakt.pipeline import register

OffsetRange = tuple[int, int]  # [start, end)


def read_ranges(
    spark: SparkSession, data_dir: str | os.PathLike, topic: str, ranges: Mapping[int, OffsetRange]
) -> DataFrame:
    """Records of ``topic`` in the given offset range of each listed partition."""
    register(spark)
    parts = sorted(ranges)
    return (
        spark.read.format("kompakt")
        .option("path", str(data_dir))
        .option("assign", json.dumps({topic: parts}))
        .option("startingOffsets", json.dumps({topic: {str(p): ranges[p][0] for p in parts}}))
        .option("endingOffsets", json.dumps({topic: {str(p): ranges[p][1] for p in parts}}))
        .option("includeHeaders", "false")
        .load()
    )


def latest_offsets(
    spark: SparkSession, data_dir: str | os.PathLike, topic: str, dirty: Mapping[int, OffsetRange]
) -> DataFrame:
    """(partition, key, latest): the highest offset of every key in the dirty ranges.

    Control batches and aborted transactions are not in it (the source reads
    ``read_committed``); records without a key are not either, as in Kafka's map.
    """
    records = read_ranges(spark, data_dir, topic, dirty)
    return (
        records.where(F.col("key").isNotNull())
        .groupBy("partition", "key")
        .agg(F.max("offset").alias("latest"))
    )


def group_of_offsets(bounds: Mapping[int, Sequence[int]]):
    """A mapInArrow function adding ``group``: index of the segment group of each offset.

    ``bounds[p]`` lists the first base offset of each group of partition ``p``.
    """
    starts = {int(p): np.asarray(b, np.int64) for p, b in bounds.items()}

    def add_group(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for rb in batches:
            parts = rb.column("partition").to_numpy(zero_copy_only=False)
            offsets = rb.column("offset").to_numpy(zero_copy_only=False)
            group = np.empty(len(offsets), np.int32)
            for p in np.unique(parts):
                sel = parts == p
                group[sel] = np.searchsorted(starts[int(p)], offsets[sel], side="right") - 1
            yield rb.append_column("group", pa.array(group))

    return add_group


def records_with_latest(
    spark: SparkSession,
    data_dir: str | os.PathLike,
    topic: str,
    to_rewrite: Mapping[int, OffsetRange],
    latest: DataFrame,
    group_bounds: Mapping[int, Sequence[int]],
) -> DataFrame:
    """(partition, group, offset, latest) for every record of the range to rewrite."""
    records = read_ranges(spark, data_dir, topic, to_rewrite).select("partition", "key", "offset")
    joined = records.join(latest, on=["partition", "key"], how="left").select(
        "partition", "offset", F.col("latest").cast("long")
    )
    schema = "partition int, offset long, latest long, group int"
    return joined.mapInArrow(group_of_offsets(group_bounds), schema)
