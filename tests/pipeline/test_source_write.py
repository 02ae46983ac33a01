"""df.write.format("kompakt") appends rows as record batches through LogManager rules."""

from __future__ import annotations

import pytest
from kafka.partitioner.default import murmur2 as kafka_python_murmur2
from kafka.record import MemoryRecords

from kompakt.pipeline.write import STAGING_DIR, attach_manager


@pytest.fixture
def attached(manager):
    with attach_manager(manager):
        yield manager


def _write(df, data_dir, topic, mode="append"):
    df.write.format("kompakt").option("path", str(data_dir)).option("topic", topic).mode(
        mode
    ).save()


def _kafka_partition(key: bytes, n: int) -> int:
    """Kafka's default partitioner, from kafka-python (not our code)."""
    return (kafka_python_murmur2(key) & 0x7FFFFFFF) % n


def test_keys_land_in_kafkas_murmur2_partition_with_offsets_assigned(
    spark, attached, data_dir, rows_of
):
    attached.create_topic("t", 5)
    keys = [f"user-{i}".encode() for i in range(40)]
    df = spark.createDataFrame([(k, b"v" + k) for k in keys], "key binary, value binary")
    _write(df.repartition(3), data_dir, "t")
    rows = rows_of(data_dir, subscribe="t")
    assert sorted(k for *_x, k, _v in rows) == sorted(keys)
    for _t, part, _o, key, value in rows:
        assert part == _kafka_partition(key, 5) and value == b"v" + key
    for p in range(5):
        offsets = [o for _t, q, o, _k, _v in rows if q == p]
        assert offsets == list(range(len(offsets)))
        assert attached.get_log("t", p).log_end_offset == len(offsets)
    assert not (data_dir / STAGING_DIR).exists()


def test_partition_column_and_headers_and_string_columns(spark, attached, data_dir):
    attached.create_topic("t", 3)
    df = spark.createDataFrame(
        [("a", "1", 2, [("h", b"x")]), ("b", None, None, [])],
        "key string, value string, partition int, headers array<struct<key:string,value:binary>>",
    )
    _write(df.coalesce(1), data_dir, "t")
    got = (
        spark.read.format("kompakt").option("path", str(data_dir)).option("subscribe", "t").load()
    ).collect()
    by_key = {bytes(r.key): r for r in got}
    assert by_key[b"a"].partition == 2 and bytes(by_key[b"a"].value) == b"1"
    assert [(h.key, bytes(h.value)) for h in by_key[b"a"].headers] == [("h", b"x")]
    assert by_key[b"b"].partition == _kafka_partition(b"b", 3) and by_key[b"b"].value is None


def test_null_key_refused_on_compacted_topic_and_nothing_written(spark, attached, data_dir):
    """Kafka: a compacted topic rejects a record without key (INVALID_RECORD)."""
    attached.create_topic("c", 1, {"cleanup.policy": "compact"})
    df = spark.createDataFrame([(b"k", b"v"), (None, b"v")], "key binary, value binary")
    with pytest.raises(Exception, match="Compacted topic cannot accept message without key"):
        _write(df.coalesce(1), data_dir, "c")
    assert attached.get_log("c", 0).log_end_offset == 0
    assert not any((data_dir / STAGING_DIR).glob("*/*/*"))


def test_overwrite_and_unknown_topics_are_refused(spark, attached, data_dir):
    attached.create_topic("t", 1)
    df = spark.createDataFrame([(b"k", b"v")], "key binary, value binary")
    with pytest.raises(Exception, match="Overwrite not allowed"):
        _write(df, data_dir, "t", mode="overwrite")
    with pytest.raises(Exception, match="unknown topic"):
        _write(df, data_dir, "nope")


def test_commit_opens_the_data_dir_itself_when_no_manager_is_attached(spark, data_dir, clock):
    from kompakt.log.manager import LogManager

    with LogManager(data_dir, clock=clock) as m:
        m.create_topic("t", 1)
    df = spark.createDataFrame([(b"k", b"v")], "key binary, value binary")
    _write(df, data_dir, "t")
    with LogManager(data_dir, clock=clock) as m:
        assert m.get_log("t", 0).log_end_offset == 1
        # another process's lock (here: this open manager, not attached) is respected
        with pytest.raises(Exception, match="locked"):
            _write(df, data_dir, "t")


def test_written_segments_parse_with_kafka_pythons_record_reader(spark, attached, data_dir):
    """Interop: what the Spark writer leaves on disk is Kafka's format for another reader."""
    attached.create_topic("t", 2)
    rows = [(b"k%d" % i, None if i % 4 == 0 else b"v%d" % i, [("h", b"%d" % i)]) for i in range(30)]
    df = spark.createDataFrame(
        rows, "key binary, value binary, headers array<struct<key:string,value:binary>>"
    )
    _write(df.repartition(2), data_dir, "t")
    for p in range(2):  # at rest: a live segment's file runs in zeros past its last batch
        attached.get_log("t", p).roll()
    seen = {}
    for p in range(2):
        offsets = []
        for log in sorted((data_dir / f"t-{p}").glob("*.log")):
            records = MemoryRecords(log.read_bytes())
            while records.has_next():
                batch = records.next_batch()
                for r in batch:
                    offsets.append(r.offset)
                    seen[r.key] = (p, r.value, list(r.headers))
        assert offsets == list(range(len(offsets)))
    assert seen == {k: (_kafka_partition(k, 2), v, [(hk, hv) for hk, hv in h]) for k, v, h in rows}
