"""acks=all on one node means on disk: a Produce with acks=-1 is answered only once an
fsync of its partition covers the record (Kafka's ``ProduceRequest.acks``: -1 waits for
the full set of in-sync replicas; kompakt's only replica is the disk), and the fsync is
a group commit: the requests that append while one fsync is in flight share one.

The disk is made slow or stalled (the partition's flush waits on the test), the broker
and the client are real.
"""

from __future__ import annotations

import socket
import struct
import threading
import time

from confluent_kafka import Producer
from kio.schema.errors import ErrorCode
from raw_kafka import API, decode_response, encode_request
from shared_kit import wait_for

from kompakt.broker.app import start_test_broker
from kompakt.record.encode import build_simple_batch

TIMEOUT = 30


class StalledDisk:
    """A one-partition topic whose flush (its fsync) waits for :attr:`gate`, as a
    stalling disk would; :attr:`calls` has the log end offset each flush saw, and
    :attr:`seen` each delivery's (offset, durable offset when it was reported)."""

    def __init__(self, broker, topic: str):
        broker.logs.create_topic(topic, 1)
        self.plog = plog = broker.logs.get_log(topic, 0)
        self.gate = threading.Event()
        self.calls: list[int] = []
        self.seen: list[tuple[int, int]] = []
        flush = plog.flush_records

        def stalled(*args, **kwargs):
            self.calls.append(plog.log_end_offset)
            self.gate.wait(TIMEOUT)
            return flush(*args, **kwargs)

        plog.flush_records = stalled

    def delivered(self, err, msg) -> None:
        assert err is None, err
        self.seen.append((msg.offset(), self.plog.durable_offset))


def test_acks_all_answer_comes_after_the_fsync_that_covers_the_record(tmp_path):
    """Kafka's acks=-1: the answer means the write is durable. With the fsync stalled,
    no delivery report arrives; once it completes, each report finds its offset below
    the durable offset (the end of the fsynced records)."""
    b = start_test_broker(tmp_path)
    try:
        disk = StalledDisk(b, "durable")
        p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 0})
        p.produce("durable", b"v0", on_delivery=disk.delivered)
        wait_for(lambda: disk.calls, "the first fsync to start")
        p.poll(0.5)  # the answer would arrive now if it did not wait for the fsync
        assert disk.seen == []
        disk.gate.set()
        assert p.flush(TIMEOUT) == 0
        assert [off for off, _ in disk.seen] == [0]
        assert all(off < rp for off, rp in disk.seen)
    finally:
        b.stop()


def test_acks_all_requests_that_append_during_an_fsync_share_the_next_one(tmp_path):
    """Group commit: four more producers' acks=all requests append while the first
    one's fsync stalls; that fsync, which runs once the disk comes back, covers and
    answers all five (one flush, not five), each answer after its record was covered."""
    b = start_test_broker(tmp_path)
    producers: list[Producer] = []
    try:
        disk = StalledDisk(b, "grouped")
        for i in range(5):
            p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 0})
            p.produce("grouped", b"v%d" % i, on_delivery=disk.delivered)
            p.poll(0)
            producers.append(p)
            if i == 0:
                wait_for(lambda: disk.calls, "the first fsync to start")
        wait_for(lambda: disk.plog.log_end_offset == 5, "all five appends")
        disk.gate.set()
        for p in producers:
            assert p.flush(TIMEOUT) == 0
        assert sorted(off for off, _ in disk.seen) == [0, 1, 2, 3, 4]
        assert all(off < rp for off, rp in disk.seen)
        # one flush, started when the log ended at offset 1, covered all five records
        assert disk.calls == [1]
        assert disk.plog.durable_offset == 5
    finally:
        b.stop()


def test_pipelined_produce_requests_are_answered_in_order_after_one_fsync(broker, topic_name):
    """Kafka answers a connection's requests in the order they came (its channel is
    muted per request). Eight acks=all Produce requests and a Metadata request sent in
    one write are handled together (their appends in one go, one fsync), and answered
    in order, each with its own base offset, the Metadata last."""
    broker.logs.create_topic(topic_name, 1)
    plog = broker.logs.get_log(topic_name, 0)
    version = 9
    frames = []
    for i in range(8):
        records = build_simple_batch([(b"k", b"v%d" % i)], timestamp=int(time.time() * 1000))
        body = {
            "acks": -1,
            "timeout": 10_000,
            "topic_data": [
                {"name": topic_name, "partition_data": [{"index": 0, "records": records}]}
            ],
        }
        frames.append(encode_request(API.produce, version, body, correlation_id=100 + i))
    frames.append(encode_request(API.metadata, 9, {"topics": None}, correlation_id=200))
    answers = []
    with socket.create_connection(("127.0.0.1", broker.port), timeout=TIMEOUT) as s:
        s.sendall(b"".join(frames))
        f = s.makefile("rb")
        for api, v in [(API.produce, version)] * 8 + [(API.metadata, 9)]:
            (n,) = struct.unpack(">i", f.read(4))
            answers.append(decode_response(api, v, f.read(n)))
    assert [cid for cid, _ in answers] == [*range(100, 108), 200]
    parts = [a.responses[0].partition_responses[0] for _, a in answers[:8]]
    assert [p.error_code for p in parts] == [ErrorCode.none] * 8
    assert [p.base_offset for p in parts] == list(range(8))
    assert plog.durable_offset == 8  # fsynced before the answers went out


def _produce_frame(topic: str, value: bytes, correlation_id: int, acks: int = -1) -> bytes:
    records = build_simple_batch([(b"k", value)], timestamp=int(time.time() * 1000))
    body = {
        "acks": acks,
        "timeout": 10_000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}],
    }
    return encode_request(API.produce, 9, body, correlation_id=correlation_id)


def test_a_connections_next_request_appends_while_the_fsync_before_it_runs(tmp_path):
    """A client pipelines Produce requests on one connection (librdkafka's
    max.in.flight); as a Kafka leader appends the next request before the ones before
    it are replicated, the second request is appended while the first one's fsync
    stalls. Neither is answered before an fsync covers it, and the answers come in the
    order of the requests (Kafka answers a connection's requests in order)."""
    b = start_test_broker(tmp_path)
    try:
        disk = StalledDisk(b, "pipelined")
        with socket.create_connection(("127.0.0.1", b.port), timeout=TIMEOUT) as s:
            s.sendall(_produce_frame("pipelined", b"first", 1))
            wait_for(lambda: disk.calls, "the first fsync to start")
            s.sendall(_produce_frame("pipelined", b"second", 2, acks=1))
            s.sendall(_produce_frame("pipelined", b"third", 3))
            wait_for(  # well before the stalled fsync gives up waiting for the gate
                lambda: disk.plog.log_end_offset == 3,
                "the next requests' appends",
                timeout=TIMEOUT / 3,
            )
            s.settimeout(0.5)
            try:  # the answers would arrive now if they did not wait for the fsync
                early = s.recv(1)
            except TimeoutError:
                early = b""
            assert early == b""
            s.settimeout(TIMEOUT)
            disk.gate.set()
            f = s.makefile("rb")
            answers = []
            for _ in range(3):
                (n,) = struct.unpack(">i", f.read(4))
                answers.append(decode_response(API.produce, 9, f.read(n)))
        assert [cid for cid, _ in answers] == [1, 2, 3]
        parts = [a.responses[0].partition_responses[0] for _, a in answers]
        assert [p.error_code for p in parts] == [ErrorCode.none] * 3
        assert [p.base_offset for p in parts] == [0, 1, 2]
        assert disk.plog.durable_offset == 3
    finally:
        b.stop()
