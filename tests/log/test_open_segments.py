"""The open-segment cap (``kompakt.log.max.open.segments``), lazy indexes (Kafka's
``LazyIndex``) and the clean-shutdown fast path of the loader.

Kafka keeps every segment's channel open and maps an index on first use; kompakt also
opens the ``.log`` lazily and closes the least recently used segment beyond the cap, so
its descriptors are bounded by the config, not by the partition count. These tests count
the real descriptors of this process (``/proc/self/fd``) that point into the data dir.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from kompakt.log.manager import CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_CHECKPOINT, LogManager
from kompakt.log.open_segments import OpenSegments
from kompakt.record.decode import iter_batches
from kompakt.record.encode import build_simple_batch

CAP = 8
FDS_PER_SEGMENT = 5  # .log, and .index / .timeindex each a file plus its mmap's duplicate
LIMIT = CAP * FDS_PER_SEGMENT + 1  # and the data dir's .lock
SMALL = {"segment.bytes": "600", "index.interval.bytes": "100", "cleanup.policy": "compact"}


def fds_under(root: Path) -> int:
    """Descriptors of this process open on files under ``root``."""
    prefix = str(root.resolve())
    n = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}").startswith(prefix):
                n += 1
        except OSError:
            continue
    return n


def fill(m: LogManager, topic: str, parts: int, rounds: int):
    """Round-robin appends, one record per partition per round (timestamps increase);
    returns {(partition, offset): (key, value, timestamp)}."""
    model = {}
    ts0 = m.clock()
    for r in range(rounds):
        for p in range(parts):
            key, value, ts = b"k%d" % (r % 7), b"v%d-%d" % (p, r) + b"x" * 60, ts0 + r * 1000
            info = m.get_log(topic, p).append(build_simple_batch([(key, value)], timestamp=ts))
            model[(p, info.first_offset)] = (key, value, ts)
    return model


def read_back(m: LogManager, topic: str, parts: int) -> dict:
    out = {}
    for p in range(parts):
        plog = m.get_log(topic, p)
        offset = plog.log_start_offset
        while offset < plog.log_end_offset:
            data = plog.read(offset, 1 << 16)
            for b in iter_batches(data):
                for rec in b.records():
                    if rec.offset >= offset:
                        out[(p, rec.offset)] = (rec.key, rec.value, rec.timestamp)
                offset = b.header.last_offset + 1
    return out


def test_fds_stay_within_the_open_segment_cap_across_append_and_fetch_of_every_partition(
    data_dir: Path, clock
):
    """More partitions (60, three to five segments each) than the cap (8): every
    partition is written and read back whole, and the descriptors on the data dir never
    exceed 5 x cap (plus the segments in use at that instant: none between calls)."""
    m = LogManager(data_dir, clock=clock, max_open_segments=CAP)
    try:
        m.create_topic("t", 60, SMALL)
        assert fds_under(data_dir) <= LIMIT
        model = fill(m, "t", 60, 20)
        assert sum(len(m.get_log("t", p).segments) for p in range(60)) > 3 * 60
        assert fds_under(data_dir) <= LIMIT
        assert read_back(m, "t", 60) == model
        assert fds_under(data_dir) <= LIMIT
        assert len(m.open_segments) <= CAP
        assert m.open_segments.evictions > 0
    finally:
        m.close()
    assert fds_under(data_dir) == 0


def test_lazy_index_answers_fetch_by_offset_and_timestamp_after_it_was_evicted(
    data_dir: Path, clock
):
    """Kafka's ``LazyIndex``: an index closed (here by the cap) and mapped again on the
    next lookup gives the same answers: a fetch at every offset starts at the batch
    holding it, ListOffsets by every timestamp finds the first record at or after it."""
    m = LogManager(data_dir, clock=clock, max_open_segments=2)
    try:
        m.create_topic("t", 3, SMALL)
        model = fill(m, "t", 3, 40)
        plog = m.get_log("t", 0)
        sealed = plog.segments[:-1]
        assert len(sealed) >= 4 and any(s.offset_index.entries for s in sealed)
        fill(m, "t", 3, 0)
        for p in (1, 2):  # touch the others: partition 0's segments are closed
            read_back(m, "t", p)
        assert not any(s.files_open for s in sealed)
        for (p, offset), (_key, value, ts) in sorted(model.items()):
            if p:
                continue
            first = next(iter_batches(plog.read(offset, 1 << 16)))
            assert first.header.base_offset <= offset <= first.header.last_offset
            assert [r.value for r in first.records() if r.offset == offset] == [value]
            assert plog.offset_for_timestamp(ts) == (offset, ts)
            assert plog.offset_for_timestamp(ts - 1) == (offset, ts)
        assert fds_under(data_dir) <= 2 * FDS_PER_SEGMENT + 1
    finally:
        m.close()


def test_clean_shutdown_reopens_without_reading_sealed_segments_and_unclean_recovers(
    data_dir: Path, clock
):
    """Kafka's ``.kafka_cleanshutdown``: after a clean close nothing is recovered, so a
    sealed segment is not even opened at start (only the active segment's tail is read);
    after a crash (no marker, no recovery-point checkpoint yet) every segment is
    recovered, which rebuilds a damaged index before any read uses it."""
    m = LogManager(data_dir, clock=clock)
    m.create_topic("t", 2, SMALL)
    model = fill(m, "t", 2, 30)
    m.close()
    assert (data_dir / CLEAN_SHUTDOWN_FILE).exists()

    m = LogManager(data_dir, clock=clock)
    try:
        assert m.was_clean_shutdown
        for p in range(2):
            segs = m.get_log("t", p).segments
            assert len(segs) > 3
            assert not any(s.files_open for s in segs[:-1])
        assert read_back(m, "t", 2) == model
    finally:
        m.close()

    sealed = m.get_log("t", 0).segments[1]
    index = sealed.offset_index.path
    assert index.stat().st_size >= 8
    with open(index, "r+b") as f:  # entries pointing past the segment's end
        f.write(b"\x7f" * 8)
    (data_dir / CLEAN_SHUTDOWN_FILE).unlink()  # as a SIGKILL leaves it
    (data_dir / RECOVERY_POINT_CHECKPOINT).unlink()
    m = LogManager(data_dir, clock=clock)
    try:
        assert not m.was_clean_shutdown
        seg = m.get_log("t", 0).segments[1]
        assert seg.files_open  # recovered at start, not on first use
        seg.sanity_check()
        assert read_back(m, "t", 2) == model
    finally:
        m.close()


def test_a_damaged_index_found_after_a_clean_shutdown_is_rebuilt_when_first_mapped(
    data_dir: Path, clock
):
    """Beyond Kafka, which trusts indexes after a clean shutdown: the lazy load checks an
    index when it is first mapped and rebuilds it from the ``.log`` if it fails."""
    m = LogManager(data_dir, clock=clock)
    m.create_topic("t", 1, SMALL)
    model = fill(m, "t", 1, 30)
    m.close()
    index = next(p for p in sorted((data_dir / "t-0").glob("*.index")) if p.stat().st_size)
    with open(index, "r+b") as f:
        f.write(b"\x7f" * 8)
    m = LogManager(data_dir, clock=clock)
    try:
        assert m.was_clean_shutdown
        assert read_back(m, "t", 1) == model
        for seg in m.get_log("t", 0).segments:
            seg.sanity_check()
    finally:
        m.close()


def test_segments_renamed_for_deletion_keep_their_files_for_readers(tmp_path: Path):
    """A segment swapped out by the cleaner (``.deleted``) no longer counts against the
    cap: its files stay open for the fetches still reading it until
    ``file.delete.delay.ms`` closes it, whatever else is opened meanwhile."""
    from kompakt.log.segment import DELETED_SUFFIX, LogSegment

    cap = OpenSegments(1)
    old = LogSegment(tmp_path, 0, handles=cap)
    old.change_suffix(DELETED_SUFFIX)
    other = LogSegment(tmp_path, 100, handles=cap)
    another = LogSegment(tmp_path, 200, handles=cap)
    assert old.files_open and another.files_open and not other.files_open
    assert len(cap) == 1
    for seg in (old, other, another):
        seg.close()


def test_a_segment_in_use_is_not_closed_under_its_reader(tmp_path: Path):
    """The cap only closes a segment whose lock it gets at once: one held by a reader
    (another thread here, or the evicting thread itself) keeps its files and stays in
    the LRU, to be closed by a later eviction once it is free."""
    from kompakt.log.segment import LogSegment

    cap = OpenSegments(1)
    busy = LogSegment(tmp_path, 0, handles=cap)
    holding, release = threading.Event(), threading.Event()

    def reader() -> None:
        with busy.lock:
            holding.set()
            release.wait(30)

    t = threading.Thread(target=reader)
    t.start()
    try:
        assert holding.wait(30)
        other = LogSegment(tmp_path, 100, handles=cap)
        assert busy.files_open and other.files_open
        assert len(cap) == 2
    finally:
        release.set()
        t.join(30)
    with other.lock:  # the evicting thread's own segment in use: left open too
        third = LogSegment(tmp_path, 200, handles=cap)
        assert other.files_open and third.files_open and not busy.files_open
    fourth = LogSegment(tmp_path, 300, handles=cap)
    assert not other.files_open and not third.files_open and fourth.files_open
    assert cap.evictions == 3
    for seg in (busy, other, third, fourth):
        seg.close()


def test_closing_a_segment_whose_files_the_cap_closed_writes_its_index_and_leaves_the_cap(
    tmp_path: Path,
):
    """Index entries are written a page at a time: an active segment the cap closed
    with entries still in memory reopens its index at close to write them, and is not
    left in the cap's list by that reopening."""
    from kompakt.log.offset_index import OffsetIndex
    from kompakt.log.segment import LogSegment

    cap = OpenSegments(1)
    seg = LogSegment(tmp_path, 0, handles=cap)
    seg.offset_index.append(5, 100)  # in memory
    other = LogSegment(tmp_path, 100, handles=cap)
    assert not seg.files_open and len(cap) == 1
    seg.close()
    assert len(cap) == 0  # the reopening took `other`'s place, the close forgot it
    assert OffsetIndex.read_only(seg.offset_index.path, 0).lookup(7) == (5, 100)
    other.close()


@pytest.mark.parametrize("cap", [0, -1])
def test_the_cap_must_be_positive(cap: int):
    with pytest.raises(ValueError, match="at least 1"):
        OpenSegments(cap)
