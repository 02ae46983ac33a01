"""Record timestamps on append, following Kafka's ``LogValidator`` (KIP-937, KIP-1030).

A CreateTime topic refuses a batch with any record stamped outside
``[now - message.timestamp.before.max.ms, now + message.timestamp.after.max.ms]``
(INVALID_TIMESTAMP, every offending record listed); a LogAppendTime topic stamps each
batch with the append time. Either way the batch's maxTimestamp is the broker's, so the
time index and time retention cannot be steered by a producer's header.
"""

from __future__ import annotations

import pytest

from kompakt.errors import InvalidRecordError, InvalidTimestampError
from kompakt.record import codecs
from kompakt.record.decode import Record, iter_batches
from kompakt.record.encode import build_batch, build_simple_batch
from kompakt.record.header import CREATE_TIME, LOG_APPEND_TIME

HOUR = 3_600_000
YEAR_2100 = 4_102_444_800_000


def batch_of(timestamps, *, keys=None, codec=codecs.NONE, timestamp_type=CREATE_TIME, **kw):
    keys = keys or [b"k%d" % i for i in range(len(timestamps))]
    recs = [
        Record(i, ts, k, b"v", []) for i, (ts, k) in enumerate(zip(timestamps, keys, strict=True))
    ]
    return build_batch(recs, compression=codec, timestamp_type=timestamp_type, **kw)


def stored(plog):
    return list(plog.iter_batches())


@pytest.mark.parametrize("codec", [codecs.NONE, codecs.ZSTD])
def test_future_timestamp_beyond_after_max_is_refused_with_each_record_named(manager, clock, codec):
    """Kafka LogValidator.validateTimestamp: the default after.max.ms is 1 h (KIP-1030);
    records 1 and 3 of 4 are in the year 2100, so the batch is refused and both listed."""
    manager.create_topic("t", 1)
    plog = manager.get_log("t", 0)
    now = clock.now
    with pytest.raises(InvalidTimestampError) as err:
        plog.append(batch_of([now, YEAR_2100, now - 5, YEAR_2100], codec=codec))
    assert err.value.error_code == 32
    assert [i for i, _m in err.value.record_errors] == [1, 3]
    assert (
        f"Timestamp {YEAR_2100} of message with offset 1 is out of range"
        in (err.value.record_errors[0][1])
    )
    assert f"[{now - (2**63 - 1)}, {now + HOUR}]" in err.value.record_errors[0][1]
    assert plog.log_end_offset == 0 and plog.size_bytes() == 0


def test_after_max_bound_is_inclusive_and_before_max_applies_to_the_past(manager, clock):
    """``now - ts > before`` or ``ts - now > after`` is invalid; the bounds themselves pass."""
    manager.create_topic(
        "t",
        1,
        {"message.timestamp.before.max.ms": "60000", "message.timestamp.after.max.ms": "1000"},
    )
    plog = manager.get_log("t", 0)
    now = clock.now
    plog.append(batch_of([now - 60000, now + 1000]))
    with pytest.raises(InvalidTimestampError) as err:
        plog.append(batch_of([now - 60001, now, now + 1001]))
    assert [i for i, _m in err.value.record_errors] == [0, 2]
    assert plog.log_end_offset == 2


def test_broker_default_log_message_timestamp_after_max_ms_applies(tmp_path, clock):
    """The broker's log.message.timestamp.after.max.ms is the default of topics without
    their own value (Kafka's ServerTopicConfigSynonyms)."""
    from kompakt.log.manager import LogManager

    with LogManager(tmp_path / "d", {"log.message.timestamp.after.max.ms": "10"}, clock=clock) as m:
        m.create_topic("t", 1)
        with pytest.raises(InvalidTimestampError):
            m.get_log("t", 0).append(batch_of([clock.now + 11]))
        m.create_topic("loose", 1, {"message.timestamp.after.max.ms": str(2**63 - 1)})
        m.get_log("loose", 0).append(batch_of([YEAR_2100]))


def test_record_without_timestamp_is_not_range_checked(manager):
    """Kafka checks only records whose timestamp is not NO_TIMESTAMP (-1)."""
    manager.create_topic("t", 1, {"message.timestamp.before.max.ms": "0"})
    manager.get_log("t", 0).append(batch_of([-1, -1]))


def test_null_keys_on_compacted_topic_are_named_by_their_own_index(manager, clock):
    """Kafka LogValidator.validateKey: each keyless record is a RecordError with its index,
    not batch index 0 (KIP-467)."""
    manager.create_topic("t", 1, {"cleanup.policy": "compact"})
    plog = manager.get_log("t", 0)
    keys = [b"a", b"b", b"c", None, b"e"]
    with pytest.raises(InvalidRecordError) as err:
        plog.append(batch_of([clock.now] * 5, keys=keys))
    assert not isinstance(err.value, InvalidTimestampError)
    assert err.value.error_code == 87
    assert [i for i, _m in err.value.record_errors] == [3]
    assert "Compacted topic cannot accept message without key" in err.value.record_errors[0][1]
    assert "due to 1 record errors in total" in str(err.value)
    assert plog.log_end_offset == 0


def test_key_and_timestamp_errors_together_are_invalid_timestamp(manager, clock):
    """Kafka processRecordErrors: any timestamp error makes the batch INVALID_TIMESTAMP;
    each record reports its first problem (the key before the timestamp)."""
    manager.create_topic("t", 1, {"cleanup.policy": "compact"})
    with pytest.raises(InvalidTimestampError) as err:
        manager.get_log("t", 0).append(
            batch_of([clock.now, YEAR_2100, YEAR_2100], keys=[None, None, b"c"])
        )
    errors = dict(err.value.record_errors)
    assert sorted(errors) == [0, 1, 2]
    assert "without key" in errors[0] and "without key" in errors[1]
    assert "out of range" in errors[2]


