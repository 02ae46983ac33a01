"""The remote metadata on both backends (a folder and moto's S3 server): manifests
committed by compare-and-swap so of two writers exactly one wins, never a manifest
naming a missing object, objects deleted only after the manifest that drops them is
durable, orphans swept after the grace period, a real SIGKILL between upload and commit
leaving only orphans, and a broker with an empty disk finding every tiered topic.

Kafka's counterpart is the RemoteLogMetadataManager; its COPY_SEGMENT_STARTED /
COPY_SEGMENT_FINISHED states become here "uploaded but named by no manifest" and "named".
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import pytest

from kompakt.log.segment import LOG_SUFFIX
from kompakt.remote import open_store
from kompakt.remote.layout import manifest_key, segments_folder, topic_key
from kompakt.remote.manifest import ManifestError, PartitionManifest, TopicRecord
from kompakt.remote.metadata import (
    ORPHAN_GRACE_MS,
    ManifestConflictError,
    RemoteLogMetadataManager,
    Versioned,
)
from kompakt.remote.storage import LocalSegmentFiles, RemoteStorageManager
from kompakt.remote.store import ObjectStore, RemoteStorageError

SegmentMaker = Callable[..., LocalSegmentFiles]  # the make_segment fixture
CHUNK = 1000
LATER = 10**15  # a sweep's "now" past every grace period


def listed(store: ObjectStore, topic: str = "t", partition: int = 0) -> set[str]:
    return {o.key for o in store.list(segments_folder(topic, partition))}


def first_manifest(
    rlmm: RemoteLogMetadataManager, rsm: RemoteStorageManager, make: SegmentMaker
) -> Versioned[PartitionManifest]:
    seg = rsm.copy_segment("t", 0, make(0, 9))
    return rlmm.commit_partition(PartitionManifest("t", 0, "topic-id-1", segments=(seg,)), None)


def test_commits_chain_by_generation_and_read_back_whole(
    store: ObjectStore, make_segment: SegmentMaker
) -> None:
    rsm, rlmm = RemoteStorageManager(store, chunk_bytes=CHUNK), RemoteLogMetadataManager(store)
    assert rlmm.load_partition("t", 0) is None
    v0 = first_manifest(rlmm, rsm, make_segment)
    seg2 = rsm.copy_segment("t", 0, make_segment(10, 19, log_bytes=2500))
    v1 = rlmm.commit_partition(v0.value.next(v0.value.segments + (seg2,), clean_point=10), v0)
    loaded = rlmm.load_partition("t", 0)
    assert loaded == v1 and loaded.value.generation == 1
    assert (loaded.value.end_offset, loaded.value.clean_point, loaded.value.size) == (
        20,
        10,
        12_500,
    )
    assert loaded.value.producer_snapshot == seg2.files[".snapshot"]
    assert loaded.value.segment_for(12) == seg2 and loaded.value.segment_for(20) is None
    with pytest.raises(
        RemoteStorageError, match="generation 5 does not follow the one read \\(1\\)"
    ):
        rlmm.commit_partition(PartitionManifest("t", 0, "topic-id-1", generation=5), v1)


def test_two_writers_of_one_manifest_exactly_one_wins(
    store: ObjectStore, make_segment: SegmentMaker
) -> None:
    """Both read generation 0 and upload a segment; the first commit wins, the second
    is refused by the store's precondition (If-Match), its upload left an orphan, and a
    retry from a fresh read succeeds. (The simultaneous race is in test_store.py on the
    file backend; conftest.py says why not on moto.)"""
    rsm, rlmm = RemoteStorageManager(store, chunk_bytes=CHUNK), RemoteLogMetadataManager(store)
    base = first_manifest(rlmm, rsm, make_segment)
    a_read, b_read = rlmm.load_partition("t", 0), rlmm.load_partition("t", 0)
    seg_a = rsm.copy_segment("t", 0, make_segment(10, 19))
    seg_b = rsm.copy_segment("t", 0, make_segment(10, 29))
    won = rlmm.commit_partition(a_read.value.next(base.value.segments + (seg_a,)), a_read)
    with pytest.raises(ManifestConflictError, match="another writer committed"):
        rlmm.commit_partition(b_read.value.next(base.value.segments + (seg_b,)), b_read)
    assert rlmm.load_partition("t", 0) == won
    assert set(seg_b.keys()) <= listed(store) - won.value.keys()  # orphans, for the sweep
    again = rlmm.load_partition("t", 0)
    seg_b2 = rsm.copy_segment("t", 0, make_segment(20, 29))
    rlmm.commit_partition(again.value.next(again.value.segments + (seg_b2,)), again)
    assert rlmm.load_partition("t", 0).value.end_offset == 30


def test_the_first_manifest_is_created_only_once(
    store: ObjectStore, make_segment: SegmentMaker
) -> None:
    rsm, rlmm = RemoteStorageManager(store, chunk_bytes=CHUNK), RemoteLogMetadataManager(store)
    first_manifest(rlmm, rsm, make_segment)
    with pytest.raises(ManifestConflictError):
        first_manifest(rlmm, rsm, make_segment)  # If-None-Match: * on a second creator


def test_no_manifest_ever_names_a_missing_object(
    store: ObjectStore, make_segment: SegmentMaker
) -> None:
    rsm, rlmm = RemoteStorageManager(store, chunk_bytes=CHUNK), RemoteLogMetadataManager(store)
    v0 = first_manifest(rlmm, rsm, make_segment)
    seg = rsm.copy_segment("t", 0, make_segment(10, 19))
    store.delete(seg.files[LOG_SUFFIX].key)  # e.g. swept while the writer stalled
    with pytest.raises(RemoteStorageError, match="not committing a manifest that names it"):
        rlmm.commit_partition(v0.value.next(v0.value.segments + (seg,)), v0)
    assert rlmm.load_partition("t", 0) == v0


def test_an_upload_older_than_half_the_grace_period_is_not_committed(
    store: ObjectStore, make_segment: SegmentMaker
) -> None:
    rsm = RemoteStorageManager(store, chunk_bytes=CHUNK, clock=lambda: 1000.0)
    rlmm = RemoteLogMetadataManager(store, clock=lambda: 1000.0 + ORPHAN_GRACE_MS / 2000 + 1)
    seg = rsm.copy_segment("t", 0, make_segment(0, 9))
    with pytest.raises(RemoteStorageError, match="upload it again"):
        rlmm.commit_partition(PartitionManifest("t", 0, "id", segments=(seg,)), None)
    assert rlmm.load_partition("t", 0) is None


def test_dropped_segments_are_deleted_after_the_commit_and_orphans_swept(
    store: ObjectStore, make_segment: SegmentMaker
) -> None:
    rsm, rlmm = RemoteStorageManager(store, chunk_bytes=CHUNK), RemoteLogMetadataManager(store)
    v0 = first_manifest(rlmm, rsm, make_segment)
    old = v0.value.segments[0]
    cleaned = rsm.copy_segment("t", 0, make_segment(0, 9, log_bytes=300))
    v1 = rlmm.commit_partition(v0.value.next((cleaned,)), v0)  # a clean replaced it
    assert listed(store) == v1.value.keys() and not set(old.keys()) & listed(store)
    stray = rsm.copy_segment("t", 0, make_segment(10, 19))
    assert rlmm.sweep_orphans() == []  # young: may be an upload about to be committed
    assert sorted(rlmm.sweep_orphans(now_ms=LATER)) == sorted(stray.keys())
    assert listed(store) == v1.value.keys()
    assert {manifest_key("t", 0)} <= {o.key for o in store.list("topics")}


def test_a_failed_delete_after_a_commit_leaves_an_orphan_the_sweep_removes(
    store: ObjectStore, make_segment: SegmentMaker
) -> None:
    """The crash window after the manifest put and before the deletes: the dropped
    objects outlive the commit, named by nothing."""
    rsm, rlmm = RemoteStorageManager(store, chunk_bytes=CHUNK), RemoteLogMetadataManager(store)
    v0 = first_manifest(rlmm, rsm, make_segment)
    cleaned = rsm.copy_segment("t", 0, make_segment(0, 9, log_bytes=300))
    v1 = rlmm.commit_partition(v0.value.next((cleaned,)), v0, delete_dropped=False)
    assert listed(store) == v0.value.keys() | v1.value.keys()
    assert sorted(rlmm.sweep_orphans(now_ms=LATER)) == sorted(v0.value.keys())
    assert listed(store) == v1.value.keys()


CRASHING_UPLOADER = """
import os, signal, sys
from pathlib import Path
from kompakt.remote import open_store
from kompakt.remote.storage import LocalSegmentFiles, RemoteStorageManager

