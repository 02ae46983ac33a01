"""The in-process engine cleaning a tiered partition's remote range
(:mod:`kompakt.cleaner.remote_clean`): Kafka's cleaner rules on the fetched segments,
new objects committed by one manifest swap, the replaced ones deleted only after
``file.delete.delay.ms``, and a failure at any step leaving a manifest that names only
existing objects and reads back the latest value of every key."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from cleaner_kit import T0, ManualClock, append, open_manager

from kompakt.broker.tiering import Tiering
from kompakt.cleaner.cleaner import Cleaner
from kompakt.cleaner.remote_clean import (
    CLEANED,
    COMMITTED,
    DELETED,
    FETCHED,
    UPLOADED,
    RemoteCleaner,
    dirty_ratio,
)
from kompakt.log.producer_snapshot import SNAPSHOT_SUFFIX
from kompakt.log.segment import LOG_SUFFIX
from kompakt.record.decode import iter_batches
from kompakt.record.encode import build_control_batch, build_simple_batch
from kompakt.record.header import CONTROL_ABORT, CONTROL_COMMIT
from kompakt.remote import RemoteTier, open_store
from kompakt.remote.cache import ChunkCache
from kompakt.remote.layout import file_base_offset, segments_folder
from kompakt.remote.manifest import PartitionManifest
from kompakt.remote.metadata import RemoteLogMetadataManager
from kompakt.remote.storage import RemoteStorageManager

TOPIC = "t"
CONFIGS = {
    "cleanup.policy": "compact",
    "remote.storage.enable": "true",
    "segment.bytes": "2048",
    "delete.retention.ms": "1000",
    "min.cleanable.dirty.ratio": "0.5",
}
KEYS = 13


class Boom(Exception):
    pass


def tier_of(url: str, s3_endpoint: str | None = None) -> RemoteTier:
    store = open_store(url, s3_endpoint)
    return RemoteTier(
        store, RemoteStorageManager(store), RemoteLogMetadataManager(store), ChunkCache(1 << 20)
    )


def feed(plog, n: int = 300) -> dict[bytes, bytes | None]:
    """Records over KEYS keys, a tombstone every 17th; the latest value per key."""
    latest: dict[bytes, bytes | None] = {}
    for i in range(n):
        k = b"k%d" % (i % KEYS)
        v = None if i % 17 == 16 else b"v%d-" % i + b"x" * 20
        append(plog, [(k, v)])
        latest[k] = v
    plog.roll()
    return {k: v for k, v in latest.items() if v is not None}


def tiered(root: Path, fill, url: str | None = None, s3_endpoint: str | None = None):
    """A compacted, tiered partition filled by ``fill(plog)`` (which returns the table a
    reader must see), every rolled segment copied up (to ``url``, a folder unless
    given); the remote cleaner on it."""
    clock = ManualClock()
    logs = open_manager(root / "data", clock)
    logs.create_topic(TOPIC, 1, CONFIGS)
    plog = logs.get_log(TOPIC, 0)
    want = fill(plog)
    tier = tier_of(url or (root / "remote").as_uri(), s3_endpoint)
    assert Tiering(logs, tier).copy(plog) > 3
    cleaner = RemoteCleaner(tier.segments, tier.metadata, clock, work_dir=root / "work")
    return logs, plog, tier, cleaner, clock, want


@pytest.fixture
def setup(tmp_path: Path):
    parts = tiered(tmp_path, feed)
    yield parts
    parts[0].close()


def twin_cleaned(root: Path, logs, broker_config=None) -> dict[int, bytes]:
    """The in-process engine on a local copy of the partition: its rolled segments'
    ``.log`` bytes by base offset (closes ``logs`` to copy a consistent dir)."""
    logs.close()
    shutil.copytree(root / "data", root / "copy")
    twin_logs = open_manager(root / "copy", logs.clock, broker_config)
    try:
        twin = twin_logs.get_log(TOPIC, 0)
        Cleaner(twin_logs).clean_partition(twin, force=False)
        return {s.base_offset: Path(s.log_path).read_bytes() for s in twin.segments_snapshot()[:-1]}
    finally:
        twin_logs.close()


def remote_logs(tier: RemoteTier, m: PartitionManifest) -> dict[int, bytes]:
    return {
        file_base_offset(s.files[LOG_SUFFIX].key): tier.segments.fetch_file(s, LOG_SUFFIX)
        for s in m.segments
    }


def remote_state(tier: RemoteTier, m: PartitionManifest) -> dict[bytes, bytes]:
    """Read the remote log from its start as a consumer would: the latest value per key."""
    latest = {
        r.key: r.value
        for s in m.segments
        for b in iter_batches(tier.segments.fetch_file(s, LOG_SUFFIX))
        if not b.header.is_control
        for r in b.records()
        if r.offset >= m.log_start_offset
    }
    return {k: v for k, v in latest.items() if v is not None}


def assert_names_existing(tier: RemoteTier, m: PartitionManifest) -> None:
    present = {o.key for o in tier.store.list(segments_folder(TOPIC, 0))}
    assert m.keys() <= present


def assert_next_clean_recovers(tier: RemoteTier, cleaner, want: dict) -> None:
    """After a failed or killed clean: the next clean reaches the remote end, and the
    orphan sweep leaves exactly the objects the manifest names, reading back ``want``."""
    cleaner.clean(manifest(tier), CONFIGS, 0)
    cleaner.delete_due()
    m = manifest(tier).value
    assert m.clean_point == m.end_offset
    tier.metadata.orphan_grace_ms = 0
    tier.metadata.sweep_orphans()
    assert {o.key for o in tier.store.list(segments_folder(TOPIC, 0))} == m.keys()
    assert remote_state(tier, m) == want


def manifest(tier: RemoteTier):
    return tier.metadata.load_partition(TOPIC, 0)


def test_clean_commits_new_objects_and_clean_point(setup):
    """Kafka's cleaner keeps the latest record of each key; the remote range shrinks,
    the manifest records the clean point, and the replaced objects stay readable until
    file.delete.delay.ms has passed (readers of the old manifest)."""
    logs, plog, tier, cleaner, clock, want = setup
    before = manifest(tier)
    assert dirty_ratio(before.value) == 1.0
    assert cleaner.due(before.value, 0.5)
    result = cleaner.clean(before, CONFIGS, delete_delay_ms=60_000)
    assert result is not None
    m = result.manifest.value
    assert m.generation == before.value.generation + 1
    assert m.clean_point == before.value.end_offset
    assert m.end_offset == before.value.end_offset
    assert m.size < before.value.size
    assert not cleaner.due(m, 0.5)
    assert remote_state(tier, m) == want
    assert_names_existing(tier, m)
    old_keys = before.value.keys() - m.keys()
    present = {o.key for o in tier.store.list(segments_folder(TOPIC, 0))}
    assert old_keys <= present  # the delay has not passed
    assert cleaner.delete_due() == 0
    clock.advance(60_000)
    assert cleaner.delete_due() == len(result.replaced)
    present = {o.key for o in tier.store.list(segments_folder(TOPIC, 0))}
    assert not old_keys & present
    assert remote_state(tier, manifest(tier).value) == want


def test_tombstones_get_a_horizon_then_go(setup):
    """KIP-534: the first clean stamps each kept tombstone batch with now +
    delete.retention.ms (recorded per segment in the manifest); a clean after that
    horizon removes the tombstones."""
    logs, plog, tier, cleaner, clock, want = setup
    r1 = cleaner.clean(manifest(tier), CONFIGS, 0)
    horizons = [s.delete_horizon_ms for s in r1.manifest.value.segments]
    assert T0 + 1000 in horizons
    assert all(h in (-1, T0 + 1000) for h in horizons)
    clock.advance(2000)
    # the clean point is the end: force a clean of the whole range again
    forced = r1.manifest.value.next(r1.manifest.value.segments, clean_point=0)
    v = tier.metadata.commit_partition(forced, r1.manifest)
    r2 = cleaner.clean(v, CONFIGS, 0)
    m = r2.manifest.value
    assert all(s.delete_horizon_ms == -1 for s in m.segments)
    tombstones = [
        r
        for s in m.segments
        for b in iter_batches(tier.segments.fetch_file(s, LOG_SUFFIX))
        for r in b.records()
        if r.value is None
    ]
    assert tombstones == []
    assert remote_state(tier, m) == want


def test_byte_identical_to_the_local_engine_on_a_local_copy(setup, tmp_path: Path):
    """The cleaned remote segments are byte for byte what the in-process engine makes of
    a local copy of the same segments."""
    logs, plog, tier, cleaner, clock, want = setup
    local = twin_cleaned(tmp_path, logs)
    result = cleaner.clean(manifest(tier), CONFIGS, 0)
    assert remote_logs(tier, result.manifest.value) == local


@pytest.mark.parametrize("step", [FETCHED, CLEANED, UPLOADED, COMMITTED, DELETED])
def test_a_failure_at_any_step_loses_nothing(setup, step: str):
    """Crash safety (docs/tiered-storage.md's order of writes): whichever step fails,
    the manifest names only existing objects and the remote log reads back the latest
    value of every key; the next clean succeeds and the sweep removes the orphans."""
    logs, plog, tier, cleaner, clock, want = setup

    def fail(at: str) -> None:
        if at == step:
            raise Boom(at)

    cleaner.fault = fail
    with pytest.raises(Boom):
        cleaner.clean(manifest(tier), CONFIGS, 0)
        cleaner.delete_due()
    m = manifest(tier).value
    assert_names_existing(tier, m)
    assert remote_state(tier, m) == want
    cleaner.fault = lambda at: None
    cleaner.clean(manifest(tier), CONFIGS, 0)
    cleaner.delete_due()
    m = manifest(tier).value
    assert_names_existing(tier, m)
    assert remote_state(tier, m) == want
    tier.metadata.orphan_grace_ms = 0
    tier.metadata.sweep_orphans()
    present = {o.key for o in tier.store.list(segments_folder(TOPIC, 0))}
    assert present == m.keys()
    assert remote_state(tier, m) == want


def test_a_lost_commit_race_discards_the_upload(setup):
    """Compare-and-swap: a manifest changed by another writer since the read wins; the
    clean's objects are named by nothing and the sweep removes them."""
    logs, plog, tier, cleaner, clock, want = setup
    stale = manifest(tier)
    tier.metadata.commit_partition(stale.value.next(stale.value.segments), stale)
    assert cleaner.clean(stale, CONFIGS, 0) is None
    m = manifest(tier).value
    assert m.clean_point == 0
    tier.metadata.orphan_grace_ms = 0
    tier.metadata.sweep_orphans()
    assert {o.key for o in tier.store.list(segments_folder(TOPIC, 0))} == m.keys()
    assert remote_state(tier, m) == want


@pytest.mark.parametrize("enabled", [True, False])
def test_the_tiering_task_cleans_a_dirty_remote_range(setup, enabled: bool):
    """The remote log manager's pass cleans a tiered compacted partition whose remote
    dirty ratio passes min.cleanable.dirty.ratio (when log.cleaner.enable), and deletes
    the replaced objects on a pass after file.delete.delay.ms (Kafka's default 60 s)."""
    logs, plog, tier, cleaner, clock, want = setup
    tiering = Tiering(logs, tier, clean_remote=enabled)
    tiering.run_once()
    m = manifest(tier).value
    assert (m.clean_point == m.end_offset) is enabled
    assert remote_state(tier, m) == want
    tiering.run_once()  # the clean range is not dirty: no second clean
    assert manifest(tier).value.generation == m.generation
    clock.advance(60_000)
    tiering.run_once()
    present = {o.key for o in tier.store.list(segments_folder(TOPIC, 0))}
    assert present == m.keys()


def append_transaction(
    plog, pid: int, items: list[tuple[bytes, bytes]], seq: dict[int, int], abort: bool
) -> None:
    """One transaction of producer ``pid`` (its next sequence in ``seq``): its records,
    then its COMMIT or ABORT marker."""
    plog.append(
        build_simple_batch(
            items,
            timestamp=plog.clock(),
            producer_id=pid,
            producer_epoch=0,
            base_sequence=seq.get(pid, 0),
            transactional=True,
        )
    )
    seq[pid] = seq.get(pid, 0) + len(items)
    kind = CONTROL_ABORT if abort else CONTROL_COMMIT
    plog.append(
        build_control_batch(kind, producer_id=pid, producer_epoch=0, timestamp=plog.clock())
    )


def feed_transactions(plog) -> dict[bytes, bytes]:
    """Three transactional producers, every fourth transaction aborted, with plain
    idempotent batches between; the table a read_committed reader must see."""
    seq: dict[int, int] = {}
    table: dict[bytes, bytes] = {}
    for i in range(70):
        pid = 100 + i % 3
        items = [(b"k%d" % ((i + j) % 7), b"t%d-%d" % (i, j)) for j in range(3)]
        abort = i % 4 == 3
        append_transaction(plog, pid, items, seq, abort)
        if not abort:
            table.update(items)
        append(plog, [(b"plain%d" % (i % 5), b"p%d" % i)], producer_id=200, base_sequence=i)
        table[b"plain%d" % (i % 5)] = b"p%d" % i
    plog.roll()
    return table


def test_transactions_from_the_tiered_txnindex(tmp_path: Path):
    """Kafka's transactional rules on a remote range: aborted data goes (the tiered
    ``.txnindex`` names the aborted transactions), committed data and the producers'
    last batches (from the tiered producer snapshot) stay, each cleaned segment carries
    the snapshot at its end, and the result equals the in-process engine's on a local
    copy."""

    def fill(plog) -> dict[bytes, bytes]:
        with plog.lock:
            assert plog.producers.keep_snapshots  # a snapshot at each roll, as a broker
        return feed_transactions(plog)

    logs, plog, tier, cleaner, clock, want = tiered(tmp_path, fill)
    assert manifest(tier).value.producer_snapshot is not None
    local = twin_cleaned(tmp_path, logs)
    result = cleaner.clean(manifest(tier), CONFIGS, 0)
    m = result.manifest.value
    assert all(SNAPSHOT_SUFFIX in s.files for s in result.cleaned)
    assert remote_logs(tier, m) == local
    assert remote_state(tier, m) == want
    values = {
        r.value
        for s in m.segments
        for b in iter_batches(tier.segments.fetch_file(s, LOG_SUFFIX))
        if not b.header.is_control
        for r in b.records()
    }
    assert not any(v.startswith(b"t3-") or v.startswith(b"t7-") for v in values)


def test_a_remote_log_start_inside_a_segment(setup):
    """DeleteRecords moved the remote log start into a segment (Kafka's
    ``logStartOffset``): the clean keeps that start, and what a reader sees from it is
    the latest value per key of the records at or after it."""
    logs, plog, tier, cleaner, clock, want = setup
    first = manifest(tier).value.segments[1]
    start = first.base_offset + 3
    Tiering(logs, tier).move_remote_start(plog, start)
    latest = {r.key: r.value for b in plog.iter_batches() for r in b.records() if r.offset >= start}
    expected = {k: v for k, v in latest.items() if v is not None}
    result = cleaner.clean(manifest(tier), CONFIGS, 0)
    m = result.manifest.value
    assert m.log_start_offset == start == m.segments[0].base_offset
    assert result.replaced
    assert remote_state(tier, m) == expected


def test_a_partial_clean_when_the_offset_map_is_full(setup, tmp_path: Path):
    """Kafka's ``buildOffsetMap`` stops when the map is full: the clean point stops
    there, the segments past it stay as they were (same objects), and the next cleans
    go on from it, each byte-identical to the in-process engine's."""
    logs, plog, tier, cleaner, clock, want = setup
    small = {"log.cleaner.dedupe.buffer.size": str(24 * 8)}  # 7 keys of 13
    cleaner.broker_config = small
    before = manifest(tier).value
    local = twin_cleaned(tmp_path, logs, small)
    result = cleaner.clean(manifest(tier), CONFIGS, 0)
    m = result.manifest.value
    assert 0 < m.clean_point < before.end_offset
    assert remote_logs(tier, m) == local
    kept = [s for s in m.segments if s.base_offset >= m.clean_point]
    assert kept and all(s in before.segments for s in kept)
    assert remote_state(tier, m) == want
    for _ in range(3):
        point = manifest(tier).value.clean_point
        m = cleaner.clean(manifest(tier), CONFIGS, 0).manifest.value
        assert point < m.clean_point < before.end_offset
        assert remote_state(tier, m) == want
