"""Retention and the active segment, as Kafka's ``UnifiedLog.deleteOldSegments`` /
``deletableSegments`` / ``deleteSegments`` (mirrors ``UnifiedLogTest``'s
``shouldDeleteTimeBasedSegmentsReadyToBeDeleted``, ``testRetentionIdempotency``,
``testRetentionDeletesProducerStateSnapshots`` and
``shouldDeleteSegmentsReadyToBeDeletedWhenCleanupPolicyIsCompactAndDelete``)."""

from __future__ import annotations

import pytest

from kompakt.errors import OffsetOutOfRangeError
from kompakt.record.encode import build_simple_batch


def batch(key: bytes, ts: int, value: bytes = b"v") -> bytes:
    return build_simple_batch([(key, value)], timestamp=ts)


@pytest.mark.parametrize("policy", ["delete", "compact,delete"])
def test_retention_ms_deletes_an_expired_active_segment_and_rolls_a_new_one(manager, clock, policy):
    """UnifiedLog.deletableSegments: the last segment is deletable when the retention-ms
    predicate holds and it is not empty; deleteSegments rolls first ("we must always
    have at least one segment"), so log start becomes the log end."""
    manager.create_topic(
        "t", 1, {"cleanup.policy": policy, "retention.ms": "5000", "file.delete.delay.ms": "0"}
    )
    plog = manager.get_log("t", 0)
    for i in range(3):
        plog.append(batch(b"k%d" % i, clock.now))
    assert len(plog.segments) == 1
    clock.advance(5000)  # not yet past: now - largestTimestamp > retention.ms
    assert plog.apply_retention() == 0
    clock.advance(15_000)
    assert plog.apply_retention() == 1
    assert plog.log_start_offset == plog.log_end_offset == 3
    assert len(plog.segments) == 1
    assert plog.active_segment.base_offset == 3 and plog.active_segment.size == 0
    assert sorted(p.name for p in plog.dir.glob("*.log")) == ["00000000000000000003.log"]
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(0, 1 << 20)
    # the empty active segment that replaced it is never deleted (isLastSegmentAndEmpty)
    clock.advance(60_000)
    assert plog.apply_retention() == 0
    # and the log goes on at the end offset
    assert plog.append(batch(b"k", clock.now)).first_offset == 3


def test_retention_ms_keeps_the_active_segment_while_its_newest_record_is_young(manager, clock):
    """The predicate is on the segment's largest timestamp, not its first record."""
    manager.create_topic(
        "t", 1, {"segment.bytes": "150", "retention.ms": "5000", "file.delete.delay.ms": "0"}
    )
    plog = manager.get_log("t", 0)
    for _ in range(4):
        plog.append(batch(b"k", clock.now, b"v" * 50))
    clock.advance(10_000)
    plog.append(batch(b"k", clock.now, b"v" * 50))  # a young record in the active segment
    segs = len(plog.segments)
    assert segs > 2
    assert plog.apply_retention() == segs - 1
    assert plog.segments == [plog.active_segment]
    assert plog.log_start_offset == plog.active_segment.base_offset == 4


def test_retention_ms_after_log_start_unblocks_like_kafka_retention_idempotency(manager, clock):
    """UnifiedLogTest.testRetentionIdempotency: three one-record segments, the first and
    last with a future timestamp; log start at 1 lets the first go, the expired second
    goes, the young third (active) stays; a second pass deletes nothing."""
    manager.create_topic("t", 1, {"retention.ms": "900", "file.delete.delay.ms": "0"})
    plog = manager.get_log("t", 0)
    plog.append(batch(b"a", clock.now + 100))
    plog.roll()
    plog.append(batch(b"b", clock.now))
    plog.roll()
    plog.append(batch(b"c", clock.now + 100))
    clock.advance(901)
    # kompakt's DeleteRecords deletes the start-breached segment 0 at once; Kafka's
    # maybeIncrementLogStartOffset leaves that to the next deleteOldSegments
    plog.delete_records_before(1)
    assert len(plog.segments) == 2
    assert plog.apply_retention() == 1
    assert plog.apply_retention() == 0
    assert plog.log_start_offset == 2


