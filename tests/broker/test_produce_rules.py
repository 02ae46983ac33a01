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

TIMEOUT = 20
POLICY_VIOLATION = 44


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
    out = []
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        m = c.poll(1.0)
        if m is None:
            continue
        if m.error():
            if m.error().code() == KafkaError._PARTITION_EOF:
                break
            raise KafkaException(m.error())
        out.append((m.offset(), m.key(), m.value(), m.timestamp()))
    c.close()
    return out


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
        assert err.value.args[0].code() == POLICY_VIOLATION
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
    assert err.value.args[0].code() == POLICY_VIOLATION
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
