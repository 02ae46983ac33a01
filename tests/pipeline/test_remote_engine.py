"""The Spark engine cleaning a tiered partition's remote range in executors
(:mod:`kompakt.pipeline.remote_engine`): on the same manifest, every object it uploads
is byte for byte the in-process engine's (:mod:`kompakt.cleaner.remote_clean`), across
two cleans (KIP-534 tombstone horizons), with committed and aborted transactions (the
tiered ``.txnindex``), idempotent producers' last batches (the tiered producer
snapshot) and a compressed codec; committed by the same one manifest swap."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from cleaner_kit import append
from test_remote_clean import CONFIGS, append_transaction, feed, tier_of, tiered

from kompakt.broker.tiering import Tiering
from kompakt.cleaner.remote_clean import RemoteCleaner
from kompakt.log.producer_snapshot import SNAPSHOT_SUFFIX
from kompakt.log.segment import LOG_SUFFIX
from kompakt.pipeline.remote_engine import SparkRemoteEngine
from kompakt.pipeline.remote_tasks import StoreAddress
from kompakt.record import codecs
from kompakt.record.decode import iter_batches
from kompakt.remote import RemoteTier
from kompakt.remote.layout import file_base_offset
from kompakt.remote.manifest import PartitionManifest

TOPIC = "t"
pytestmark = pytest.mark.slow


def fill_mixed(plog) -> dict[bytes, bytes]:
    """Plain keyed batches with tombstones (some gzip/lz4/zstd compressed), transactions
    of two producers (every third aborted), an idempotent producer; the table a
    read_committed reader must see."""
    with plog.lock:
        assert plog.producers.keep_snapshots  # a producer snapshot at each roll
    table: dict[bytes, bytes | None] = {}
    seq: dict[int, int] = {}
    codec_cycle = (codecs.NONE, codecs.GZIP, codecs.LZ4, codecs.ZSTD)
    for i in range(90):
        k = b"k%d" % (i % 11)
        v = None if i % 13 == 12 else b"v%d-" % i + b"x" * 16
        append(plog, [(k, v), (b"j%d" % (i % 5), b"w%d" % i)], compression=codec_cycle[i % 4])
        table[k] = v
        table[b"j%d" % (i % 5)] = b"w%d" % i
        if i % 6 == 0:
            pid = 100 + (i // 6) % 2
            items = [(b"t%d" % ((i + j) % 4), b"txn%d-%d" % (i, j)) for j in range(2)]
            abort = (i // 6) % 3 == 2
            append_transaction(plog, pid, items, seq, abort)
            if not abort:
                table.update(items)
        if i % 4 == 1:
            append(plog, [(b"idem%d" % (i % 3), b"i%d" % i)], producer_id=200, base_sequence=i)
            table[b"idem%d" % (i % 3)] = b"i%d" % i
    for k in (b"k3", b"j1"):  # tombstones no later record supersedes
        append(plog, [(k, None)], compression=codecs.GZIP)
        table[k] = None
    plog.roll()
    return {k: v for k, v in table.items() if v is not None}


def remote_state(tier: RemoteTier, m: PartitionManifest) -> dict[bytes, bytes]:
    """The latest value per key read from the remote log's start (batches a clean left
    empty, record count 0, read as no records)."""
    latest = {
        r.key: r.value
        for s in m.segments
        for b in iter_batches(tier.segments.fetch_file(s, LOG_SUFFIX))
        if not b.header.is_control
        for r in b.records()
        if r.offset >= m.log_start_offset
    }
    return {k: v for k, v in latest.items() if v is not None}


def all_objects(tier: RemoteTier, m: PartitionManifest) -> dict[tuple[int, str], bytes]:
    """Every file of every remote segment, by (file base offset, suffix)."""
    return {
        (file_base_offset(f.key), suffix): tier.segments.fetch_file(s, suffix)
        for s in m.segments
        for suffix, f in s.files.items()
    }


def shape(m: PartitionManifest) -> list[tuple]:
    """The manifest's content apart from segment ids and upload times."""
    return [
        (s.base_offset, s.last_offset, s.max_timestamp_ms, s.delete_horizon_ms, sorted(s.files))
        for s in m.segments
    ] + [(m.log_start_offset, m.clean_point, m.end_offset)]


