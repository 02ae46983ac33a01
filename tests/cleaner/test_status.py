"""Cleaning status is computed in one place (CleaningStatus) for /v1/partitions, metrics
and the embedded API: the figures Kafka's LogCleanerManager reports as gauges."""

from __future__ import annotations

from cleaner_kit import append, open_manager

from kompakt.cleaner import Cleaner, LocalEngine
from kompakt.cleaner.cleanable import log_to_clean
from kompakt.cleaner.stats import CleanStats, DirtyRange
from kompakt.cleaner.status import CleaningStatus

COMPACT = {"cleanup.policy": "compact", "segment.bytes": "600"}


def test_status_of_a_compacted_log_is_what_the_cleaner_plans_with(tmp_path, clock):
    with open_manager(tmp_path, clock) as m:
        m.create_topic("c", 1, COMPACT)
        m.create_topic("d", 1, {"cleanup.policy": "delete"})
        plog = m.get_log("c", 0)
        for i in range(30):
            append(plog, [(b"k%d" % (i % 4), None if i % 10 == 9 else b"v%d" % i)])
        plog.roll()
        status = CleaningStatus(m)
        got = {(s.topic, s.partition): s for _plog, s in status.partitions()}
        c, d = got[("c", 0)], got[("d", 0)]
        ltc = log_to_clean(plog, None, clock())
        assert c.compacted and c.dirty_ratio == ltc.cleanable_ratio > 0
        assert c.cleanable_bytes == ltc.cleanable_bytes
        assert c.first_dirty_offset == 0
        assert c.first_uncleanable_offset == ltc.first_uncleanable_offset
        assert c.tombstones_pending == 3
        assert c.last_clean is None
        assert not d.compacted and d.dirty_ratio is None and d.tombstones_pending is None
        assert d.to_json() == {"uncleanable_reason": None}
        assert set(c.to_json()) == {
            "uncleanable_reason",
            "dirty_ratio",
            "cleanable_bytes",
            "first_dirty_offset",
            "first_uncleanable_offset",
            "last_compaction_ms",
            "last_compaction",
            "tombstones_pending",
        }
        quick = [s for _p, s in status.partitions(tombstones=False)]
        assert sorted(s.topic for s in quick) == ["c", "d"]
        assert all(s.tombstones_pending is None for s in quick)


def test_the_cleaners_status_shows_its_last_clean_and_the_new_dirty_range(tmp_path, clock):
    with open_manager(tmp_path, clock) as m:
        m.create_topic("c", 1, COMPACT)
        plog = m.get_log("c", 0)
        for i in range(30):
            append(plog, [(b"k%d" % (i % 4), b"v%d" % i)])
        plog.roll()
        cleaner = Cleaner(m, engine=LocalEngine(1 << 20))
        stats = cleaner.clean_partition(plog)
        assert stats is not None
        after = cleaner.status.of_log(plog)
        assert after.last_clean is stats
        assert after.first_dirty_offset == stats.end_offset
        assert after.dirty_ratio == 0
        doc = cleaner.status.of_log(plog).to_json()
        assert doc["last_compaction_ms"] == stats.started_ms
        assert doc["last_compaction"] == stats.to_json()


def test_an_uncleanable_partition_reports_its_reason(tmp_path, clock):
    with open_manager(tmp_path, clock) as m:
        m.create_topic("c", 1, COMPACT)
        plog = m.get_log("c", 0)
        plog.uncleanable_reason = "corrupt batch in x at byte position 0: bad CRC"
        [(_plog, s)] = list(CleaningStatus(m).partitions())
        assert s.uncleanable_reason == plog.uncleanable_reason
        assert s.to_json()["uncleanable_reason"] == plog.uncleanable_reason


