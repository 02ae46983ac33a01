"""The Spark source's ``read_committed`` agrees with the broker's READ_COMMITTED fetch:
the same partition, read by a librdkafka READ_COMMITTED consumer and by
``spark.read.format("kompakt")``, gives the same records (Kafka: a READ_COMMITTED
fetch stops at the last stable offset and the client drops aborted transactions)."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kompakt.broker.app import start_test_broker

TIMEOUT = 20
SMALL = {"transaction.state.log.num.partitions": 2, "offsets.topic.num.partitions": 2}


def consumer_rows(bootstrap: str, topic: str) -> list[tuple[int, bytes]]:
    """(offset, value) a READ_COMMITTED consumer reads from partition 0 up to the LSO."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "agree",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    tp = TopicPartition(topic, 0)
    try:
        _low, lso = c.get_watermark_offsets(tp, TIMEOUT, cached=False)
        c.assign([TopicPartition(topic, 0, 0)])
        got: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + TIMEOUT
        while c.position([tp])[0].offset < lso:
            assert time.monotonic() < deadline, f"read only {got} of LSO {lso}"
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append((m.offset(), m.value()))
        return got
    finally:
        c.close()


def test_spark_read_committed_returns_what_a_read_committed_consumer_reads(
    tmp_path, rows_of
) -> None:
    """Committed, aborted, committed again, then an open transaction followed by a
    plain record: both readers stop at the open transaction's first offset (the LSO)
    and leave out the aborted records; READ_UNCOMMITTED sees them all."""
    b = start_test_broker(tmp_path, **SMALL)
    topic = "agree"
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics(
            [NewTopic(topic, 1, 1, config={"segment.bytes": "300"})], operation_timeout=TIMEOUT
        )[topic].result(TIMEOUT)
        tx = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "t1", "linger.ms": 0})
        plain = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0})
        tx.init_transactions(TIMEOUT)
        for name, end in ((b"c", "commit"), (b"a", "abort"), (b"d", "commit"), (b"o", None)):
            tx.begin_transaction()
            for i in range(3):
                tx.produce(topic, key=b"k%d" % i, value=name + b"%d" % i, partition=0)
            assert tx.flush(TIMEOUT) == 0  # an abort would purge unsent records
            if end == "commit":
                tx.commit_transaction(TIMEOUT)
            elif end == "abort":
                tx.abort_transaction(TIMEOUT)
            plain.produce(topic, value=b"p-" + name, partition=0)
            assert plain.flush(TIMEOUT) == 0
        plog = b.logs.get_log(topic, 0)
        deadline = time.monotonic() + TIMEOUT
        while plog.log_end_offset < 19:  # 4 x (3 records + 1 plain) + 3 markers
            assert time.monotonic() < deadline, plog.log_end_offset
            time.sleep(0.05)  # back-off: the last markers follow the EndTxn answers
        assert len(plog.segments) > 2
        lso = plog.last_stable_offset
        assert lso < plog.high_watermark  # the open transaction holds it back
        broker = consumer_rows(b.bootstrap, topic)
        values = [v for _o, v in broker]
        assert not [v for v in values if v.startswith((b"a", b"o"))]
        assert {b"c0", b"d2", b"p-c", b"p-a", b"p-d"} <= set(values)
        assert b"p-o" not in values  # past the LSO
        spark = [(o, v) for _t, _p, o, _k, v in rows_of(tmp_path, subscribe=topic)]
        assert spark == broker
        raw = rows_of(tmp_path, subscribe=topic, **{"kafka.isolation.level": "read_uncommitted"})
        assert {v for *_x, v in raw} >= {b"a0", b"o2", b"p-o"}
    finally:
        b.stop()