def spark_cleaner(
    tier: RemoteTier,
    url: str,
    clock,
    spark,
    single_task_bytes: int | None = None,
    s3_endpoint: str | None = None,
) -> RemoteCleaner:
    """A remote cleaner with the Spark engine; ``single_task_bytes=0``: every range is
    read by a task per 4 KiB of segments and rewritten by a task per group."""
    address = StoreAddress.here(url, s3_endpoint)
    task_bytes = 4096 if single_task_bytes == 0 else None
    engine = SparkRemoteEngine(tier.segments, address, None, single_task_bytes, task_bytes)
    return RemoteCleaner(tier.segments, tier.metadata, clock, engine=engine)


def both_engines(
    tmp_path: Path, tier: RemoteTier, local: RemoteCleaner, clock, spark, configs=CONFIGS
):
    """One clean of the same manifest by each engine: the in-process one on ``tier``,
    the Spark one on a copy of it; (the copy, the in-process result, the Spark one)."""
    shutil.copytree(tmp_path / "remote", tmp_path / "twin")
    twin = tier_of((tmp_path / "twin").as_uri())
    remote = spark_cleaner(twin, (tmp_path / "twin").as_uri(), clock, spark)
    a = local.clean(tier.metadata.load_partition(TOPIC, 0), configs, 0)
    b = remote.clean(twin.metadata.load_partition(TOPIC, 0), configs, 0)
    assert a is not None and b is not None
    return twin, a, b


@pytest.mark.parametrize("single_task_bytes", [None, 0], ids=["one-task", "spread"])
def test_spark_remote_clean_is_byte_identical_to_the_in_process_one(
    spark, tmp_path: Path, single_task_bytes: int | None
):
    """Same manifest, both engines, two cleans (the second after delete.retention.ms,
    KIP-534: the tombstones stamped by the first go): every uploaded object and the
    manifests agree, and the remote log reads back the table a consumer must see."""
    logs, plog, tier, local, clock, want = tiered(tmp_path, fill_mixed)
    logs.close()
    twin_url = (tmp_path / "twin").as_uri()
    shutil.copytree(tmp_path / "remote", tmp_path / "twin")
    twin = tier_of(twin_url)
    remote = spark_cleaner(twin, twin_url, clock, spark, single_task_bytes)
    before = tier.metadata.load_partition(TOPIC, 0)
    assert before.value.producer_snapshot is not None
    assert any(".txnindex" in s.files for s in before.value.segments)
    for round_ in range(2):
        a = local.clean(tier.metadata.load_partition(TOPIC, 0), CONFIGS, 0)
        uploaded = twin.segments.stats.snapshot().bytes_uploaded
        b = remote.clean(twin.metadata.load_partition(TOPIC, 0), CONFIGS, 0)
        assert a is not None and b is not None
        # the executors' uploads are counted in the broker's metrics
        up = sum(f.size for s in b.cleaned for f in s.files.values())
        assert twin.segments.stats.snapshot().bytes_uploaded - uploaded == up
        ma, mb = a.manifest.value, b.manifest.value
        assert shape(ma) == shape(mb)
        assert all_objects(tier, ma) == all_objects(twin, mb)
        assert remote_state(twin, mb) == want
        if round_ == 0:
            assert any(s.delete_horizon_ms > 0 for s in mb.segments)  # tombstones stamped
            clock.advance(2000)  # past delete.retention.ms (1000)
            for t, v in ((tier, a.manifest), (twin, b.manifest)):
                m = v.value
                t.metadata.commit_partition(m.next(m.segments, clean_point=0), v)
    tombstones = [
        r.key
        for s in mb.segments
        for b in iter_batches(twin.segments.fetch_file(s, LOG_SUFFIX))
        for r in b.records()
        if r.value is None
    ]
    assert tombstones == []  # past their horizon: gone


def test_nothing_to_clean_commits_nothing(spark, tmp_path: Path):
    """A clean range (clean point at the end) below min.cleanable.dirty.ratio is not
    cleaned unless forced (Kafka's cleanableRatio rule from the manifest's clean point)."""
    logs, plog, tier, local, clock, want = tiered(tmp_path, fill_mixed)
    logs.close()
    url = (tmp_path / "remote").as_uri()
    remote = spark_cleaner(tier, url, clock, spark)
    first = remote.clean(tier.metadata.load_partition(TOPIC, 0), CONFIGS, 0)
    assert first is not None
    v = tier.metadata.load_partition(TOPIC, 0)
    assert remote.clean(v, CONFIGS, 0, force=False) is None
    assert tier.metadata.load_partition(TOPIC, 0).value.generation == v.value.generation


