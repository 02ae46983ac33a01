"""``Cleaner.compact_now``: the one "compact now" behind the CLI and ``POST /v1/compact``.

Kafka rules checked: a corrupt partition is marked uncleanable and the others still
cleaned (``LogCleanerManager.markPartitionUncleanable``); a partition being cleaned is
out of the cleanable set before its clean is planned, so nothing else plans or cleans
it meanwhile (``LogCleanerManager.inProgress``, ``grabFilthiestCompactedLog``); an
aborted clean stops at the next check and leaves the log as it was
(``LogCleaningAbortedException``, ``LogCleanerTest.testCleanSegmentsWithAbort``). And
what a compaction must not touch: other topics and partitions, non-compacted topics,
other partitions' checkpoints.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cleaner_kit import (
    Run,
    append,
    dir_bytes,
    fold,
    leftovers,
    open_manager,
    wait_for_file,
    wait_for_later_group,
)
from shared_kit import condition_wait_frame, corrupt_first_batch, snapshot, wait_for

from kompakt.cleaner import Cleaner
from kompakt.cleaner.manager import CleaningAbortedError
from kompakt.cleaner.segment_io import CleanFaults
from kompakt.errors import InvalidConfigError, UnknownTopicError
from kompakt.log.manager import LogManager

COMPACT = {"cleanup.policy": "compact", "segment.bytes": "600"}


def fill(m: LogManager, clock, topic: str, partition: int, n: int = 60, keys: int = 5) -> dict:
    plog = m.get_log(topic, partition)
    model: dict[bytes, bytes] = {}
    for i in range(n):
        k, v = b"k%d" % (i % keys), b"%s-%d-v%d" % (topic.encode(), partition, i)
        append(plog, [(k, v)])
        model[k] = v
        clock.advance(1)
    plog.roll()  # everything before the active segment is cleanable
    return model


@pytest.fixture
def world(tmp_path: Path, clock):
    """Compacted topic a (2 partitions) and b (1), delete-policy topic ev, all dirty."""
    m = open_manager(tmp_path / "data", clock)
    m.create_topic("a", 2, COMPACT)
    m.create_topic("b", 1, COMPACT)
    m.create_topic("ev", 1, {"cleanup.policy": "delete", "segment.bytes": "600"})
    models = {(t, p): fill(m, clock, t, p) for t, p in (("a", 0), ("a", 1), ("b", 0), ("ev", 0))}
    yield m, models
    m.close()


def test_pass_marks_corrupt_partition_uncleanable_and_cleans_the_others(world):
    """Kafka LogCleanerManager.markPartitionUncleanable: the pass goes on past it."""
    m, models = world
    bad = corrupt_first_batch(m.get_log("a", 0).dir)
    before = dir_bytes(bad.parent)
    report = Cleaner(m).compact_now()
    by = {(r.topic, r.partition): r for r in report.results}
    assert set(by) == {("a", 0), ("a", 1), ("b", 0)}  # never the delete-policy topic
    assert by[("a", 0)].status == "uncleanable"
    assert bad.name == "00000000000000000000.log"
    assert by[("a", 0)].file == str(bad) and by[("a", 0)].position == 0
    assert str(bad) in by[("a", 0)].reason and "byte position 0" in by[("a", 0)].reason
    assert "CRC mismatch" in by[("a", 0)].reason
    assert m.get_log("a", 0).uncleanable_reason == by[("a", 0)].reason
    for tp in (("a", 1), ("b", 0)):
        assert by[tp].status == "cleaned", by[tp]
        assert by[tp].stats.records_written < by[tp].stats.records_read
        assert fold(m.get_log(*tp)) == models[tp]
    assert dir_bytes(bad.parent) == before
    assert ("a", 0) not in m.cleaner_checkpoint().read()
    assert not leftovers(bad.parent)


def test_named_corrupt_partition_is_reported_and_nothing_else_touched(world):
    m, _models = world
    root = m.dir
    bad = corrupt_first_batch(m.get_log("a", 0).dir)
    before = snapshot(root)
    report = Cleaner(m).compact_now("a", 0)
    [r] = report.results
    assert (r.topic, r.partition, r.status, r.file, r.position) == (
        "a",
        0,
        "uncleanable",
        str(bad),
        0,
    )
    assert snapshot(root) == before  # no other partition, no checkpoint, nothing


def test_corruption_found_in_the_rewrite_is_named_too(tmp_path: Path, clock):
    """A CRC error past the dirty range start (the map stage skips clean segments):
    the rewrite finds it and the report still names file and position."""
    m = open_manager(tmp_path / "data", clock)
    m.create_topic("a", 1, COMPACT)
    fill(m, clock, "a", 0)
    c = Cleaner(m)
    assert c.compact_now("a").results[0].status == "cleaned"
    fill(m, clock, "a", 0, n=30)
    bad = corrupt_first_batch(m.get_log("a", 0).dir)  # in the cleaned tail now
    [r] = c.compact_now("a").results
    assert (r.status, r.file, r.position) == ("uncleanable", str(bad), 0)
    m.close()


def test_named_compact_touches_only_its_partition(world):
    """What "compact a:1" must not touch: a-0, b, ev, or their checkpoint entries."""
    m, models = world
    root = m.dir
    c = Cleaner(m)
    c.compact_now("b", 0)  # gives the checkpoint file an entry to keep
    b_checkpoint = m.cleaner_checkpoint().read()
    before = snapshot(root)
    [r] = c.compact_now("a", 1).results
    assert r.status == "cleaned"
    after = snapshot(root)
    changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    assert all(k.startswith("a-1/") or k == "cleaner-offset-checkpoint" for k in changed), changed
    cps = m.cleaner_checkpoint().read()
    assert cps == {**b_checkpoint, ("a", 1): r.stats.end_offset}
    assert fold(m.get_log("a", 1)) == models[("a", 1)]


def test_dry_run_pass_writes_nothing_not_even_a_checkpoint_reset(world):
    m, _models = world
    c = Cleaner(m)
    c.compact_now("a", 0)
    cp = m.cleaner_checkpoint()
    cp.write({**cp.read(), ("a", 0): 10**9})  # past the end: the next plan resets it
    before = snapshot(m.dir)
    report = c.compact_now(dry_run=True)
    assert {r.status for r in report.results} == {"dry-run"}
    assert snapshot(m.dir) == before


def test_refusals_touch_nothing(world):
    m, _models = world
    before = snapshot(m.dir)
    c = Cleaner(m)
    with pytest.raises(UnknownTopicError):
        c.compact_now("a", 7)
    with pytest.raises(UnknownTopicError):
        c.compact_now("nope")
    with pytest.raises(Exception, match="cleanup.policy=delete"):
        c.compact_now("ev")
    with pytest.raises(InvalidConfigError, match="unknown engine 'bogus'"):
        c.compact_now("a", engine="bogus")
    assert snapshot(m.dir) == before


# -- one partition, two cleans ---------------------------------------------------------------


@pytest.fixture
def hold(tmp_path: Path, monkeypatch):
    """The engines' test hook: group rewrites wait at a known point until released."""
    d = tmp_path / "hold"
    d.mkdir()
    monkeypatch.setattr(CleanFaults, "hold_dir", str(d))
    return d


