"""Append, roll, read and retention of one partition, following Kafka's ``UnifiedLog`` rules."""

from __future__ import annotations

import os
import struct

import pytest

from kompakt.errors import (
    CorruptRecordError,
    InvalidRecordError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
)
from kompakt.log.manager import LogManager
from kompakt.record import codecs
from kompakt.record.decode import RecordBatch, iter_batches
from kompakt.record.encode import build_simple_batch


def batch(*kvs, ts=1_700_000_000_000, codec=codecs.NONE):
    return build_simple_batch(list(kvs), timestamp=ts, compression=codec)


def records_of(data: bytes):
    return [r for b in iter_batches(data) for r in b.records()]


def test_append_assigns_consecutive_offsets_and_tracks_leo_hw(manager):
    manager.create_topic("t", 1)
    plog = manager.get_log("t", 0)
    info = plog.append(batch((b"a", b"1"), (b"b", b"2")))
    assert (info.first_offset, info.last_offset) == (0, 1)
    info = plog.append(batch((b"c", b"3")))
    assert (info.first_offset, info.last_offset) == (2, 2)
    assert plog.log_end_offset == plog.high_watermark == 3
    assert [r.offset for r in records_of(plog.read(0, 1 << 20))] == [0, 1, 2]


def test_segment_files_use_kafka_20_digit_names(manager):
    manager.create_topic("t", 1, {"segment.bytes": "200"})
    plog = manager.get_log("t", 0)
    for i in range(10):
        plog.append(batch((b"k%d" % i, b"x" * 50)))
    names = sorted(p.name for p in plog.dir.iterdir() if p.suffix == ".log")
    assert names[0] == "00000000000000000000.log"
    assert len(names) > 2
    for n in names:
        base = int(n.split(".")[0])
        assert (plog.dir / f"{base:020d}.index").exists()
        assert (plog.dir / f"{base:020d}.timeindex").exists()


def test_roll_on_segment_bytes_never_splits_a_batch(manager):
    manager.create_topic("t", 1, {"segment.bytes": "300"})
    plog = manager.get_log("t", 0)
    for _i in range(20):
        plog.append(batch((b"k", b"v" * 100)))
    for seg in plog.segments:
        assert seg.size <= 300 or len(list(seg.iter_batches())) == 1
        total = sum(b.header.size for b in seg.iter_batches())
        assert total == seg.size


def test_roll_on_segment_ms_measured_from_first_batch_timestamp(manager, clock):
    manager.create_topic("t", 1, {"segment.ms": "1000"})
    plog = manager.get_log("t", 0)
    plog.append(batch((b"a", b"1"), ts=clock.now))
    clock.advance(500)
    plog.append(batch((b"a", b"1"), ts=clock.now))
    assert len(plog.segments) == 1
    clock.advance(600)
    plog.append(batch((b"a", b"1"), ts=clock.now))
    assert len(plog.segments) == 2 and plog.segments[1].base_offset == 2


def test_segment_jitter_is_capped_by_segment_ms_like_kafka(manager, clock):
    """Kafka's ``LogConfig.randomSegmentJitter``: ``hash % min(segment.jitter.ms,
    segment.ms)``. A jitter far above segment.ms once made the roll time negative, so
    every append rolled a segment."""
    manager.create_topic("j", 1, {"segment.ms": "1000", "segment.jitter.ms": str(10**15)})
    plog = manager.get_log("j", 0)
    assert 0 < plog.roll_ms() <= 1000
    for _ in range(5):
        plog.append(batch((b"a", b"1"), ts=clock.now))
    assert len(plog.segments) == 1
    clock.advance(1001)  # past segment.ms, whatever the jitter: rolls
    plog.append(batch((b"a", b"1"), ts=clock.now))
    assert len(plog.segments) == 2


def test_a_segment_ms_change_rolls_from_the_next_append_like_kafka(manager, clock):
    """Kafka's ``UnifiedLog.updateConfig``: a dynamic topic config change is used from
    the next append on (the roll time is worked out once per config, not kept)."""
    manager.create_topic("d", 1, {"segment.ms": str(10**9)})
    plog = manager.get_log("d", 0)
    plog.append(batch((b"a", b"1"), ts=clock.now))
    clock.advance(2000)
    plog.append(batch((b"a", b"1"), ts=clock.now))
    assert len(plog.segments) == 1
    manager.alter_topic_config("d", {"segment.ms": "1000"})
    plog.append(batch((b"a", b"1"), ts=clock.now))
    assert len(plog.segments) == 2


