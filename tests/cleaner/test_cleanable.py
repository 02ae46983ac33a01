"""Which part of a log the cleaner may touch and which log it picks
(Kafka ``LogCleanerManager.cleanableOffsets``, ``grabFilthiestCompactedLog``,
``Cleaner.groupSegmentsBySize``)."""

from __future__ import annotations

from cleaner_kit import append, dir_bytes, fold, records

from kompakt.cleaner import Cleaner, cleanable

COMPACT = {"cleanup.policy": "compact", "delete.retention.ms": "1000"}


def compacted(manager, topic="t", partitions=1, **extra):
    cfg = {**COMPACT, **{k.replace("_", "."): v for k, v in extra.items()}}
    manager.create_topic(topic, partitions, cfg)
    return manager.get_log(topic, 0)


def fill(pl, n, keys=4, start=0, ts=None):
    for i in range(start, start + n):
        append(pl, [(b"k%d" % (i % keys), b"v%d" % i)], ts=ts)


# -- 3. uncleanable section ------------------------------------------------------------------


def test_min_compaction_lag_keeps_recent_segments(manager, clock):
    """Kafka LogCleanerManager.cleanableOffsets (LogCleanerManagerTest
    .testCleanableOffsetsForTime): with min.compaction.lag.ms the first non-active
    segment whose largestTimestamp > now - lag bounds the clean; it and later are untouched,
    and the active segment is never cleaned."""
    pl = compacted(manager, segment_bytes="200", min_compaction_lag_ms="10000")
    now = clock()
    fill(pl, 12, ts=now - 20000)
    pl.roll()
    boundary = pl.log_end_offset
    fill(pl, 12, start=12, ts=now - 5000)
    pl.roll()
    fill(pl, 3, start=24, ts=now)  # stays in the active segment
    untouched = {n: b for n, b in dir_bytes(pl.dir).items() if int(n.split(".")[0]) >= boundary}
    first_dirty, first_uncleanable, _ = cleanable.cleanable_offsets(pl, None, now)
    assert (first_dirty, first_uncleanable) == (0, boundary)
    model = fold(pl)
    stats = Cleaner(manager).clean_partition(pl)
    assert stats.end_offset == boundary
    after = dir_bytes(pl.dir)
    for name, data in untouched.items():
        assert after[name] == data
    assert [r.key for r in records(pl) if r.offset < boundary] == [b"k0", b"k1", b"k2", b"k3"]
    assert fold(pl) == model


def test_active_segment_never_cleaned(manager):
    """Kafka LogCleanerManager.cleanableOffsets: firstUncleanableDirtyOffset <= active
    segment base (LogCleanerTest.testCleaningBeyondMissingOffsets / activeSegment rule)."""
    pl = compacted(manager, segment_bytes="100000")
    fill(pl, 30)  # everything in the active segment
    before = dir_bytes(pl.dir, (".log", ".index", ".timeindex"))
    c = Cleaner(manager)
    assert c.clean_partition(pl) is None
    assert c.clean_once() is False
    assert dir_bytes(pl.dir, (".log", ".index", ".timeindex")) == before
    pl.roll()
    fill(pl, 5, start=30)
    active = pl.active_segment.log_path.name
    active_bytes = pl.active_segment.log_path.read_bytes()
    assert c.clean_partition(pl) is not None
    assert dir_bytes(pl.dir)[active] == active_bytes


# -- 7. segment grouping ---------------------------------------------------------------------


def test_group_segments_by_size_respects_segment_bytes(manager):
    """Kafka Cleaner.groupSegmentsBySize (LogCleanerTest.testSegmentGrouping): neighbours
    merge while total log size <= segment.bytes; every group is maximal."""
    pl = compacted(manager, segment_bytes="150")
    fill(pl, 60, keys=60)
    segs = pl.segments_snapshot()[:-1]
    assert len(segs) > 20
    for limit in (150, 400, 1000, 10**9):
        groups = cleanable.group_segments_by_size(segs, limit, 10**9, pl.log_end_offset)
        assert [s for g in groups for s in g] == segs
        for i, g in enumerate(groups):
            total = sum(s.size for s in g)
            assert len(g) == 1 or total <= limit
            if i + 1 < len(groups):
                assert total + groups[i + 1][0].size > limit
    assert len(cleanable.group_segments_by_size(segs, 10**9, 10**9, pl.log_end_offset)) == 1