def test_the_clean_line_counts_the_segments_it_rewrote_not_those_rolled_meanwhile(
    tmp_path, clock, caplog
):
    """``segments N -> M`` is what this clean did to the log it started from: a producer
    rolling new segments while it runs (the broker's log is live) made a clean that
    merged 4 segments into 1 say ``segments 4 -> 9``."""
    with open_manager(tmp_path, clock) as m:
        m.create_topic("c", 1, COMPACT)
        plog = m.get_log("c", 0)
        for i in range(20):
            append(plog, [(b"k%d" % (i % 4), b"v" * 100)])
        before = len(plog.segments_snapshot())
        rolled = []

        def producer_meanwhile(_plog):
            def tick(done: int, total: int) -> None:
                if not rolled:  # once: a live producer appends and rolls during the clean
                    for i in range(30):
                        append(plog, [(b"new%d" % i, b"v" * 100)])
                    rolled.append(len(plog.segments_snapshot()))

            return tick

        cleaner = Cleaner(m, engine=LocalEngine(1 << 20))
        with caplog.at_level("INFO", logger="kompakt.cleaner.cleaner"):
            doc = cleaner.compact_now("c", progress=producer_meanwhile).to_json()
        stats = doc["results"][0]["stats"]
        assert rolled and rolled[0] > before  # the producer did roll during the clean
        assert stats["segments_before"] == before
        assert stats["segments_after"] <= before  # merged: never more than it started with
        assert f"segments {before} -> {stats['segments_after']}" in caplog.text


def test_a_clean_without_an_offset_map_claims_no_map_fill():
    """Kafka's cleaner reports its offset map's "Buffer utilization"; the Spark engine
    has no map (it joins), so its clean line says nothing of one and its JSON has null,
    while the local engine's map fill is reported."""
    spark = CleanStats("c", 0, "spark")
    spark.add_dirty(DirtyRange(end_offset=10))  # what the Spark engine returns
    assert "map" not in spark.log_line()
    assert spark.to_json()["map_utilization"] is None
    local = CleanStats("c", 0, "local")
    local.add_dirty(DirtyRange(end_offset=10, map_utilization=0.25, map_entries=4))
    assert "; map 25.0% full;" in local.log_line()


def test_partitions_listed_while_logs_grow_and_topics_are_deleted_never_go_missing(tmp_path, clock):
    """Kafka's LogCleanerManager answers its gauges under its lock: a status walk that
    races appends (the tombstone cache changes under it) and topic deletions neither
    swallows an error nor leaves out a partition that was live the whole time."""
    import sys
    import threading

    from cleaner_kit import Run

    stable = [(f"s{i}", 0) for i in range(3)]
    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often: the race shows in a few rounds
    try:
        with open_manager(tmp_path, clock) as m:
            for topic, _p in stable:
                m.create_topic(topic, 1, COMPACT)
                for i in range(40):  # many sealed segments in each log's cache
                    append(m.get_log(topic, 0), [(b"k%d" % i, None if i % 3 else b"v")])
            status = CleaningStatus(m)
            stop = threading.Event()

            def write() -> None:
                i = 0
                while not stop.is_set():
                    for topic, _p in stable:  # the active segment's size changes each time
                        append(m.get_log(topic, 0), [(b"w%d" % i, None)])
                    i += 1

            def churn() -> None:
                i = 0
                while not stop.is_set():
                    m.create_topic(f"churn{i}", 2, COMPACT)
                    append(m.get_log(f"churn{i}", 0), [(b"a", None)])
                    m.delete_topic(f"churn{i}")
                    i += 1

            def list_many() -> None:
                for _ in range(150):
                    listed = {(s.topic, s.partition) for _plog, s in status.partitions()}
                    missing = set(stable) - listed
                    assert not missing, f"live partitions left out: {sorted(missing)}"

            background = [Run(write), Run(churn)]
            listers = [Run(list_many) for _ in range(4)]
            for t in background + listers:
                t.start()
            for t in listers:
                t.join(120)
            stop.set()
            for t in background:
                t.join(60)
            errors = [t.error for t in background + listers if t.error is not None]
            assert not errors, errors
    finally:
        sys.setswitchinterval(old_interval)
