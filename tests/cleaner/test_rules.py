"""Kafka's record- and batch-level cleaner rules (``Cleaner.shouldRetainRecord``,
``checkBatchRetention``, ``MemoryRecords.filterTo``, KIP-534 delete horizons)."""

from __future__ import annotations

import pytest
from cleaner_kit import T0, append, dir_bytes, fold, headers, leftovers, records

from kompakt.cleaner import Cleaner, LocalEngine
from kompakt.record import codecs
from kompakt.record.header import DELETE_HORIZON_BIT

COMPACT = {"cleanup.policy": "compact", "delete.retention.ms": "1000"}


def compacted(manager, topic="t", **extra):
    manager.create_topic(
        topic, 1, {**COMPACT, **{k.replace("_", "."): v for k, v in extra.items()}}
    )
    return manager.get_log(topic, 0)


# -- 1. partial cleans -----------------------------------------------------------------------


def test_partial_clean_with_small_offset_map(manager):
    """Kafka LogCleanerTest.testPartialSegmentClean / testCleaningWithKeysConflictingWithTxnMarkers:
    a full ``SkimpyOffsetMap`` (size >= slots * load factor) ends the pass at
    ``map.latestOffset``; later passes finish the rest (Cleaner.buildOffsetMap)."""
    pl = compacted(manager, segment_bytes="300")
    model = {}
    for rnd in range(4):
        for k in range(10):
            key, val = b"k%02d" % k, b"v%d-%d" % (rnd, k)
            append(pl, [(key, val)])
            model[key] = val
    pl.roll()
    engine = LocalEngine(4 * 24)  # 4 slots, 3 entries at load factor 0.9
    assert engine.map.max_entries == 3
    c = Cleaner(manager, engine=engine)
    checkpoints = []
    passes = []
    for _ in range(40):
        stats = c.clean_partition(pl)
        if stats is None:
            break
        passes.append(stats)
        checkpoints.append(manager.cleaner_checkpoint().read()[("t", 0)])
        assert stats.map_entries <= 3
        assert fold(pl) == model
    assert len(passes) > 3
    assert all(s.partial for s in passes[:-1])
    assert not passes[-1].partial
    assert checkpoints == sorted(checkpoints) and len(set(checkpoints)) == len(checkpoints)
    assert checkpoints[-1] == pl.log_end_offset
    recs = records(pl)
    assert sorted(r.key for r in recs) == sorted(model)
    assert {r.key: r.value for r in recs} == model


# -- 2. tombstones and delete horizons -------------------------------------------------------


def test_tombstone_delete_horizon_kip534(manager, clock):
    """KIP-534 / Kafka LogCleanerTest.testDeleteHorizon (Cleaner.shouldRetainRecord): the
    first clean keeps a tombstone and stamps its batch with horizon = now +
    delete.retention.ms (attribute bit 0x40, baseTimestamp = horizon, record timestamps
    unchanged); cleans before the horizon keep it; a clean at the horizon removes it."""
    pl = compacted(manager)
    ts = T0 - 5000
    append(pl, [(b"a", b"1"), (b"b", b"1")], ts=ts)
    append(pl, [(b"a", None), (b"c", b"1")], ts=ts + 1)
    pl.roll()
    c = Cleaner(manager)
    c.clean_partition(pl)
    hs = headers(pl)
    tomb_batch = [h for h in hs if h.base_offset == 2][0]
    horizon = clock() + 1000
    assert tomb_batch.attributes & DELETE_HORIZON_BIT
    assert tomb_batch.has_delete_horizon and tomb_batch.delete_horizon == horizon
    assert tomb_batch.base_timestamp == horizon
    by_off = {r.offset: r for r in records(pl)}
    assert by_off[2].value is None and by_off[2].timestamp == ts + 1
    assert by_off[3].timestamp == ts + 1
    assert 0 not in by_off and by_off[1].timestamp == ts
    assert fold(pl) == {b"b": b"1", b"c": b"1"}

    clock.advance(999)
    append(pl, [(b"d", b"1")])
    pl.roll()
    stats = c.clean_partition(pl)
    assert stats is not None and stats.tombstones_removed == 0
    by_off = {r.offset: r for r in records(pl)}
    assert by_off[2].value is None
    assert [h for h in headers(pl) if h.base_offset == 2][0].delete_horizon == horizon

    clock.advance(1)
    append(pl, [(b"e", b"1")])
    pl.roll()
    stats = c.clean_partition(pl)
    assert stats.tombstones_removed == 1
    by_off = {r.offset: r for r in records(pl)}
    assert 2 not in by_off and by_off[3].value == b"1"
    assert fold(pl) == {b"b": b"1", b"c": b"1", b"d": b"1", b"e": b"1"}


