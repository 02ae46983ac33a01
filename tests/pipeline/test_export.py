"""export_latest writes what folding the topic into a dict gives: latest value per key."""

from __future__ import annotations

import pyarrow.parquet as pq

from kompakt.pipeline.export import export_latest
from kompakt.record.batch import build_simple_batch


def test_export_keeps_latest_value_per_key_and_drops_tombstoned_keys(
    spark, manager, data_dir, tmp_path
):
    manager.create_topic("users", 2, {"cleanup.policy": "compact", "segment.bytes": "120"})
    history = [
        (0, b"alice", b"London"),
        (1, b"bob", b"Paris"),
        (0, b"alice", b"Rome"),
        (0, b"carol", b"Oslo"),
        (1, b"bob", None),  # tombstone: bob is gone
        (0, b"carol", b"Lima"),
        (1, b"dave", b"Kyiv"),
    ]
    for part, key, value in history:
        manager.get_log("users", part).append(build_simple_batch([(key, value)], timestamp=5))
    out = tmp_path / "users.parquet"
    assert export_latest(spark, data_dir, "users", out) == 3
    table = pq.read_table(out)
    got = {
        r["key"]: (r["value"], r["partition"], r["offset"])
        for r in table.select(["key", "value", "partition", "offset"]).to_pylist()
    }
    assert got == {b"alice": (b"Rome", 0, 1), b"carol": (b"Lima", 0, 3), b"dave": (b"Kyiv", 1, 2)}
    assert set(table.schema.names) == {
        "key",
        "value",
        "partition",
        "offset",
        "timestamp",
        "headers",
    }
