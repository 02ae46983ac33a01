"""Tiered storage wired into the broker (KIP-405's RemoteLogManager), with real clients:
a compacted topic with ``remote.storage.enable=true`` and a small
``local.retention.bytes`` has its rolled segments copied to the remote tier and deleted
locally, and a consumer from the beginning still reads every record, byte-identical to
an untiered twin topic fed the same input; ListOffsets answers EARLIEST_LOCAL and
LATEST_TIERED (Kafka's ``UnifiedLog.fetchOffsetByTimestamp``); a restart keeps serving.
Kafka refuses tiering a compacted topic; kompakt tiers it (the remote tier's point)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from raw_kafka import API, call
from shared_kit import consume_until, wait_for

from kompakt.broker.app import BrokerThread, start_test_broker
from kompakt.broker.tiering import tiering_of
from kompakt.errors import OffsetOutOfRangeError
from kompakt.remote.layout import manifest_key

TIMEOUT = 30
N = 600
BROKER = {
    "remote.log.storage.system.enable": "true",
    "remote.log.manager.task.interval.ms": "100",
    "log.cleaner.enable": "false",  # the twin and the tiered topic stay record-for-record
}
TIERED = {
    "cleanup.policy": "compact",
    "remote.storage.enable": "true",
    "segment.bytes": "4096",
    "local.retention.bytes": "8192",
}


def start(data: Path, **extra: str) -> BrokerThread:
    return start_test_broker(
        data, **{k.replace(".", "_"): v for k, v in {**BROKER, **extra}.items()}
    )


def create(bootstrap: str, topic: str, configs: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(TIMEOUT)


def produce(bootstrap: str, topics: list[str], n: int = N) -> None:
    """The same records to each topic: repeated keys, headers, a tombstone every 50."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.num.messages": 7})
    t0 = int(time.time() * 1000)
    for i in range(n):
        value = None if i % 50 == 49 else b"value-%d-" % i + b"x" * (i % 40)
        for t in topics:
            p.produce(
                t, key=b"k%d" % (i % 97), value=value, headers=[("h", b"%d" % i)], timestamp=t0 + i
            )
    assert p.flush(TIMEOUT) == 0


def read_all(bootstrap: str, topic: str) -> list[tuple[Any, ...]]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    c.assign([TopicPartition(topic, 0, 0)])
    try:
        msgs = consume_until(c, timeout=TIMEOUT)
    finally:
        c.close()
    return [(m.offset(), m.key(), m.value(), m.headers(), m.timestamp()) for m in msgs]


# ListOffsetsRequest's timestamps: EARLIEST, EARLIEST_LOCAL (KIP-405), LATEST_TIERED
# (KIP-1005); confluent-kafka's OffsetSpec has no way to send the last two
EARLIEST, EARLIEST_LOCAL, LATEST_TIERED = -2, -4, -5


def list_offset(b: BrokerThread, topic: str, timestamp: int) -> int:
    """ListOffsets v9 (the first with LATEST_TIERED) for partition 0."""
    part = {"partition_index": 0, "current_leader_epoch": -1, "timestamp": timestamp}
    body = {
        "replica_id": -1,
        "isolation_level": 0,
        "topics": [{"name": topic, "partitions": [part]}],
    }
    resp = call(b.port, API.list_offsets, 9, body)
    (p,) = resp.topics[0].partitions
    assert p.error_code == 0, p
    return p.offset


def tiered_down(b: BrokerThread, topic: str) -> int:
    """Wait until local retention brought the local log within local.retention.bytes
    (plus at most one segment it may not delete, and the active one); the local start."""
    plog = b.logs.get_log(topic, 0)
    bound = int(TIERED["local.retention.bytes"]) + 2 * int(TIERED["segment.bytes"])
    wait_for(lambda: 0 < plog.size_bytes() < bound, f"{topic}: local log within {bound} bytes")
    return plog.log_start_offset


def test_compacted_topic_reads_the_same_from_the_remote_tier(tmp_path: Path) -> None:
    """Every record of a tiered compacted topic, from offset 0, is what its untiered twin
    returns (offsets, keys, values, headers, timestamps), while local disk holds only
    the newest segments; after a restart too."""
    b = start(tmp_path / "data")
    try:
        create(b.bootstrap, "tiered", TIERED)
        create(b.bootstrap, "twin", {"cleanup.policy": "compact", "segment.bytes": "4096"})
        produce(b.bootstrap, ["tiered", "twin"])
        local_start = tiered_down(b, "tiered")
        expected = read_all(b.bootstrap, "twin")
        assert len(expected) == N
        assert read_all(b.bootstrap, "tiered") == expected
        # Kafka's EARLIEST is the remote log's start, EARLIEST_LOCAL the local one,
        # LATEST_TIERED the highest offset in the remote tier
        assert list_offset(b, "tiered", EARLIEST) == 0
        assert list_offset(b, "tiered", EARLIEST_LOCAL) == local_start > 0
        assert list_offset(b, "tiered", LATEST_TIERED) >= local_start - 1
        assert list_offset(b, "twin", EARLIEST_LOCAL) == 0
        assert list_offset(b, "twin", LATEST_TIERED) == -1  # not tiered
    finally:
        b.stop()
    b = start(tmp_path / "data")
    try:
        assert b.logs.get_log("tiered", 0).log_start_offset >= local_start
        assert read_all(b.bootstrap, "tiered") == expected
    finally:
        b.stop()


def test_fetch_below_the_log_start_is_out_of_range(tmp_path: Path) -> None:
    """Kafka: a fetch below logStartOffset is OFFSET_OUT_OF_RANGE, tiered or not; a
    consumer with auto.offset.reset=error says so."""
    b = start(tmp_path / "data")
    try:
        create(b.bootstrap, "t", TIERED)
        produce(b.bootstrap, ["t"], 200)
        tiered_down(b, "t")
        tiering = tiering_of(b.broker.state)
        assert tiering is not None
        plog = b.logs.get_log("t", 0)
        assert tiering.log_start_offset(plog) == 0
        with pytest.raises(OffsetOutOfRangeError):
            tiering.source_for(plog, -1)
    finally:
        b.stop()


def test_remote_storage_needs_the_broker_switch(tmp_path: Path) -> None:
    """Kafka's validateRemoteStorageOnlyIfSystemEnabled, through CreateTopics."""
    b = start_test_broker(tmp_path / "data")
    try:
        with pytest.raises(KafkaException, match="Tiered Storage functionality is disabled"):
            create(b.bootstrap, "t", {"remote.storage.enable": "true"})
    finally:
        b.stop()


def test_manifest_is_in_the_folder_beside_the_data_dir(tmp_path: Path) -> None:
    """kompakt.remote.storage.url empty: the folder <data dir>-remote."""
    b = start(tmp_path / "data")
    try:
        create(b.bootstrap, "t", TIERED)
        produce(b.bootstrap, ["t"], 200)
        manifest = tmp_path / "data-remote" / manifest_key("t", 0)
        wait_for(manifest.exists, "the manifest")
    finally:
        b.stop()
