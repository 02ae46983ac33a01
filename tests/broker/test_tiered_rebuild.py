"""A broker killed (SIGKILL) and its data dir deleted; a new broker on an empty data dir
with the same bucket rebuilds every tiered topic from it (what Kafka's tiered storage
cannot do: its remote metadata is a topic on the lost disk).

Checked against what the killed broker served: every tiered partition reads back from
offset 0 batch for batch, byte for byte, up to the remote end; ListOffsets EARLIEST and
LATEST answer the remote log start and end; the topics keep their ids' configs and
partition counts; a consumer group's committed offsets are the ones it committed (one
committed past the remote end, on records never tiered, comes back as that end); and an
idempotent producer going on with its producer id, epoch and sequence is treated as
before the loss (Kafka's ``ProducerStateManager`` loaded from its snapshot): its last
batch retried is a duplicate answered with the original offset, an older epoch is
fenced (INVALID_PRODUCER_EPOCH), the next sequence is appended.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource
from raw_kafka import API, call
from reliability.kit import BrokerProcess, create_topic
from shared_kit import wait_for

from kompakt.broker import remote_groups
from kompakt.broker.coordinator.storage import OFFSETS_TOPIC
from kompakt.broker.remote_rebuild import rebuild_from_tier
from kompakt.broker.tiering import Tiering
from kompakt.log.manager import LogManager
from kompakt.log.producer_snapshot import SnapshotEntry, encode
from kompakt.log.topic_store import new_topic_id
from kompakt.record.decode import iter_batches
from kompakt.record.encode import build_simple_batch
from kompakt.remote import RemoteTier, open_store
from kompakt.remote.cache import ChunkCache
from kompakt.remote.layout import GROUP_OFFSETS
from kompakt.remote.manifest import PartitionManifest, TopicRecord
from kompakt.remote.metadata import RemoteLogMetadataManager
from kompakt.remote.storage import LocalSegmentFiles, RemoteStorageManager
from kompakt.remote.store import FileObjectStore, RemoteStorageError
from tests.remote import broker_kit

EARLIEST, LATEST, LATEST_TIERED = -2, -1, -5
INVALID_PRODUCER_EPOCH = 47
COMPACT, EVENTS, GROUP = "rb-compact", "rb-events", "rb-group"
BROKER_KEYS = {
    "remote.log.storage.system.enable": "true",
    "remote.log.manager.task.interval.ms": "100",
    "log.cleaner.enable": "false",
    "offsets.topic.num.partitions": "3",
}
SMALL = {"segment.bytes": "1024", "local.retention.bytes": "1024", "remote.storage.enable": "true"}


def list_offset(port: int, topic: str, partition: int, timestamp: int) -> int:
    return broker_kit.list_offset(SimpleNamespace(port=port), topic, timestamp, partition)


def fetch_batches(port: int, topic: str, partition: int, end: int) -> list[bytes]:
    """Every batch from offset 0 up to ``end`` as raw bytes, by Fetch v12."""
    out: list[bytes] = []
    offset = 0
    while offset < end:
        p = broker_kit.fetch(SimpleNamespace(port=port), topic, offset, partition=partition)
        assert p.error_code == 0, p
        batches = [b for b in iter_batches(p.records or b"") if b.header.last_offset < end]
        assert batches, f"{topic}-{partition}: no batch at {offset} (end {end})"
        out += [bytes(b.buffer) for b in batches]
        offset = batches[-1].header.last_offset + 1
    return out


def active_base(data: Path, topic: str, partition: int) -> int:
    """The base offset of the partition's active segment (its newest ``.log``)."""
    return max(int(f.stem) for f in (data / f"{topic}-{partition}").glob("*.log"))


def topic_configs(bootstrap: str, topic: str) -> dict[str, str | None]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    (future,) = admin.describe_configs([ConfigResource("topic", topic)]).values()
    return {k: v.value for k, v in future.result(30).items()}


def produce_raw(port: int, topic: str, batch: bytes) -> tuple[int, int]:
    """(error code, base offset) of an acks=all Produce of one batch to partition 0."""
    body = {
        "acks": -1,
        "timeout": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
    }
    (p,) = call(port, API.produce, 9, body).responses[0].partition_responses
    return p.error_code, p.base_offset


