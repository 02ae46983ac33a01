"""Rewrite segment groups in Spark tasks, each group with only its share of the superseded bits.

The write stage of a Spark clean rewrites each group of segments into one new segment
file (Kafka ``Cleaner.cleanSegments``, one call per group of ``groupSegmentsBySize``).
What a group's rewrite needs from the dedup stage is, for each of its records, whether
a later record of its key feeds the map: the group's slice of
:class:`~kompakt.pipeline.survivors.Superseded`, a packed bitmap of one bit per offset
(125 kB per million offsets). The slice travels with its group (a Spark task takes a run of groups),
so no record is shuffled or joined to reach its group. ``clean(task)`` runs in a
Python worker and returns a small JSON-able result that comes back to the driver.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pyspark.sql import SparkSession

from kompakt.cleaner.transactions import TxnTracker
from kompakt.pipeline.survivors import Superseded, spark_tasks


@dataclass(frozen=True)
class GroupTask:
    """One segment group of one partition: the files one task rewrites, the offset its
    rewrite ends at, and which of its records are superseded."""

    topic: str
    partition: int
    dir: str
    index: int
    bases: tuple[int, ...]
    end: int  # next offset after the group's last segment
    superseded: Superseded | None  # this group's slice only (None: decided in the task)
    txn: TxnTracker | None = None  # the clean's transaction pass as it reaches the group


GroupCleaner = Callable[[GroupTask], Mapping[str, Any]]


def run_groups(
    spark: SparkSession, tasks: Sequence[GroupTask], clean: GroupCleaner
) -> list[dict[str, Any]]:
    """Call ``clean`` once per task on the executors, a run of consecutive groups per
    Spark task (:func:`kompakt.pipeline.survivors.spark_tasks`); results sorted by
    (partition, group)."""
    if not tasks:
        return []

    def run(task: GroupTask) -> str:
        return json.dumps({"partition": task.partition, "group": task.index, **dict(clean(task))})

    sc = spark.sparkContext
    rows = sc.parallelize(list(tasks), spark_tasks(sc, len(tasks))).map(run).collect()
    return _sorted(rows)


def run_groups_in_one_task(
    spark: SparkSession,
    decide: Callable[[], Superseded],
    tasks: Sequence[GroupTask],
    clean: GroupCleaner,
) -> list[dict[str, Any]]:
    """A small clean as one Spark task: ``decide()`` computes the superseded bits of the
    whole range (:func:`kompakt.pipeline.survivors.superseded_here`), then every group
    is rewritten with its slice, as :func:`run_groups` would. One job of one stage
    instead of a shuffle job and a rewrite job: for a range of a few MB the jobs' fixed
    costs were all of the clean's time."""
    if not tasks:
        return []

    def run(_: object) -> list[str]:
        bits = decide()
        out = []
        for task in tasks:
            mine = replace(task, superseded=bits.slice(task.bases[0], task.end))
            out.append(
                json.dumps({"partition": task.partition, "group": task.index, **dict(clean(mine))})
            )
        return out

    rows = spark.sparkContext.parallelize([0], 1).flatMap(run).collect()
    return _sorted(rows)


def _sorted(rows: Sequence[str]) -> list[dict[str, Any]]:
    out = [json.loads(r) for r in rows]
    return sorted(out, key=lambda r: (r["partition"], r["group"]))
