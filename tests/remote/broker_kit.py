"""What the tiered-broker tests share: a broker with the remote tier on, topic creation
with configs, and the raw ListOffsets and Fetch requests confluent-kafka cannot send
(EARLIEST_LOCAL, LATEST_TIERED; a fetch at an exact offset whose bytes are compared)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from confluent_kafka.admin import AdminClient, NewTopic
from raw_kafka import API, call

from kompakt.broker.app import BrokerThread, start_test_broker

TIMEOUT = 30
# ListOffsetsRequest's timestamps: EARLIEST, EARLIEST_LOCAL (KIP-405), LATEST_TIERED
# (KIP-1005)
EARLIEST, EARLIEST_LOCAL, LATEST_TIERED = -2, -4, -5
OFFSET_OUT_OF_RANGE = 1


def tiered_broker(data: Path, **keys: str | int) -> BrokerThread:
    """A test broker with ``remote.log.storage.system.enable`` and these broker keys
    (Kafka names, dots and all)."""
    props = {"remote.log.storage.system.enable": "true", **keys}
    return start_test_broker(data, **{k.replace(".", "_"): v for k, v in props.items()})


def create_topic(b: BrokerThread, topic: str, configs: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(TIMEOUT)


class HasPort(Protocol):
    port: int


def list_offset(b: HasPort, topic: str, timestamp: int, partition: int = 0) -> int:
    """ListOffsets v9 (the first with LATEST_TIERED) of one partition."""
    part = {"partition_index": partition, "current_leader_epoch": -1, "timestamp": timestamp}
    body = {
        "replica_id": -1,
        "isolation_level": 0,
        "topics": [{"name": topic, "partitions": [part]}],
    }
    (p,) = call(b.port, API.list_offsets, 9, body).topics[0].partitions
    assert p.error_code == 0, p
    return p.offset


def fetch(b: HasPort, topic: str, offset: int, committed: bool = False, partition: int = 0) -> Any:
    """One Fetch v12 of one partition at ``offset`` (64 KiB at most)."""
    part = {
        "partition": partition,
        "current_leader_epoch": -1,
        "fetch_offset": offset,
        "last_fetched_epoch": -1,
        "log_start_offset": -1,
        "partition_max_bytes": 65536,
    }
    body = {
        "replica_id": -1,
        "max_wait": 0,
        "min_bytes": 0,
        "max_bytes": 1 << 20,
        "isolation_level": int(committed),
        "session_id": 0,
        "session_epoch": -1,
        "topics": [{"topic": topic, "partitions": [part]}],
        "forgotten_topics_data": [],
        "rack_id": "",
    }
    return call(b.port, API.fetch, 12, body).responses[0].partitions[0]
