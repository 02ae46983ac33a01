"""A log's flushes (Kafka's ``UnifiedLog.flush`` / ``LocalLog.flush``): the fsyncs run
without the log's lock, acks=all's flush fsyncs only the ``.log`` files and leaves the
indexes to recovery, and a new segment's directory entry is fsynced with it."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from shared_kit import wait_for

from kompakt.log.manager import LogManager
from kompakt.record.encode import build_simple_batch

TS = 1_700_000_000_000


def batch(i: int, size: int = 50) -> bytes:
    return build_simple_batch([(b"k%d" % i, b"v" * size)], timestamp=TS + i)


class FsyncLog:
    """Every fsync of the process, by the path of its descriptor; one thread's can be
    held (a stalled disk) until :attr:`gate` is set."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, stall_thread: str | None = None):
        self.paths: list[str] = []
        self.gate = threading.Event()
        self.stalled = threading.Event()
        real = os.fsync

        def fsync(fd: int) -> None:
            self.paths.append(os.readlink(f"/proc/self/fd/{fd}"))
            if threading.current_thread().name == stall_thread:
                self.stalled.set()
                self.gate.wait(30)
            real(fd)

        monkeypatch.setattr(os, "fsync", fsync)

    def names(self) -> list[str]:
        return [Path(p).name for p in self.paths]


@pytest.mark.parametrize("how", ["flush", "flush_records"])
def test_an_append_goes_on_while_the_flush_fsyncs(manager, monkeypatch, how):
    """Kafka's ``UnifiedLog.flush`` takes the log's lock only to update the recovery
    point; ``LocalLog.flush`` fsyncs the segments without it. Was: the fsync ran under
    the log's lock, so every append (another client's Produce) waited for the disk."""
    manager.create_topic("t", 1)
    plog = manager.get_log("t", 0)
    plog.append(batch(0))
    disk = FsyncLog(monkeypatch, stall_thread="flusher")
    flusher = threading.Thread(target=getattr(plog, how), name="flusher")
    flusher.start()
    try:
        wait_for(disk.stalled.is_set, "the flush's fsync to start")
        appended: list[int] = []
        appender = threading.Thread(
            target=lambda: appended.append(plog.append(batch(1)).first_offset)
        )
        appender.start()
        wait_for(lambda: appended, "the append during the fsync", timeout=10)
        assert appended == [1]
    finally:
        disk.gate.set()
        flusher.join(30)
    appender.join(30)
    # the flush covered what it saw; the append made meanwhile waits for the next one
    assert plog.durable_offset == 1
    plog.flush_records()
    assert plog.durable_offset == 2


def test_acks_all_flush_fsyncs_the_log_only_and_recovery_rebuilds_the_indexes(
    data_dir, clock, monkeypatch
):
    """acks=all needs the records on disk, not the indexes: they are derived, and Kafka's
    ``LogLoader.recoverLog`` rebuilds them for every segment from the recovery point,
    which this flush leaves where it was. So a power loss that drops the unflushed
    index pages loses no acknowledged record, and offsets and times still resolve."""
    m = LogManager(data_dir, clock=clock)
    m.create_topic("t", 1, {"index.interval.bytes": "100"})
    plog = m.get_log("t", 0)
    for i in range(20):
        plog.append(batch(i))
    seg = plog.active_segment
    assert seg.offset_index.entries > 3 and seg.time_index.entries > 3
    disk = FsyncLog(monkeypatch)
    plog.flush_records()
    assert plog.durable_offset == 20 and plog.recovery_point == 0
    assert not [n for n in disk.names() if n.endswith((".index", ".timeindex"))]
    assert "00000000000000000000.log" in disk.names()
    assert seg.offset_index.dirty and seg.time_index.dirty

    # a power loss: the index pages never reached the disk; no clean-shutdown marker
    m._release_lock()
    for path in (seg.offset_index.path, seg.time_index.path):
        path.write_bytes(bytes(path.stat().st_size))
    m2 = LogManager(data_dir, clock=clock)
    try:
        plog2 = m2.get_log("t", 0)
        assert plog2.log_end_offset == 20
        seg2 = plog2.active_segment
        assert seg2.offset_index.entries == seg.offset_index.entries
        assert seg2.time_index.entries >= seg.time_index.entries
        assert seg2.translate_offset(17)[1].base_offset == 17
        assert plog2.offset_for_timestamp(TS + 13) == (13, TS + 13)
    finally:
        m2.close()


def test_a_new_segments_directory_entry_is_fsynced_by_the_next_flush(manager, monkeypatch):
    """Kafka's ``LocalLog.flush``: "If there are any new segments, we need to flush the
    parent directory for crash consistency" (``Utils.flushDirIfExists``). Was: acks=all
    fsynced the new segment's file but never its directory entry, which a power loss
    can drop with every record in it. A flush with no new segment leaves the dir be."""
    manager.create_topic("t", 1, {"segment.bytes": "300"})
    plog = manager.get_log("t", 0)
    plog.append(batch(0))
    plog.flush_records()
    disk = FsyncLog(monkeypatch)
    while len(plog.segments) == 1:
        plog.append(batch(plog.log_end_offset))
    new = plog.active_segment
    disk.paths.clear()  # the roll fsynced the old segment (and the dir before the new file)
    plog.flush_records()
    assert str(plog.dir) in disk.paths
    assert str(new.log_path) in disk.paths
    disk.paths.clear()
    plog.append(batch(plog.log_end_offset))
    plog.flush_records()
    assert disk.paths == [str(new.log_path)]
