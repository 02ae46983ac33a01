"""Issue 12, "nothing a user does loses data": Produce and DeleteRecords follow Kafka's
rules, and touch nothing they were not aimed at.

Every test drives the real broker with a real client (confluent-kafka / kafka-python) or
raw protocol frames; the rule each one checks names the Kafka class it follows.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kio.schema.errors import ErrorCode
from raw_kafka import API, call
from shared_kit import consume_until, wait_for

TIMEOUT = 20


def admin(broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def create(broker, name: str, partitions: int = 1, **configs: str) -> None:
    cfg = {k.replace("_", "."): v for k, v in configs.items()}
    a = admin(broker)  # kept alive until the future is done
    a.create_topics([NewTopic(name, partitions, 1, config=cfg)])[name].result(TIMEOUT)


def produce(broker, topic: str, items, partition: int = 0) -> None:
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0})
    errors = []
    for k, v in items:
        p.produce(
            topic,
            v,
            k,
            partition=partition,
            on_delivery=lambda err, _m: errors.append(err) if err else None,
        )
    assert p.flush(TIMEOUT) == 0
    assert errors == []


def consume_all(broker, topic: str, partition: int = 0) -> list:
    """(offset, key, value, (timestamp type, timestamp)) of every record from the start."""
    c = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"read-{topic}-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    lo, _hi = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=TIMEOUT)
    c.assign([TopicPartition(topic, partition, lo)])
    try:
        got = consume_until(c, timeout=TIMEOUT, what=f"{topic}-{partition} to its end")
    finally:
        c.close()
    return [(m.offset(), m.key(), m.value(), m.timestamp()) for m in got]


def delete_records(broker, topic: str, offset: int, partition: int = 0):
    a = admin(broker)
    fs = a.delete_records([TopicPartition(topic, partition, offset)])
    return list(fs.values())[0].result(TIMEOUT)


# -- 1. DeleteRecords honours cleanup.policy -------------------------------------------------


def test_delete_records_on_compact_only_topic_is_policy_violation_and_keeps_data(
    broker, topic_name
):
    """Kafka Partition.deleteRecordsOnLeader: "Records of partition ... can not be deleted
    due to the configured policy" (POLICY_VIOLATION) unless cleanup.policy has delete."""
    create(broker, topic_name, cleanup_policy="compact")
    items = [(b"k%d" % i, b"v%d" % i) for i in range(6)]
    produce(broker, topic_name, items)
    for offset in (3, -1):  # a given offset and "up to the high watermark"
        with pytest.raises(KafkaException) as err:
            delete_records(broker, topic_name, offset)
        assert err.value.args[0].code() == ErrorCode.policy_violation
    assert broker.logs.get_log(topic_name, 0).log_start_offset == 0
    assert [(k, v) for _o, k, v, _t in consume_all(broker, topic_name)] == items


def test_delete_records_is_allowed_with_compact_delete_and_delete(broker, topic_name):
    """Kafka LogConfig.delete is true for "delete" and "compact,delete": records go."""
    for policy in ("delete", "compact,delete"):
        name = f"{topic_name}-{policy.replace(',', '-')}"
        create(broker, name, cleanup_policy=policy)
        produce(broker, name, [(b"k%d" % i, b"v") for i in range(5)])
        assert delete_records(broker, name, 3).low_watermark == 3
        assert [o for o, *_ in consume_all(broker, name)] == [3, 4]


def test_delete_records_on_topic_with_empty_policy_is_refused(broker, topic_name):
    """An empty cleanup.policy (KIP-1161: keep everything) has no delete either."""
    create(broker, topic_name, cleanup_policy="")
    produce(broker, topic_name, [(b"k", b"v")] * 3)
    with pytest.raises(KafkaException) as err:
        delete_records(broker, topic_name, 2)
    assert err.value.args[0].code() == ErrorCode.policy_violation
    assert len(consume_all(broker, topic_name)) == 3


def test_delete_records_after_policy_change_follows_the_current_policy(broker, topic_name):
    """The check reads the topic's config at request time (Kafka reads leaderLog.config)."""
    create(broker, topic_name)
    produce(broker, topic_name, [(b"k%d" % i, b"v") for i in range(4)])
    broker.logs.alter_topic_config(topic_name, {"cleanup.policy": "compact"})
    with pytest.raises(KafkaException):
        delete_records(broker, topic_name, 2)
    broker.logs.alter_topic_config(topic_name, {"cleanup.policy": "compact,delete"})
    assert delete_records(broker, topic_name, 2).low_watermark == 2


