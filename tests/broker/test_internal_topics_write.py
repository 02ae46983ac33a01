"""Clients may not Produce to internal topics (Kafka's ``ReplicaManager.appendToLocalLog``
with ``internalTopicsAllowed=false``: INVALID_TOPIC_EXCEPTION, "Cannot append to internal
topic __consumer_offsets"). A forged offset record or tombstone would otherwise change or
delete another group's committed offsets when the coordinator loads the log at the next
start. The coordinator's own writes do not go through Produce and keep working."""

from __future__ import annotations

from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode
from raw_kafka import API, call

from kompakt.broker.app import BrokerThread, start_test_broker
from kompakt.broker.coordinator import records as R
from kompakt.broker.coordinator.storage import OFFSETS_TOPIC
from kompakt.record.encode import build_simple_batch

TIMEOUT = 10
FAST = {"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 1}


def create(b: BrokerThread, name: str, partitions: int = 2) -> None:
    a = AdminClient({"bootstrap.servers": b.bootstrap})
    a.create_topics([NewTopic(name, partitions, 1)], operation_timeout=TIMEOUT)[name].result(
        TIMEOUT
    )


def commit(b: BrokerThread, group: str, offsets: dict[tuple[str, int], int]) -> None:
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(
            offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()],
            asynchronous=False,
        )
    finally:
        c.close()


def all_committed(b: BrokerThread, group: str) -> dict[tuple[str, int], int]:
    r = call(b.port, API.offset_fetch, 8, {"groups": [{"group_id": group, "topics": None}]})
    return {
        (t.name, p.partition_index): p.committed_offset
        for t in r.groups[0].topics
        for p in t.partitions
    }


def call_no_answer(port: int, body: dict[str, Any]) -> bool:
    """Send an acks=0 Produce v9 (no answer comes) and then a Metadata on the same
    connection: its answer proves the Produce was handled first."""
    import io
    import socket
    import struct

    from kio.index import load_request_schema
    from kio.serial import entity_writer

    from kompakt.broker.protocol import build

    buf = b""
    for cid, (key, ver, b) in enumerate([(0, 9, body), (3, 12, {"topics": []})]):
        req_cls = load_request_schema(key, ver)
        hdr_cls = req_cls.__header_schema__
        out = io.BytesIO()
        head = {"request_api_key": key, "request_api_version": ver, "correlation_id": cid}
        entity_writer(hdr_cls)(out, build(hdr_cls, {**head, "client_id": "raw"}))
        entity_writer(req_cls)(out, build(req_cls, b))
        data = out.getvalue()
        buf += struct.pack(">i", len(data)) + data
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(buf)
        f = s.makefile("rb")
        (n,) = struct.unpack(">i", f.read(4))
        frame = f.read(n)
    return struct.unpack(">i", frame[:4])[0] == 1  # the Metadata's correlation id


def forge(b: BrokerThread, records: list[tuple[bytes, bytes | None]]) -> list[Any]:
    """Produce ``records`` to ``__consumer_offsets`` partition 0; each delivery's error."""
    errors: list[Any] = []
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0, "retries": 0})
    for k, v in records:
        p.produce(
            OFFSETS_TOPIC, key=k, value=v, partition=0, on_delivery=lambda e, _m: errors.append(e)
        )
    assert p.flush(TIMEOUT) == 0
    return errors


def test_produce_to_consumer_offsets_is_refused_and_offsets_survive_restart(tmp_path):
    """ReplicaManager.appendToLocalLog: a forged tombstone and a forged offset for a
    victim group fail with INVALID_TOPIC_EXCEPTION; nothing reaches the log, and after a
    restart (the coordinator reloads ``__consumer_offsets``) the victim's offsets are the
    ones it committed. Commits after the refusal still work (coordinator-origin writes)."""
    b = start_test_broker(tmp_path / "d", **FAST)
    try:
        create(b, "t")
        commit(b, "victim", {("t", 0): 7, ("t", 1): 9})
        plog = b.broker.logs.get_log(OFFSETS_TOPIC, 0)
        end = plog.log_end_offset
        forged_value = R.offset_value(R.OffsetAndMetadata(0, -1, "", 1))
        errors = forge(
            b,
            [
                (R.offset_key("victim", "t", 0), None),  # tombstone
                (R.offset_key("victim", "t", 1), forged_value),
            ],
        )
        assert [e.code() if e else None for e in errors] == [KafkaError.TOPIC_EXCEPTION] * 2
        assert plog.log_end_offset == end
        commit(b, "victim", {("t", 0): 8, ("t", 1): 9})
        assert plog.log_end_offset > end
        data = b.broker.config.data_dir
        b.stop()
        b = start_test_broker(data, **FAST)
        assert all_committed(b, "victim") == {("t", 0): 8, ("t", 1): 9}
    finally:
        b.stop()


def test_raw_produce_to_internal_topic_names_the_topic(broker):
    """The answer carries Kafka's exception text; acks=0 writes nothing either."""
    create(broker, "raw-internal-t", 1)
    commit(broker, "raw-internal-g", {("raw-internal-t", 0): 1})  # makes the offsets topic
    logs = broker.broker.logs
    ends = [p.log_end_offset for p in logs.logs() if p.topic == OFFSETS_TOPIC]
    records = build_simple_batch(
        [(R.offset_key("raw-internal-g", "raw-internal-t", 0), None)], timestamp=0
    )
    body = {
        "transactional_id": None,
        "acks": 1,
        "timeout": 5000,
        "topic_data": [
            {"name": OFFSETS_TOPIC, "partition_data": [{"index": 0, "records": records}]}
        ],
    }
    r = call(broker.port, API.produce, 9, body)
    part = r.responses[0].partition_responses[0]
    assert part.error_code == ErrorCode.invalid_topic_exception
    assert part.error_message == f"Cannot append to internal topic {OFFSETS_TOPIC}"
    body["acks"] = 0
    assert call_no_answer(broker.port, body)
    assert [p.log_end_offset for p in logs.logs() if p.topic == OFFSETS_TOPIC] == ends
    assert all_committed(broker, "raw-internal-g") == {("raw-internal-t", 0): 1}
