"""A live segment's file is written ahead with zeros to the next 64 KiB boundary
(:data:`kompakt.log.syncs.WRITE_AHEAD`) by appends of 16 KiB or more, so they land in
whole page-cache folios.
Readers stop at the segment's size; a roll, a close and a truncation cut the file to its
last batch, as Kafka's ``FileRecords.trim`` cuts a preallocated segment
(``LogSegment.onBecomeInactiveSegment``); after a crash, recovery cuts the zeros as any
invalid tail (``LogSegment.recover``)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from kompakt.log.manager import CLEAN_SHUTDOWN_FILE, LogManager
from kompakt.log.syncs import WRITE_AHEAD, WRITE_AHEAD_FROM
from kompakt.record.decode import iter_batches
from kompakt.record.encode import build_simple_batch

TS = 1_700_000_000_000


def batch(i: int, size: int = WRITE_AHEAD_FROM) -> bytes:
    return build_simple_batch([(b"k%d" % i, b"v" * size)], timestamp=TS + i)


def offsets_read(plog) -> list[int]:
    """Every batch's base offset, read through the log as a fetch reads it."""
    found: list[int] = []
    while not found or found[-1] + 1 < plog.log_end_offset:
        found += [b.header.base_offset for b in iter_batches(plog.read(len(found), 1 << 24))]
    return found


def log_of_three(manager):
    """A new partition's log with three one-record batches."""
    manager.create_topic("t", 1)
    plog = manager.get_log("t", 0)
    for i in range(3):
        plog.append(batch(i))
    return plog


def test_a_live_segment_is_written_ahead_with_zeros_that_no_reader_sees(manager):
    plog = log_of_three(manager)
    seg = plog.active_segment
    raw = seg.log_path.read_bytes()
    assert len(raw) == WRITE_AHEAD > seg.size
    assert raw[seg.size :] == bytes(len(raw) - seg.size)
    assert offsets_read(plog) == [0, 1, 2]
    # an append past the written-ahead end writes ahead again, to the next boundary
    plog.append(batch(3, WRITE_AHEAD))
    assert seg.log_path.stat().st_size == 2 * WRITE_AHEAD
    assert offsets_read(plog) == [0, 1, 2, 3]


def test_small_appends_write_nothing_ahead(manager):
    """A partition of small appends gains little from it and would keep 64 KiB of zeros
    on disk: its file ends at its last batch."""
    manager.create_topic("t", 1)
    plog = manager.get_log("t", 0)
    for i in range(3):
        plog.append(batch(i, 100))
    seg = plog.active_segment
    assert seg.log_path.stat().st_size == seg.size


def test_a_roll_cuts_the_old_segment_to_its_last_batch(manager):
    """Kafka's ``onBecomeInactiveSegment`` trims the log file: the cleaner, tiering and
    Spark read a segment no longer written by its file's size."""
    manager.create_topic("t", 1)
    plog = manager.get_log("t", 0)
    plog.append(batch(0))
    old = plog.active_segment
    plog.roll()
    assert old.log_path.stat().st_size == old.size
    plog.append(batch(1))
    assert offsets_read(plog) == [0, 1]


def test_truncation_cuts_the_zeros_with_the_batches(manager):
    """Recovery's cut of an invalid tail (``LogSegment.truncateTo``)."""
    seg = log_of_three(manager).active_segment
    second_end = len(batch(0)) * 2
    seg.truncate_to_position(second_end)
    assert seg.log_path.stat().st_size == seg.size == second_end
    assert [b.header.base_offset for b in seg.iter_batches()] == [0, 1]


def test_a_clean_close_leaves_each_file_ending_at_its_last_batch(data_dir: Path, clock):
    m = LogManager(data_dir, clock=clock)
    m.create_topic("t", 2)
    for p in (0, 1):
        m.get_log("t", p).append(batch(p))
    paths = [m.get_log("t", p).active_segment.log_path for p in (0, 1)]
    m.close()
    for path in paths:
        raw = path.read_bytes()
        assert [b.position + len(b.buffer) for b in iter_batches(raw)] == [len(raw)]


