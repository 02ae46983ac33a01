"""KIP-950 (Kafka 3.9) on a real broker, through IncrementalAlterConfigs: a tiered topic
turns read-only with ``remote.log.copy.disable=true`` (no more copies, the tiered
records still served), and turns tiering off with ``remote.storage.enable=false`` only
together with ``remote.log.delete.on.disable=true``, which deletes its remote data and
starts the log at the local log start (Kafka's ``logStartOffset = localLogStartOffset``).
"""

from __future__ import annotations

import os
from pathlib import Path

from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from shared_kit import wait_for

from kompakt.broker.app import BrokerThread
from kompakt.broker.tiering import tiering_of
from tests.broker.test_tiered import TIERED, produce, read_all, start, tiered_down
from tests.remote.broker_kit import EARLIEST, TIMEOUT, create_topic, list_offset

SET, DELETE = AlterConfigOpType.SET, AlterConfigOpType.DELETE


def alter(b: BrokerThread, topic: str, *changes: tuple[str, str | None, AlterConfigOpType]) -> None:
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    entries = [ConfigEntry(k, v, incremental_operation=op) for k, v, op in changes]
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
    admin.incremental_alter_configs([res])[res].result(TIMEOUT)


def passes(b: BrokerThread, n: int) -> None:
    """Wait for ``n`` more passes of the remote log manager's task."""
    task = next(t for t in b.broker.background.threads if "remote" in t.name)
    runs = task.runs
    wait_for(lambda: task.runs >= runs + n, f"{n} more passes of the task")


def test_copy_disable_keeps_the_tier_readable_and_copies_nothing_more(tmp_path: Path) -> None:
    """remote.log.copy.disable=true (with local.retention.bytes back to -2, Kafka's
    validateRetentionConfigsWhenRemoteCopyDisabled): later rolled segments stay local,
    the remote log ends where it ended, and a consumer from offset 0 reads the tiered
    records and the new local ones."""
    b = start(tmp_path / "data")
    try:
        create_topic(b, "t", TIERED)
        produce(b.bootstrap, ["t"], 300)
        tiered_down(b, "t")
        plog = b.logs.get_log("t", 0)
        tiering = tiering_of(b.broker.state)
        assert tiering is not None
        top = tiering.highest_tiered_offset(plog)
        local_start = plog.log_start_offset
        alter(
            b,
            "t",
            ("remote.log.copy.disable", "true", SET),
            ("local.retention.bytes", None, DELETE),
        )
        produce(b.bootstrap, ["t"], 300)
        passes(b, 3)
        assert len(plog.segments_snapshot()) > 3  # rolled segments waiting, not copied
        assert tiering.highest_tiered_offset(plog) == top
        assert plog.log_start_offset == local_start
        assert [r[0] for r in read_all(b.bootstrap, "t")] == list(range(600))
    finally:
        b.stop()


def test_turning_remote_storage_off_with_delete_drops_the_remote_data(tmp_path: Path) -> None:
    """remote.storage.enable=false with remote.log.delete.on.disable=true is accepted;
    the task deletes every remote object of the topic (record, manifest, segments), the
    log starts at the local log start, and the topic takes new records as before."""
    b = start(tmp_path / "data")
    remote = tmp_path / "data-remote" / "topics" / "t"
    try:
        create_topic(b, "t", TIERED)
        produce(b.bootstrap, ["t"], 300)
        local_start = tiered_down(b, "t")
        assert local_start > 0 and any(remote.rglob("*.log"))
        assert list_offset(b, "t", EARLIEST) == 0
        alter(
            b,
            "t",
            ("remote.storage.enable", "false", SET),
            ("remote.log.delete.on.disable", "true", SET),
        )

        def objects() -> list[str]:
            # os.walk, not rglob: the task removes folders while this looks, and
            # rglob raises for a folder that vanished between listing and entering it.
            return [f for _d, _s, files in os.walk(remote) for f in files if not f.startswith(".")]

        wait_for(lambda: not objects(), "the topic's remote objects deleted")
        assert list_offset(b, "t", EARLIEST) == local_start
        produce(b.bootstrap, ["t"], 10)
        rows = read_all(b.bootstrap, "t", local_start)
        assert [r[0] for r in rows] == list(range(local_start, 310))
        passes(b, 2)  # nothing comes back
        assert not objects()
    finally:
        b.stop()


def test_copy_disabled_delete_topic_applies_retention_to_local_segments(tmp_path: Path) -> None:
    """With copies disabled a delete topic's retention.* reaches every local segment,
    uploaded or not (Kafka's UnifiedLog retention when remote copy is off): the local
    log comes within retention.bytes while nothing is tiered."""
    b = start(tmp_path / "data")
    try:
        configs = {
            **TIERED,
            "cleanup.policy": "delete",
            "retention.bytes": "8192",
            "local.retention.bytes": "-2",
            "remote.log.copy.disable": "true",
        }
        create_topic(b, "t", configs)
        produce(b.bootstrap, ["t"], 300)
        plog = b.logs.get_log("t", 0)
        seg = int(TIERED["segment.bytes"])
        wait_for(lambda: plog.size_bytes() <= 8192 + seg, "the local log within retention")
        tiering = tiering_of(b.broker.state)
        assert tiering is not None
        assert tiering.highest_tiered_offset(plog) == -1
        assert plog.log_start_offset > 0
    finally:
        b.stop()
