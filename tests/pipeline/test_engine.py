"""Differential test: the Spark engine and the in-process engine write identical logs.

Same segment base offsets, same files byte for byte (batches, offsets, lastOffset,
attributes, producer fields, records), same cleaner checkpoint — for hypothesis-made
logs and for the cleaner's scenarios (tombstones across cleans, producer batches,
compression codecs, min.compaction.lag.ms).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from engine_kit import clean_twice, snapshot, write_log
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kompakt.cleaner import LocalEngine
from kompakt.pipeline.engine import SparkEngine

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