def test_second_compact_waits_then_reports_its_own_fresh_result(world, hold):
    """Kafka LogCleanerManager.inProgress: a partition being cleaned is not planned by
    anyone else; the second request waits, then plans afresh (nothing left to clean)
    instead of redoing the range with the figures of a stale plan."""
    m, models = world
    c = Cleaner(m)
    first = Run(c.compact_now, "a", 0)
    first.start()
    wait_for_file(hold / "held-0")
    second = Run(c.compact_now, "a", 0)
    second.start()
    wait_for(lambda: condition_wait_frame(second), "the second request to wait")
    (hold / "release").touch()
    first.join(60)
    second.join(60)
    assert first.error is None and second.error is None, (first.error, second.error)
    [r1] = first.result.results
    [r2] = second.result.results
    assert r1.status == "cleaned" and r1.stats.first_dirty_offset == 0
    assert r2.status == "skipped" and r2.reason == "nothing to clean", r2
    assert r2.first_dirty_offset == r1.stats.end_offset
    assert fold(m.get_log("a", 0)) == models[("a", 0)]


def test_background_pass_never_picks_the_partition_being_compacted(tmp_path: Path, clock, hold):
    """grabFilthiestCompactedLog skips in-progress partitions: with only that one due,
    the pass finds nothing (and does not wait for it)."""
    m = open_manager(tmp_path / "data", clock)
    m.create_topic("a", 1, COMPACT)
    fill(m, clock, "a", 0)
    c = Cleaner(m)
    first = Run(c.compact_now, "a", 0)
    first.start()
    wait_for_file(hold / "held-0")
    background = Run(c.clean_once)
    background.start()
    background.join(60)
    assert not background.is_alive() and background.result is False
    (hold / "release").touch()
    first.join(60)
    assert first.result.results[0].status == "cleaned"
    m.close()


