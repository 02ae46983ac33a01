"""Differential test: the Spark engine and the in-process engine write identical logs.

Same segment base offsets, same files byte for byte (batches, offsets, lastOffset,
attributes, producer fields, records), same cleaner checkpoint — for hypothesis-made
logs and for the cleaner's scenarios (tombstones across cleans, producer batches,
compression codecs, min.compaction.lag.ms).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from engine_kit import NOW, TOPIC_CONFIG, clean_twice, snapshot, write_log
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kompakt.cleaner import Cleaner, LocalEngine
from kompakt.log.manager import LogManager
from kompakt.pipeline import survivors
from kompakt.pipeline.engine import SparkEngine
from kompakt.record.batch import CONTROL_COMMIT, build_control_batch, build_simple_batch
from kompakt.record.header import CONTROL_ABORT

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


# Both of the Spark engine's plans: a range of at most SINGLE_TASK_BYTES is decided and
# rewritten in one task (superseded_here), a bigger one by the shuffle (superseded).
PLANS = pytest.mark.parametrize("single_task_bytes", [8 << 20, 0], ids=["one-task", "shuffle"])


@PLANS
def test_engines_agree_on_tombstones_producers_and_codecs(
    spark, tmp_path, monkeypatch, single_task_bytes
):
    monkeypatch.setattr(survivors, "SINGLE_TASK_BYTES", single_task_bytes)
    batches = [
        ([(b"k%d" % (i % 7), None if i % 5 == 0 else b"v%d" % i)], i % 5, i % 3 == 0)
        for i in range(120)
    ]
    assert_engines_agree(tmp_path, batches)


def write_committed_txn_log(root: Path) -> None:
    """k=v0, then k=v1 in a transaction of producer 9 whose COMMIT marker sits in the
    next segment, each segment padded so that no segment group holds both."""
    pad = b"x" * 380
    with LogManager(root, clock=lambda: NOW) as logs:
        logs.create_topic("t", 1, TOPIC_CONFIG)
        plog = logs.get_log("t", 0)
        plog.append(build_simple_batch([(b"k", b"v0")], timestamp=NOW))
        txn = {"producer_id": 9, "producer_epoch": 0, "base_sequence": 0, "transactional": True}
        plog.append(build_simple_batch([(b"k", b"v1")], timestamp=NOW, **txn))
        plog.append(build_simple_batch([(b"pad1", pad)], timestamp=NOW))
        plog.roll()
        plog.append(
            build_control_batch(CONTROL_COMMIT, producer_id=9, producer_epoch=0, timestamp=NOW)
        )
        plog.append(build_simple_batch([(b"pad2", pad)], timestamp=NOW))
        plog.roll()


def clean_past_the_marker_horizon(root: Path, engine) -> list[tuple[bytes, bytes | None]]:
    """Cleans 1 and 2 (past any horizon) keep the COMMIT marker: its transaction's data
    is in an earlier group, and Kafka's ``CleanedTransactionMetadata``, one per clean
    through every group, has read it; then k=v2 is written and clean 3 runs, removing
    k=v1 (its batch stays, empty, as producer 9's last, and the marker with it).
    Returns the log's records (key, value) afterwards, markers included."""
    now = [NOW + 10_000]
    with LogManager(root, clock=lambda: now[0]) as logs:
        cleaner = Cleaner(logs, engine=engine)
        plog = logs.get_log("t", 0)
        for key in (None, b"other", b"k"):
            if key is not None:
                plog.append(build_simple_batch([(key, b"v2")], timestamp=now[0]))
                plog.roll()
            assert cleaner.clean_partition(plog) is not None
            now[0] += 5_000
        return [(r.key, r.value) for b in plog.iter_batches() for r in b.records()]


@PLANS
def test_a_committed_record_whose_marker_is_in_another_group_is_compacted_by_both_engines(
    spark, tmp_path, monkeypatch, single_task_bytes
):
    """A committed k=v1 whose COMMIT marker sits in a later segment group is compacted
    away by k=v2 alike in both engines (the Spark engine once looked up keys only for
    records its ``read_committed`` source returned), and both keep the marker while
    the transaction's (emptied) batch is read: one transaction pass per clean."""
    monkeypatch.setattr(survivors, "SINGLE_TASK_BYTES", single_task_bytes)
    write_committed_txn_log(tmp_path / "a")
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    local = clean_past_the_marker_horizon(tmp_path / "a", LocalEngine(1 << 20))
    spark_state = clean_past_the_marker_horizon(tmp_path / "b", SparkEngine())
    pad = b"x" * 380
    commit = (b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")  # the COMMIT marker
    assert local == [(b"pad1", pad), commit, (b"pad2", pad), (b"other", b"v2"), (b"k", b"v2")]
    assert spark_state == local
    a, b = snapshot(tmp_path / "a"), snapshot(tmp_path / "b")
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name] == b[name], name


def test_engines_write_the_same_txnindex_for_a_kept_abort_marker(spark, tmp_path):
    """Kafka's cleaner removes aborted data, keeps the ABORT marker while this pass saw
    the transaction's batches and appends its ``AbortedTxn`` to the cleaned segment's
    ``.txnindex``; both engines run that rewrite, so both write the same index bytes."""
    txn = {"producer_id": 9, "producer_epoch": 0, "base_sequence": 0, "transactional": True}
    with LogManager(tmp_path / "a", clock=lambda: NOW) as logs:
        logs.create_topic("t", 1, TOPIC_CONFIG)
        plog = logs.get_log("t", 0)
        plog.append(build_simple_batch([(b"k", b"v0")], timestamp=NOW))
        plog.append(build_simple_batch([(b"k", b"aborted")], timestamp=NOW, **txn))
        plog.append(
            build_control_batch(CONTROL_ABORT, producer_id=9, producer_epoch=0, timestamp=NOW)
        )
        plog.append(build_simple_batch([(b"k", b"v1")], timestamp=NOW))
        plog.roll()
        plog.append(build_simple_batch([(b"z", b"1")], timestamp=NOW))
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    for root, engine in ((tmp_path / "a", LocalEngine(1 << 20)), (tmp_path / "b", SparkEngine())):
        with LogManager(root, clock=lambda: NOW + 10_000) as logs:
            assert Cleaner(logs, engine=engine).clean_partition(logs.get_log("t", 0))
    a, b = snapshot(tmp_path / "a"), snapshot(tmp_path / "b")
    assert "t-0/00000000000000000000.txnindex" in a
    assert a["t-0/00000000000000000000.txnindex"][2:10] == (9).to_bytes(8, "big")
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name] == b[name], name


