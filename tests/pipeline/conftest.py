"""One local SparkSession for the whole test session (Spark start-up costs ~10 s)."""

from __future__ import annotations

import time

import pytest
from manual_clock import ManualClock

from kompakt.pipeline.standalone import FAST_START_JAVA_OPTS

SPARK_TEST_CONFIG = {
    "kompakt.spark.master": "local[2]",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.driver.memory": "1g",
    "spark.sql.execution.arrow.maxRecordsPerBatch": "10000",
    "spark.driver.extraJavaOptions": FAST_START_JAVA_OPTS,
}


@pytest.fixture(scope="session")
def spark():
    import kompakt.pipeline as pipeline

    session = pipeline.session(SPARK_TEST_CONFIG)
    session.sparkContext.setLogLevel("ERROR")
    yield session
    pipeline.stop()


@pytest.fixture
def clock():
    """A controlled clock that starts at the wall time: the Spark writer stamps records
    with the executors' wall time, and the log refuses records more than
    message.timestamp.after.max.ms (1 h) ahead of its clock, as Kafka does."""
    return ManualClock(int(time.time() * 1000))


def read_rows(spark, data_dir, **options) -> list[tuple]:
    """(topic, partition, offset, key, value) of a kompakt read, sorted."""
    reader = spark.read.format("kompakt").option("path", str(data_dir))
    for k, v in options.items():
        reader = reader.option(k, v)
    rows = reader.load().select("topic", "partition", "offset", "key", "value").collect()
    return sorted(
        (
            r.topic,
            r.partition,
            r.offset,
            bytes(r.key) if r.key is not None else None,
            bytes(r.value) if r.value is not None else None,
        )
        for r in rows
    )


@pytest.fixture
def rows_of(spark):
    def rows(data_dir, **options):
        return read_rows(spark, data_dir, **options)

    return rows
