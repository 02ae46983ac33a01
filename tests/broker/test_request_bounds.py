"""One request may not take the broker down: Kafka's bounds on how much one admin request
may create, and a Produce naming very many partitions leaves other clients served."""

import time

from kio.schema.errors import ErrorCode
from raw_kafka import API, call

# Kafka's ReplicationControlManager.validateTotalNumberOfPartitions
TOO_MANY_PARTITIONS = "Excessively large number of partitions per request."
# Kafka's QuorumController, an operation over MAX_RECORDS_PER_USER_OP records
TOO_LARGE_BATCH = "Unable to perform excessively large batch operation."


def _topic(name, partitions):
    return {"name": name, "num_partitions": partitions, "replication_factor": 1, "configs": []}


def test_create_topics_over_10000_partitions_is_refused_whole_as_kafka_does(broker, topic_name):
    """Kafka's MAX_PARTITIONS_PER_BATCH (10,000): 10,001 one-partition topics, validate
    only, are all refused with POLICY_VIOLATION and Kafka's text, at once (the issue's
    report: 27.8 s and other clients stalled)."""
    topics = [_topic(f"{topic_name}-{i}", 1) for i in range(10_001)]
    t0 = time.monotonic()
    r = call(broker.port, API.create_topics, 7, {"topics": topics, "validate_only": True})
    took = time.monotonic() - t0
    assert len(r.topics) == 10_001
    assert {(t.error_code, t.error_message) for t in r.topics} == {
        (ErrorCode.policy_violation, TOO_MANY_PARTITIONS)
    }
    assert [t.name for t in r.topics[:2]] == [f"{topic_name}-0", f"{topic_name}-1"]
    assert took < 5, took


def test_create_topics_counts_partitions_of_every_topic_as_kafka_does(broker, topic_name):
    """Kafka's own case: 5,000 + 5,000 + 1 partitions are refused whole (nothing made,
    not even the one-partition topic); 5,000 + 5,000 pass the bound."""
    names = [f"{topic_name}-{s}" for s in ("foo", "bar", "baz")]
    sizes = (5000, 5000, 1)
    body = {"topics": [_topic(n, p) for n, p in zip(names, sizes, strict=True)]}
    r = call(broker.port, API.create_topics, 7, body)
    assert [(t.error_code, t.error_message) for t in r.topics] == [
        (ErrorCode.policy_violation, TOO_MANY_PARTITIONS)
    ] * 3
    assert not any(broker.logs.has_topic(n) for n in names)
    body = {"topics": [_topic(n, p) for n, p in zip(names, sizes[:2], strict=False)]}
    r = call(broker.port, API.create_topics, 7, {**body, "validate_only": True})
    assert [t.error_code for t in r.topics] == [ErrorCode.none] * 2


def test_create_partitions_over_10000_new_partitions_is_refused_whole(broker, topic_name):
    """CreatePartitions adding 10,002 partitions over two topics: Kafka's controller
    makes one record per new partition and refuses an operation over 10,000 records;
    both topics get POLICY_VIOLATION, neither grows."""
    names = [f"{topic_name}-a", f"{topic_name}-b"]
    r = call(broker.port, API.create_topics, 7, {"topics": [_topic(n, 1) for n in names]})
    assert [t.error_code for t in r.topics] == [ErrorCode.none] * 2
    grow = {"topics": [{"name": n, "count": 5002, "assignments": None} for n in names]}
    for validate_only in (True, False):
        body = {**grow, "timeout": 5000, "validate_only": validate_only}
        r = call(broker.port, API.create_partitions, 3, body)
        assert [(t.error_code, t.error_message) for t in r.results] == [
            (ErrorCode.policy_violation, TOO_LARGE_BATCH)
        ] * 2
    assert [broker.logs.partition_count(n) for n in names] == [1, 1]
    one = {"topics": [{"name": names[0], "count": 3, "assignments": None}], "timeout": 5000}
    r = call(broker.port, API.create_partitions, 3, one)
    assert r.results[0].error_code == ErrorCode.none
    assert broker.logs.partition_count(names[0]) == 3