url, endpoint, folder, kill_after = sys.argv[1], sys.argv[2] or None, sys.argv[3], int(sys.argv[4])
store = open_store(url, endpoint)
put = store.put
done = []

def put_then_die(*args, **kwargs):
    version = put(*args, **kwargs)
    done.append(args[0])
    if len(done) == kill_after:
        os.kill(os.getpid(), signal.SIGKILL)  # a crash, not an exception: nothing runs after
    return version

store.put = put_then_die
files = {p.suffix: p for p in Path(folder).iterdir() if p.name.startswith("%020d" % 10)}
RemoteStorageManager(store, chunk_bytes=1000).copy_segment("t", 0, LocalSegmentFiles(10, 19, 0, files))
raise SystemExit("not killed")
"""


@pytest.mark.parametrize("kill_after", [1, 3, 5])
def test_sigkill_between_upload_and_manifest_leaves_only_orphans(
    backend: tuple[str, str | None], make_segment: SegmentMaker, kill_after: int
) -> None:
    """A writer process SIGKILLed after 1, 3 or all 5 of a segment's objects are up
    and before its manifest commit: the manifest still names exactly what it named,
    every object it names exists, and the sweep removes exactly the dead upload."""
    store = open_store(*backend)
    rsm, rlmm = RemoteStorageManager(store, chunk_bytes=CHUNK), RemoteLogMetadataManager(store)
    v0 = first_manifest(rlmm, rsm, make_segment)
    local = make_segment(10, 19)
    folder = str(local.files[LOG_SUFFIX].parent)
    args = [backend[0], backend[1] or "", folder, str(kill_after)]
    run = subprocess.run(
        [sys.executable, "-c", CRASHING_UPLOADER, *args], capture_output=True, timeout=120
    )
    assert run.returncode == -9, run.stderr.decode()[-2000:]
    after = rlmm.load_partition("t", 0)
    assert after == v0
    assert after.value.keys() <= listed(store)
    orphans = listed(store) - after.value.keys()
    assert len(orphans) == kill_after
    assert set(rlmm.sweep_orphans(now_ms=LATER)) == orphans
    assert listed(store) == after.value.keys()
    assert RemoteStorageManager(store).fetch_file(after.value.segments[0], LOG_SUFFIX)


def test_a_damaged_manifest_is_one_line_naming_key_and_field(
    store: ObjectStore, make_segment: SegmentMaker
) -> None:
    rsm, rlmm = RemoteStorageManager(store, chunk_bytes=CHUNK), RemoteLogMetadataManager(store)
    v0 = first_manifest(rlmm, rsm, make_segment)
    key = manifest_key("t", 0)
    body = v0.value.to_json().replace(b'"generation": 0', b'"generation": "0"')
    store.put(key, body)
    with pytest.raises(ManifestError, match="manifest.json: field 'generation' must be a int") as e:
        rlmm.load_partition("t", 0)
    assert "\n" not in str(e.value)
    store.put(key, b"{not json")
    with pytest.raises(ManifestError, match="not JSON"):
        rlmm.load_partition("t", 0)
    store.put(key, body.replace(b'"format": 1', b'"format": 9'))
    with pytest.raises(ManifestError, match="format 9 is not 1"):
        rlmm.load_partition("t", 0)


def test_an_overlapping_segment_list_is_refused(
    make_segment: SegmentMaker, store: ObjectStore
) -> None:
    rsm = RemoteStorageManager(store, chunk_bytes=CHUNK)
    a, b = (
        rsm.copy_segment("t", 0, make_segment(0, 9)),
        rsm.copy_segment("t", 0, make_segment(5, 19)),
    )
    with pytest.raises(ManifestError, match="overlaps"):
        PartitionManifest("t", 0, "id").next((a, b))


def test_a_broker_with_an_empty_disk_finds_every_tiered_topic(
    backend: tuple[str, str | None], make_segment: SegmentMaker
) -> None:
    """What the issue asks beyond Kafka (whose metadata lives in a topic on the lost
    disk): topics, their configs and partition counts, and every partition's segments
    byte-identical, from the bucket alone, through a store opened anew from the URL."""
    writer = open_store(*backend)
    rsm, rlmm = RemoteStorageManager(writer, chunk_bytes=CHUNK), RemoteLogMetadataManager(writer)
    logs = {}
    for topic, partitions in (("orders", 2), ("users", 1)):
        rlmm.commit_topic(
            TopicRecord(topic, f"id-{topic}", partitions, {"cleanup.policy": "compact"}), None
        )
        for p in range(partitions):
            local = make_segment(100 * p + len(topic), 100 * p + len(topic) + 9)
            seg = rsm.copy_segment(topic, p, local)
            rlmm.commit_partition(PartitionManifest(topic, p, f"id-{topic}", segments=(seg,)), None)
            logs[topic, p] = local.files[LOG_SUFFIX].read_bytes()
    record = rlmm.load_topic("orders")
    rlmm.commit_topic(
        TopicRecord(
            "orders", "id-orders", 2, {"cleanup.policy": "compact", "retention.ms": "-1"}, 1
        ),
        record,
    )
    with pytest.raises(ManifestConflictError):
        rlmm.commit_topic(TopicRecord("orders", "id-orders", 3, {}, 1), record)

    fresh = open_store(*backend)  # the new broker: nothing but the URL
    meta, segs = RemoteLogMetadataManager(fresh), RemoteStorageManager(fresh)
    assert meta.topics() == ["orders", "users"]
    orders = meta.load_topic("orders").value
    assert (orders.partitions, orders.configs["retention.ms"], orders.generation) == (2, "-1", 1)
    for (topic, p), log in logs.items():
        m = meta.load_partition(topic, p).value
        assert m.topic_id == f"id-{topic}"
        assert segs.fetch_log_range(m.segments[0], 0, m.segments[0].size) == log
    assert fresh.get(topic_key("users"))[0] == writer.get(topic_key("users"))[0]