def idempotent(pid: int, epoch: int, seq: int, n: int = 3) -> bytes:
    items = [(b"idem-%d-%d" % (epoch, seq + i), b"v%d" % (seq + i)) for i in range(n)]
    return build_simple_batch(
        items,
        timestamp=int(time.time() * 1000),
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
    )


def test_a_broker_on_an_empty_disk_rebuilds_topics_offsets_groups_and_producers(
    tmp_path: Path,
) -> None:
    remote = tmp_path / "remote"
    keys = {**BROKER_KEYS, "kompakt.remote.storage.url": remote.as_uri()}
    old = BrokerProcess(tmp_path / "data", keys).start(60)
    try:
        create_topic(old.bootstrap, COMPACT, 2, {**SMALL, "cleanup.policy": "compact"})
        create_topic(old.bootstrap, EVENTS, 1, {**SMALL, "retention.ms": "-1"})
        pid = call(
            old.port,
            API.init_producer_id,
            4,
            {"transactional_id": None, "transaction_timeout": 60000},
        ).producer_id
        sent = [idempotent(pid, 0, 0), idempotent(pid, 0, 3), idempotent(pid, 1, 0)]
        answers = [produce_raw(old.port, COMPACT, b) for b in sent]
        assert [e for e, _ in answers] == [0, 0, 0]
        last_offset = answers[-1][1]
        p = Producer({"bootstrap.servers": old.bootstrap, "acks": "all", "linger.ms": 0})
        for i in range(300):  # batches of 10: segments roll, the idempotent ones' too
            for topic, part in ((COMPACT, 0), (COMPACT, 1), (EVENTS, 0)):
                p.produce(topic, b"value-%d-%d" % (part, i), b"k%d" % (i % 40), partition=part)
            if i % 10 == 9:
                assert p.flush(30) == 0
        tps = [(COMPACT, 0), (COMPACT, 1), (EVENTS, 0)]
        wait_for(
            lambda: all(list_offset(old.port, t, q, LATEST_TIERED) > 200 for t, q in tps),
            "every partition tiered past offset 200",
        )
        assert list_offset(old.port, COMPACT, 0, LATEST_TIERED) > last_offset
        c = Consumer({"bootstrap.servers": old.bootstrap, "group.id": GROUP, "log_level": 2})
        ends = {tp: list_offset(old.port, *tp, LATEST) for tp in tps}
        commits = {(COMPACT, 0): 120, (EVENTS, 0): 77, (COMPACT, 1): ends[(COMPACT, 1)]}
        c.commit(
            offsets=[TopicPartition(t, q, o) for (t, q), o in commits.items()], asynchronous=False
        )
        c.close()
        store = open_store(remote.as_uri())

        def uploaded() -> dict:
            got = remote_groups.load(store)
            return {(t, q): om.offset for (g, t, q), om in (got.offsets.items() if got else ())}

        wait_for(lambda: uploaded() == commits, "the group's offsets in the bucket")
        # every rolled segment tiered: the remote end is the active segment's base
        tiered = {tp: active_base(old.data_dir, *tp) for tp in tps}
        wait_for(
            lambda: all(list_offset(old.port, *tp, LATEST_TIERED) + 1 == tiered[tp] for tp in tps),
            "every rolled segment tiered",
        )
        before = {tp: fetch_batches(old.port, *tp, tiered[tp]) for tp in tps}
        want_config = topic_configs(old.bootstrap, COMPACT)
    finally:
        old.kill()  # SIGKILL: the disk is lost with whatever it held
    shutil.rmtree(tmp_path / "data")

    new = BrokerProcess(tmp_path / "fresh", keys).start(60)
    try:
        assert not (tmp_path / "data").exists()
        for tp in tps:
            assert list_offset(new.port, *tp, EARLIEST) == 0
            assert list_offset(new.port, *tp, LATEST) == tiered[tp]
            assert fetch_batches(new.port, *tp, tiered[tp]) == before[tp], tp
        admin = AdminClient({"bootstrap.servers": new.bootstrap})
        meta = admin.list_topics(timeout=30).topics
        assert len(meta[COMPACT].partitions) == 2 and len(meta[EVENTS].partitions) == 1
        assert topic_configs(new.bootstrap, COMPACT) == want_config

        c = Consumer({"bootstrap.servers": new.bootstrap, "group.id": GROUP, "log_level": 2})
        committed = c.committed([TopicPartition(t, q) for t, q in commits], timeout=30)
        c.close()
        # past the remote end (records never tiered, lost with the disk): that end
        want = {tp: min(o, tiered[tp]) for tp, o in commits.items()}
        assert {(x.topic, x.partition): x.offset for x in committed} == want
        assert want[(COMPACT, 1)] < commits[(COMPACT, 1)]

        # the producer goes on: its last batch again is a duplicate, not a second copy
        end = tiered[(COMPACT, 0)]
        assert produce_raw(new.port, COMPACT, sent[-1]) == (0, last_offset)
        assert list_offset(new.port, COMPACT, 0, LATEST) == end
        assert produce_raw(new.port, COMPACT, idempotent(pid, 0, 6))[0] == INVALID_PRODUCER_EPOCH
        assert produce_raw(new.port, COMPACT, idempotent(pid, 1, 3)) == (0, end)
    finally:
        new.kill()


