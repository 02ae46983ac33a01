"""The benchmarks' protocol sink answers a real confluent-kafka producer and consumer:
offsets run on from produce to produce, and what it serves back is valid (librdkafka
checks each batch's CRC with ``check.crcs``) and as many records of the topic's size as
were produced, at the offsets the producer was told."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from shared_kit import consume_until

from kompakt.record.encode import build_simple_batch

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "protocol_sink.py"
_spec = importlib.util.spec_from_file_location("protocol_sink", _PATH)
assert _spec is not None and _spec.loader is not None
protocol_sink = importlib.util.module_from_spec(_spec)
sys.modules["protocol_sink"] = protocol_sink  # its dataclasses look their module up
_spec.loader.exec_module(protocol_sink)


@pytest.fixture
def sink() -> Iterator:
    with protocol_sink.ProtocolSink() as s:
        yield s


def test_count_records_reads_batch_headers_only():
    one = build_simple_batch([(None, b"v")] * 3, timestamp=0)
    two = build_simple_batch([(b"k", None)] * 5, timestamp=0, base_offset=3)
    assert protocol_sink.count_records(one + two) == 8
    assert protocol_sink.count_records(b"") == 0


@pytest.mark.parametrize("idempotent", [False, True], ids=["acks1", "idempotent"])
def test_produce_then_consume_the_records_it_counted(sink, idempotent: bool):
    """Kafka's ProduceResponse base offset: the first offset of the appended batch;
    Fetch returns the records from the requested offset up to the high watermark."""
    sink.add_topic("t", 1, record_size=1000)
    admin = AdminClient({"bootstrap.servers": sink.bootstrap})
    admin.create_topics([NewTopic("t", 1, 1)])["t"].result(30)  # already there: no error
    conf = {"bootstrap.servers": sink.bootstrap, "linger.ms": 5}
    if idempotent:
        conf["enable.idempotence"] = True
    else:
        conf["acks"] = "1"
    p = Producer(conf)
    offsets: list[int] = []
    for _ in range(2):  # two flushes: the second's offsets follow the first's
        for _i in range(1500):
            p.produce("t", b"x" * 1000, on_delivery=lambda err, m: offsets.append(m.offset()))
        assert p.flush(30) == 0
    assert sorted(offsets) == list(range(3000))
    assert sink.topics["t"].ends == [3000]

    for _reader in range(2):  # the second reader is served the responses kept encoded
        c = Consumer(
            {
                "bootstrap.servers": sink.bootstrap,
                "group.id": "unused",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "check.crcs": True,
            }
        )
        c.assign([TopicPartition("t", 0, OFFSET_BEGINNING)])
        try:
            got = consume_until(c)
        finally:
            c.close()
        assert [m.offset() for m in got] == list(range(3000))
        assert {len(m.value()) for m in got} == {1000}


def test_unknown_topic_is_refused(sink):
    p = Producer({"bootstrap.servers": sink.bootstrap, "message.timeout.ms": 2000, "acks": "1"})
    errors: list = []
    p.produce("missing", b"x", on_delivery=lambda err, _m: errors.append(err))
    p.flush(10)
    assert errors and errors[0] is not None


def test_transactional_producer_commits_and_aborts_against_the_sink(sink):
    """The transactional client's ceiling: FindCoordinator (TRANSACTION key),
    InitProducerId with a transactional id, AddPartitionsToTxn and EndTxn answered at
    once with NONE (Kafka's success), so commit and abort both return and the records
    of both are delivered."""
    sink.add_topic("tx", 1, record_size=10)
    p = Producer({"bootstrap.servers": sink.bootstrap, "transactional.id": "t1"})
    p.init_transactions(10)
    delivered: list = []
    for end in (p.commit_transaction, p.abort_transaction):
        p.begin_transaction()
        for _ in range(3):
            p.produce("tx", b"x" * 10, on_delivery=lambda err, m: delivered.append(err))
        assert p.flush(10) == 0
        end(10)
    assert delivered == [None] * 6
    assert sink.topics["tx"].ends == [6]