def test_group_segments_by_size_respects_index_size(manager):
    """Kafka Cleaner.groupSegmentsBySize (LogCleanerTest.testSegmentGroupingWithSparseOffsets
    ...IndexSize): offset and time index sizes each stay <= segment.index.bytes."""
    pl = compacted(manager, segment_bytes="400", index_interval_bytes="0")
    for i in range(80):
        append(pl, [(b"k%d" % i, b"v")])
    segs = pl.segments_snapshot()[:-1]
    sizes = [(s.offset_index.size_bytes(), s.time_index.size_bytes()) for s in segs]
    assert all(o > 0 and t > 0 for o, t in sizes)
    limit = 3 * max(t for _o, t in sizes)
    groups = cleanable.group_segments_by_size(segs, 10**9, limit, pl.log_end_offset)
    assert [s for g in groups for s in g] == segs
    assert len(groups) > 1
    for i, g in enumerate(groups):
        off = sum(s.offset_index.size_bytes() for s in g)
        tim = sum(s.time_index.size_bytes() for s in g)
        assert len(g) == 1 or (off <= limit and tim <= limit)
        if i + 1 < len(groups):
            nxt = groups[i + 1][0]
            assert (
                off + nxt.offset_index.size_bytes() > limit
                or tim + nxt.time_index.size_bytes() > limit
            )


def test_clean_merges_small_segments(manager):
    """Kafka Cleaner.doClean + groupSegmentsBySize: many tiny segments become one cleaned
    segment when segment.bytes allows (LogCleanerTest.testSegmentGrouping)."""
    pl = compacted(manager, segment_bytes="150")
    fill(pl, 40, keys=40)
    pl.roll()
    n_before = len(pl.segments)
    assert n_before > 10
    model = fold(pl)
    manager.alter_topic_config("t", {"segment.bytes": str(1 << 20)})
    stats = Cleaner(manager).clean_partition(pl)
    assert stats.segments_before == n_before
    assert len(pl.segments) == 2 == stats.segments_after  # one cleaned + the active one
    assert fold(pl) == model
    assert [r.offset for r in records(pl)] == list(range(40))


# -- 8. dirty-offset reset -------------------------------------------------------------------


def test_checkpoint_below_log_start_resets_to_log_start(manager, clock):
    """Kafka LogCleanerManager.cleanableOffsets (LogCleanerManagerTest
    .testCleanableOffsetsNeedsCheckpointReset): a checkpoint below logStartOffset resets
    the first dirty offset to logStartOffset."""
    pl = compacted(manager, segment_bytes="200")
    fill(pl, 30, keys=30)
    pl.roll()
    cut = pl.segments[3].base_offset
    pl.delete_records_before(cut)
    assert pl.log_start_offset == cut
    manager.cleaner_checkpoint().write({("t", 0): 2})
    c = Cleaner(manager)
    ltc = c.log_to_clean(pl)
    assert ltc.first_dirty_offset == cut and ltc.checkpoint_reset
    assert ltc.clean_bytes == 0
    stats = c.clean_partition(pl)
    assert stats.first_dirty_offset == cut
    assert manager.cleaner_checkpoint().read()[("t", 0)] == pl.log_end_offset


def test_a_tiered_logs_checkpoint_below_its_local_log_start_resets_without_a_warning(
    manager, caplog
):
    """Kafka's cleanableOffsets warns of a checkpoint below the log start unless
    retention moves that start ("Don't bother with the warning if compact and delete are
    enabled"). On a tiered topic local retention moves the local log start on every
    pass of the remote log manager, as retention does: it resets without the warning
    too, while an untiered compacted log still warns."""
    for topic, tiered in (("tiered", "true"), ("plain", "false")):
        pl = compacted(manager, topic, segment_bytes="200", remote_storage_enable=tiered)
        fill(pl, 30, keys=30)
        pl.roll()
        cut = pl.segments[3].base_offset
        pl.delete_records_before(cut)
        manager.cleaner_checkpoint().write({(topic, 0): 2})
        caplog.clear()
        ltc = Cleaner(manager).log_to_clean(pl)
        assert ltc.first_dirty_offset == cut and ltc.checkpoint_reset
        warned = [r for r in caplog.records if "below the log start" in r.getMessage()]
        assert len(warned) == (tiered == "false"), (topic, warned)


