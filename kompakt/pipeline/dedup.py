"""Spark stages of a clean: the key map and each record's lookup in it.

Kafka builds an in-memory offset map (key hash -> latest offset) over the dirty range
and, when the map is full, cleans only part of it per pass. Here the map is a Spark
aggregation: ``groupBy(partition, key).max(offset)`` shuffles exact keys, so any
number of distinct keys is handled in one pass and no two keys can collide. Which
records feed it is the cleaner's rule (:func:`kompakt.cleaner.key_map.segment_key_map`,
one task per dirty segment), the same code the in-process engine runs. The lookup joins
every keyed record of the range being rewritten with that map, so each record carries
the latest dirty offset of its key (null: the key is not in the dirty range).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from kompakt.cleaner.key_map import SegmentKeys, aborted_in, segment_key_map, segment_lookups
from kompakt.cleaner.transactions import AbortedTxn
from kompakt.pipeline.layout import list_segments, partition_dir, segment_path, segments_covering

OffsetRange = tuple[int, int]  # [start, end)
KEYS_SCHEMA = "partition int, key binary, offset long"
# one row per segment a task reads: (partition, file, first offset, end, aborted txns)
SEGMENTS_SCHEMA = (
    "partition int, path string, start long, end long, "
    "aborted array<struct<producer_id: long, first_offset: long, last_offset: long>>"
)


def _segments(
    data_dir: str | os.PathLike,
    topic: str,
    ranges: Mapping[int, OffsetRange],
    aborted: Mapping[int, Sequence[AbortedTxn]],
) -> list[tuple]:
    """The segment rows covering each partition's range, each with the aborted
    transactions that overlap that segment."""
    rows = []
    for part in sorted(ranges):
        start, end = ranges[part]
        pdir = partition_dir(data_dir, topic, part)
        bases = list_segments(pdir)
        covering = segments_covering(bases, start, end)
        for i, base in enumerate(covering):
            seg_end = covering[i + 1] if i + 1 < len(covering) else end
            txns = [
                (t.producer_id, t.first_offset, t.last_offset)
                for t in aborted_in(aborted.get(part, ()), base, seg_end)
            ]
            rows.append((part, str(segment_path(pdir, base)), start, end, txns))
    return rows


def _keys_batch(part: int, keys: SegmentKeys) -> pa.RecordBatch:
    scan, mask = keys.scan, keys.mask
    n = len(scan.offset)
    all_keys = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(),
        n,
        [None, pa.py_buffer(scan.key_offsets.astype(np.int64)), pa.py_buffer(scan.key_data)],
    )
    chosen = all_keys.filter(pa.array(mask)).cast(pa.binary())
    return pa.RecordBatch.from_arrays(
        [
            pa.array(np.full(len(chosen), part, np.int32)),
            chosen,
            pa.array(scan.offset[mask].astype(np.int64)),
        ],
        names=["partition", "key", "offset"],
    )


def _map_feeds(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Executor side: each segment row to the keyed records that feed the key map."""
    for rb in batches:
        for row in rb.to_pylist():
            aborted = [AbortedTxn(**t) for t in row["aborted"] or []]
            yield _keys_batch(row["partition"], segment_key_map(row["path"], aborted, row["start"]))


def _lookups(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Executor side: each segment row to its keyed data records in the range."""
    for rb in batches:
        for row in rb.to_pylist():
            keys = segment_lookups(row["path"], row["start"], row["end"])
            yield _keys_batch(row["partition"], keys)


def _segment_frame(spark: SparkSession, rows: list[tuple]) -> DataFrame:
    return spark.createDataFrame(rows, SEGMENTS_SCHEMA).repartition(
        max(1, min(len(rows), spark.sparkContext.defaultParallelism * 4))
    )


def latest_offsets(
    spark: SparkSession,
    data_dir: str | os.PathLike,
    topic: str,
    dirty: Mapping[int, OffsetRange],
    aborted: Mapping[int, Sequence[AbortedTxn]] | None = None,
) -> DataFrame:
    """(partition, key, latest): the highest offset of every key in the dirty ranges,
    over the records the cleaner's rule feeds to the key map (no control batches, no
    aborted transactions — ``aborted`` per partition, as the cleaner collected them —
    no null keys)."""
    rows = _segments(data_dir, topic, dirty, aborted or {})
    keys = _segment_frame(spark, rows).mapInArrow(_map_feeds, KEYS_SCHEMA)
    return keys.groupBy("partition", "key").agg(F.max("offset").alias("latest"))


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
    """(partition, group, offset, latest) for every keyed data record of the range to
    rewrite (the others need no lookup: the rewrite drops unkeyed records and decides
    control batches and aborted transactions itself)."""
    rows = _segments(data_dir, topic, to_rewrite, {})
    records = _segment_frame(spark, rows).mapInArrow(_lookups, KEYS_SCHEMA)
    joined = records.join(latest, on=["partition", "key"], how="left").select(
        "partition", "offset", F.col("latest").cast("long")
    )
    schema = "partition int, offset long, latest long, group int"
    return joined.mapInArrow(group_of_offsets(group_bounds), schema)
