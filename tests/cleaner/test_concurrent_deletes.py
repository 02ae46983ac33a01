"""Segments and partitions removed while a clean runs.

Kafka lets retention, DeleteRecords and the log cleaner run side by side:
``LocalLog.replaceSegments`` skips old segments "already removed from the index and
scheduled for async deletion" and never brings them back, and a clean whose log changed
under it is not a corruption (``LogCleaner.CleanerThread.cleanFilthiestLog`` marks a
partition uncleanable only for other errors). kompakt abandons such a clean: nothing is
swapped, no ``.cleaned``/``.swap`` file is left, the checkpoint stays, the log start
offset never goes back, and the next pass cleans the partition.

Deleting a topic: Kafka's ``LogManager.asyncDelete`` calls ``cleaner.abortCleaning``
(``LogCleanerManager.abortAndPauseCleaning``), which waits until a running clean of the
partition has stopped, before any file is touched.

The engines' injected fault (``CleanFaults.hold_dir``) holds a group rewrite so the
removal lands mid-clean.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cleaner_kit import (
    Run,
    append,
    fold,
    leftovers,
    open_manager,
    wait_for_file,
    wait_for_later_group,
)
from shared_kit import condition_wait_frame, wait_for

from kompakt.cleaner import Cleaner
from kompakt.cleaner.segment_io import CleanFaults
from kompakt.log.manager import LogManager

TOPIC = {"cleanup.policy": "compact,delete", "segment.bytes": "300", "retention.ms": "100000"}


@pytest.fixture
def hold(tmp_path: Path, monkeypatch):
    d = tmp_path / "hold"
    d.mkdir()
    monkeypatch.setattr(CleanFaults, "hold_dir", str(d))
    yield d
    (d / "release").touch()  # never leave a clean waiting


def fill(m: LogManager, clock, n: int = 80, keys: int = 40) -> None:
    plog = m.get_log("a", 0)
    for i in range(n):
        append(plog, [(b"k%d" % (i % keys), b"v%d" % i)])
        clock.advance(10)
    plog.roll()


def make(tmp_path: Path, clock) -> tuple[LogManager, Cleaner]:
    m = open_manager(tmp_path / "data", clock)
    m.create_topic("a", 1, TOPIC)
    fill(m, clock)
    return m, Cleaner(m)


def abandoned_then_cleaned(m: LogManager, c: Cleaner, run: Run, start: int, cp_before) -> None:
    """What a clean abandoned because its log changed leaves, and that the next one works."""
    plog = m.get_log("a", 0)
    run.join(60)
    assert run.error is None, run.error
    [r] = run.result.results
    assert r.status == "skipped", r
    assert "changed during the clean" in r.reason or "segments changed" in r.reason, r.reason
    assert plog.uncleanable_reason is None
    assert c.uncleanable() == {}
    assert plog.log_start_offset == start  # not moved back by a swap
    assert not leftovers(plog.dir)
    assert m.cleaner_checkpoint().read().get(("a", 0)) == cp_before
    model = fold(plog)
    status = c.status.of_log(plog).to_json()
    assert status["uncleanable_reason"] is None
    again = c.compact_now("a", 0).results[0]
    assert again.status == "cleaned", again
    assert plog.log_start_offset == start
    assert fold(plog) == model
    assert m.cleaner_checkpoint().read()[("a", 0)] == again.stats.end_offset
    assert not leftovers(plog.dir)


def test_retention_during_local_clean_abandons_it(tmp_path: Path, clock, hold):
    """Time retention on a compact,delete topic deletes the segments a held clean is
    about to read (they are renamed .deleted at once): abandoned, not uncleanable."""
    m, c = make(tmp_path, clock)
    plog = m.get_log("a", 0)
    cp_before = m.cleaner_checkpoint().read().get(("a", 0))
    run = Run(c.compact_now, "a", 0)
    run.start()
    wait_for_file(hold / "held-0")
    third = plog.segments[2]
    deleted = plog.apply_retention(third.largest_timestamp + 100000 + 1)
    assert deleted == 3
    start = plog.log_start_offset
    assert start == third.next_offset
    (hold / "release").touch()
    abandoned_then_cleaned(m, c, run, start, cp_before)
    m.close()


def test_delete_records_during_local_clean_abandons_it(tmp_path: Path, clock, hold, monkeypatch):
    """DeleteRecords during "compact now" (POST /v1/compact) removes segments the held
    clean has planned: abandoned and retried, the log start offset stays where
    DeleteRecords put it."""
    m, c = make(tmp_path, clock)
    plog = m.get_log("a", 0)
    monkeypatch.setattr(CleanFaults, "hold_dir", None)
    c.compact_now("a", 0)  # a checkpoint that must not move
    monkeypatch.setattr(CleanFaults, "hold_dir", str(hold))
    fill(m, clock)
    cp_before = m.cleaner_checkpoint().read()[("a", 0)]
    run = Run(c.compact_now, "a", 0)
    run.start()
    wait_for_file(hold / "held-0")
    target = plog.segments[3].base_offset + 1  # inside a segment: that one stays
    assert plog.delete_records_before(target) == target
    (hold / "release").touch()
    abandoned_then_cleaned(m, c, run, target, cp_before)
    m.close()


def test_delete_records_between_groups_is_caught_before_the_swap(tmp_path: Path, clock, hold):
    """The first group is rewritten, then DeleteRecords removes its segments while the
    second is held: the swap would bring them back (Kafka ``replaceSegments`` must not),
    so nothing is swapped and no .cleaned file survives."""
    m, c = make(tmp_path, clock)
    plog = m.get_log("a", 0)
    (hold / "release-0").touch()
    run = Run(c.compact_now, "a", 0)
    run.start()
    second = int(wait_for_later_group(hold).name.split("-")[1])
    assert (plog.dir / f"{0:020d}.log.cleaned").exists()
    assert plog.delete_records_before(second) == second
    (hold / "release").touch()
    abandoned_then_cleaned(m, c, run, second, None)
    m.close()


def test_delete_topic_aborts_and_waits_for_the_running_clean(tmp_path: Path, clock, hold):
    """Kafka ``LogManager.asyncDelete`` -> ``abortAndPauseCleaning``: delete_topic returns
    only once the partition's clean has stopped; that clean reports itself abandoned and
    the topic re-created under the same name is not touched by it."""
    m, c = make(tmp_path, clock)
    run = Run(c.compact_now, "a", 0)
    run.start()
    wait_for_file(hold / "held-0")
    old = m.get_log("a", 0)
    cleaning_at_close = []
    close = old.close

    def watched_close() -> None:  # the moment the files go away
        cleaning_at_close.append(dict(c.manager.in_progress()))
        close()

    old.close = watched_close
    m.delete_topic("a")
    assert cleaning_at_close == [{}], "the partition was deleted under a running clean"
    run.join(10)
    assert not run.is_alive()
    assert c.manager.in_progress() == {}
    assert not c.manager.is_paused(("a", 0))  # resumed after the delete
    m.create_topic("a", 1, TOPIC)
    fill(m, clock, n=30, keys=30)
    plog = m.get_log("a", 0)
    before = {p.name: p.read_bytes() for p in sorted(plog.dir.iterdir())}
    model = fold(plog)
    (hold / "release").touch()
    assert run.error is None, run.error
    [r] = run.result.results
    assert (r.status, r.reason) == (
        "skipped",
        "a-0 was deleted during the clean; the clean is abandoned",
    )
    assert {p.name: p.read_bytes() for p in sorted(plog.dir.iterdir())} == before
    assert fold(plog) == model
    assert ("a", 0) not in m.cleaner_checkpoint().read()
    assert not [p for p in m.dir.iterdir() if p.name.endswith("-delete")]
    assert c.compact_now("a", 0).results[0].status == "cleaned"  # cleanable again
    m.close()


def test_compact_waiting_for_a_deleted_partition_skips_it(tmp_path: Path, clock, hold):
    """A second "compact now" that waited for the clean of a partition deleted
    meanwhile does not plan or checkpoint the re-created one with the old log."""
    m, c = make(tmp_path, clock)
    first = Run(c.compact_now, "a", 0)
    first.start()
    wait_for_file(hold / "held-0")
    plog = m.get_log("a", 0)
    second = Run(c._compact_one, plog, True, False, c.engine, None)
    second.start()
    wait_for(lambda: condition_wait_frame(second), "the second request to wait for the first")
    m.delete_topic("a")
    m.create_topic("a", 1, TOPIC)
    second.join(30)
    first.join(30)
    assert second.error is None, second.error
    assert second.result.status == "skipped", second.result
    assert ("a", 0) not in m.cleaner_checkpoint().read()
    m.close()
