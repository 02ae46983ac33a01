"""Raw-socket protocol tests: framing, fuzzing, versions, pipelining, long polling."""

import gc
import random
import socket
import struct
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from kio.schema.errors import ErrorCode
from raw_kafka import API, encode_request
from raw_kafka import decode_response as decode
from shared_kit import record_results, wait_for

from kompakt.broker.app import start_test_broker
from kompakt.record.encode import build_simple_batch


def build_batch(items, **kw):
    return build_simple_batch(items, timestamp=int(time.time() * 1000), **kw)


def connect(broker):
    s = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
    return s


def encode(api_key, version, corr, body):
    return encode_request(api_key, version, body, correlation_id=corr)


def recv_frame(s):
    head = b""
    while len(head) < 4:
        chunk = s.recv(4 - len(head))
        if not chunk:
            return None
        head += chunk
    (n,) = struct.unpack(">i", head)
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def call(s, api_key, version, body, corr=1):
    s.sendall(encode(api_key, version, corr, body))
    return decode(api_key, version, recv_frame(s))


def closed(s):
    s.settimeout(5)
    try:
        return s.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True


def test_api_versions_advertises_produce_from_v0(broker):
    with connect(broker) as s:
        _c, resp = call(
            s, API.api_versions, 3, {"client_software_name": "raw", "client_software_version": "1"}
        )
    assert resp.error_code == ErrorCode.none
    keys = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert keys[API.produce][0] == 0 and keys[API.produce][1] >= 9
    assert keys[API.metadata] == (0, 13)
    assert API.find_coordinator in keys  # the group coordinator is registered


def test_the_start_up_heap_is_frozen_once_a_client_connected(broker):
    """A full collection walks only what came after the broker's start (gc.freeze)."""
    with connect(broker) as s:
        call(s, API.api_versions, 3, {"client_software_name": "r", "client_software_version": "1"})
    assert gc.get_freeze_count() > 10_000


def test_api_versions_unsupported_version_answers_v0(broker):
    with connect(broker) as s:
        # a future ApiVersions v99: header v2 layout, body unknown
        hdr = struct.pack(">hhih", API.api_versions, 99, 42, 3) + b"raw" + b"\x00"
        s.sendall(struct.pack(">i", len(hdr)) + hdr)
        corr, resp = decode(API.api_versions, 0, recv_frame(s))
    assert corr == 42
    assert resp.error_code == ErrorCode.unsupported_version
    assert any(k.api_key == API.api_versions and k.max_version == 4 for k in resp.api_keys)


def test_pipelined_requests_answered_in_order(broker):
    with connect(broker) as s:
        frames = b"".join(encode(API.metadata, 12, corr, {"topics": None}) for corr in range(1, 21))
        s.sendall(frames)
        corrs = [decode(API.metadata, 12, recv_frame(s))[0] for _ in range(20)]
    assert corrs == list(range(1, 21))


def test_produce_v2_is_rejected_and_acks_0_has_no_response(broker, topic_name):
    broker.logs.create_topic(topic_name)
    with connect(broker) as s:
        hdr = struct.pack(">hhih", API.produce, 2, 7, 3) + b"raw" + b"\x00\x01" + b"\x00" * 10
        s.sendall(struct.pack(">i", len(hdr)) + hdr)
        assert closed(s)


def test_garbage_and_fuzz_never_kill_the_server(broker):
    rnd = random.Random(1234)
    payloads = [
        b"\x00",  # truncated size
        b"\x00\x00\x00\x10abc",  # truncated frame
        struct.pack(">i", 2**31 - 1) + b"x" * 100,  # huge size prefix
        struct.pack(">i", -5),  # negative size
        struct.pack(">i", 4) + b"abcd",  # too short for a header
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    ]
    for _ in range(150):
        api = rnd.choice([rnd.randint(-5, 100), 0, 1, 3, 18, 19, 32])
        version = rnd.randint(-2, 20)
        body = bytes(rnd.getrandbits(8) for _ in range(rnd.randint(0, 64)))
        frame = struct.pack(">hhi", api, version, rnd.randint(0, 1000)) + body
        payloads.append(struct.pack(">i", len(frame)) + frame)
    for p in payloads:
        try:
            with connect(broker) as s:
                s.sendall(p)
                s.shutdown(socket.SHUT_WR)
                s.settimeout(5)
                while s.recv(65536):
                    pass
        except OSError:
            pass
    # a real client still works
    a = AdminClient({"bootstrap.servers": broker.bootstrap})
    md = a.list_topics(timeout=10)
    assert md.controller_id == 1