def test_a_damaged_group_offsets_object_is_one_line_and_the_topics_still_come_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Bad input in the bucket: the rebuild names the object in one line, recreates the
    topics, and leaves the groups to start afresh instead of refusing to start."""
    store = FileObjectStore(tmp_path / "remote")
    meta = RemoteLogMetadataManager(store)
    tier = RemoteTier(store, RemoteStorageManager(store), meta, ChunkCache(1 << 20))
    configs = {"remote.storage.enable": "true"}
    meta.commit_topic(TopicRecord(COMPACT, new_topic_id(), 2, configs), None)
    store.put(GROUP_OFFSETS, b'{"format": 1, "partitions": "three"}')
    with pytest.raises(RemoteStorageError, match=GROUP_OFFSETS) as bad:
        remote_groups.load(store)
    assert "\n" not in str(bad.value)
    logs = LogManager(tmp_path / "data")
    try:
        assert rebuild_from_tier(logs, tier) == [COMPACT]
        assert logs.partition_count(COMPACT) == 2 and not logs.has_topic(OFFSETS_TOPIC)
    finally:
        logs.close()
    assert f"consumer group offsets not restored: {GROUP_OFFSETS}" in caplog.text


def test_a_missing_producer_snapshot_leaves_the_producers_unknown_not_the_topic(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The manifest's producer snapshot gone from the bucket: the partition is rebuilt
    at its remote end all the same, and the log says its producers are not restored."""
    tier, _topic_id = _tier_with_one_segment(tmp_path, COMPACT)
    [seg] = tier.metadata.load_partition(COMPACT, 0).value.segments
    tier.store.delete(seg.files[".snapshot"].key)
    logs = LogManager(tmp_path / "data")
    try:
        assert rebuild_from_tier(logs, tier) == [COMPACT]
        assert logs.get_log(COMPACT, 0).log_end_offset == 3
    finally:
        logs.close()
    assert "producer snapshot is unusable" in caplog.text


def _tier_with_one_segment(tmp_path: Path, topic: str) -> tuple[RemoteTier, str]:
    """A bucket holding ``topic``'s record and a manifest of offsets 0..2 (with its
    producer snapshot), as a broker that tiered them leaves it."""
    store = FileObjectStore(tmp_path / "remote")
    meta = RemoteLogMetadataManager(store)
    segments = RemoteStorageManager(store)
    tier = RemoteTier(store, segments, meta, ChunkCache(1 << 20))
    topic_id = new_topic_id()
    meta.commit_topic(TopicRecord(topic, topic_id, 1, {"remote.storage.enable": "true"}), None)
    log_file, snap_file = tmp_path / f"{topic}.log", tmp_path / f"{topic}.snapshot"
    log_file.write_bytes(idempotent(7, 0, 0))
    now = int(time.time() * 1000)  # an entry this old is not expired at load
    snap_file.write_bytes(encode([SnapshotEntry(7, 0, 2, 2, 2, now)]))
    seg = segments.copy_segment(
        topic, 0, LocalSegmentFiles(0, 2, 0, {".log": log_file, ".snapshot": snap_file})
    )
    meta.commit_partition(PartitionManifest(topic, 0, topic_id, segments=(seg,)), None)
    return tier, topic_id


