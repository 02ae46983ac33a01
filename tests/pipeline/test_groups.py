"""Every segment group gets one task carrying exactly its slice of the superseded bits."""

from __future__ import annotations

import numpy as np

from kompakt.pipeline.groups import GroupTask, run_groups
from kompakt.pipeline.survivors import Superseded


def test_each_group_task_sees_only_its_slice_and_results_come_back_in_group_order(spark):
    width = 40
    marked = [1, 2, 9, 17, 18, 30, 39]
    flags = np.zeros(width, np.uint8)
    flags[marked] = 1
    whole = Superseded(0, width, np.packbits(flags))
    bounds = [(0, 3), (3, 17), (17, 17), (17, 40)]  # the third group holds no offsets
    tasks = [
        GroupTask("t", 0, "/nowhere", i, (lo,), hi, whole.slice(lo, hi))
        for i, (lo, hi) in reversed(list(enumerate(bounds)))
    ]

    def describe(task: GroupTask) -> dict:
        s = task.superseded
        offsets = np.arange(s.start, s.end)
        return {"range": [s.start, s.end], "marked": offsets[s.mask(offsets)].tolist()}

    got = run_groups(spark, tasks, describe)
    assert [r["group"] for r in got] == [0, 1, 2, 3]
    assert [r["range"] for r in got] == [[0, 3], [3, 17], [17, 17], [17, 40]]
    assert [r["marked"] for r in got] == [[1, 2], [9], [], [17, 18, 30, 39]]


def test_no_tasks_give_no_results(spark):
    assert run_groups(spark, [], lambda task: {}) == []