def test_retention_bytes_keeps_the_active_segment_unless_zero(manager, clock):
    """deleteRetentionSizeBreachedSegments: a segment goes while the log stays at least
    retention.bytes without it, so the active segment goes only with retention.bytes=0
    (testRetentionDeletesProducerStateSnapshots: log start 3 after deleteOldSegments)."""
    manager.create_topic("t", 1, {"retention.bytes": "1", "file.delete.delay.ms": "0"})
    plog = manager.get_log("t", 0)
    plog.append(batch(b"a", clock.now))
    plog.roll()
    plog.append(batch(b"b", clock.now))
    plog.roll()
    plog.append(batch(b"c", clock.now))
    assert plog.apply_retention() == 2
    assert plog.log_start_offset == 2 and len(plog.segments) == 1

    manager.create_topic("z", 1, {"retention.bytes": "0", "file.delete.delay.ms": "0"})
    z = manager.get_log("z", 0)
    z.append(batch(b"a", clock.now))
    z.roll()
    z.append(batch(b"b", clock.now))
    z.roll()
    z.append(batch(b"c", clock.now))
    assert z.apply_retention() == 3
    assert z.log_start_offset == z.log_end_offset == 3
    assert len(z.segments) == 1 and z.active_segment.size == 0


def test_compact_only_topic_keeps_an_expired_active_segment(manager, clock):
    """shouldNotDeleteSegmentsWhenPolicyDoesNotIncludeDelete."""
    manager.create_topic("c", 1, {"cleanup.policy": "compact", "retention.ms": "1"})
    plog = manager.get_log("c", 0)
    plog.append(batch(b"k", clock.now))
    clock.advance(10_000)
    assert plog.apply_retention() == 0
    assert plog.log_start_offset == 0


def test_expired_active_segment_survives_restart_with_log_start_at_end(tmp_path, clock):
    """The log start offset retention reached is checkpointed and reloaded."""
    from kompakt.log.manager import LogManager

    m = LogManager(tmp_path / "d", clock=clock)
    m.create_topic("t", 1, {"retention.ms": "5000", "file.delete.delay.ms": "0"})
    plog = m.get_log("t", 0)
    for i in range(3):
        plog.append(batch(b"k%d" % i, clock.now))
    clock.advance(20_000)
    assert m.apply_retention() == 1
    m.close()
    m = LogManager(tmp_path / "d", clock=clock)
    try:
        plog = m.get_log("t", 0)
        assert plog.log_start_offset == plog.log_end_offset == 3
    finally:
        m.close()


def test_idle_topic_expires_on_a_running_broker_watermarks_via_list_offsets(tmp_path):
    """The broker's retention thread on an idle topic: ListOffsets (confluent-kafka's
    get_watermark_offsets) reports low == high == 3 once the three records expire."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic
    from shared_kit import wait_for

    from kompakt.broker.app import start_test_broker

    b = start_test_broker(tmp_path / "d", **{"log.retention.check.interval.ms": "200"})
    try:
        a = AdminClient({"bootstrap.servers": b.bootstrap})
        cfg = {"retention.ms": "1000", "file.delete.delay.ms": "0"}
        a.create_topics([NewTopic("idle", 1, 1, config=cfg)])["idle"].result(10)
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0})
        for i in range(3):
            p.produce("idle", key=b"k%d" % i, value=b"v")
        assert p.flush(10) == 0
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "wm"})
        try:
            tp = TopicPartition("idle", 0)
            wait_for(
                lambda: c.get_watermark_offsets(tp, timeout=10) == (3, 3),
                "retention to empty the idle partition (watermarks (3, 3))",
                20,
            )
        finally:
            c.close()
    finally:
        b.stop()
