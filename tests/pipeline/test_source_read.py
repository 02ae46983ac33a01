"""spark.read.format("kompakt") reads topics like Spark's Kafka source reads Kafka."""

from __future__ import annotations

import os

import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from kompakt.pipeline.layout import list_segments, partition_dir
from kompakt.pipeline.plan import plan_ranges
from kompakt.pipeline.read import read_range
from kompakt.record.decode import Record
from kompakt.record.encode import build_batch, build_control_batch, build_simple_batch
from kompakt.record.header import CONTROL_ABORT, CONTROL_COMMIT

# Spark's KafkaRecordToRowConverter.kafkaSchema with includeHeaders (all fields nullable)
SPARK_KAFKA_SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
        StructField(
            "headers",
            ArrayType(
                StructType([StructField("key", StringType()), StructField("value", BinaryType())])
            ),
        ),
    ]
)


def produce(manager, topic, partition, items, ts=1_000):
    return manager.get_log(topic, partition).append(build_simple_batch(items, timestamp=ts))


def test_schema_equals_spark_kafka_source_schema(spark, manager, data_dir):
    manager.create_topic("t", 1)
    df = spark.read.format("kompakt").option("path", str(data_dir)).option("subscribe", "t").load()
    assert df.schema == SPARK_KAFKA_SCHEMA
    assert all(f.nullable for f in df.schema.fields)
    plain = (
        spark.read.format("kompakt")
        .option("path", str(data_dir))
        .option("subscribe", "t")
        .option("includeHeaders", "false")
        .load()
    )
    assert plain.schema == StructType(SPARK_KAFKA_SCHEMA.fields[:7])


def test_rows_carry_every_field_and_reading_does_not_need_the_dir_lock(spark, manager, data_dir):
    manager.create_topic("t", 1)
    log = manager.get_log("t", 0)
    log.append(
        build_simple_batch(
            [(b"k", b"v", [("h", b"x"), ("n", None)]), (b"z", None)], timestamp=1_234
        )
    )
    # `manager` holds .lock for the whole test: the read must not need it
    rows = (
        spark.read.format("kompakt").option("path", str(data_dir)).option("subscribe", "t").load()
    ).collect()
    assert [(bytes(r.key), r.value, r.offset, r.partition, r.topic) for r in rows] == [
        (b"k", bytearray(b"v"), 0, 0, "t"),
        (b"z", None, 1, 0, "t"),
    ]
    assert int(rows[0].timestamp.timestamp() * 1000) == 1_234 and rows[0].timestampType == 0
    assert [(h.key, h.value) for h in rows[0].headers] == [("h", bytearray(b"x")), ("n", None)]


def test_subscribe_and_subscribe_pattern_choose_topics(manager, data_dir, rows_of):
    for name in ("a1", "a2", "b"):
        manager.create_topic(name, 2)
        produce(manager, name, 1, [(name.encode(), b"v")])
    assert {r[0] for r in rows_of(data_dir, subscribe="a1,b")} == {"a1", "b"}
    assert {r[0] for r in rows_of(data_dir, subscribePattern="a[0-9]")} == {"a1", "a2"}
    assert rows_of(data_dir, assign='{"a2":[1]}') == [("a2", 1, 0, b"a2", b"v")]
    assert rows_of(data_dir, subscribe="nosuchtopic") == []


def test_starting_and_ending_offsets_bound_the_range_end_exclusive(manager, data_dir, rows_of):
    manager.create_topic("t", 2, {"segment.bytes": "150"})
    for i in range(10):
        produce(manager, "t", i % 2, [(b"k%d" % i, b"v%d" % i)])
    everything = rows_of(data_dir, subscribe="t")
    assert len(everything) == 10
    assert len(list_segments(partition_dir(data_dir, "t", 0))) > 1
    got = rows_of(
        data_dir,
        subscribe="t",
        startingOffsets='{"t":{"0":2,"1":-2}}',
        endingOffsets='{"t":{"0":4,"1":-1}}',
    )
    assert [(p, o) for _t, p, o, _k, _v in got] == [(0, 2), (0, 3)] + [(1, o) for o in range(5)]
    with pytest.raises(Exception, match="must specify all TopicPartitions"):
        rows_of(data_dir, subscribe="t", startingOffsets='{"t":{"0":2}}')
    with pytest.raises(Exception, match="can't be latest"):
        rows_of(data_dir, subscribe="t", startingOffsets="latest")


def test_deleted_records_are_data_loss_unless_fail_on_data_loss_is_false(
    manager, data_dir, rows_of
):
    manager.create_topic("t", 1, {"segment.bytes": "100"})
    for i in range(6):
        produce(manager, "t", 0, [(b"k%d" % i, b"v")])
    manager.get_log("t", 0).delete_records_before(3)
    manager.checkpoint()
    assert [r[2] for r in rows_of(data_dir, subscribe="t")] == [3, 4, 5]
    with pytest.raises(Exception, match="below the log start offset"):
        rows_of(data_dir, subscribe="t", startingOffsets='{"t":{"0":1}}')
    got = rows_of(data_dir, subscribe="t", startingOffsets='{"t":{"0":1}}', failOnDataLoss="false")
    assert [r[2] for r in got] == [3, 4, 5]