def test_long_poll_fetch_wakes_on_append(broker, topic_name):
    """Kafka DelayedFetch: a fetch with less than min_bytes ready waits for data and an
    append completes it. max_wait is ten minutes, so an answer before the socket's 10 s
    timeout can only come from the append's wake-up (no elapsed-time assertion)."""
    broker.logs.create_topic(topic_name)
    plog = broker.logs.get_log(topic_name, 0)
    waiting = record_results(broker.broker.state.notifier, "register")
    body = {
        "max_wait": 600_000,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "topics": [
            {
                "topic": topic_name,
                "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}],
            }
        ],
    }
    with connect(broker) as s:
        s.sendall(encode(1, 12, 1, body))
        wait_for(lambda: waiting, "the fetch to wait for an append")
        plog.append(build_batch([(b"k", b"late")]))
        _c, resp = decode(1, 12, recv_frame(s))
    part = resp.responses[0].partitions[0]
    assert part.error_code == 0 and part.high_watermark == 1 and part.records
    # offset out of range
    with connect(broker) as s:
        body["topics"][0]["partitions"][0]["fetch_offset"] = 99
        _c, resp = call(s, API.fetch, 12, body)
    assert resp.responses[0].partitions[0].error_code == ErrorCode.offset_out_of_range


def test_fetch_by_topic_id_v13(broker, topic_name):
    broker.logs.create_topic(topic_name)
    broker.logs.get_log(topic_name, 0).append(build_batch([(b"k", b"v")]))
    with connect(broker) as s:
        _c, md = call(
            s, 3, 12, {"topics": [{"name": topic_name}], "allow_auto_topic_creation": False}
        )
        tid = md.topics[0].topic_id
        body = {
            "max_wait": 0,
            "min_bytes": 0,
            "max_bytes": 1 << 20,
            "topics": [
                {
                    "topic_id": tid,
                    "partitions": [
                        {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1024}
                    ],
                }
            ],
        }
        _c, resp = call(s, API.fetch, 16, body)
    assert resp.responses[0].topic_id == tid
    assert resp.responses[0].partitions[0].high_watermark == 1


def test_idempotent_sequence_checks(broker, topic_name):
    broker.logs.create_topic(topic_name)
    with connect(broker) as s:
        _c, init = call(
            s, API.init_producer_id, 4, {"transactional_id": None, "transaction_timeout": 60000}
        )
        pid = init.producer_id

        def produce(seq, n=1, epoch=0):
            batch = build_batch(
                [(b"k", b"v%d" % i) for i in range(n)],
                producer_id=pid,
                producer_epoch=epoch,
                base_sequence=seq,
            )
            body = {
                "acks": -1,
                "timeout": 5000,
                "topic_data": [
                    {"name": topic_name, "partition_data": [{"index": 0, "records": batch}]}
                ],
            }
            _c, r = call(s, API.produce, 9, body)
            p = r.responses[0].partition_responses[0]
            return p.error_code, p.base_offset

        assert produce(0, 2) == (0, 0)
        assert produce(2, 3) == (0, 2)
        assert produce(0, 2) == (0, 0)  # duplicate: original offset, not appended
        assert produce(9)[0] == ErrorCode.out_of_order_sequence_number
        assert produce(5, 1) == (0, 5)
        assert produce(0, 1, epoch=1) == (0, 6)  # new epoch starts at 0
        assert produce(6, 1, epoch=0)[0] == ErrorCode.invalid_producer_epoch
    assert broker.logs.get_log(topic_name, 0).log_end_offset == 7


def test_unknown_topic_with_auto_create_off(tmp_path):
    b = start_test_broker(tmp_path, auto_create_topics_enable="false")
    try:
        p = Producer(
            {
                "bootstrap.servers": b.bootstrap,
                "message.timeout.ms": 1500,
                "topic.metadata.refresh.interval.ms": 200,
            }
        )
        errs = []
        p.produce("nope", b"v", on_delivery=lambda e, m: errs.append(e))
        p.flush(5)
        assert errs and errs[0] is not None
        assert not b.logs.has_topic("nope")
        with connect(b) as s:
            _c, md = call(
                s, 3, 12, {"topics": [{"name": "nope"}], "allow_auto_topic_creation": True}
            )
        assert md.topics[0].error_code == ErrorCode.unknown_topic_or_partition
    finally:
        b.stop()


@pytest.mark.parametrize("version", [0, 4, 9, 13])
def test_metadata_versions(broker, version):
    with connect(broker) as s:
        body = {"topics": [] if version == 0 else None}
        _c, md = call(s, API.metadata, version, body)
    assert md.brokers[0].port == broker.port