def test_indexes_count_records_across_batches_of_one_request(manager, clock):
    """Two batches in one record set: the index is the record's position in the set."""
    manager.create_topic("t", 1)
    data = batch_of([clock.now, clock.now]) + batch_of([clock.now, YEAR_2100])
    with pytest.raises(InvalidTimestampError) as err:
        manager.get_log("t", 0).append(data)
    assert [i for i, _m in err.value.record_errors] == [3]


def test_create_time_batch_max_timestamp_is_the_largest_record_timestamp(manager, clock):
    """Kafka's LogValidator sets maxTimestamp from the records (setMaxTimestamp), so a
    header claiming the year 2100 cannot keep a segment from time retention."""
    manager.create_topic("t", 1)
    plog = manager.get_log("t", 0)
    now = clock.now
    info = plog.append(batch_of([now - 10, now - 20], max_timestamp=YEAR_2100))
    assert info.max_timestamp == now - 10
    [b] = stored(plog)
    b.ensure_valid()  # CRC recomputed
    assert b.header.max_timestamp == now - 10
    assert plog.active_segment.max_timestamp == now - 10


def test_log_append_time_overwrites_max_timestamp_sets_type_bit_and_crc(manager, clock):
    """Kafka LogValidator with LogAppendTime: maxTimestamp = now, the timestamp-type bit
    set, the CRC recomputed; every record reads back with the append time; the time
    index points at it."""
    manager.create_topic("t", 1, {"message.timestamp.type": "LogAppendTime"})
    plog = manager.get_log("t", 0)
    info = plog.append(batch_of([5, YEAR_2100, 7]))  # no range check with LogAppendTime
    assert info.log_append_time == clock.now == info.max_timestamp
    [b] = stored(plog)
    b.ensure_valid()
    assert b.header.timestamp_type == LOG_APPEND_TIME
    assert b.header.max_timestamp == clock.now
    assert [r.timestamp for r in b.records()] == [clock.now] * 3
    assert plog.offset_for_timestamp(clock.now) == (0, clock.now)
    assert plog.offset_for_timestamp(clock.now + 1) is None


def test_log_append_time_with_topic_compression_recompresses_and_stamps(manager, clock):
    manager.create_topic(
        "t", 1, {"message.timestamp.type": "LogAppendTime", "compression.type": "gzip"}
    )
    plog = manager.get_log("t", 0)
    plog.append(batch_of([1, 2]))
    [b] = stored(plog)
    b.ensure_valid()
    assert b.header.compression == codecs.GZIP
    assert b.header.timestamp_type == LOG_APPEND_TIME
    assert [r.timestamp for r in b.records()] == [clock.now] * 2


def test_producer_may_not_set_log_append_time_on_a_log_append_time_topic(manager, clock):
    """Kafka validateTimestamp: "Producer should not set timestamp type to LogAppendTime"."""
    manager.create_topic("t", 1, {"message.timestamp.type": "LogAppendTime"})
    with pytest.raises(InvalidTimestampError) as err:
        manager.get_log("t", 0).append(batch_of([1, 2], timestamp_type=LOG_APPEND_TIME))
    assert [i for i, _m in err.value.record_errors] == [0, 1]
    assert "LogAppendTime" in err.value.record_errors[0][1]


def test_simple_batch_at_now_still_appends(manager, clock):
    """The common case stays untouched: a producer stamping now."""
    manager.create_topic("t", 1)
    info = manager.get_log("t", 0).append(build_simple_batch([(b"k", b"v")], timestamp=clock.now))
    assert info.first_offset == 0
    assert next(iter_batches(manager.get_log("t", 0).read(0, 1000))).header.max_timestamp == (
        clock.now
    )


@pytest.mark.parametrize("codec", [codecs.NONE, codecs.GZIP, codecs.ZSTD])
def test_offset_for_timestamp_finds_the_first_record_at_or_after_in_any_batch(
    manager, clock, codec
):
    """Kafka's ``LogSegment.findOffsetByTimestamp``: the first record whose timestamp is
    at least the target, within the first batch whose maxTimestamp is, records out of
    order inside a batch included."""
    manager.create_topic("t", 1, {"message.timestamp.before.max.ms": str(10 * HOUR)})
    plog = manager.get_log("t", 0)
    now = clock.now
    plog.append(batch_of([now - 50, now - 10, now - 30], codec=codec))
    plog.append(batch_of([now - 5, now - 1], codec=codec))
    assert plog.offset_for_timestamp(now - 60) == (0, now - 50)
    assert plog.offset_for_timestamp(now - 20) == (1, now - 10)
    assert plog.offset_for_timestamp(now - 10) == (1, now - 10)
    assert plog.offset_for_timestamp(now - 9) == (3, now - 5)
    assert plog.offset_for_timestamp(now) is None


def test_offset_for_timestamp_streams_a_batch_expanding_to_hundreds_of_mib(manager, clock):
    """A ListOffsets by time walks a batch a chunk at a time, as Kafka's record iterator
    streams it: a few KiB of zstd holding a 256 MiB value took twice that per request."""
    import tracemalloc

    manager.create_topic("t", 1, {"max.message.bytes": "1000000"})
    plog = manager.get_log("t", 0)
    big = [
        Record(0, clock.now - 2, b"w", b"\0" * (256 << 20), []),
        Record(1, clock.now, b"k", b"v", []),
    ]
    plog.append(build_batch(big, compression=codecs.ZSTD))
    tracemalloc.start()
    try:
        found = plog.offset_for_timestamp(clock.now - 1)
        _now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert found == (1, clock.now) and peak < 16 << 20
