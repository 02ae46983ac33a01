"""Fixtures of the Spark pipeline tests (the session-wide ``spark`` is in tests/conftest.py)."""

from __future__ import annotations

import time

import pytest
from manual_clock import ManualClock


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