def _txn(manager, topic, pid, items, offset_ts=5):
    recs = [Record(i, offset_ts, k, v) for i, (k, v) in enumerate(items)]
    batch = build_batch(
        recs, producer_id=pid, producer_epoch=0, base_sequence=0, transactional=True
    )
    return manager.get_log(topic, 0).append(batch)


def _marker(manager, topic, pid, kind):
    batch = build_control_batch(kind, producer_id=pid, producer_epoch=0, timestamp=9)
    return manager.get_log(topic, 0).append(batch)


def test_control_batches_and_aborted_transactions_are_not_returned(manager, data_dir, rows_of):
    """Kafka read_committed: data of an aborted (or still open) transaction is invisible."""
    manager.create_topic("t", 1, {"segment.bytes": "200"})
    produce(manager, "t", 0, [(b"plain", b"1")])  # 0
    _txn(manager, "t", 7, [(b"a1", b"x"), (b"a2", b"x")])  # 1-2 aborted later
    _txn(manager, "t", 8, [(b"c1", b"y")])  # 3 committed later
    _marker(manager, "t", 7, CONTROL_ABORT)  # 4
    produce(manager, "t", 0, [(b"plain2", b"2")])  # 5
    _marker(manager, "t", 8, CONTROL_COMMIT)  # 6
    _txn(manager, "t", 9, [(b"open", b"z")])  # 7 never decided
    assert len(list_segments(partition_dir(data_dir, "t", 0))) > 2
    got = rows_of(data_dir, subscribe="t")
    assert [(o, k) for _t, _p, o, k, _v in got] == [(0, b"plain"), (3, b"c1"), (5, b"plain2")]
    # the commit marker lies beyond endingOffsets: it still decides
    upto = rows_of(data_dir, subscribe="t", endingOffsets='{"t":{"0":4}}')
    assert [o for _t, _p, o, _k, _v in upto] == [0, 3]
    raw = rows_of(data_dir, subscribe="t", **{"kafka.isolation.level": "read_uncommitted"})
    assert [o for _t, _p, o, _k, _v in raw] == [0, 1, 2, 3, 5, 7]


def test_big_partitions_are_read_by_many_tasks_at_once(spark, manager, data_dir, rows_of):
    manager.create_topic("t", 2, {"segment.bytes": "300"})
    for i in range(60):
        produce(manager, "t", i % 2, [(b"k%d" % i, b"v" * 20)])
    df = (
        spark.read.format("kompakt")
        .option("path", str(data_dir))
        .option("subscribe", "t")
        .option("maxBytesPerPartition", "600")
        .load()
    )
    n = df.rdd.getNumPartitions()
    assert n > 4
    rows = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
    assert rows == sorted((p, o) for p in range(2) for o in range(30))
    more = rows_of(data_dir, subscribe="t", minPartitions="40")
    assert len(more) == 60


def test_a_segment_swapped_away_during_a_read_is_found_again_by_relisting(manager, data_dir):
    """A clean may replace segments between planning and reading; offsets do not change."""
    manager.create_topic("t", 1, {"segment.bytes": "150"})
    for i in range(8):
        produce(manager, "t", 0, [(b"k%d" % i, b"v%d" % i)])
    manager.close()
    (plan,) = plan_ranges({"path": str(data_dir), "subscribe": "t"})
    assert len(plan.bases) > 2
    pdir = partition_dir(data_dir, "t", 0)
    # merge the 2nd and 3rd segments into one file named by the 2nd's base, as a clean does
    second, third = plan.bases[1], plan.bases[2]
    merged = b"".join((pdir / f"{b:020d}.log").read_bytes() for b in (second, third))
    (pdir / f"{second:020d}.log.swap").write_bytes(merged)
    os.unlink(pdir / f"{third:020d}.log")
    os.replace(pdir / f"{second:020d}.log.swap", pdir / f"{second:020d}.log")
    offsets = [o for rb in read_range(plan) for o in rb.column("offset").to_pylist()]
    assert offsets == list(range(8))


def test_a_live_partition_reads_up_to_its_last_batch_not_into_the_zeros_after_it(manager, data_dir):
    """A live segment's file is written ahead with zeros (kompakt.log.syncs.WRITE_AHEAD):
    the source reads the file as it is and stops at its last batch, as at a torn tail."""
    from kompakt.log.syncs import WRITE_AHEAD_FROM

    manager.create_topic("t", 1)
    for i in range(5):  # appends big enough to write ahead, stamped now: one segment
        produce(manager, "t", 0, [(b"k%d" % i, b"v" * WRITE_AHEAD_FROM)], ts=manager.clock())
    manager.flush_all()
    seg = manager.get_log("t", 0).active_segment
    assert seg.log_path.stat().st_size > seg.size  # still written ahead: the log is open
    (plan,) = plan_ranges({"path": str(data_dir), "subscribe": "t"})
    offsets = [o for rb in read_range(plan) for o in rb.column("offset").to_pylist()]
    assert offsets == list(range(5))
