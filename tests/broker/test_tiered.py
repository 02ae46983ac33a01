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
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from shared_kit import consume_until, wait_for

from kompakt.broker.app import BrokerThread, start_test_broker
from kompakt.broker.tiering import tiering_of
from kompakt.remote.layout import manifest_key
from tests.remote.broker_kit import (
    EARLIEST,
    EARLIEST_LOCAL,
    LATEST_TIERED,
    TIMEOUT,
    create_topic,
    list_offset,
    tiered_broker,
)

N = 600
BROKER = {
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
    return tiered_broker(data, **{**BROKER, **extra})


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


def read_all(bootstrap: str, topic: str, offset: int = 0) -> list[tuple[Any, ...]]:
    """(offset, key, value, headers, timestamp) of every record from ``offset`` on."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    c.assign([TopicPartition(topic, 0, offset)])
    try:
        msgs = consume_until(c, timeout=TIMEOUT)
    finally:
        c.close()
    return [(m.offset(), m.key(), m.value(), m.headers(), m.timestamp()) for m in msgs]


def tiered_down(b: BrokerThread, topic: str) -> int:
    """Wait until every rolled segment is tiered and local retention brought the local
    log within local.retention.bytes (plus at most one segment it may not delete, and
    the active one), then two more passes of the task so nothing moves any more; the
    local log start."""
    plog = b.logs.get_log(topic, 0)
    tiering = tiering_of(b.broker.state)
    assert tiering is not None
    bound = int(TIERED["local.retention.bytes"]) + 2 * int(TIERED["segment.bytes"])

    def settled() -> bool:
        top = tiering.highest_tiered_offset(plog)
        return top == plog.active_segment.base_offset - 1 and plog.size_bytes() < bound

    wait_for(settled, f"{topic}: tiered, and the local log within {bound} bytes")
    task = next(t for t in b.broker.background.threads if "remote" in t.name)
    runs = task.runs
    wait_for(lambda: task.runs >= runs + 2, "two more passes of the task")
    return plog.log_start_offset


def test_compacted_topic_reads_the_same_from_the_remote_tier(tmp_path: Path) -> None:
    """Every record of a tiered compacted topic, from offset 0, is what its untiered twin
    returns (offsets, keys, values, headers, timestamps), while local disk holds only
    the newest segments; after a restart too."""
    b = start(tmp_path / "data")
    try:
        create_topic(b, "tiered", TIERED)
        create_topic(b, "twin", {"cleanup.policy": "compact", "segment.bytes": "4096"})
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
        # ListOffsets by time finds tiered records too (RemoteLogManager.findOffsetByTimestamp)
        for i in (0, 1, 57, 150, local_start - 1, local_start, N - 1):
            ts = expected[i][4][1]
            assert list_offset(b, "tiered", ts) == list_offset(b, "twin", ts) == i
    finally:
        b.stop()
    b = start(tmp_path / "data")
    try:
        assert b.logs.get_log("tiered", 0).log_start_offset >= local_start
        assert read_all(b.bootstrap, "tiered") == expected
    finally:
        b.stop()


def test_nothing_local_is_deleted_while_the_tier_cannot_be_written(tmp_path: Path) -> None:
    """Crash-safety order: a local segment goes only after a durable manifest names it.
    With uploads failing (the tier's topics/ folder cannot be made), the task keeps
    running and failing, and every local segment stays and is served."""
    remote = tmp_path / "remote"
    remote.mkdir()
    (remote / "topics").write_bytes(b"not a folder")
    b = start(tmp_path / "data", **{"kompakt.remote.storage.url": remote.as_uri()})
    try:
        create_topic(b, "t", TIERED)
        produce(b.bootstrap, ["t"], 300)
        task = next(t for t in b.broker.background.threads if "remote" in t.name)
        runs = task.runs
        wait_for(lambda: task.runs >= runs + 3, "three more passes of the task")
        plog = b.logs.get_log("t", 0)
        assert plog.log_start_offset == 0 and len(plog.segments) > 3
        assert len(read_all(b.bootstrap, "t")) == 300
    finally:
        b.stop()


def test_remote_storage_needs_the_broker_switch(tmp_path: Path) -> None:
    """Kafka's validateRemoteStorageOnlyIfSystemEnabled, through CreateTopics."""
    b = start_test_broker(tmp_path / "data")
    try:
        with pytest.raises(KafkaException, match="Tiered Storage functionality is disabled"):
            create_topic(b, "t", {"remote.storage.enable": "true"})
    finally:
        b.stop()


def test_remote_storage_cannot_be_turned_off_on_a_tiered_topic(tmp_path: Path) -> None:
    """Kafka's validateTurningOffRemoteStorageWithDelete, through
    IncrementalAlterConfigs; other changes to the topic still pass."""
    b = start(tmp_path / "data")
    try:
        create_topic(b, "t", TIERED)
        admin = AdminClient({"bootstrap.servers": b.bootstrap})

        def alter(name: str, value: str) -> None:
            entry = ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
            res = ConfigResource(ResourceType.TOPIC, "t", incremental_configs=[entry])
            admin.incremental_alter_configs([res])[res].result(TIMEOUT)

        with pytest.raises(KafkaException, match="invalid to disable remote storage"):
            alter("remote.storage.enable", "false")
        alter("local.retention.bytes", "4096")
        assert b.logs.topic_config("t").remote_storage_enable
    finally:
        b.stop()


def test_manifest_is_in_the_folder_beside_the_data_dir(tmp_path: Path) -> None:
    """kompakt.remote.storage.url empty: the folder <data dir>-remote."""
    b = start(tmp_path / "data")
    try:
        create_topic(b, "t", TIERED)
        produce(b.bootstrap, ["t"], 200)
        manifest = tmp_path / "data-remote" / manifest_key("t", 0)
        wait_for(manifest.exists, "the manifest")
    finally:
        b.stop()


def test_deleting_a_tiered_topic_deletes_its_remote_data(tmp_path: Path) -> None:
    """Kafka deletes a deleted topic's remote segments; nothing of the topic is left in
    the folder (its manifests' lock files and folders neither), and a new topic of the
    same name is tiered afresh (its own manifest, its own records)."""
    b = start(tmp_path / "data")
    remote = tmp_path / "data-remote" / "topics" / "t"
    try:
        create_topic(b, "t", TIERED)
        produce(b.bootstrap, ["t"], 300)
        tiered_down(b, "t")
        assert any(remote.rglob("*.log"))
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.delete_topics(["t"])["t"].result(TIMEOUT)
        assert not remote.exists()  # no object, lock file or empty folder left behind
        wait_for(lambda: not b.logs.has_topic("t"), "the topic gone")
        create_topic(b, "t", TIERED)
        produce(b.bootstrap, ["t"], 300)
        tiered_down(b, "t")
        assert len(read_all(b.bootstrap, "t")) == 300
    finally:
        b.stop()


def test_a_broker_on_an_empty_disk_rebuilds_tiered_topics_from_the_tier(tmp_path: Path) -> None:
    """The issue's rebuild: a broker whose data dir is empty recreates each tiered topic
    from the bucket (same topic id, partitions and configs), serves every tiered record
    as before, and appends new records after the remote end. Records that were only
    local (not yet tiered) are gone with the disk, as in Kafka."""
    remote = (tmp_path / "bucket").as_uri()
    b = start(tmp_path / "lost", **{"kompakt.remote.storage.url": remote})
    try:
        create_topic(b, "t", TIERED)
        produce(b.bootstrap, ["t"])
        tiered_down(b, "t")
        tiering = tiering_of(b.broker.state)
        assert tiering is not None
        end = tiering.highest_tiered_offset(b.logs.get_log("t", 0)) + 1
        before = [r for r in read_all(b.bootstrap, "t") if r[0] < end]
        topic_id = b.logs.topic_meta("t").topic_id
    finally:
        b.stop()
    b = start(tmp_path / "fresh", **{"kompakt.remote.storage.url": remote})
    try:
        meta = b.logs.topic_meta("t")
        assert (meta.topic_id, meta.partitions) == (topic_id, 1)
        assert b.logs.topic_config("t").overrides == TIERED
        assert list_offset(b, "t", EARLIEST) == 0
        assert list_offset(b, "t", EARLIEST_LOCAL) == end
        assert read_all(b.bootstrap, "t") == before
        produce(b.bootstrap, ["t"], 10)
        after = read_all(b.bootstrap, "t")
        assert after[: len(before)] == before
        assert [r[0] for r in after[len(before) :]] == list(range(end, end + 10))
    finally:
        b.stop()


def test_retention_never_deletes_a_tiered_topics_segments_before_upload(tmp_path: Path) -> None:
    """Kafka deletes a tiered log's local segments only once uploaded (UnifiedLog's
    retention on a remote-enabled log): with uploads failing, the log's own
    retention.bytes pass deletes nothing; the remote log manager applies retention."""
    remote = tmp_path / "remote"
    remote.mkdir()
    (remote / "topics").write_bytes(b"not a folder")
    b = start(tmp_path / "data", **{"kompakt.remote.storage.url": remote.as_uri()})
    try:
        configs = {**TIERED, "cleanup.policy": "delete", "retention.bytes": "8192"}
        create_topic(b, "t", configs)
        produce(b.bootstrap, ["t"], 300)
        plog = b.logs.get_log("t", 0)
        assert plog.size_bytes() > 8192 + 4096  # retention.bytes would delete some
        assert plog.apply_retention() == 0
        assert plog.log_start_offset == 0
    finally:
        b.stop()