def test_a_crash_leaves_zeros_that_recovery_cuts_before_the_next_append(
    tmp_path: Path, data_dir: Path, clock
):
    """The files as a SIGKILL leaves them (no clean-shutdown marker, zeros past the last
    batch): the log ends at the last batch and the next append follows it."""
    m = LogManager(data_dir, clock=clock)
    m.create_topic("t", 1)
    for i in range(5):
        m.get_log("t", 0).append(batch(i))
    crashed = tmp_path / "crashed"
    shutil.copytree(data_dir, crashed)  # while open: what a crash leaves on disk
    m.close()
    assert not (crashed / CLEAN_SHUTDOWN_FILE).exists()
    assert (crashed / "t-0" / "00000000000000000000.log").stat().st_size == 2 * WRITE_AHEAD
    again = LogManager(crashed, clock=clock)
    try:
        plog = again.get_log("t", 0)
        assert plog.log_end_offset == 5
        plog.append(batch(5))
        assert offsets_read(plog) == [0, 1, 2, 3, 4, 5]
    finally:
        again.close()


def test_zeros_past_a_clean_shutdown_are_cut_at_load(data_dir: Path, clock):
    """Power lost after the close's cut but before it reached the disk: the file ends
    in zeros despite the marker, and the load recovers it rather than append after
    them (where every later batch would be hidden from readers)."""
    m = LogManager(data_dir, clock=clock)
    m.create_topic("t", 1)
    m.get_log("t", 0).append(batch(0))
    path = m.get_log("t", 0).active_segment.log_path
    m.close()
    with open(path, "ab") as f:
        f.write(bytes(WRITE_AHEAD - path.stat().st_size))
    again = LogManager(data_dir, clock=clock)
    try:
        plog = again.get_log("t", 0)
        plog.append(batch(1))
        assert offsets_read(plog) == [0, 1]
    finally:
        again.close()


def test_a_disk_with_room_for_the_records_but_not_the_zeros_takes_the_records(tmp_path: Path):
    """Bad input loses nothing, and neither does a nearly full disk: the zeros are an
    optimisation, so an append that fits is not refused (KAFKA_STORAGE_ERROR, the log
    dir offline) for want of room for them."""
    mnt = tmp_path / "fs"
    mnt.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True
    )
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.decode().strip()}")
    try:
        m = LogManager(mnt / "data")
        m.create_topic("t", 1)
        plog = m.get_log("t", 0)
        st = os.statvfs(mnt)
        (mnt / "filler").write_bytes(bytes(st.f_bavail * st.f_frsize - 40_000))
        assert plog.append(batch(0, 20_000)).first_offset == 0
        assert plog.append(batch(1, 100)).first_offset == 1
        assert offsets_read(plog) == [0, 1]
        m.close()
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_zeros_written_ahead_are_no_damage_so_recovery_keeps_the_later_segments(
    data_dir: Path, clock, caplog
):
    """Recovery deletes the segments after a damaged one (Kafka's LogLoader); zeros
    written ahead are cut without that, and without a warning of invalid bytes."""
    m = LogManager(data_dir, clock=clock)
    m.create_topic("t", 1)
    plog = m.get_log("t", 0)
    plog.append(batch(0))
    first = plog.active_segment.log_path
    plog.roll()
    plog.append(batch(1))
    m.close()
    with open(first, "ab") as f:  # as if the roll's cut had not reached the disk
        f.write(bytes(WRITE_AHEAD - first.stat().st_size))
    (data_dir / CLEAN_SHUTDOWN_FILE).unlink()
    (data_dir / "recovery-point-offset-checkpoint").unlink()  # recover every segment
    with caplog.at_level("INFO", logger="kompakt.log"):
        again = LogManager(data_dir, clock=clock)
    try:
        plog = again.get_log("t", 0)
        assert offsets_read(plog) == [0, 1]
        assert first.stat().st_size == plog.segments[0].size
    finally:
        again.close()
    assert "zeros written ahead" in caplog.text
    assert "invalid bytes" not in caplog.text and "deleting" not in caplog.text