def test_delete_records_touches_only_the_named_partition_and_topic(broker, topic_name):
    """DeleteRecords on one partition leaves its sibling partitions and other topics alone."""
    create(broker, topic_name, partitions=3)
    other = topic_name + "-other"
    create(broker, other)
    for part in range(3):
        produce(broker, topic_name, [(b"k%d" % i, b"v") for i in range(5)], partition=part)
    produce(broker, other, [(b"k%d" % i, b"v") for i in range(5)])
    assert delete_records(broker, topic_name, 4, partition=1).low_watermark == 4
    starts = [broker.logs.get_log(topic_name, p).log_start_offset for p in range(3)]
    assert starts == [0, 4, 0]
    assert broker.logs.get_log(other, 0).log_start_offset == 0
    assert len(consume_all(broker, topic_name, 0)) == 5
    assert len(consume_all(broker, topic_name, 2)) == 5
    assert len(consume_all(broker, other)) == 5


def test_create_partitions_leaves_existing_partitions_and_configs_alone(broker, topic_name):
    """CreatePartitions adds empty partitions with the topic's config; the data and log
    start offsets of the existing ones do not move (Kafka's ReplicationControlManager)."""
    create(broker, topic_name, partitions=2, cleanup_policy="compact")
    for part in range(2):
        produce(broker, topic_name, [(b"k%d" % i, b"v%d" % i) for i in range(4)], partition=part)
    before = [consume_all(broker, topic_name, p) for p in range(2)]
    a = admin(broker)
    a.create_partitions([NewPartitions(topic_name, 4)])[topic_name].result(TIMEOUT)
    assert [consume_all(broker, topic_name, p) for p in range(2)] == before
    for p in range(2, 4):
        plog = broker.logs.get_log(topic_name, p)
        assert plog.log_end_offset == 0 and plog.config.compact


# -- raw protocol helpers (the record_errors of a Produce answer are not exposed by clients)


def _call(broker, api_key: int, version: int, body: dict):
    return call(broker.port, api_key, version, body)


def raw_produce(broker, topic_data: dict[str, dict[int, bytes]], version: int = 9):
    """Produce {topic: {partition: record set}}; answers {(topic, partition): response}."""
    body = {
        "acks": -1,
        "timeout": 5000,
        "topic_data": [
            {
                "name": t,
                "partition_data": [{"index": p, "records": r} for p, r in parts.items()],
            }
            for t, parts in topic_data.items()
        ],
    }
    r = _call(broker, API.produce, version, body)
    return {(t.name, p.index): p for t in r.responses for p in t.partition_responses}


def now_ms() -> int:
    return int(time.time() * 1000)


def batch(items, timestamps=None, **kw) -> bytes:
    from kompakt.record.decode import Record
    from kompakt.record.encode import build_batch

    ts = timestamps or [now_ms()] * len(items)
    return build_batch(
        [Record(i, t, k, v, []) for i, ((k, v), t) in enumerate(zip(items, ts, strict=True))],
        **kw,
    )


YEAR_2100 = 4_102_444_800_000


# -- 2. message.timestamp.* (KIP-937) and LogAppendTime end to end --------------------------


def test_produce_stamped_in_2100_is_invalid_timestamp_with_record_errors(broker, topic_name):
    """Kafka LogValidator.validateTimestamp: CreateTime beyond now + after.max.ms (1 h by
    default since KIP-1030) is INVALID_TIMESTAMP (32); each bad record listed."""
    create(broker, topic_name)
    now = now_ms()
    items = [(b"k%d" % i, b"v") for i in range(4)]
    got = raw_produce(broker, {topic_name: {0: batch(items, [now, YEAR_2100, now, YEAR_2100])}})
    p = got[(topic_name, 0)]
    assert p.error_code == ErrorCode.invalid_timestamp
    assert [e.batch_index for e in p.record_errors] == [1, 3]
    assert "out of range" in p.record_errors[0].batch_index_error_message
    assert p.error_message == "One or more records have been rejected due to invalid timestamp"
    assert broker.logs.get_log(topic_name, 0).log_end_offset == 0


