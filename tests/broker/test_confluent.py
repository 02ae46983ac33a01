"""librdkafka (confluent-kafka) against the broker: produce, consume, admin."""

import pytest
from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)

TIMEOUT = 10


def admin(broker):
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def create(broker, name, partitions=1, config=None):
    a = admin(broker)
    fs = a.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})],
        operation_timeout=TIMEOUT,
    )
    fs[name].result(TIMEOUT)


def consume_all(broker, topic, partition, n, offset=0):
    c = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
        }
    )
    c.assign([TopicPartition(topic, partition, offset)])
    out = []
    try:
        for _ in range(200):
            if len(out) >= n:
                break
            for m in c.consume(num_messages=n, timeout=0.2):
                assert m.error() is None, m.error()
                out.append(m)
    finally:
        c.close()
    return out


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_idempotent_produce_and_consume(broker, topic_name, codec):
    create(broker, topic_name, partitions=2)
    p = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "enable.idempotence": True,
            "compression.codec": codec,
            "linger.ms": 5,
        }
    )
    sent = {}
    errors = []

    def cb(err, msg):
        if err is not None:
            errors.append(err)

    for i in range(300):
        key = f"k{i % 37}".encode()
        value = f"value-{i}-".encode() * 3
        part = i % 2
        p.produce(topic_name, value, key, partition=part, on_delivery=cb)
        sent.setdefault(part, []).append((key, value))
    assert p.flush(TIMEOUT) == 0
    assert not errors
    for part, items in sent.items():
        got = consume_all(broker, topic_name, part, len(items))
        assert [(m.key(), m.value()) for m in got] == items
        assert [m.offset() for m in got] == list(range(len(items)))
    # seek into the middle
    got = consume_all(broker, topic_name, 0, 10, offset=140)
    assert got[0].offset() == 140 and got[0].value() == sent[0][140][1]


def test_null_key_on_compacted_topic_is_invalid_record(broker, topic_name):
    create(broker, topic_name, config={"cleanup.policy": "compact"})
    p = Producer({"bootstrap.servers": broker.bootstrap, "message.send.max.retries": 0})
    results = []
    p.produce(topic_name, b"no key", on_delivery=lambda err, msg: results.append(err))
    p.flush(TIMEOUT)
    assert [e.code() for e in results] == [KafkaError.INVALID_RECORD]  # 87
    p.produce(topic_name, b"v", b"k", on_delivery=lambda err, msg: results.append(err))
    p.flush(TIMEOUT)
    assert results[1] is None
    hw = consume_all(broker, topic_name, 0, 1)
    assert [m.key() for m in hw] == [b"k"]