# -- 4. unkeyed records ----------------------------------------------------------------------


def test_unkeyed_records_removed_after_policy_change(manager):
    """Kafka Cleaner.shouldRetainRecord: a record without a key cannot be compacted and is
    discarded (counted as invalid; LogCleanerTest.testCleanSegmentsWithUnkeyedMessages...)."""
    manager.create_topic("t", 1, {"cleanup.policy": "delete"})
    pl = manager.get_log("t", 0)
    append(pl, [(None, b"x"), (b"a", b"1"), (None, b"y")])
    append(pl, [(None, b"z")])
    append(pl, [(b"b", b"1")])
    pl.roll()
    manager.alter_topic_config("t", {"cleanup.policy": "compact"})
    stats = Cleaner(manager).clean_partition(pl)
    assert stats.unkeyed_removed == 3
    recs = records(pl)
    assert [(r.offset, r.key) for r in recs] == [(1, b"a"), (4, b"b")]


# -- 5. producer state -----------------------------------------------------------------------


def test_retain_empty_last_batch_of_producer(manager, clock):
    """Kafka Cleaner.checkBatchRetention / LogCleanerTest.testEmptyBatchRemovalWithSequenceReuse:
    a producer's last batch stays as a header-only batch (count 0, same base and last
    offset, baseTimestamp -1) when all its records are superseded; its earlier batches go."""
    pl = compacted(manager)
    now = clock()
    p = {"producer_id": 7, "producer_epoch": 3}
    append(pl, [(b"a", b"p1")], ts=now, base_sequence=0, **p)
    append(pl, [(b"b", b"p2"), (b"c", b"p2")], ts=now, base_sequence=1, **p)
    append(pl, [(b"a", b"n"), (b"b", b"n"), (b"c", b"n")], ts=now)
    pl.roll()
    before = {h.base_offset: h for h in headers(pl)}
    Cleaner(manager).clean_partition(pl)
    hs = {h.base_offset: h for h in headers(pl)}
    assert 0 not in hs
    empty = hs[1]
    assert empty.record_count == 0
    assert (empty.base_offset, empty.last_offset) == (1, 2)
    assert empty.base_timestamp == -1
    assert (empty.producer_id, empty.producer_epoch, empty.base_sequence) == (7, 3, 1)
    assert empty.attributes == before[1].attributes
    assert fold(pl) == {b"a": b"n", b"b": b"n", b"c": b"n"}


# -- 6. verbatim copy and rebuilt batches ----------------------------------------------------


@pytest.mark.parametrize("codec", [codecs.NONE, codecs.GZIP, codecs.ZSTD])
def test_rebuilt_batch_keeps_last_offset_codec_producer_fields(manager, clock, codec):
    """Kafka MemoryRecords.filterTo / buildRetainedRecordsInto: a batch with nothing dropped
    is copied as is; a rebuilt one keeps its lastOffset, codec and producer fields
    (LogCleanerTest.testCleanSegmentsWithConcurrentSegmentDeletion, testPartialSegmentClean)."""
    pl = compacted(manager)
    now = clock()
    p = {"producer_id": 11, "producer_epoch": 2, "compression": codec}
    append(pl, [(b"a", b"1"), (b"b", b"1"), (b"c", b"1")], ts=now, base_sequence=0, **p)
    append(pl, [(b"x", b"1"), (b"y", b"1")], ts=now, base_sequence=3, **p)
    append(pl, [(b"c", b"2")], ts=now + 5, compression=codec)
    pl.roll()
    raw_before = {b.header.base_offset: bytes(b.buffer) for b in pl.iter_batches()}
    stats = Cleaner(manager).clean_partition(pl)
    after = {b.header.base_offset: b for b in pl.iter_batches()}
    assert bytes(after[3].buffer) == raw_before[3]
    assert bytes(after[5].buffer) == raw_before[5]
    assert stats.batches_copied == 2
    h = after[0].header
    assert h.compression == codec
    assert (h.base_offset, h.last_offset, h.record_count) == (0, 2, 2)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (11, 2, 0)
    assert h.partition_leader_epoch == 0
    after[0].ensure_valid()
    assert [(r.offset, r.key, r.timestamp) for r in after[0].records()] == [
        (0, b"a", now),
        (1, b"b", now),
    ]
    assert fold(pl) == {b"a": b"1", b"b": b"1", b"c": b"2", b"x": b"1", b"y": b"1"}