def test_a_remote_log_start_inside_a_segment_matches_the_in_process_clean(spark, tmp_path: Path):
    """DeleteRecords moved the remote log start into a segment (Kafka's
    ``logStartOffset``): both engines keep that start and upload the same bytes."""
    logs, plog, tier, local, clock, want = tiered(tmp_path, feed)
    start = tier.metadata.load_partition(TOPIC, 0).value.segments[1].base_offset + 3
    Tiering(logs, tier).move_remote_start(plog, start)
    logs.close()
    twin, a, b = both_engines(tmp_path, tier, local, clock, spark)
    assert b.manifest.value.log_start_offset == start
    assert shape(a.manifest.value) == shape(b.manifest.value)
    assert all_objects(tier, a.manifest.value) == all_objects(twin, b.manifest.value)


def test_min_compaction_lag_bounds_both_engines_alike(spark, tmp_path: Path):
    """``min.compaction.lag.ms`` (Kafka's cleanableOffsets): the segments whose newest
    record is younger than the lag are not cleaned; the Spark engine, planning from the
    manifest's timestamps, stops at the same offset and uploads the same bytes."""

    def fill(plog) -> dict[bytes, bytes]:
        for i in range(300):
            append(plog, [(b"k%d" % (i % 13), b"v%d-" % i + b"x" * 20)])
            plog.clock.advance(10)
        plog.roll()
        return {}

    configs = {**CONFIGS, "min.compaction.lag.ms": "1500"}
    logs, plog, tier, local, clock, _want = tiered(tmp_path, fill)
    logs.close()
    twin, a, b = both_engines(tmp_path, tier, local, clock, spark, configs)
    m = b.manifest.value
    assert 0 < m.clean_point < m.end_offset  # the young segments are left dirty
    assert shape(a.manifest.value) == shape(m)
    assert all_objects(tier, a.manifest.value) == all_objects(twin, m)


def test_a_last_segment_without_snapshot_replays_from_an_older_one_like_the_log(
    spark, tmp_path: Path
):
    """The last remote segment has no ``.snapshot``: both engines rebuild the producer
    state as Kafka's ``LogLoader.rebuildProducerState`` does, from the newest snapshot
    at or below the end and the batches after it. An idempotent producer seen only after
    that snapshot keeps its last batch (KIP-360) in both, emptied by a later value."""

    def fill(plog) -> dict[bytes, bytes]:
        with plog.lock:
            assert plog.producers.keep_snapshots  # a producer snapshot at each roll
        for i in range(200):
            append(plog, [(b"k%d" % (i % 13), b"v%d-" % i + b"x" * 20)])
        plog.roll()
        append(
            plog,
            [(b"p", b"idem")],
            producer_id=300,
            producer_epoch=0,
            base_sequence=0,
            compression=codecs.GZIP,
        )
        for i in range(20):
            append(plog, [(b"p", b"plain%d" % i), (b"k%d" % (i % 13), b"w%d" % i)])
        plog.roll()
        return {}

    logs, plog, tier, local, clock, _want = tiered(tmp_path, fill)
    logs.close()
    v = tier.metadata.load_partition(TOPIC, 0)
    m = v.value
    last = m.segments[-1]
    assert SNAPSHOT_SUFFIX in last.files and SNAPSHOT_SUFFIX in m.segments[-2].files
    files = {k: f for k, f in last.files.items() if k != SNAPSHOT_SUFFIX}
    tier.metadata.commit_partition(m.next((*m.segments[:-1], replace(last, files=files))), v)
    twin, a, b = both_engines(tmp_path, tier, local, clock, spark)
    kept = [
        bt.header
        for s in a.manifest.value.segments
        for bt in iter_batches(tier.segments.fetch_file(s, LOG_SUFFIX))
        if bt.header.producer_id == 300
    ]
    assert [h.record_count for h in kept] == [0]  # the producer's last batch, emptied
    assert shape(a.manifest.value) == shape(b.manifest.value)
    assert all_objects(tier, a.manifest.value) == all_objects(twin, b.manifest.value)