def test_admin_topics_and_configs(broker, topic_name):
    a = admin(broker)
    create(broker, topic_name, partitions=1, config={"cleanup.policy": "compact"})
    # already exists
    fs = a.create_topics([NewTopic(topic_name, 1, 1)])
    with pytest.raises(KafkaException) as ei:
        fs[topic_name].result(TIMEOUT)
    assert ei.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS
    # bad config / rf
    bad = a.create_topics(
        [
            NewTopic(topic_name + "-bad", 1, 1, config={"segment.bytes": "3"}),
            NewTopic(topic_name + "-rf", 1, 3),
        ]
    )
    with pytest.raises(KafkaException) as ei:
        bad[topic_name + "-bad"].result(TIMEOUT)
    assert ei.value.args[0].code() == KafkaError.INVALID_CONFIG
    with pytest.raises(KafkaException) as ei:
        bad[topic_name + "-rf"].result(TIMEOUT)
    assert ei.value.args[0].code() == KafkaError.INVALID_REPLICATION_FACTOR

    res = ConfigResource(ConfigResource.Type.TOPIC, topic_name)
    desc = a.describe_configs([res])[res].result(TIMEOUT)
    assert desc["cleanup.policy"].value == "compact"
    assert desc["segment.bytes"].is_default
    assert desc["cleanup.policy"].source == 1  # DYNAMIC_TOPIC_CONFIG

    inc = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic_name,
        incremental_configs=[
            ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.APPEND),
        ],
    )
    a.incremental_alter_configs([inc])[inc].result(TIMEOUT)
    desc = a.describe_configs([res])[res].result(TIMEOUT)
    assert desc["retention.ms"].value == "1000"
    assert desc["cleanup.policy"].value == "compact,delete"
    assert broker.logs.topic_config(topic_name).retention_ms == 1000

    bad_inc = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic_name,
        incremental_configs=[
            ConfigEntry("retention.ms", "x", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    with pytest.raises(KafkaException) as ei:
        a.incremental_alter_configs([bad_inc])[bad_inc].result(TIMEOUT)
    assert ei.value.args[0].code() == KafkaError.INVALID_CONFIG

    broker_res = ConfigResource(ConfigResource.Type.BROKER, "1")
    bdesc = a.describe_configs([broker_res])[broker_res].result(TIMEOUT)
    assert bdesc["num.partitions"].value == "1"
    assert bdesc["log.dirs"].is_read_only

    a.create_partitions([NewPartitions(topic_name, 3)])[topic_name].result(TIMEOUT)
    md = a.list_topics(topic_name, timeout=TIMEOUT)
    assert len(md.topics[topic_name].partitions) == 3
    assert md.controller_id == 1

    a.delete_topics([topic_name], operation_timeout=TIMEOUT)[topic_name].result(TIMEOUT)
    assert not broker.logs.has_topic(topic_name)
    fs = a.delete_topics([topic_name])
    with pytest.raises(KafkaException) as ei:
        fs[topic_name].result(TIMEOUT)
    assert ei.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_delete_records_and_offsets(broker, topic_name):
    create(broker, topic_name)
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    for i in range(10):
        p.produce(topic_name, str(i).encode(), b"k", timestamp=1_000_000 + i * 1000)
    p.flush(TIMEOUT)
    c = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": "x", "enable.auto.commit": False}
    )
    lo, hi = c.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=TIMEOUT)
    assert (lo, hi) == (0, 10)
    found = c.offsets_for_times([TopicPartition(topic_name, 0, 1_004_500)], timeout=TIMEOUT)
    assert found[0].offset == 5
    c.close()
    a = admin(broker)
    if hasattr(a, "delete_records"):
        fs = a.delete_records([TopicPartition(topic_name, 0, 4)])
        list(fs.values())[0].result(TIMEOUT)
        assert broker.logs.get_log(topic_name, 0).log_start_offset == 4


def test_list_offsets_max_timestamp_is_the_record_holding_it(broker, topic_name):
    """KAFKA-16310 (Kafka 3.8): OffsetSpec.max_timestamp answers the first record with
    the largest timestamp; one linger-held batch at T, T+9, T+2, T+9 -> offset 1."""
    from confluent_kafka.admin import OffsetSpec

    create(broker, topic_name)
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 500})
    for i, dt in enumerate((0, 9, 2, 9)):
        p.produce(topic_name, b"v", b"k%d" % i, partition=0, timestamp=1_000_000 + dt)
    p.flush(TIMEOUT)
    assert len(list(broker.logs.get_log(topic_name, 0).iter_batches())) == 1
    tp = TopicPartition(topic_name, 0)
    a = admin(broker)
    got = a.list_offsets({tp: OffsetSpec.max_timestamp()})[tp].result(TIMEOUT)
    assert (got.offset, got.timestamp) == (1, 1_000_009)


def test_internal_topics_refuse_delete_records_and_are_flagged_internal(broker, topic_name):
    """Kafka's ReplicaManager: "Cannot delete records of internal topic" (error 17);
    Metadata's is_internal is Topic.isInternal (the fixed set), not a '__' prefix."""
    from confluent_kafka import KafkaException, TopicCollection

    if not broker.logs.has_topic("__consumer_offsets"):  # earlier group consumers made it
        broker.logs.create_topic("__consumer_offsets", 1, {"cleanup.policy": "compact"})
    broker.logs.create_topic("__" + topic_name)
    a = admin(broker)
    fs = a.delete_records([TopicPartition("__consumer_offsets", 0, 0)])
    with pytest.raises(KafkaException) as err:
        list(fs.values())[0].result(TIMEOUT)
    assert err.value.args[0].code() == 17  # INVALID_TOPIC_EXCEPTION
    meta = a.describe_topics(TopicCollection(["__consumer_offsets", "__" + topic_name]))
    internal = {name: f.result(TIMEOUT).is_internal for name, f in meta.items()}
    assert internal == {"__consumer_offsets": True, "__" + topic_name: False}
