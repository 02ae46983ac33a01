"""One request may not take the broker down: Kafka's bounds on how much one admin request
may create, and a Produce naming very many partitions leaves other clients served."""

import select
import socket
import struct
import time
from typing import Any

from kio.schema.errors import ErrorCode
from raw_kafka import API, call, decode_response, encode_request
from shared_kit import wait_for

from kompakt.record.encode import build_simple_batch

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


def _produce_frame(partitions: dict[str, int], records: bytes) -> bytes:
    """A raw Produce (v9, acks=1) of ``records`` to partitions 0..n-1 of each topic."""
    topic_data = [
        {"name": t, "partition_data": [{"index": i, "records": records} for i in range(n)]}
        for t, n in partitions.items()
    ]
    return encode_request(API.produce, 9, {"acks": 1, "timeout": 30000, "topic_data": topic_data})


def _answer(sock: socket.socket) -> Any:
    f = sock.makefile("rb")
    (n,) = struct.unpack(">i", f.read(4))
    return decode_response(API.produce, 9, f.read(n))[1]


def test_a_produce_naming_100000_partitions_leaves_other_clients_served(broker, topic_name):
    """Kafka serves each connection on its own (network threads, request handler pool):
    one Produce naming 100,000 partitions (9 MB in, 7 MB out) does not hold the others.
    Its answer takes seconds to encode; that was done on the one event loop, and no other
    connection was served meanwhile. Now it is encoded on the handler's worker thread: a
    produce another client sends once the big one's handler is done (its last partition,
    a real one, appended) is answered before the big one."""
    last, mine = f"{topic_name}-last", f"{topic_name}-other"
    broker.logs.create_topic(last, 1, {})
    broker.logs.create_topic(mine, 1, {})
    batch = build_simple_batch([(b"k", b"v")], timestamp=int(time.time() * 1000))
    wide = _produce_frame({f"{topic_name}-absent": 100_000, last: 1}, batch)
    one = _produce_frame({mine: 1}, batch)
    with socket.create_connection(("127.0.0.1", broker.port), timeout=120) as big:
        with socket.create_connection(("127.0.0.1", broker.port), timeout=60) as other:
            other.sendall(one)
            _answer(other)  # connected and served
            big.sendall(wide)
            last_log = broker.logs.get_log(last, 0)
            wait_for(lambda: last_log.log_end_offset == 1, "the big produce's last partition")
            other.sendall(one)
            answer = _answer(other)
            assert answer.responses[0].partition_responses[0].error_code == ErrorCode.none
            assert not select.select([big], [], [], 0)[0], "the big produce was answered first"
        answer = _answer(big)
    absent, appended = answer.responses
    assert len(absent.partition_responses) == 100_000
    codes = {p.error_code for p in absent.partition_responses}
    assert codes == {ErrorCode.unknown_topic_or_partition}
    assert appended.partition_responses[0].error_code == ErrorCode.none