def test_checkpoint_past_log_end_resets_to_log_start(manager, clock):
    """Kafka LogCleanerManager.cleanableOffsets (LogCleanerManagerTest
    .testCleanableOffsetsForShortTime / checkpoint > LEO): reset to logStartOffset."""
    pl = compacted(manager, segment_bytes="200")
    fill(pl, 30, keys=30)
    pl.roll()
    first_dirty, _u, reset = cleanable.cleanable_offsets(pl, pl.log_end_offset + 100, clock())
    assert (first_dirty, reset) == (pl.log_start_offset, True)
    first_dirty, _u, reset = cleanable.cleanable_offsets(pl, pl.log_end_offset, clock())
    assert (first_dirty, reset) == (pl.log_end_offset, False)


def test_reset_checkpoint_is_rewritten_even_without_a_clean(manager, clock):
    """Kafka LogCleanerManager.grabFilthiestCompactedLog: ``if
    (offsetsToClean.forceUpdateCheckpoint) updateCheckpoints(..., firstDirtyOffset)`` for
    every compacted log considered, cleaned or not. Otherwise a stale checkpoint past the
    log end becomes "valid" once the log grows past it and [old LEO, checkpoint) is then
    treated as already clean."""
    pl = compacted(manager, segment_bytes="100000")
    fill(pl, 30)  # all in the active segment: nothing cleanable, not eligible
    manager.cleaner_checkpoint().write({("t", 0): 50})
    c = Cleaner(manager)
    assert c.log_to_clean(pl).checkpoint_reset
    assert c.clean_once() is False
    assert manager.cleaner_checkpoint().read().get(("t", 0)) == 0
    fill(pl, 40, start=30)
    pl.roll()
    assert c.log_to_clean(pl).first_dirty_offset == 0


# -- 9. filthiest log ------------------------------------------------------------------------


def _two_logs(manager):
    a = compacted(manager, "a", segment_bytes="200", min_cleanable_dirty_ratio="0.01")
    b = compacted(manager, "b", segment_bytes="200", min_cleanable_dirty_ratio="0.01")
    fill(a, 20)
    fill(b, 20)
    a.roll()
    b.roll()
    return a, b


def test_filthiest_log_is_cleaned_first(manager):
    """Kafka LogCleanerManager.grabFilthiestCompactedLog (LogCleanerManagerTest
    .testGrabFilthiestCompactedLogReturnsLogWithDirtiestRatio): highest ratio wins."""
    a, b = _two_logs(manager)
    c = Cleaner(manager)
    c.clean_partition(a)
    c.clean_partition(b)
    fill(a, 3, start=100)
    fill(b, 12, start=100)
    a.roll()
    b.roll()
    ra, rb = c.log_to_clean(a).cleanable_ratio, c.log_to_clean(b).cleanable_ratio
    assert rb > ra > 0.01
    cp = manager.cleaner_checkpoint().read()
    assert c.clean_once() is True
    cp2 = manager.cleaner_checkpoint().read()
    assert cp2[("b", 0)] > cp[("b", 0)] and cp2[("a", 0)] == cp[("a", 0)]
    assert c.clean_once() is True
    assert manager.cleaner_checkpoint().read()[("a", 0)] > cp[("a", 0)]


def test_ratio_exactly_min_cleanable_dirty_ratio_is_not_eligible(manager):
    """Kafka LogCleanerManager.grabFilthiestCompactedLog: ``cleanableRatio >
    minCleanableRatio`` is strict (LogCleanerManagerTest.testDoesNotCleanAtRatio...)."""
    a = compacted(manager, "a", segment_bytes="200")
    fill(a, 20)
    a.roll()
    c = Cleaner(manager)
    c.clean_partition(a)
    fill(a, 6, start=50)
    a.roll()
    ratio = c.log_to_clean(a).cleanable_ratio
    assert 0 < ratio < 1
    manager.alter_topic_config("a", {"min.cleanable.dirty.ratio": repr(ratio)})
    assert a.config.min_cleanable_dirty_ratio == ratio
    assert c.clean_once() is False
    manager.alter_topic_config("a", {"min.cleanable.dirty.ratio": repr(ratio - 1e-9)})
    assert c.clean_once() is True


