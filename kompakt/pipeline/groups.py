"""Run one task per segment group, in parallel, each with its records' key lookups.

The write stage of a Spark clean rewrites each group of segments into one new segment
file. Spark groups the looked-up records by (partition, group) and hands each group,
sorted by offset, to ``clean(task, offsets, latest)`` in a Python worker; ``latest``
is the latest dirty offset of each record's key, -1 when the key is not in the map
(Kafka's ``OffsetMap.get`` returns -1 too). A group without any data record still
gets its call (with empty arrays): it may hold control or empty batches to rewrite.
``clean`` returns a small JSON-able result that comes back to the driver.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

RESULT_SCHEMA = "partition int, group int, result string"


@dataclass(frozen=True)
class GroupTask:
    """One segment group of one partition: the files one task rewrites."""

    topic: str
    partition: int
    dir: str
    index: int
    bases: tuple[int, ...]


GroupCleaner = Callable[[GroupTask, np.ndarray, np.ndarray], Mapping[str, Any]]


def _runner(tasks: Mapping[tuple[int, int], GroupTask], clean: GroupCleaner):
    def run(key: tuple, table: pa.Table) -> pa.Table:
        part, group = int(key[0].as_py()), int(key[1].as_py())
        offsets = table.column("offset").to_numpy()
        latest = table.column("latest").fill_null(-1).to_numpy()
        order = np.argsort(offsets, kind="stable")
        offsets, latest = offsets[order], latest[order]
        real = offsets >= 0  # drop the sentinel row that made the group exist
        result = clean(tasks[(part, group)], offsets[real], latest[real])
        return pa.table(
            {
                "partition": pa.array([part], pa.int32()),
                "group": pa.array([group], pa.int32()),
                "result": pa.array([json.dumps(dict(result))], pa.string()),
            }
        )

    return run


def run_groups(
    spark: SparkSession, records: DataFrame, tasks: Sequence[GroupTask], clean: GroupCleaner
) -> list[dict[str, Any]]:
    """Call ``clean`` once per task on the executors; results sorted by (partition, group).

    ``records`` has columns (partition int, offset long, latest long, group int).
    """
    if not tasks:
        return []
    by_key = {(t.partition, t.index): t for t in tasks}
    sentinels = spark.createDataFrame(
        [(t.partition, -1, None, t.index) for t in tasks],
        "partition int, offset long, latest long, group int",
    )
    rows = (
        records.select("partition", "offset", "latest", "group")
        .unionByName(sentinels)
        .repartition(
            min(len(tasks), spark.sparkContext.defaultParallelism * 4), "partition", "group"
        )
        .groupBy("partition", "group")
        .applyInArrow(_runner(by_key, clean), RESULT_SCHEMA)
        .collect()
    )
    out = [{"partition": r.partition, "group": r.group, **json.loads(r.result)} for r in rows]
    return sorted(out, key=lambda r: (r["partition"], r["group"]))