def test_create_topics_edge_cases_and_list_offsets(broker, topic_name):
    topics = [
        {"name": topic_name, "num_partitions": -1, "replication_factor": -1, "configs": []},
        {"name": "bad/name", "num_partitions": 1, "replication_factor": 1, "configs": []},
        {"name": topic_name + "-z", "num_partitions": 0, "replication_factor": 1, "configs": []},
        {
            "name": topic_name + "-v",
            "num_partitions": 2,
            "replication_factor": 1,
            "configs": [{"name": "cleanup.policy", "value": "compact"}],
        },
    ]
    with connect(broker) as s:
        _c, r = call(s, API.create_topics, 7, {"topics": topics[:3], "timeout": 5000})
        codes = [t.error_code for t in r.topics]
        assert codes == [0, 17, 37]
        assert r.topics[0].num_partitions == 1  # num.partitions default
        _c, r = call(
            s, API.create_topics, 7, {"topics": topics[3:], "timeout": 5000, "validate_only": True}
        )
        assert r.topics[0].error_code == ErrorCode.none
        assert not broker.logs.has_topic(topic_name + "-v")
        # a batch larger than max.message.bytes
        broker.logs.alter_topic_config(topic_name, {"max.message.bytes": "100"})
        big = build_batch([(b"k", b"x" * 500)])
        body = {
            "acks": 1,
            "timeout": 5000,
            "topic_data": [{"name": topic_name, "partition_data": [{"index": 0, "records": big}]}],
        }
        _c, r = call(s, API.produce, 9, body)
        assert r.responses[0].partition_responses[0].error_code == ErrorCode.message_too_large
        broker.logs.alter_topic_config(topic_name, delete=["max.message.bytes"])
        for ts in (1000, 5000, 3000):
            broker.logs.get_log(topic_name, 0).append(
                build_simple_batch([(b"k", b"v")], timestamp=ts)
            )
        parts = [{"partition_index": 0, "timestamp": t} for t in (-2, -1, -3, 2000, 9999)]
        body = {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [{"name": topic_name, "partitions": parts}],
        }
        _c, r = call(s, API.list_offsets, 7, body)
        got = [(p.offset, p.timestamp) for p in r.topics[0].partitions]
        assert got == [(0, -1), (3, -1), (1, 5000), (1, 5000), (-1, -1)]
        _c, r = call(
            s,
            32,
            4,
            {
                "resources": [
                    {
                        "resource_type": 2,
                        "resource_name": topic_name,
                        "configuration_keys": ["segment.bytes"],
                    }
                ],
                "include_synonyms": True,
                "include_documentation": True,
            },
        )
        (entry,) = r.results[0].configs
        assert entry.name == "segment.bytes" and entry.config_source == 5
        assert entry.documentation and entry.synonyms[0].name == "log.segment.bytes"


def test_null_in_a_non_nullable_array_closes_only_that_connection(broker, caplog):
    """Kafka's generated readers refuse -1 for a non-nullable field ("non-nullable field
    groups was serialized as null") and the request is dropped; found by the kio fuzzer,
    where handlers crashed iterating None."""
    hdr = struct.pack(">hhih", API.describe_groups, 1, 7, 3) + b"raw"  # v1, header v1
    frame = hdr + struct.pack(">i", -1)  # groups: array of string, not nullable
    caplog.set_level("WARNING", logger="kompakt")
    with connect(broker) as s:
        s.sendall(struct.pack(">i", len(frame)) + frame)
        assert closed(s)
    logged = [r for r in caplog.records if "non-nullable field" in r.getMessage()]
    assert logged and all(r.levelname == "WARNING" for r in logged)
    assert not [r for r in caplog.records if r.levelname == "ERROR"]
    with connect(broker) as s:
        _c, resp = call(s, API.describe_groups, 1, {"groups": []})
        assert list(resp.groups) == []


@pytest.mark.parametrize("version", [10, 11])
def test_metadata_unknown_topic_id_before_v12_answers_an_empty_name(broker, version):
    """Metadata v10/v11 responses have a non-nullable topic name (nullable from v12)."""
    import uuid

    with connect(broker) as s:
        _c, md = call(
            s,
            3,
            version,
            {
                "topics": [{"name": None, "topic_id": uuid.uuid4()}],
                "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False,
            },
        )
    assert md.topics[0].error_code == ErrorCode.unknown_topic_id and md.topics[0].name == ""
