"""Crash-safe segment swap (Kafka ``LocalLog.replaceSegments`` and the swap recovery of
``LogLoader``) and readers of swapped-out segments."""

from __future__ import annotations

import shutil

import pytest
from cleaner_kit import T0, ManualClock, append, fold, leftovers, records

from kompakt.cleaner import Cleaner
from kompakt.log.manager import LogManager
from kompakt.record.decode import iter_batches

CONFIG = {
    "cleanup.policy": "compact",
    "delete.retention.ms": "1000",
    "segment.bytes": "200",
    "file.delete.delay.ms": "600000",
}
SUFFIXES = (".log", ".index", ".timeindex")


def build_log(data_dir, clock):
    m = LogManager(data_dir, clock=clock)
    m.create_topic("t", 1, CONFIG)
    pl = m.get_log("t", 0)
    for i in range(40):
        append(pl, [(b"k%d" % (i % 7), b"v%d" % i)])
        if i == 30:
            append(pl, [(b"k3", None)])
    pl.roll()
    append(pl, [(b"k1", b"active")])
    return m, pl


def segment_files(part_dir):
    return sorted(p.name for p in part_dir.iterdir() if p.name.endswith(SUFFIXES))


@pytest.fixture
def prepared(tmp_path):
    """(original data dir, its records, the cleaned copy's records, cleaned files)."""
    clock = ManualClock()
    orig = tmp_path / "orig"
    m, pl = build_log(orig, clock)
    original = [(r.offset, r.key, r.value) for r in records(pl)]
    model = fold(pl)
    old_segments = [s.base_offset for s in pl.segments]
    m.close()
    copy = tmp_path / "copy"
    shutil.copytree(orig, copy)
    m2 = LogManager(copy, clock=clock)
    m2.alter_topic_config("t", {"segment.bytes": str(1 << 20)})  # one group
    pl2 = m2.get_log("t", 0)
    stats = Cleaner(m2).clean_partition(pl2)
    assert stats.segments_after == 2
    cleaned = [(r.offset, r.key, r.value) for r in records(pl2)]
    assert fold(pl2) == model
    new_base = pl2.segments[0].base_offset
    assert new_base == 0
    cleaned_files = {
        name: (copy / "t-0" / name).read_bytes()
        for name in segment_files(copy / "t-0")
        if int(name.split(".")[0]) == new_base
    }
    cleaned_end = pl2.segments[1].base_offset
    m2.close()
    return {
        "orig": orig,
        "clock": clock,
        "original": original,
        "cleaned": cleaned,
        "model": model,
        "files": cleaned_files,
        "old_segments": old_segments,
        "cleaned_end": cleaned_end,
    }


def place(part_dir, files, suffix):
    for name, data in files.items():
        (part_dir / (name + suffix)).write_bytes(data)


def reopen_and_check(p):
    m = LogManager(p["orig"], clock=p["clock"])
    try:
        pl = m.get_log("t", 0)
        assert leftovers(pl.dir) == []
        assert not [q for q in pl.dir.iterdir() if q.name.endswith(".deleted")]
        offsets = [r.offset for r in records(pl)]
        assert offsets == sorted(set(offsets))
        for seg in pl.segments:
            for b in iter_batches(seg.read_all()):
                b.ensure_valid()
        assert fold(pl) == p["model"]
        return [(r.offset, r.key, r.value) for r in records(pl)], pl.segments_snapshot()
    finally:
        m.close()


def test_crash_with_only_cleaned_files_rolls_back(prepared):
    """Kafka LogLoader.removeTempFilesAndCollectSwapFiles: ``.cleaned`` files are deleted on
    load; the old segments stay (crash before the ``.cleaned -> .swap`` rename)."""
    part = prepared["orig"] / "t-0"
    place(part, prepared["files"], ".cleaned")
    got, _segs = reopen_and_check(prepared)
    assert got == prepared["original"]


def test_crash_with_swap_and_old_segments_completes(prepared):
    """Kafka LogLoader: a ``.swap`` segment replaces every segment whose base is in
    [swap base, swap next offset) and is renamed to its final name (crash right after
    ``.cleaned -> .swap``)."""
    part = prepared["orig"] / "t-0"
    place(part, prepared["files"], ".swap")
    got, segs = reopen_and_check(prepared)
    assert got == prepared["cleaned"]
    assert [s.base_offset for s in segs] == [0, prepared["cleaned_end"]]


