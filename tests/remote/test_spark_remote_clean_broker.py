"""A broker whose cleaner engine is Spark (``kompakt.cleaner.engine=spark``) cleans a
tiered compacted partition's remote range with the Spark engine, in executors that read
and write the bucket (:mod:`kompakt.pipeline.remote_engine`): a consumer from offset 0
then reads the latest value of every key, each key once below the clean point (Kafka's
compaction guarantee)."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Producer
from shared_kit import wait_for

from kompakt.broker.app import BrokerThread
from kompakt.broker.tiering import tiering_of
from tests.broker.test_tiered import read_all
from tests.remote.broker_kit import TIMEOUT, create_topic, tiered_broker

N, KEYS = 400, 23
TOPIC = "tiered"
CONFIGS = {
    "cleanup.policy": "compact",
    "remote.storage.enable": "true",
    "segment.bytes": "4096",
    "local.retention.bytes": "8192",
    "min.cleanable.dirty.ratio": "0.01",
    "file.delete.delay.ms": "0",
}


def spark_broker(data: Path, spark) -> BrokerThread:
    """A tiered broker whose cleaner engine is Spark, on the test session's master,
    running its remote log manager's task every 100 ms."""
    return tiered_broker(
        data,
        **{
            "remote.log.manager.task.interval.ms": "100",
            "kompakt.cleaner.engine": "spark",
            "kompakt.spark.master": spark.sparkContext.master,
            "kompakt.spark.start": "lazy",
        },
    )


@pytest.mark.slow
def test_a_spark_broker_cleans_the_remote_range_in_executors(spark, tmp_path: Path) -> None:
    b = spark_broker(tmp_path / "data", spark)
    try:
        create_topic(b, TOPIC, CONFIGS)
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5, "batch.num.messages": 7})
        latest: dict[bytes, bytes | None] = {}
        for i in range(N):
            key = b"k%d" % (i % KEYS)
            value = None if i % 50 == 49 else b"v%d-" % i + b"x" * 40
            p.produce(TOPIC, key=key, value=value)
            latest[key] = value
        assert p.flush(TIMEOUT) == 0
        plog = b.logs.get_log(TOPIC, 0)
        tiering = tiering_of(b.broker.state)
        assert tiering is not None
        assert tiering.remote_cleaner.engine is not None
        assert tiering.remote_cleaner.engine.name == "spark"

        def cleaned() -> bool:
            m = tiering.manifest(plog)
            top = plog.active_segment.base_offset
            return m is not None and m.end_offset == top and m.clean_point == top

        wait_for(cleaned, "the whole remote range tiered and cleaned by Spark", TIMEOUT)
        jobs = spark.sparkContext.statusTracker().getJobIdsForGroup(f"kompakt-remote-{TOPIC}-0")
        assert jobs  # the clean ran as a Spark job
        m = tiering.manifest(plog)
        msgs = read_all(b.bootstrap, TOPIC)  # (offset, key, value, headers, timestamp)
        seen = {r[1]: r[2] for r in msgs}
        assert {k: v for k, v in seen.items() if v is not None} == {
            k: v for k, v in latest.items() if v is not None
        }
        below = [key for offset, key, *_ in msgs if offset < m.clean_point]
        assert len(below) == len(set(below))
    finally:
        b.stop()
