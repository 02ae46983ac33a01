"""Read-only index access for readers that do not own the log (Kafka ``OffsetIndex``).

The Spark source reads ``.index`` files while a broker appends to them, trims them on
roll and swaps them away on a clean; these tests pin what ``AbstractIndex.read_only``
promises such a reader.
"""

from __future__ import annotations

import io
import subprocess
import sys
import time

import pytest

from kompakt.log.index import IndexCorruptError
from kompakt.log.offset_index import OffsetIndex
from kompakt.log.segment import INDEX_SUFFIX, TIMEINDEX_SUFFIX, segment_file
from kompakt.log.time_index import TimeIndex


def test_read_only_offset_index_sees_the_owners_entries_in_a_preallocated_file(tmp_path):
    path = segment_file(tmp_path, 100, INDEX_SUFFIX)
    owner = OffsetIndex(path, 100, 4096)
    for i, (offset, position) in enumerate([(120, 4096), (150, 8200), (190, 12400)]):
        owner.append(offset, position)
        owner.flush()  # the entries the owner has written
        reader = OffsetIndex.read_only(path, 100)
        assert reader.entries == i + 1
        assert reader.entry(reader.entries - 1) == (offset, position)
    assert path.stat().st_size == 4096  # still preallocated: trailing zero slots skipped
    assert reader.lookup(170) == (150, 8200)
    with pytest.raises(io.UnsupportedOperation):
        reader.append(200, 9000)
    owner.close()


def test_read_only_index_keeps_its_snapshot_when_the_owner_trims_the_file(tmp_path):
    """A roll trims the index (Kafka ``trimToValidSize``); a mapped reader would fault on
    the pages past the new end, a snapshot does not notice."""
    path = segment_file(tmp_path, 0, INDEX_SUFFIX)
    owner = OffsetIndex(path, 0, 4096)
    owner.append(5, 100)
    owner.flush()
    reader = OffsetIndex.read_only(path, 0)
    owner.truncate_entries(0)
    owner.trim_to_valid_size()
    assert path.stat().st_size == 0
    assert reader.entries == 1 and reader.entry(0) == (5, 100)
    owner.close()
    reader.close()


def test_read_only_index_never_creates_or_changes_a_file(tmp_path):
    path = segment_file(tmp_path, 0, TIMEINDEX_SUFFIX)
    with pytest.raises(FileNotFoundError):
        TimeIndex.read_only(path, 0)
    assert not path.exists()
    owner = TimeIndex(path, 0, 1200)
    owner.maybe_append(1000, 3)
    owner.close()
    before = path.read_bytes()
    reader = TimeIndex.read_only(path, 0)
    assert reader.last_entry == (1000, 3)
    with pytest.raises(io.UnsupportedOperation):
        reader.truncate_to(0)
    with pytest.raises(io.UnsupportedOperation):
        reader.trim_to_valid_size()
    reader.close()
    assert path.read_bytes() == before


def test_entries_of_a_preallocated_index_after_a_crash_are_found_past_its_hole(tmp_path):
    """A crash leaves the active index at its preallocated 10 MiB, a hole after the
    entries written; reopening finds the entries from where the data ends
    (``SEEK_HOLE``) instead of reading the hole: 10,000 partitions restarted in 3.7 s
    instead of 151 s. Entries, a zeroed slot and data after it are all still counted."""
    from kompakt.log.index import _data_end

    path = segment_file(tmp_path, 0, INDEX_SUFFIX)
    owner = OffsetIndex(path, 0, 10 * 1024 * 1024)
    for i in range(1, 600):  # past one 4 KiB page
        owner.append(i * 10, i * 4096)
    owner.flush()
    size = path.stat().st_size
    assert size == 10 * 1024 * 1024  # preallocated, as a crash leaves it
    with open(path, "rb") as f:
        end = _data_end(f.fileno(), size)
    assert 599 * 8 <= end <= size  # at most the file; on file systems with holes, far less
    again = OffsetIndex(path, 0, 10 * 1024 * 1024)
    assert again.entries == 599
    assert again.entry(598) == (5990, 599 * 4096)
    owner.close()
    again.close()


def test_new_entries_are_served_from_memory_and_the_file_holds_a_prefix(tmp_path):
    """Entries are written a page at a time (``PENDING_BYTES``), not one ``pwrite``
    per append: the owner's lookups see every entry, a reader of the file (the Spark
    source) at least a prefix of them, which is still a correct sparse index (Kafka's
    ``OffsetIndex.lookup``: the largest entry <= the target, a walk forward from it)."""
    from kompakt.log.index import PENDING_BYTES

    path = segment_file(tmp_path, 0, INDEX_SUFFIX)
    owner = OffsetIndex(path, 0, 1 << 20)
    n = PENDING_BYTES // OffsetIndex.ENTRY_SIZE + 3
    for i in range(1, n + 1):
        owner.append(i * 10, i * 100)
    assert owner.entries == n
    assert owner.lookup(n * 10 + 5) == (n * 10, n * 100)
    assert owner.last_entry == (n * 10, n * 100)
    reader = OffsetIndex.read_only(path, 0)
    assert 0 < reader.entries <= n
    assert [reader.entry(i) for i in range(reader.entries)] == [
        owner.entry(i) for i in range(reader.entries)
    ]
    found, pos = reader.lookup(n * 10 + 5)
    assert found <= n * 10 and pos == found * 10  # lands on an earlier entry of the log
    owner.flush()
    assert OffsetIndex.read_only(path, 0).entries == n
    owner.close()


