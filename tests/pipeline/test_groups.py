"""Every segment group gets one task with exactly its records, sorted, with key lookups."""

from __future__ import annotations

from kompakt.pipeline.dedup import latest_offsets, records_with_latest
from kompakt.pipeline.groups import GroupTask, run_groups
from kompakt.record.encode import build_simple_batch


def test_each_group_task_sees_its_records_in_offset_order(spark, manager, data_dir):
    manager.create_topic("t", 2)
    for i, key in enumerate([b"a", b"b", b"a", b"c", b"b", b"a", b"d"]):
        manager.get_log("t", i % 2).append(build_simple_batch([(key, b"v")], timestamp=1))
    ends = {p: manager.get_log("t", p).log_end_offset for p in range(2)}
    dirty = {0: (2, ends[0]), 1: (0, ends[1])}
    latest = latest_offsets(spark, data_dir, "t", dirty)
    bounds = {0: [0, 2, 9], 1: [0]}  # group 2 of partition 0 holds no records at all
    records = records_with_latest(
        spark, data_dir, "t", {p: (0, ends[p]) for p in ends}, latest, bounds
    )
    tasks = [
        GroupTask("t", p, str(data_dir / f"t-{p}"), i, (b,))
        for p, starts in bounds.items()
        for i, b in enumerate(starts)
    ]

    def describe(task, offsets, latest):
        return {"bases": list(task.bases), "offsets": offsets.tolist(), "latest": latest.tolist()}

    got = run_groups(spark, records, tasks, describe)
    # partition 0: a@0 a@1 b@2 d@3 (dirty from 2: b->2, d->3); partition 1: b@0 c@1 a@2
    assert got == [
        {"partition": 0, "group": 0, "bases": [0], "offsets": [0, 1], "latest": [-1, -1]},
        {"partition": 0, "group": 1, "bases": [2], "offsets": [2, 3], "latest": [2, 3]},
        {"partition": 0, "group": 2, "bases": [9], "offsets": [], "latest": []},
        {"partition": 1, "group": 0, "bases": [0], "offsets": [0, 1, 2], "latest": [0, 1, 2]},
    ]