def test_compacted_topic_rolls_at_max_compaction_lag_like_kafka(manager, clock):
    manager.create_topic("c", 1, {"cleanup.policy": "compact", "max.compaction.lag.ms": "100"})
    plog = manager.get_log("c", 0)
    plog.append(batch((b"a", b"1"), ts=clock.now))
    clock.advance(150)
    plog.append(batch((b"a", b"2"), ts=clock.now))
    assert len(plog.segments) == 2


def test_roll_when_offset_index_is_full(manager):
    manager.create_topic("t", 1, {"segment.index.bytes": "24", "index.interval.bytes": "0"})
    plog = manager.get_log("t", 0)
    for _ in range(12):
        plog.append(batch((b"k", b"v")))
    assert len(plog.segments) > 1
    assert all(s.offset_index.entries <= 3 for s in plog.segments)


def test_roll_when_time_index_is_full_writes_its_final_entry_into_the_kept_slot(manager, clock):
    """Kafka's ``TimeIndex``: ``isFull`` keeps the last slot free, and the roll's
    ``maybeAppend(..., skipFullCheck = true)`` writes the segment's max timestamp into
    it. Was: the write refused the kept slot too, and every append after the time index
    filled failed with "index is full"."""
    cfg = {"segment.index.bytes": "36", "index.interval.bytes": "100"}
    manager.create_topic("t", 1, cfg)  # 3 time index slots, the last one kept
    plog = manager.get_log("t", 0)
    # a batch of one record is ~70 bytes: every second batch gets index entries; the
    # fifth fills the time index, and the sixth, in the same append, raises the max
    # timestamp past its last entry
    for i in range(4):
        plog.append(batch((b"k", b"v"), ts=clock.now + i))
    plog.append(batch((b"k", b"v"), ts=clock.now + 4) + batch((b"k", b"v"), ts=clock.now + 5))
    plog.append(batch((b"k", b"v"), ts=clock.now + 6))
    first = plog.segments[0]
    assert len(plog.segments) > 1
    assert first.time_index.entries == 3
    assert first.time_index.last_entry == (first.max_timestamp, first.next_offset - 1)


def test_read_mid_batch_returns_whole_batch_starting_before_offset(manager):
    manager.create_topic("t", 1)
    plog = manager.get_log("t", 0)
    plog.append(batch((b"a", b"1"), (b"b", b"2"), (b"c", b"3")))
    data = plog.read(1, 1 << 20)
    first = next(iter_batches(data))
    assert first.header.base_offset == 0


def test_read_respects_max_bytes_but_returns_one_batch_at_least(manager):
    manager.create_topic("t", 1)
    plog = manager.get_log("t", 0)
    for _ in range(5):
        plog.append(batch((b"k", b"v" * 100)))
    one = len(plog.read(0, 1 << 20)) // 5
    assert len(plog.read(0, one * 2 + 10)) == one * 2
    assert len(plog.read(0, 5)) == one
    assert plog.read(0, 5, min_one_batch=False) == b""
    assert plog.read(5, 100) == b""
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(6, 100)


def test_offset_index_lookup_used_for_reads_in_large_segment(manager):
    manager.create_topic("t", 1, {"index.interval.bytes": "100"})
    plog = manager.get_log("t", 0)
    for i in range(200):
        plog.append(batch((b"k%d" % i, b"v" * 30)))
    seg = plog.active_segment
    assert seg.offset_index.entries > 10
    off, pos = seg.offset_index.lookup(150)
    assert off <= 150 and pos > 0
    for target in (0, 1, 77, 150, 199):
        got = next(iter_batches(plog.read(target, 1000)))
        assert got.header.base_offset <= target <= got.header.last_offset


