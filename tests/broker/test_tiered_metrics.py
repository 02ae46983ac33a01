"""The remote tier's deletes and metadata requests on ``/metrics`` of a real broker:
objects the remote log manager deletes through the metadata manager (segments a
DeleteRecords drops, a deleted topic's objects) move ``kompakt_remote_delete_bytes`` and
the ``delete`` requests as the cleaner's deletions do (Kafka's
``RemoteDeleteRequestsPerSec``, counted per object), and manifest writes and listings
are counted requests (what an object store bills). DescribeLogDirs reports the local
bytes, the remote ones are on ``/metrics``."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
from raw_kafka import call

from kompakt.broker.tiering import tiering_of
from kompakt.remote.layout import manifest_key
from tests.broker.test_remote_metrics import remote_samples
from tests.broker.test_tiered import TIERED, produce, read_all, start, tiered_down
from tests.remote.broker_kit import TIMEOUT, create_topic

DELETES = 'kompakt_remote_requests_total{kind="delete"}'


def test_delete_records_and_topic_deletion_count_the_objects_they_delete(tmp_path: Path) -> None:
    """Kafka's DeleteRecords on a tiered partition drops the remote segments below the
    new log start (RemoteLogManager deletes them, counting RemoteDeleteRequestsPerSec):
    every object of every dropped segment is counted with its bytes; then deleting the
    topic counts its remaining objects, the manifest and the topic record too."""
    b = start(tmp_path / "data")
    try:
        # DeleteRecords needs delete in the policy (Kafka's POLICY_VIOLATION otherwise)
        create_topic(b, "tiered", {**TIERED, "cleanup.policy": "compact,delete"})
        produce(b.bootstrap, ["tiered"])
        tiered_down(b, "tiered")
        plog = b.logs.get_log("tiered", 0)
        tiering = tiering_of(b.broker.state)
        assert tiering is not None
        m = tiering.manifest(plog)
        assert m is not None and len(m.segments) > 2
        dropped = m.segments[:2]
        before = remote_samples(b.admin_port)
        assert before['kompakt_remote_requests_total{kind="put"}'] > 0
        assert before['kompakt_remote_requests_total{kind="list"}'] > 0

        # a consumer from offset 0 puts the dropped segments' chunks in the cache
        read_all(b.bootstrap, "tiered")
        cache = tiering.tier.cache
        dropped_logs = {s.files[".log"].key for s in dropped}
        assert dropped_logs <= cache.objects()
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        tp = TopicPartition("tiered", 0, dropped[-1].last_offset + 1)
        admin.delete_records([tp])[tp].result(TIMEOUT)
        after = remote_samples(b.admin_port)
        assert not dropped_logs & cache.objects()  # their chunks left
        objects = [f for s in dropped for f in s.files.values()]
        assert after[DELETES] - before[DELETES] == len(objects)
        assert after["kompakt_remote_delete_bytes_total"] - before[
            "kompakt_remote_delete_bytes_total"
        ] == sum(f.size for f in objects)

        left = tiering.manifest(plog)
        assert left is not None
        manifest_bytes = len(tiering.tier.store.get(manifest_key("tiered", 0))[0])
        admin.delete_topics(["tiered"])["tiered"].result(TIMEOUT)
        gone = remote_samples(b.admin_port)
        # each remaining segment's objects, the manifest and the topic record
        assert gone[DELETES] - after[DELETES] == len(left.keys()) + 2
        assert gone["kompakt_remote_delete_bytes_total"] - after[
            "kompakt_remote_delete_bytes_total"
        ] == manifest_bytes + sum(f.size for s in left.segments for f in s.files.values())
    finally:
        b.stop()


def test_describe_log_dirs_reports_local_bytes_and_metrics_the_remote_ones(tmp_path: Path) -> None:
    """Kafka's ReplicaManager.describeLogDirs answers ``partition_size`` with
    ``UnifiedLog.size``, the local segments only (KIP-405 adds no remote field): a tiered
    partition reports the bytes on this broker's disk, and its remote bytes are
    ``kompakt_remote_log_size_bytes`` (Kafka's RemoteLogSizeBytes)."""
    b = start(tmp_path / "data")
    try:
        create_topic(b, "tiered", TIERED)
        produce(b.bootstrap, ["tiered"])
        tiered_down(b, "tiered")
        plog = b.logs.get_log("tiered", 0)
        tiering = tiering_of(b.broker.state)
        assert tiering is not None
        m = tiering.manifest(plog)
        assert m is not None and m.size > 0
        (result,) = call(b.port, 35, 4, {"topics": None}).results
        sizes = {
            (t.name, p.partition_index): p.partition_size
            for t in result.topics
            for p in t.partitions
        }
        assert sizes[("tiered", 0)] == plog.size_bytes() < m.size
        tp = '{partition="0",topic="tiered"}'
        assert remote_samples(b.admin_port)[f"kompakt_remote_log_size_bytes{tp}"] == m.size
    finally:
        b.stop()