def test_max_compaction_lag_forces_clean_below_ratio(manager, clock):
    """Kafka LogCleanerManager.maxCompactionDelay / needCompactionNow (LogCleanerManagerTest
    .testMaxCompactionLag...): past max.compaction.lag.ms a log is cleaned below the ratio."""
    a = compacted(
        manager,
        "a",
        segment_bytes="200",
        max_compaction_lag_ms="60000",
        min_cleanable_dirty_ratio="0.99",
    )
    fill(a, 20)
    a.roll()
    c = Cleaner(manager)
    c.clean_partition(a)
    fill(a, 2, start=50)
    a.roll()
    assert c.log_to_clean(a).cleanable_ratio < 0.99
    assert c.clean_once() is False
    clock.advance(60001)
    ltc = c.log_to_clean(a)
    assert ltc.need_compaction_now
    assert c.clean_once() is True
    assert manager.cleaner_checkpoint().read()[("a", 0)] == a.log_end_offset


# -- 11. corrupt input -----------------------------------------------------------------------


def test_corrupt_segment_marks_partition_uncleanable(manager):
    """Kafka LogCleaner.CleanerThread.cleanFilthiestLog: a non-IO exception marks the
    partition uncleanable (``markPartitionUncleanable``) and other partitions go on."""
    a = compacted(manager, "a", segment_bytes="200")
    b = compacted(manager, "b", segment_bytes="200")
    fill(a, 30)
    a.roll()
    fill(b, 20)
    c = Cleaner(manager)
    c.clean_partition(b)
    fill(b, 4, start=100)
    b.roll()
    seg = a.segments[1]
    path = seg.log_path
    data = bytearray(path.read_bytes())
    data[len(data) - 3] ^= 0xFF  # inside the last record of a sealed segment
    path.write_bytes(bytes(data))
    before_a = dir_bytes(a.dir, (".log", ".index", ".timeindex"))
    cp_b = manager.cleaner_checkpoint().read()[("b", 0)]
    assert c.log_to_clean(a).cleanable_ratio > c.log_to_clean(b).cleanable_ratio
    c.clean_once()
    assert a.uncleanable_reason and "CRC" in a.uncleanable_reason
    assert c.uncleanable() == {("a", 0): a.uncleanable_reason}
    c.clean_once()
    assert manager.cleaner_checkpoint().read()[("b", 0)] > cp_b
    assert ("a", 0) not in manager.cleaner_checkpoint().read()
    assert dir_bytes(a.dir, (".log", ".index", ".timeindex")) == before_a
    assert c.clean_once() is False


def test_the_manager_hands_each_filthy_log_to_one_taker_and_skips_paused_ones(manager, clock):
    """Kafka's LogCleanerManager.grabFilthiestCompactedLog: the log chosen is in progress
    before the lock is let go, so two cleaner threads never take the same one, and a
    paused partition (abortAndPauseCleaning, as a topic deletion does) is not chosen."""
    from kompakt.cleaner.manager import LogCleanerManager

    logs = []
    for name in ("a", "b", "c"):
        pl = compacted(manager, name, segment_bytes="200")
        fill(pl, 30)
        pl.roll()
        logs.append(pl)
    m = LogCleanerManager(manager, clock)
    assert m.abort_and_pause(("c", 0), "paused by the test")
    first, second = m.grab_filthiest(), m.grab_filthiest()
    assert {first.topic_partition, second.topic_partition} == {("a", 0), ("b", 0)}
    assert m.grab_filthiest() is None  # both taken, the third paused
    assert set(m.in_progress()) == {("a", 0), ("b", 0)}
    m.done(("a", 0))
    assert m.grab_filthiest().topic_partition == ("a", 0)
    m.resume(("c", 0))
    assert m.grab_filthiest().topic_partition == ("c", 0)
