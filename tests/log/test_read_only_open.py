"""``LogManager(read_only=True)``: a dry run opens a data dir and changes no byte of it.

Kafka's read-only tools (``kafka-dump-log.sh``, ``kafka-log-dirs.sh``) never write to a
log dir. A read-only open of a dir a broker left uncleanly (killed, or copied while it
ran) sees what a writable open would see after recovery, but recovers in memory: no
index is rebuilt on disk, no torn tail truncated, no ``.lock``, checkpoint,
``meta.properties`` or clean-shutdown marker is written.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from tree_kit import changed, snapshot

from kompakt.errors import KafkaStorageError, LogDirLockedError
from kompakt.log.manager import LOCK_FILE, LogManager, is_data_dir
from kompakt.log.segment import INDEX_SUFFIX, LOG_SUFFIX, SWAP_SUFFIX, segment_file
from kompakt.record.encode import build_simple_batch


def _append(plog, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        plog.append(build_simple_batch([(b"k%d" % (i % 5), b"v%d" % i)], timestamp=1000 + i))


@pytest.fixture
def crashed(tmp_path: Path) -> Path:
    """A data dir whose broker was killed: no clean-shutdown marker, the active
    segment's indexes preallocated, a torn last batch, an inactive segment without its
    ``.index``, an orphan index and the leftovers of a finished clean."""
    d = tmp_path / "crashed"
    m = LogManager(d)
    m.create_topic("t", 1, {"cleanup.policy": "compact", "segment.bytes": "400"})
    plog = m.get_log("t", 0)
    _append(plog, 30)
    m.flush_all()
    active, second = plog.active_segment, plog.segments[1]
    m._release_lock()  # killed: no close
    with open(active.log_path, "r+b") as f:
        f.truncate(active.size - 7)
    segment_file(plog.dir, second.base_offset, INDEX_SUFFIX).unlink()
    segment_file(plog.dir, 99_999, INDEX_SUFFIX).write_bytes(b"\0" * 8)
    segment_file(plog.dir, 0, LOG_SUFFIX, ".deleted").write_bytes(b"old")
    (d / LOCK_FILE).unlink()  # copied without it
    return d


def _view(m: LogManager) -> tuple:
    plog = m.get_log("t", 0)
    return (
        plog.log_end_offset,
        [s.base_offset for s in plog.segments],
        [s.size for s in plog.segments],
        [[s.offset_index.entry(i) for i in range(s.offset_index.entries)] for s in plog.segments],
        [(r.offset, r.key, r.value) for b in plog.iter_batches() for r in b.records()],
    )


def test_read_only_open_of_a_crashed_dir_recovers_in_memory_only(crashed: Path, tmp_path: Path):
    """Kafka's LogLoader.recoverLog, without the writes: the read-only view equals what a
    writable open recovers (same end, segments, sizes, index entries, records)."""
    copy = tmp_path / "copy"
    shutil.copytree(crashed, copy)
    before = snapshot(crashed)
    with LogManager(crashed, read_only=True) as ro:
        seen = _view(ro)
        assert not ro.was_clean_shutdown
    assert changed(before, snapshot(crashed)) == set()
    with LogManager(copy) as rw:
        assert _view(rw) == seen
    assert seen[0] == 29  # the torn 30th batch is not there


def test_read_only_open_makes_no_lock_and_is_refused_while_an_owner_holds_it(tmp_path: Path):
    """One owner at a time (Kafka's .lock): an existing lock is held shared, none is
    made; a broker's (exclusive) lock refuses the read-only open."""
    d = tmp_path / "d"
    with LogManager(d) as m:
        m.create_topic("t", 1)
        with pytest.raises(LogDirLockedError):
            LogManager(d, read_only=True)
    (d / LOCK_FILE).unlink()
    before = snapshot(d)
    with LogManager(d, read_only=True) as ro:
        assert ro.partition_count("t") == 1
    assert snapshot(d) == before and not (d / LOCK_FILE).exists()


def test_read_only_open_refuses_an_interrupted_swap_and_changes_nothing(crashed: Path):
    """Only a writable open finishes or rolls back a swap (Kafka's LogLoader)."""
    part = crashed / "t-0"
    segment_file(part, 0, LOG_SUFFIX, SWAP_SUFFIX).write_bytes(b"")
    before = snapshot(crashed)
    with pytest.raises(KafkaStorageError, match="interrupted segment swap"):
        LogManager(crashed, read_only=True)
    assert snapshot(crashed) == before


def test_read_only_open_of_a_listed_partition_without_folder_makes_none(tmp_path: Path):
    d = tmp_path / "d"
    with LogManager(d) as m:
        m.create_topic("t", 2)
    shutil.rmtree(d / "t-1")
    before = snapshot(d)
    with LogManager(d, read_only=True) as ro:
        assert ro.get_log("t", 1).log_end_offset == 0
    assert snapshot(d) == before


def test_close_deletes_what_waits_for_file_delete_delay(tmp_path: Path):
    """A closing process gives the disk back: Kafka's broker deletes ``.deleted`` files
    after ``file.delete.delay.ms``; an offline command exits before that."""
    with LogManager(tmp_path / "d") as m:
        m.create_topic("t", 1)
        old = tmp_path / "d" / "t-0" / "00000000000000000000.log.deleted"
        old.write_bytes(b"x" * 100)
        m.deleter.schedule([old], delay_ms=60_000)
        assert old.exists()
    assert not old.exists()


def test_partition_shaped_folders_do_not_make_a_data_dir(tmp_path: Path):
    """Kafka's rule: a log dir is formatted (meta.properties); a user's folder holding
    ``users-0/00000000000000000000.log`` is not one."""
    f = tmp_path / "f"
    (f / "users-0").mkdir(parents=True)
    (f / "users-0" / "00000000000000000000.log").write_text("a text file\n")
    (f / "users-0" / "partition.metadata").write_text("version: 0\n")
    assert not is_data_dir(f)
    (f / "meta.properties").write_text("version=1\nnode.id=1\ncluster.id=x\n")
    assert is_data_dir(f)
