"""A broker whose cleaner engine is Spark (``kompakt.cleaner.engine=spark``) cleans a
tiered compacted partition's remote range with the Spark engine, in executors that read
and write the bucket (:mod:`kompakt.pipeline.remote_engine`): a consumer from offset 0
then reads the latest value of every key, each key once below the clean point (Kafka's
compaction guarantee)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kompakt.broker.app import BrokerThread
from kompakt.broker.tiering import tiering_of
from tests.remote.broker_kit import create_topic, tiered_broker
from tests.remote.test_clean_broker import (
    CONFIGS,
    TOPIC,
    assert_compacted_read,
    produce_keys,
    wait_remote_range_cleaned,
)

N, KEYS = 400, 23


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
        latest = produce_keys(b.bootstrap, N, KEYS)
        plog = b.logs.get_log(TOPIC, 0)
        tiering = tiering_of(b.broker.state)
        assert tiering is not None
        assert tiering.remote_cleaner.engine is not None
        assert tiering.remote_cleaner.engine.name == "spark"
        wait_remote_range_cleaned(
            tiering, plog, "the whole remote range tiered and cleaned by Spark"
        )
        jobs = spark.sparkContext.statusTracker().getJobIdsForGroup(f"kompakt-remote-{TOPIC}-0")
        assert jobs  # the clean ran as a Spark job
        m = tiering.manifest(plog)
        assert m is not None
        assert_compacted_read(b.bootstrap, latest, m.clean_point)
    finally:
        b.stop()