def test_abort_between_groups_leaves_the_partition_as_it_was(tmp_path: Path, clock, hold):
    """Kafka testCleanSegmentsWithAbort: the first group's .cleaned file is written,
    the abort comes while the second is being rewritten; no .cleaned file, segment or
    checkpoint change survives."""
    m = open_manager(tmp_path / "data", clock)
    m.create_topic("a", 1, {**COMPACT, "segment.bytes": "300"})
    model = fill(m, clock, "a", 0, n=80, keys=40)
    plog = m.get_log("a", 0)
    before = snapshot(m.dir)
    c = Cleaner(m)
    run = Run(c.compact_now, "a", 0)
    run.start()
    wait_for_file(hold / "held-0")
    (hold / "release-0").touch()
    wait_for_later_group(hold)
    assert any(p.name.endswith(".cleaned") for p in plog.dir.iterdir())
    c.abort_all("interrupted")
    run.join(60)
    assert isinstance(run.error, CleaningAbortedError), run.error
    assert str(run.error) == "interrupted: compaction of a-0 cancelled, nothing changed"
    assert not leftovers(plog.dir)
    assert snapshot(m.dir) == before
    assert fold(plog) == model
    with pytest.raises(CleaningAbortedError):  # closed: no new clean starts
        c.compact_now("a", 0)
    m.close()


def test_topic_deleted_and_recreated_during_a_clean_is_not_touched_by_it(
    tmp_path: Path, clock, hold
):
    """Kafka's deleteLog aborts the partition's clean first (abortCleaning): a clean of a
    deleted partition must not rename, replace or checkpoint the new one of that name."""
    m = open_manager(tmp_path / "data", clock)
    m.create_topic("a", 1, {**COMPACT, "segment.bytes": "300"})
    fill(m, clock, "a", 0, n=80, keys=40)
    c = Cleaner(m)
    run = Run(c.compact_now, "a", 0)
    run.start()
    wait_for_file(hold / "held-0")
    m.delete_topic("a")
    m.create_topic("a", 1, {**COMPACT, "segment.bytes": "300"})
    model = fill(m, clock, "a", 0, n=30, keys=30)
    before = snapshot(m.dir / "a-0")
    (hold / "release").touch()
    run.join(60)
    assert run.error is None, run.error
    [r] = run.result.results
    assert (r.status, r.reason) == (
        "skipped",
        "a-0 was deleted during the clean; the clean is abandoned",
    )
    assert snapshot(m.dir / "a-0") == before
    assert fold(m.get_log("a", 0)) == model
    assert ("a", 0) not in m.cleaner_checkpoint().read()
    m.close()


def test_compact_now_of_a_topic_without_cleanup_names_the_empty_policy(manager):
    """``cleanup.policy=`` (an empty list: neither deletion nor compaction, which
    kompakt's topic configs accept as Kafka's list validator does); "compact now" of
    such a topic says so in words, not ``policy=:``."""
    from kompakt.cleaner.cleaner import NotCompactedError

    manager.create_topic("keep-all", 1, {"cleanup.policy": ""})
    with pytest.raises(NotCompactedError, match=r"cleanup.policy='' \(no cleanup at all\)"):
        Cleaner(manager).compact_now("keep-all")