def test_an_index_left_by_a_crash_before_its_entries_were_written_passes_the_sanity_check(
    tmp_path,
):
    """SIGKILL loses the entries not yet written: the newest ones. The file left is a
    shorter index (Kafka's ``sanityCheck`` holds), and a lookup past it starts earlier."""
    path = segment_file(tmp_path, 0, INDEX_SUFFIX)
    owner = OffsetIndex(path, 0, 4096)
    owner.append(10, 100)
    owner.flush()
    owner.append(20, 200)
    owner.append(30, 300)  # neither flushed nor closed: what a kill leaves
    again = OffsetIndex(path, 0, 4096)
    again.sanity_check(400)
    assert again.entries == 1 and again.lookup(35) == (10, 100)
    owner.close()
    again.close()


def test_a_failed_appends_rollback_forgets_its_unwritten_entries(tmp_path):
    """``LogSegment.append`` cuts the indexes back to their count before a failed
    write: the entries it added are gone from memory and never reach the file."""
    path = segment_file(tmp_path, 0, INDEX_SUFFIX)
    owner = OffsetIndex(path, 0, 4096)
    owner.append(10, 100)
    owner.flush()
    owner.append(20, 200)
    owner.append(30, 300)
    owner.entries = 2
    owner.append(40, 400)
    assert [owner.entry(i) for i in range(3)] == [(10, 100), (20, 200), (40, 400)]
    owner.trim_to_valid_size()
    assert path.stat().st_size == 3 * OffsetIndex.ENTRY_SIZE
    owner.close()
    reread = OffsetIndex.read_only(path, 0)
    assert [reread.entry(i) for i in range(3)] == [(10, 100), (20, 200), (40, 400)]


def test_reads_after_a_kill_with_index_entries_unwritten_find_every_offset(tmp_path):
    """A log killed with index entries in memory only (appended after the last flush)
    restarts, recovers, and reads every offset from the right batch."""
    from kompakt.log.manager import LogManager
    from kompakt.record.decode import iter_batches
    from kompakt.record.encode import build_simple_batch

    now = int(time.time() * 1000)  # older timestamps roll a segment per append

    def one(i):
        return build_simple_batch([(b"k%d" % i, b"v" * 50)], timestamp=now + i)

    m = LogManager(tmp_path / "d")
    m.create_topic("t", 1, {"index.interval.bytes": "1"})
    plog = m.get_log("t", 0)
    for i in range(20):
        plog.append(one(i))
    m.flush_all()
    for i in range(20, 60):
        plog.append(one(i))
    assert plog.active_segment.offset_index.entries > 40
    m._release_lock()  # a kill: no close, no clean-shutdown marker
    m2 = LogManager(tmp_path / "d")
    plog2 = m2.get_log("t", 0)
    assert plog2.log_end_offset == 60
    for off in range(60):
        first = next(iter_batches(plog2.read(off, 1 << 16)))
        assert first.header.base_offset == off
    assert plog2.offset_for_timestamp(now + 45)[0] == 45
    m2.close()


_FAILED_WRITE = """
import errno, resource, signal, sys
from pathlib import Path
from kompakt.log.index import IndexCorruptError
from kompakt.log.offset_index import OffsetIndex
path = Path(sys.argv[1])
index = OffsetIndex(path, 0, 1 << 20)  # preallocated before the limit
for i in range(1, 101):
    index.append(i * 10, i * 100)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (200, resource.RLIM_INFINITY))
try:
    index.flush()
except OSError as exc:
    assert exc.errno == errno.EFBIG, exc
else:
    raise AssertionError("the write past the file-size limit did not fail")
assert index.lookup(995) == (990, 9900)  # still served from memory
resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
index.flush()
assert OffsetIndex.read_only(path, 0).entries == 100
index.close()
print("ok")
"""


def test_entries_whose_write_failed_stay_pending_and_the_next_flush_writes_them(tmp_path):
    """A full disk fails the deferred write at the flush (Kafka's flush path: the
    caller's storage error, the log dir offline), and loses no entry: the ones not
    written stay in memory, served to lookups, until a later write succeeds. The
    disk is full here by a file-size limit (EFBIG), in a child process."""
    res = subprocess.run(
        [sys.executable, "-c", _FAILED_WRITE, str(segment_file(tmp_path, 0, INDEX_SUFFIX))],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0 and "ok" in res.stdout, res.stdout + res.stderr


def test_an_entry_dropped_by_a_truncation_or_rollback_no_longer_bounds_the_next_one(tmp_path):
    """Kafka's ``OffsetIndex.append`` refuses an offset not past the last entry and
    ``TimeIndex.maybeAppend`` skips a timestamp not past it: the last entry as it is
    after a truncation (or a failed append's rollback), not the one written before."""
    offsets = OffsetIndex(segment_file(tmp_path, 100, INDEX_SUFFIX), 100, 4096)
    times = TimeIndex(segment_file(tmp_path, 100, TIMEINDEX_SUFFIX), 100, 4096)
    offsets.append(110, 10)
    offsets.append(130, 50)
    times.maybe_append(5, 110)
    times.maybe_append(9, 130)
    offsets.truncate_to(120)
    times.truncate_to(120)
    offsets.append(120, 40)
    times.maybe_append(7, 120)
    assert offsets.lookup(125) == (120, 40) and times.lookup(8) == (7, 120)
    with pytest.raises(IndexCorruptError):
        offsets.append(115, 60)
    offsets.entries = times.entries = 1  # a rollback to before the entries just written
    offsets.append(112, 20)
    times.maybe_append(6, 112)
    assert offsets.entries == times.entries == 2 and times.lookup(6) == (6, 112)
    offsets.close()
    times.close()