def test_list_offsets_by_timestamp_finds_first_record_at_or_after(manager):
    manager.create_topic("t", 1, {"index.interval.bytes": "10"})
    plog = manager.get_log("t", 0)
    for i in range(50):
        plog.append(batch((b"k", b"v"), ts=1000 + i * 10))
    assert plog.offset_for_timestamp(1000) == (0, 1000)
    assert plog.offset_for_timestamp(1205) == (21, 1210)
    assert plog.offset_for_timestamp(5000) is None
    assert plog.max_timestamp_offset() == (49, 1490)


def test_null_key_on_compacted_topic_is_refused_and_nothing_written(manager):
    manager.create_topic("c", 1, {"cleanup.policy": "compact"})
    plog = manager.get_log("c", 0)
    with pytest.raises(InvalidRecordError) as err:
        plog.append(batch((b"a", b"1"), (None, b"2")))
    assert err.value.error_code == 87
    assert plog.log_end_offset == 0 and plog.size_bytes() == 0


def test_null_key_is_fine_on_delete_topic(manager):
    manager.create_topic("d", 1)
    manager.get_log("d", 0).append(batch((None, b"2")))


def test_corrupt_batch_is_refused(manager):
    manager.create_topic("t", 1)
    data = bytearray(batch((b"a", b"1")))
    data[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        manager.get_log("t", 0).append(bytes(data))
    assert manager.get_log("t", 0).size_bytes() == 0


def test_batch_over_max_message_bytes_is_refused(manager):
    manager.create_topic("t", 1, {"max.message.bytes": "200"})
    with pytest.raises(RecordTooLargeError):
        manager.get_log("t", 0).append(batch((b"a", b"x" * 500)))


def test_log_append_time_rewrites_timestamps(manager, clock):
    manager.create_topic("t", 1, {"message.timestamp.type": "LogAppendTime"})
    info = manager.get_log("t", 0).append(batch((b"a", b"1"), ts=5))
    assert info.log_append_time == clock.now
    b = next(iter_batches(manager.get_log("t", 0).read(0, 1000)))
    b.ensure_valid()
    assert b.records()[0].timestamp == clock.now


def test_topic_compression_type_recompresses_batches(manager):
    manager.create_topic("t", 1, {"compression.type": "zstd"})
    manager.get_log("t", 0).append(batch((b"a", b"1" * 100)))
    b = next(iter_batches(manager.get_log("t", 0).read(0, 10000)))
    assert b.header.compression == codecs.ZSTD
    assert b.records()[0].value == b"1" * 100


def test_retention_ms_deletes_expired_segments_and_rolls_an_expired_active_one(manager, clock):
    """UnifiedLog.deleteSegments: all segments expired, the active one too, so a new
    empty active segment is rolled at the log end first (see test_retention_active)."""
    manager.create_topic(
        "t", 1, {"segment.bytes": "150", "retention.ms": "1000", "file.delete.delay.ms": "0"}
    )
    plog = manager.get_log("t", 0)
    for _ in range(6):
        plog.append(batch((b"k", b"v" * 50), ts=clock.now))
    segs = len(plog.segments)
    assert segs > 2
    clock.advance(5000)
    deleted = plog.apply_retention()
    assert deleted == segs
    assert len(plog.segments) == 1
    assert plog.log_start_offset == plog.active_segment.base_offset == plog.log_end_offset == 6
    assert not list(plog.dir.glob("*.deleted"))
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(0, 100)


def test_retention_bytes_deletes_oldest_segments_until_under_limit(manager):
    manager.create_topic(
        "t", 1, {"segment.bytes": "150", "retention.bytes": "300", "file.delete.delay.ms": "0"}
    )
    plog = manager.get_log("t", 0)
    for _ in range(8):
        plog.append(batch((b"k", b"v" * 50)))
    plog.apply_retention()
    assert plog.size_bytes() - plog.segments[0].size < 300 <= plog.size_bytes() + 1000
    assert plog.log_start_offset == plog.segments[0].base_offset > 0


def test_retention_is_not_applied_to_compact_only_topics(manager, clock):
    manager.create_topic(
        "c", 1, {"cleanup.policy": "compact", "segment.bytes": "150", "retention.ms": "1"}
    )
    plog = manager.get_log("c", 0)
    for _ in range(4):
        plog.append(batch((b"k", b"v" * 50), ts=clock.now))
    clock.advance(10_000)
    assert plog.apply_retention() == 0


def test_deleted_segments_go_through_deleted_suffix_and_wait_file_delete_delay(manager, clock):
    manager.create_topic(
        "t", 1, {"segment.bytes": "150", "retention.ms": "1000", "file.delete.delay.ms": "60000"}
    )
    plog = manager.get_log("t", 0)
    for _ in range(4):
        plog.append(batch((b"k", b"v" * 50), ts=clock.now))
    clock.advance(5000)
    plog.apply_retention()
    assert list(plog.dir.glob("*.log.deleted"))


def test_delete_records_moves_log_start_forward_only(manager):
    manager.create_topic("t", 1, {"segment.bytes": "150", "file.delete.delay.ms": "0"})
    plog = manager.get_log("t", 0)
    for _ in range(6):
        plog.append(batch((b"k", b"v" * 50)))
    assert plog.delete_records_before(3) == 3
    assert plog.delete_records_before(1) == 3
    assert plog.segments[0].base_offset <= 3
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(2, 100)
    with pytest.raises(OffsetOutOfRangeError):
        plog.delete_records_before(100)


def test_recovery_truncates_torn_tail_after_unclean_shutdown(tmp_path, clock):
    data = tmp_path / "d"
    m = LogManager(data, clock=clock)
    m.create_topic("t", 1)
    plog = m.get_log("t", 0)
    for i in range(5):
        plog.append(batch((b"k%d" % i, b"v" * 20)))
    path = plog.active_segment.log_path
    size = plog.active_segment.size
    m.flush_all()
    # simulate a crash: no clean-shutdown marker, then tear the last batch
    m._release_lock()
    with open(path, "r+b") as f:
        f.truncate(size - 7)
    m2 = LogManager(data, clock=clock)
    plog2 = m2.get_log("t", 0)
    assert plog2.log_end_offset == 4
    assert [r.key for r in records_of(plog2.read(0, 1 << 20))] == [b"k0", b"k1", b"k2", b"k3"]
    assert plog2.append(batch((b"x", b"y"))).first_offset == 4
    m2.close()


def test_recovery_truncates_at_bad_crc_and_drops_later_segments(tmp_path, clock):
    data = tmp_path / "d"
    m = LogManager(data, clock=clock)
    m.create_topic("t", 1, {"segment.bytes": "200"})
    plog = m.get_log("t", 0)
    for i in range(8):
        plog.append(batch((b"k%d" % i, b"v" * 60)))
    first = plog.segments[0]
    assert len(plog.segments) > 2
    m._release_lock()
    with open(first.log_path, "r+b") as f:
        f.seek(first.size - 3)
        f.write(b"\xff\xff\xff")
    m2 = LogManager(data, clock=clock)
    plog2 = m2.get_log("t", 0)
    assert len(plog2.segments) == 1
    assert all(b.is_valid() for b in plog2.iter_batches())
    m2.close()


def test_clean_shutdown_marker_skips_recovery_and_is_removed_on_open(tmp_path, clock):
    data = tmp_path / "d"
    m = LogManager(data, clock=clock)
    m.create_topic("t", 1)
    m.get_log("t", 0).append(batch((b"a", b"1")))
    m.close()
    assert (data / ".kafka_cleanshutdown").exists()
    m2 = LogManager(data, clock=clock)
    assert m2.was_clean_shutdown
    assert not (data / ".kafka_cleanshutdown").exists()
    assert m2.get_log("t", 0).log_end_offset == 1
    m2.close()


def test_missing_and_corrupt_index_files_are_rebuilt(tmp_path, clock):
    data = tmp_path / "d"
    m = LogManager(data, clock=clock)
    m.create_topic("t", 1, {"segment.bytes": "2000", "index.interval.bytes": "50"})
    plog = m.get_log("t", 0)
    for i in range(60):
        plog.append(batch((b"k%d" % i, b"v" * 40)))
    segs = [s.base_offset for s in plog.segments]
    m.close()
    d = data / "t-0"
    (d / f"{segs[0]:020d}.index").unlink()
    (d / f"{segs[1]:020d}.timeindex").unlink()
    with open(d / f"{segs[2]:020d}.index", "r+b") as f:
        f.write(struct.pack(">ii", 99999, 99999) * 3)
    m2 = LogManager(data, clock=clock)
    plog2 = m2.get_log("t", 0)
    for seg in plog2.segments:
        seg.sanity_check()
        assert seg.offset_index.entries > 0
    for target in range(0, 60, 7):
        got = next(iter_batches(plog2.read(target, 1000)))
        assert got.header.base_offset == target
    m2.close()


def test_indexes_are_preallocated_then_trimmed_on_roll_like_kafka(manager):
    manager.create_topic(
        "t",
        1,
        {"segment.bytes": "200", "segment.index.bytes": "4096", "index.interval.bytes": "10"},
    )
    plog = manager.get_log("t", 0)
    for _ in range(4):
        plog.append(batch((b"k", b"v" * 60)))
    active = plog.active_segment
    assert os.path.getsize(active.offset_index.path) == 4096
    sealed = plog.segments[0]
    assert os.path.getsize(sealed.offset_index.path) == sealed.offset_index.entries * 8
    assert os.path.getsize(sealed.time_index.path) == sealed.time_index.entries * 12


def test_appended_segments_parse_with_kafka_python_reader(manager):
    from kafka.record.default_records import DefaultRecordBatch

    manager.create_topic("t", 1)
    plog = manager.get_log("t", 0)
    for codec in (codecs.NONE, codecs.GZIP, codecs.SNAPPY, codecs.LZ4, codecs.ZSTD):
        plog.append(batch((b"k", b"v" * 30), codec=codec))
    path = plog.active_segment.log_path
    plog.close()  # the file at rest: a live segment's is written ahead of its size
    raw = path.read_bytes()
    pos, offsets = 0, []
    while pos < len(raw):
        length = struct.unpack_from(">i", raw, pos + 8)[0]
        kb = DefaultRecordBatch(raw[pos : pos + 12 + length])
        assert kb.validate_crc()
        offsets += [r.offset for r in kb]
        pos += 12 + length
    assert offsets == [0, 1, 2, 3, 4]
    assert RecordBatch.from_bytes(raw[: 12 + struct.unpack_from(">i", raw, 8)[0]]).is_valid()


def test_flush_messages_fsyncs_once_that_many_offsets_are_unflushed(manager):
    """UnifiedLog.append: ``if (unflushedMessages >= config.flushInterval) flush()``; the
    recovery point then moves to the log end offset."""
    manager.create_topic("t", 1, {"flush.messages": "3"})
    plog = manager.get_log("t", 0)
    plog.append(batch((b"a", b"1")))
    plog.append(batch((b"b", b"2")))
    assert plog.recovery_point == 0
    plog.append(batch((b"c", b"3")))
    assert plog.recovery_point == plog.log_end_offset == 3


def test_flush_ms_fsyncs_an_append_that_comes_that_long_after_the_last_flush(manager, clock):
    """LogManager.flushDirtyLogs: a log whose last flush is ``flush.ms`` old is flushed;
    kompakt checks it on append."""
    manager.create_topic("t", 1, {"flush.ms": "1000"})
    plog = manager.get_log("t", 0)
    plog.append(batch((b"a", b"1")))
    clock.advance(999)
    plog.append(batch((b"b", b"2")))
    assert plog.recovery_point == 0
    clock.advance(1)
    plog.append(batch((b"c", b"3")))
    assert plog.recovery_point == 3
    plog.append(batch((b"d", b"4")))  # the flush restarted the interval
    assert plog.recovery_point == 3


def test_default_flush_settings_leave_appends_to_the_periodic_flush(manager, clock):
    """flush.messages and flush.ms default to Long.MAX_VALUE, as Kafka's: however long
    between appends, the only flush is each roll's (segment.ms here), which moves the
    recovery point to the new segment's base (Kafka's roll: flushUptoOffsetExclusive)."""
    manager.create_topic("t", 1)
    plog = manager.get_log("t", 0)
    for i in range(5):
        clock.advance(10**9)
        plog.append(batch((b"k%d" % i, b"v")))
        assert plog.recovery_point == plog.active_segment.base_offset == i
    assert len(plog.segments) == 5
