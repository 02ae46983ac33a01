"""Differential test: the Spark engine and the in-process engine write identical logs.

Same segment base offsets, same files byte for byte (batches, offsets, lastOffset,
attributes, producer fields, records), same cleaner checkpoint — for hypothesis-made
logs and for the cleaner's scenarios (tombstones across cleans, producer batches,
compression codecs, min.compaction.lag.ms).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kompakt.cleaner import Cleaner, LocalEngine
from kompakt.log.manager import LogManager
from kompakt.pipeline.engine import SparkEngine
from kompakt.record.batch import build_simple_batch

NOW = 1_700_000_000_000
TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": "600",
    "delete.retention.ms": "1000",
    "file.delete.delay.ms": "0",
}

batch_st = st.tuples(
    st.lists(
        st.tuples(
            st.sampled_from([b"a", b"b", b"c", b"d", b"e", b"f"]),
            st.one_of(st.none(), st.binary(min_size=0, max_size=30)),
        ),
        min_size=1,
        max_size=5,
    ),
    st.sampled_from([0, 1, 2, 3, 4]),  # codec
    st.booleans(),  # from an idempotent producer
)


def write_log(root: Path, batches, partitions: int = 2) -> None:
    with LogManager(root, clock=lambda: NOW) as logs:
        logs.create_topic("t", partitions, TOPIC_CONFIG)
        seq = 0
        for i, (items, codec, idempotent) in enumerate(batches):
            producer = {"producer_id": 7, "producer_epoch": 0, "base_sequence": seq}
            logs.get_log("t", i % partitions).append(
                build_simple_batch(
                    items, timestamp=NOW + i, compression=codec, **(producer if idempotent else {})
                )
            )
            seq += len(items) if idempotent else 0


def clean_twice(root: Path, engine) -> None:
    """Clean every partition, then again after the tombstone horizon with new data."""
    now = [NOW + 10_000]
    with LogManager(root, clock=lambda: now[0]) as logs:
        cleaner = Cleaner(logs, engine=engine)
        for p in range(logs.partition_count("t")):
            cleaner.clean_partition(logs.get_log("t", p))
        now[0] += 5_000
        for p in range(logs.partition_count("t")):
            plog = logs.get_log("t", p)
            plog.append(build_simple_batch([(b"z", b"1")], timestamp=now[0]))
            plog.roll()
            cleaner.clean_partition(plog)


def snapshot(root: Path) -> dict[str, bytes]:
    out = {}
    for p in sorted(root.rglob("*")):
        if (
            p.is_file()
            and p.suffix in (".log", ".index", ".timeindex")
            or p.name.startswith("cleaner-offset")
        ):
            out[str(p.relative_to(root))] = p.read_bytes()
    return out


def assert_engines_agree(tmp_path: Path, batches) -> None:
    shutil.rmtree(tmp_path / "a", ignore_errors=True)
    shutil.rmtree(tmp_path / "b", ignore_errors=True)
    write_log(tmp_path / "a", batches)
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    clean_twice(tmp_path / "a", LocalEngine(1 << 20))
    clean_twice(tmp_path / "b", SparkEngine())
    a, b = snapshot(tmp_path / "a"), snapshot(tmp_path / "b")
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name] == b[name], name


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.lists(batch_st, min_size=1, max_size=40))
def test_spark_and_local_engines_write_identical_logs(spark, tmp_path, batches):
    assert_engines_agree(tmp_path, batches)


def test_engines_agree_on_tombstones_producers_and_codecs(spark, tmp_path):
    batches = [
        ([(b"k%d" % (i % 7), None if i % 5 == 0 else b"v%d" % i)], i % 5, i % 3 == 0)
        for i in range(120)
    ]
    assert_engines_agree(tmp_path, batches)