def test_crash_with_swap_and_some_old_segments_deleted_completes(prepared):
    """Kafka LogLoader: ``.deleted`` files are removed and the ``.swap`` completed (crash
    while renaming the old segments to ``.deleted``, LocalLog.replaceSegments)."""
    part = prepared["orig"] / "t-0"
    place(part, prepared["files"], ".swap")
    for base in prepared["old_segments"][:3]:
        for s in SUFFIXES:
            f = part / f"{base:020d}{s}"
            f.rename(f.with_name(f.name + ".deleted"))
    got, _segs = reopen_and_check(prepared)
    assert got == prepared["cleaned"]


def test_crash_with_swap_and_cleaned_at_lower_or_equal_offset_rolls_back(prepared):
    """Kafka LogLoader: a ``.swap`` at or above the smallest ``.cleaned`` offset was not
    complete when the crash hit; it is deleted with the ``.cleaned`` files."""
    part = prepared["orig"] / "t-0"
    place(part, prepared["files"], ".swap")
    place(part, prepared["files"], ".cleaned")
    got, _segs = reopen_and_check(prepared)
    assert got == prepared["original"]


def test_crash_with_swap_and_cleaned_at_higher_offset_completes(prepared):
    """Kafka LogLoader: a ``.swap`` below every ``.cleaned`` offset is complete (a later
    group was still being cleaned): it is swapped in; the ``.cleaned`` goes."""
    part = prepared["orig"] / "t-0"
    place(part, prepared["files"], ".swap")
    hi = prepared["old_segments"][-2]
    for s in SUFFIXES:
        (part / f"{hi:020d}{s}.cleaned").write_bytes((part / f"{hi:020d}{s}").read_bytes())
    got, _segs = reopen_and_check(prepared)
    assert got == prepared["cleaned"]


def test_reader_of_swapped_out_segment_keeps_reading(tmp_path):
    """Kafka LocalLog.replaceSegments / asyncDeleteSegment: old segments are renamed to
    ``.deleted`` and removed only after file.delete.delay.ms, so open readers go on."""
    clock = ManualClock(T0)
    m, pl = build_log(tmp_path / "d", clock)
    try:
        model = fold(pl)
        old = pl.segments_snapshot()
        expected = {s.base_offset: s.read_all() for s in old}
        Cleaner(m).clean_partition(pl)
        assert pl.segments_snapshot() != old
        assert any(q.name.endswith(".deleted") for q in pl.dir.iterdir())
        for seg in old:
            data = seg.read_all()
            assert data == expected[seg.base_offset]
            batches = list(iter_batches(data))
            assert batches
            for b in batches:
                b.ensure_valid()
                b.records()
        assert fold(pl) == model
    finally:
        m.close()


def test_crash_during_final_rename_leaves_no_index_swap(prepared):
    """Kafka LogLoader.removeTempFilesAndCollectSwapFiles: an index ``.swap`` file is
    deleted (the index is rebuilt), a log ``.swap`` is completed. Here the crash hit
    after ``00..0.log.swap -> 00..0.log`` and ``.index.swap -> .index`` but before the
    ``.timeindex`` rename; the old segments were already ``.deleted``."""
    part = prepared["orig"] / "t-0"
    for base in prepared["old_segments"]:
        if base < prepared["cleaned_end"]:
            for s in SUFFIXES:
                f = part / f"{base:020d}{s}"
                f.rename(f.with_name(f.name + ".deleted"))
    for name, data in prepared["files"].items():
        suffix = ".swap" if name.endswith(".timeindex") else ""
        (part / (name + suffix)).write_bytes(data)
    m = LogManager(prepared["orig"], clock=prepared["clock"])
    try:
        pl = m.get_log("t", 0)
        assert [(r.offset, r.key, r.value) for r in records(pl)] == prepared["cleaned"]
        assert leftovers(pl.dir) == []
    finally:
        m.close()