def test_confluent_producer_sees_invalid_timestamp_and_nothing_is_stored(broker, topic_name):
    """librdkafka surfaces INVALID_TIMESTAMP on delivery; the topic stays empty."""
    create(broker, topic_name)
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    errors = []
    p.produce(
        topic_name, b"v", b"k", timestamp=YEAR_2100, on_delivery=lambda e, m: errors.append(e)
    )
    p.flush(TIMEOUT)
    assert [e.code() for e in errors] == [KafkaError.INVALID_TIMESTAMP]
    assert broker.logs.get_log(topic_name, 0).log_end_offset == 0


def test_topic_timestamp_bounds_are_honoured_per_topic(broker, topic_name):
    """message.timestamp.before.max.ms rejects old records on the topic that sets it only."""
    create(broker, topic_name, message_timestamp_before_max_ms="60000")
    old = [(b"k", b"v")]
    got = raw_produce(
        broker,
        {topic_name: {0: batch(old, [now_ms() - 3_600_000])}},
    )
    assert got[(topic_name, 0)].error_code == ErrorCode.invalid_timestamp
    other = topic_name + "-default"
    create(broker, other)
    got = raw_produce(broker, {other: {0: batch(old, [now_ms() - 3_600_000])}})
    assert got[(other, 0)].error_code == ErrorCode.none


def test_log_append_time_end_to_end_with_confluent_and_kafka_python(broker, topic_name):
    """message.timestamp.type=LogAppendTime: the Produce answer carries log_append_time_ms,
    the stored batch has the type bit, the broker's time and a valid CRC, consumers see
    TIMESTAMP_LOG_APPEND_TIME with that time, and ListOffsets by time finds it."""
    create(broker, topic_name, message_timestamp_type="LogAppendTime")
    before = now_ms()
    got = raw_produce(broker, {topic_name: {0: batch([(b"a", b"1"), (b"b", b"2")], [5, 6])}})
    after = now_ms()
    p = got[(topic_name, 0)]
    assert p.error_code == ErrorCode.none
    append_ms = round(p.log_append_time.timestamp() * 1000)
    assert before <= append_ms <= after
    [b] = list(broker.logs.get_log(topic_name, 0).iter_batches())
    b.ensure_valid()
    assert b.header.max_timestamp == append_ms and b.header.timestamp_type == 1

    from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME

    seen = consume_all(broker, topic_name)
    assert [t for *_r, t in seen] == [(TIMESTAMP_LOG_APPEND_TIME, append_ms)] * 2

    delivered = []
    prod = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    prod.produce(topic_name, b"3", b"c", timestamp=7, on_delivery=lambda e, m: delivered.append(m))
    prod.flush(TIMEOUT)
    kind, ts = delivered[0].timestamp()
    assert kind == TIMESTAMP_LOG_APPEND_TIME and ts >= append_ms

    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    kc = KafkaConsumer(bootstrap_servers=broker.bootstrap, consumer_timeout_ms=3000)
    kc.assign([KTP(topic_name, 0)])
    kc.seek_to_beginning()
    recs = list(kc)
    assert [(r.timestamp_type, r.timestamp) for r in recs[:2]] == [(1, append_ms)] * 2
    found = kc.offsets_for_times({KTP(topic_name, 0): append_ms})
    assert found[KTP(topic_name, 0)].offset == 0
    kc.close()


# -- 3. record_errors name each record (KIP-467) ---------------------------------------------


def test_null_key_in_record_3_of_5_on_compacted_topic_names_index_3(broker, topic_name):
    """Kafka LogValidator.validateKey + processRecordErrors: INVALID_RECORD (87) with
    record_errors=[{batch_index: 3}] and error_message set (librdkafka test 0011)."""
    create(broker, topic_name, cleanup_policy="compact")
    items = [(b"a", b"1"), (b"b", b"2"), (b"c", b"3"), (None, b"4"), (b"e", b"5")]
    got = raw_produce(broker, {topic_name: {0: batch(items)}})
    p = got[(topic_name, 0)]
    assert p.error_code == ErrorCode.invalid_record
    assert [e.batch_index for e in p.record_errors] == [3]
    assert "without key" in p.record_errors[0].batch_index_error_message
    assert p.error_message.startswith("One or more records have been rejected due to 1 record")
    assert broker.logs.get_log(topic_name, 0).log_end_offset == 0