@PLANS
def test_spark_engine_honours_the_cleaner_io_limit_in_its_tasks(
    spark, tmp_path, monkeypatch, single_task_bytes
):
    """log.cleaner.io.max.bytes.per.second (Kafka's Throttler) in the Spark tasks, where
    the reads and writes happen: each task throttles its share, and the bytes and sleep
    of every task come back to the cleaner's throttle (through Spark accumulators)."""
    from kompakt.cleaner.throttle import Throttler

    monkeypatch.setattr(survivors, "SINGLE_TASK_BYTES", single_task_bytes)
    batches = [([(b"k%d" % (i % 7), b"v%d" % i + b"x" * 200)], 0, False) for i in range(120)]
    write_log(tmp_path, batches, partitions=1)
    with LogManager(tmp_path, clock=lambda: NOW + 10_000) as logs:
        plog = logs.get_log("t", 0)
        before = {r.key: r.value for b in plog.iter_batches() for r in b.records()}
        # Kafka's 300 ms period: tasks of a few kB end well within it, and are throttled
        # by settling their share at their end
        throttle = Throttler()
        cleaner = Cleaner(
            logs,
            engine=SparkEngine(),
            config={"log.cleaner.io.max.bytes.per.second": "50000"},
            throttle=throttle,
        )
        stats = cleaner.clean_partition(plog)
        assert stats is not None and stats.bytes_read > 0
        after = {r.key: r.value for b in plog.iter_batches() for r in b.records()}
    assert after == before
    assert throttle.observed_total >= stats.bytes_read + stats.bytes_written
    assert throttle.throttled_seconds_total > 0