def test_a_tiered_partition_whose_folder_was_lost_goes_on_at_the_remote_end(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A data dir that has its topics but lost one tiered partition's folder (the probe:
    ``rm -rf data/pd-1`` and a restart) came back empty at offset 0: new acks=all
    records got offsets the tier held, and local retention deleted them as tiered. It
    now goes on at the remote end, as a rebuild starts it; a local log with records
    behind the tier is named in an error and left as it is: not tiered, so local
    retention never deletes its records as if the tier held them."""
    from kompakt.broker.remote_rebuild import align_to_tier

    tier, topic_id = _tier_with_one_segment(tmp_path, COMPACT)
    logs = LogManager(tmp_path / "data")
    try:
        logs.create_topic(COMPACT, 1, {"remote.storage.enable": "true"}, topic_id=topic_id)
        logs.create_topic(EVENTS, 1, {"remote.storage.enable": "true"})  # nothing tiered
        logs.get_log(EVENTS, 0).append(idempotent(9, 0, 0, n=2))
        manifest_of = Tiering(logs, tier).manifest
        assert align_to_tier(logs, tier, manifest_of) == [f"{COMPACT}-0"]
        plog = logs.get_log(COMPACT, 0)
        assert (plog.log_start_offset, plog.log_end_offset) == (3, 3)
        with plog.lock:  # the tier's producer snapshot: a retry of 0..2 is known
            assert plog.producers.entries[7].last_seq == 2
        assert plog.append(idempotent(7, 0, 3)).first_offset == 3
        assert logs.get_log(EVENTS, 0).log_end_offset == 2
        assert "goes on at 3" in caplog.text
        assert align_to_tier(logs, tier, manifest_of) == []  # aligned once
    finally:
        logs.close()

    tier, topic_id = _tier_with_one_segment(tmp_path / "behind", "behind")
    logs = LogManager(tmp_path / "behind-data")
    try:
        configs = {"remote.storage.enable": "true", "local.retention.bytes": "1"}
        logs.create_topic("behind", 1, configs, topic_id=topic_id)
        plog = logs.get_log("behind", 0)
        plog.append(idempotent(8, 0, 0, n=1))  # an older copy: offset 0 only
        tiering = Tiering(logs, tier)
        overlapping = tiering.overlapping
        assert align_to_tier(logs, tier, tiering.manifest, overlapping) == []
        assert overlapping == {("behind", 0)}
        assert "behind the remote tier's end 3 and overlaps it" in caplog.text
        for seq in range(1, 8, 2):  # new records: offsets 1..8, the tier's 1..2 among them
            plog.roll()
            plog.append(idempotent(8, 0, seq, n=2))
        plog.roll()
        tiering.run_once()  # copies nothing, so its retention deletes nothing
        assert (plog.log_start_offset, plog.log_end_offset) == (0, 9)
        assert tiering.manifest(plog).end_offset == 3
        assert "its local log overlaps its remote log's offsets" in caplog.text
    finally:
        logs.close()


def test_a_damaged_manifest_stops_the_rebuild_before_any_topic_is_made(tmp_path: Path) -> None:
    """The rebuild made the topics that sorted before a damaged manifest, then stopped;
    the next start found a data dir with topics and rebuilt nothing (60 tiered records
    of the damaged topic never came back). Now every object is read first: the start
    fails with the dir still empty, and after the repair the rebuild makes them all."""
    from kompakt.remote.layout import manifest_key

    tier, _ = _tier_with_one_segment(tmp_path, "a-first")
    tier2, _ = _tier_with_one_segment(tmp_path, "b-second")
    key = manifest_key("b-second", 0)
    good, _version = tier.store.get(key)
    tier.store.put(key, b"{not json")
    logs = LogManager(tmp_path / "data")
    try:
        with pytest.raises(RemoteStorageError, match="not JSON"):
            rebuild_from_tier(logs, tier)
        assert logs.topics() == []
        tier.store.put(key, good)
        assert rebuild_from_tier(logs, tier) == ["a-first", "b-second"]
        assert [logs.get_log(t, 0).log_end_offset for t in ("a-first", "b-second")] == [3, 3]
    finally:
        logs.close()