def test_confluent_producer_fails_the_keyless_message_on_a_compacted_topic(broker, topic_name):
    create(broker, topic_name, cleanup_policy="compact")
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 50})
    results = []
    for k in (b"a", b"b", None):
        p.produce(topic_name, b"v", k, on_delivery=lambda e, m: results.append((m.key(), e)))
    p.flush(TIMEOUT)
    failed = {k for k, e in results if e is not None}
    assert None in failed
    assert all(e.code() == KafkaError.INVALID_RECORD for _k, e in results if e is not None)


def test_a_bad_partition_in_a_request_does_not_block_or_touch_the_others(broker, topic_name):
    """Kafka validates and appends each partition on its own: the bad one fails, the
    partitions and topics beside it in the same request are written."""
    create(broker, topic_name, partitions=2, cleanup_policy="compact")
    other = topic_name + "-other"
    create(broker, other)
    good = batch([(b"k", b"v")])
    got = raw_produce(
        broker,
        {
            topic_name: {0: batch([(None, b"x")]), 1: good},
            other: {0: batch([(b"k", b"v")], [YEAR_2100])},
        },
    )
    assert got[(topic_name, 0)].error_code == ErrorCode.invalid_record
    assert got[(topic_name, 1)].error_code == ErrorCode.none
    assert got[(other, 0)].error_code == ErrorCode.invalid_timestamp
    ends = [broker.logs.get_log(topic_name, p).log_end_offset for p in (0, 1)]
    assert ends == [0, 1] and broker.logs.get_log(other, 0).log_end_offset == 0
    got = raw_produce(broker, {other: {0: good}})
    assert got[(other, 0)].error_code == ErrorCode.none


def test_retried_duplicate_on_log_append_time_topic_answers_the_original_time(broker, topic_name):
    """Kafka UnifiedLog.append for a duplicate batch: the original's offset and its
    append time (not -1), so a retrying idempotent producer learns the stored time."""
    create(broker, topic_name, message_timestamp_type="LogAppendTime")
    init = _call(
        broker, API.init_producer_id, 4, {"transactional_id": None, "transaction_timeout": 60000}
    )
    data = batch([(b"k", b"v")], producer_id=init.producer_id, producer_epoch=0, base_sequence=0)
    first = raw_produce(broker, {topic_name: {0: data}})[(topic_name, 0)]
    plog = broker.logs.get_log(topic_name, 0)
    appended_ms = first.log_append_time.timestamp() * 1000
    wait_for(lambda: plog.clock() > appended_ms, "the log's clock to move past it")
    again = raw_produce(broker, {topic_name: {0: data}})[(topic_name, 0)]
    assert (again.error_code, again.base_offset) == (0, 0)
    assert again.log_append_time == first.log_append_time is not None
    assert broker.logs.get_log(topic_name, 0).log_end_offset == 1


# -- AlterConfigs: a change reaches only the resource it names -------------------------------


def test_alter_configs_touches_only_the_named_topic_and_a_bad_resource_only_itself(
    broker, topic_name
):
    """Kafka applies each resource of an (Incremental)AlterConfigs request on its own: a
    refused resource changes nothing, and the topics beside it keep their configs and data."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    a_name, b_name, c_name = (f"{topic_name}-{s}" for s in "abc")
    create(broker, a_name, retention_ms="-1")
    create(broker, b_name, retention_ms="-1")
    create(broker, c_name, retention_ms="-1")
    for t in (a_name, b_name, c_name):
        produce(broker, t, [(b"k%d" % i, b"v") for i in range(3)])

    def res(name, key, value):
        op = AlterConfigOpType.SET
        return ConfigResource(
            ConfigResource.Type.TOPIC,
            name,
            incremental_configs=[ConfigEntry(key, value, incremental_operation=op)],
        )

    good = res(a_name, "segment.bytes", "2048")
    bad = res(b_name, "retention.ms", "never")
    a = admin(broker)
    fs = a.incremental_alter_configs([good, bad])
    fs[good].result(TIMEOUT)
    with pytest.raises(KafkaException):
        fs[bad].result(TIMEOUT)
    assert broker.logs.topic_meta(a_name).overrides == {
        "retention.ms": "-1",
        "segment.bytes": "2048",
    }
    assert broker.logs.topic_meta(b_name).overrides == {"retention.ms": "-1"}
    assert broker.logs.topic_meta(c_name).overrides == {"retention.ms": "-1"}
    assert broker.logs.apply_retention() == 0
    for t in (a_name, b_name, c_name):
        assert len(consume_all(broker, t)) == 3
