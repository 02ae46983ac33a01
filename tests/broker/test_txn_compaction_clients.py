"""Issue 25's data loss as its reporters met it: a real broker, librdkafka's transactional
producer and read_committed consumer, cleans asked for through the admin endpoint.

Kafka's rule (``LogCleaner``'s ``CleanedTransactionMetadata``, carried through every
segment group of a clean): a COMMIT marker stays while its transaction's data does, so
a read_committed consumer sees every committed record that is still the latest of its
key, whatever the cleaner did between. The repro: transaction 1 commits ``keep`` (900
bytes, so its marker starts the next 1 KiB segment), transaction 2 of the same producer
aborts, then ``c1``..``c4`` commit with a clean after each; Kafka returns
``keep,c1,c2,c3,c4``. Before the fix the cleans removed ``keep`` (read_committed saw
``c1..c4``), on both engines.
"""

from __future__ import annotations

import itertools
import json
import urllib.request
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from shared_kit import consume_until

from kompakt.broker.app import BrokerThread, start_test_broker

TIMEOUT = 30
SMALL = {"transaction.state.log.num.partitions": 2, "offsets.topic.num.partitions": 2}
TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.bytes": "1024", "delete.retention.ms": "0"}
_ids = itertools.count()


@pytest.fixture(scope="module")
def local_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    b = start_test_broker(
        tmp_path_factory.mktemp("txn-clients-local"), **SMALL, **{"kompakt.cleaner.engine": "local"}
    )
    yield b
    b.stop()


@pytest.fixture(scope="module")
def spark_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    """Named as tests/conftest.py's SLOW_FIXTURES expects: a broker on the Spark engine."""
    b = start_test_broker(
        tmp_path_factory.mktemp("txn-clients-spark"),
        **SMALL,
        **{
            "kompakt.cleaner.engine": "spark",
            "kompakt.spark.master": "local[2]",
            "spark.sql.shuffle.partitions": "2",
        },
    )
    yield b
    b.stop()


def compact(b: BrokerThread, topic: str) -> int:
    """``kompakt compact TOPIC`` through the admin endpoint (the background cleaner may
    have been first: then it reports nothing to clean); where the clean stopped."""
    body = json.dumps({"topic": topic, "partition": 0}).encode()
    req = urllib.request.Request(
        f"http://127.0.0.1:{b.admin_port}/v1/compact",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=300) as resp:
        (result,) = json.loads(resp.read())["results"]
    assert result["status"] in ("cleaned", "skipped"), result
    return int(result["first_uncleanable_offset"])


def read_all(bootstrap: str, topic: str, isolation: str) -> list[tuple[bytes, int]]:
    """(key, value length) of every record a fresh consumer reads up to partition EOF."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{next(_ids)}",
            "isolation.level": isolation,
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    c.assign([TopicPartition(topic, 0, 0)])
    try:
        got = consume_until(c, timeout=TIMEOUT, what=f"{topic}-0 to its end")
    finally:
        c.close()
    return [(m.key(), len(m.value())) for m in got]


def run_repro(b: BrokerThread, topic: str) -> list[tuple[bytes, int]]:
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config=TOPIC_CONFIG)])[topic].result(TIMEOUT)
    p = Producer(
        {"bootstrap.servers": b.bootstrap, "transactional.id": f"tx-{topic}", "linger.ms": 0}
    )
    p.init_transactions(TIMEOUT)

    def txn(key: bytes, value: bytes, commit: bool) -> None:
        p.begin_transaction()
        p.produce(topic, key=key, value=value, partition=0)
        assert p.flush(TIMEOUT) == 0
        (p.commit_transaction if commit else p.abort_transaction)(TIMEOUT)

    txn(b"keep", b"k" * 900, commit=True)  # its COMMIT marker starts segment 1
    txn(b"aborted", b"x", commit=False)
    reached = 0
    for i in range(1, 5):
        # ~400-byte values, as in the report: the transactions roll segments, so the
        # cleans reach past the marker that starts segment 1 (with tiny values nothing
        # rolls, nothing is cleaned past offset 1 and nothing is lost)
        txn(b"c%d" % i, b"v%d" % i + b"x" * 400, commit=True)
        reached = max(reached, compact(b, topic))
    assert reached >= 8, f"the cleans stopped at {reached}: the repro no longer reaches c3"
    return read_all(b.bootstrap, topic, "read_committed")


def assert_kafka_answer(b: BrokerThread, topic: str, seen: list[tuple[bytes, int]]) -> None:
    assert [k for k, _ in seen] == [b"keep", b"c1", b"c2", b"c3", b"c4"]
    assert seen[0] == (b"keep", 900)
    # the clean did reach the aborted transaction: its record is gone from the log
    assert b"aborted" not in [k for k, _ in read_all(b.bootstrap, topic, "read_uncommitted")]


def test_read_committed_keeps_a_committed_record_across_cleans_local_engine(
    local_broker: BrokerThread,
) -> None:
    topic = f"txn-keep-local-{next(_ids)}"
    assert_kafka_answer(local_broker, topic, run_repro(local_broker, topic))


def test_read_committed_keeps_a_committed_record_across_cleans_spark_engine(
    spark_broker: BrokerThread,
) -> None:
    topic = f"txn-keep-spark-{next(_ids)}"
    assert_kafka_answer(spark_broker, topic, run_repro(spark_broker, topic))
