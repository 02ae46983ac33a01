"""A broker cleans a tiered compacted partition's remote range (its remote log
manager's pass, with ``log.cleaner.enable``): real producers and consumers, the local
copies deleted by ``local.retention.bytes``, and a consumer from offset 0 afterwards
sees the latest value of every key, each key once in the cleaned remote range (Kafka's
compaction guarantee), served from the cleaned objects."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from confluent_kafka import Producer
from shared_kit import wait_for

from kompakt.broker.tiering import Tiering, tiering_of
from kompakt.log.partition_log import PartitionLog
from tests.broker.test_tiered import read_all
from tests.remote.broker_kit import TIMEOUT, create_topic, tiered_broker

N, KEYS = 800, 37
TOPIC = "tiered"
CONFIGS = {
    "cleanup.policy": "compact",
    "remote.storage.enable": "true",
    "segment.bytes": "4096",
    "local.retention.bytes": "8192",
    "min.cleanable.dirty.ratio": "0.01",
    "file.delete.delay.ms": "0",
}


def produce_keys(bootstrap: str, n: int, keys: int) -> dict[bytes, bytes | None]:
    """``n`` records over ``keys`` keys (every 50th a tombstone); each key's latest value."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.num.messages": 7})
    latest: dict[bytes, bytes | None] = {}
    for i in range(n):
        key = b"k%d" % (i % keys)
        value = None if i % 50 == 49 else b"v%d-" % i + b"x" * 40
        p.produce(TOPIC, key=key, value=value)
        latest[key] = value
    assert p.flush(TIMEOUT) == 0
    return latest


def wait_remote_range_cleaned(tiering: Tiering, plog: PartitionLog, what: str) -> None:
    """Until every rolled segment is tiered and the remote range cleaned to its end."""

    def cleaned() -> bool:
        m = tiering.manifest(plog)
        top = plog.active_segment.base_offset
        return m is not None and m.end_offset == top and m.clean_point == top

    wait_for(cleaned, what, TIMEOUT)


def assert_compacted_read(bootstrap: str, latest: dict, clean_point: int) -> None:
    """A consumer from offset 0 reads every live key's latest value, each key once
    below the clean point (Kafka's compaction guarantee)."""
    msgs = read_all(bootstrap, TOPIC)  # (offset, key, value, headers, timestamp)
    seen = {r[1]: r[2] for r in msgs}
    assert {k: v for k, v in seen.items() if v is not None} == {
        k: v for k, v in latest.items() if v is not None
    }
    below = [key for offset, key, *_ in msgs if offset < clean_point]
    assert len(below) == len(set(below))


def test_broker_cleans_the_remote_range(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """... and says so in the remote clean's own line: the private log a remote clean
    builds is no topic creation or recovery of the broker's logs, so the log layer's
    INFO lines about it stay out of the broker's log."""
    caplog.set_level(logging.INFO)
    b = tiered_broker(tmp_path / "data", **{"remote.log.manager.task.interval.ms": "100"})
    try:
        create_topic(b, TOPIC, CONFIGS)
        latest = produce_keys(b.bootstrap, N, KEYS)
        plog = b.logs.get_log(TOPIC, 0)
        tiering = tiering_of(b.broker.state)
        assert tiering is not None
        wait_remote_range_cleaned(tiering, plog, "the whole remote range tiered and cleaned")
        m = tiering.manifest(plog)
        assert m is not None
        assert plog.log_start_offset > 0  # the local copies are gone: reads are remote
        assert_compacted_read(b.bootstrap, latest, m.clean_point)
        said = [r.getMessage() for r in caplog.records if r.name.startswith("kompakt.")]
        assert any("cleaned" in line and "remote segments" in line for line in said)
        created = [line for line in said if line.startswith(f"created topic {TOPIC} ")]
        assert len(created) == 1, created  # the broker's own, by the admin client
        assert not [line for line in said if "remote-clean-" in line], said
    finally:
        b.stop()