@pytest.mark.parametrize("codec", [codecs.GZIP, codecs.SNAPPY, codecs.LZ4, codecs.ZSTD])
def test_batches_expanding_past_what_a_scan_holds_clean_the_same(
    manager, clock, codec, monkeypatch
):
    """Kafka bounds a batch's compressed size only, so the cleaner walks a batch that
    expands past ``kompakt.record.scan.HELD`` a chunk at a time, and rebuilds it so
    (``stream_scan.retained_records``): with HELD a few bytes, every compressed batch
    takes that path, and the clean keeps what the in-memory clean keeps, record for
    record, tombstones stamped with their horizon alike."""
    from kompakt.cleaner import rewrite
    from kompakt.record import scan, stream_scan

    def build(pl):
        now = clock()
        for r in range(3):
            big = b"%d" % r * 3000  # records longer than the small chunk below
            items = [(b"a", big), (b"e%d" % r, big), (b"b", b"b%d" % r)]
            append(pl, items + [(b"c", None if r == 2 else big)], ts=now + r, compression=codec)
            append(pl, [(b"d%d" % r, b"d" * 2500)], ts=now + r, compression=codec)
        pl.roll()
        Cleaner(manager).clean_partition(pl)
        return [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in records(pl)], [
            h.delete_horizon for h in headers(pl)
        ]

    whole = build(compacted(manager, "whole"))
    monkeypatch.setattr(scan, "HELD", 10)
    monkeypatch.setattr(rewrite, "HELD", 10)
    monkeypatch.setattr(stream_scan, "CHUNK", 512)
    monkeypatch.setattr(stream_scan.retained_records, "__defaults__", (512,))
    monkeypatch.setattr(stream_scan.stream_columns, "__defaults__", (512,))
    streamed = []

    def counted(*args):
        streamed.append(args[0].header.base_offset)
        return stream_scan.retained_records(*args)

    monkeypatch.setattr(rewrite, "retained_records", counted)
    assert build(compacted(manager, "streamed")) == whole
    assert streamed  # the rebuilds took the streamed path


# -- 13. dry run -----------------------------------------------------------------------------


def test_dry_run_touches_nothing(manager):
    """kompakt's dry run of Kafka's Cleaner.doClean: same counts, no files or checkpoint."""
    pl = compacted(manager, segment_bytes="200")
    for i in range(20):
        append(pl, [(b"k%d" % (i % 4), b"v%d" % i)])
    append(pl, [(b"k0", None)])
    pl.roll()
    before = dir_bytes(pl.dir, (".log", ".index", ".timeindex"))
    c = Cleaner(manager)
    stats = c.clean_partition(pl, dry_run=True)
    assert dir_bytes(pl.dir, (".log", ".index", ".timeindex")) == before
    assert leftovers(pl.dir) == []
    assert ("t", 0) not in manager.cleaner_checkpoint().read()
    assert stats.dry_run
    assert stats.records_read == 21
    assert stats.records_written == 4  # k1..k3 and the k0 tombstone
    assert stats.bytes_read == sum(len(v) for k, v in before.items() if k.endswith(".log"))
    assert 0 < stats.bytes_written < stats.bytes_read
    real = c.clean_partition(pl)
    assert (real.records_read, real.records_written, real.bytes_written) == (
        stats.records_read,
        stats.records_written,
        stats.bytes_written,
    )
