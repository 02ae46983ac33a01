"""Writes and fsyncs of a log's files: a record set written in one ``pwritev``
(:func:`pwrite_all`), a live segment's written ahead to whole page-cache folios
(:func:`append_ahead`) and read back without those zeros (:func:`file_batches`), and
fsyncs that run outside the owner's lock (Kafka's ``LocalLog.flush`` walks the segments
and fsyncs them without the log's lock; only the recovery point is updated under it).

A file's writes are counted (:class:`Unsynced`); a flush *claims* them under the
owner's lock (a duplicate of the descriptor and the count it covers), releases the
lock, fsyncs, then marks the count synced. Appends and reads go on meanwhile; the
open-segment cap may close the original descriptor (the duplicate stays valid, and an
fsync of either flushes the same file); and a second flush running at the same time
does not take the first one's fsync, still in flight, as done: the count is marked
synced only once an fsync that covered it returned.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable, Generator
from dataclasses import dataclass

from kompakt.errors import CorruptRecordError
from kompakt.record.decode import RecordBatch, iter_batches

Buffer = bytes | bytearray | memoryview
_IOV_MAX = os.sysconf("SC_IOV_MAX")  # buffers one pwritev takes (1024 on Linux)


def pwrite_all(fd: int, pieces: list[Buffer], position: int) -> int:
    """Write ``pieces`` back to back at ``position`` and return their length: one
    ``pwritev`` (one syscall for a record set and its new batch headers), then,
    after a short write or beyond ``IOV_MAX`` pieces, the rest joined."""
    total = sum(map(len, pieces))
    written = 0
    if len(pieces) == 1:
        rest = memoryview(pieces[0])
    else:
        if len(pieces) <= _IOV_MAX:
            written = os.pwritev(fd, pieces, position)
            if written == total:
                return total
        rest = memoryview(b"".join(pieces))
    while written < total:
        written += os.pwrite(fd, rest[written:], position + written)
    return total


# A live segment's file is written ahead with zeros to the next 64 KiB boundary: the
# next append then lands in page-cache folios made whole and aligned, where a write
# that starts and ends mid-page makes the kernel build small ones around it. On this
# machine's ext4 a 61 KB append took 18 us so and 23-29 us without. Only appends of
# WRITE_AHEAD_FROM bytes or more do it: a partition of small ones gains little and
# would keep 64 KiB of zeros on disk. The bytes past the segment's size are never read
# (readers stop at the size), and a roll, a close and a truncation cut the file back
# to its size (as Kafka's ``FileRecords.trim`` of a preallocated segment); after a
# crash, recovery truncates them as any torn tail.
WRITE_AHEAD = 64 * 1024
WRITE_AHEAD_FROM = 16 * 1024
_ZEROS = memoryview(bytes(WRITE_AHEAD))


def append_ahead(fd: int, pieces: list[Buffer], position: int, file_end: int) -> tuple[int, int]:
    """Write ``pieces`` at ``position`` (:func:`pwrite_all`), with zeros after them to
    the next :data:`WRITE_AHEAD` boundary when they are :data:`WRITE_AHEAD_FROM` bytes
    or more and pass ``file_end`` (the file's size); return their length and the file's
    new size. A disk with room for the records but not the zeros takes the records."""
    n = sum(map(len, pieces))
    end = position + n
    if end <= file_end or n < WRITE_AHEAD_FROM:
        pwrite_all(fd, pieces, position)
        return n, max(end, file_end)
    ahead = -end % WRITE_AHEAD
    try:
        pwrite_all(fd, [*pieces, _ZEROS[:ahead]] if ahead else pieces, position)
    except OSError as exc:
        if exc.errno != errno.ENOSPC or not ahead:
            raise
        pwrite_all(fd, pieces, position)  # what the zeros' first try left is past the end
        return n, max(end, os.fstat(fd).st_size)
    return n, end + ahead


def is_written_ahead(tail: Buffer) -> bool:
    """Whether the bytes after a file's last whole batch are the zeros a live segment
    is written ahead with (fewer than :data:`WRITE_AHEAD`, all zero): the tail of a
    segment still written, or of one a crash left, not damage."""
    return 0 < len(tail) < WRITE_AHEAD and tail == bytes(len(tail))


def batches_before_zeros(
    data: Buffer, rest: Callable[[int], Buffer]
) -> Generator[RecordBatch, None, int | None]:
    """Yield the whole batches of ``data`` (bytes of a ``.log`` file, all of it or a
    chunk); return where the last one ends, or None when what follows it is the zeros
    a live or crashed segment is written ahead with: the one test of "stop at the
    zeros" for every reader of a file. ``rest(end)`` gives the file's bytes from
    ``data``'s position ``end`` on; other damage raises."""
    end = 0
    try:
        for b in iter_batches(data):
            yield b
            end = b.position + len(b.buffer)
    except CorruptRecordError:
        if not is_written_ahead(rest(end)):
            raise
        return None
    return end


def file_batches(data: Buffer) -> list[RecordBatch]:
    """The whole batches of a ``.log`` file's bytes read at once, stopping quietly at
    the zeros a live segment is written ahead with (and at a torn tail, as
    :func:`~kompakt.record.decode.iter_batches` does); other damage raises."""
    return list(batches_before_zeros(data, lambda end: memoryview(data)[end:]))


class Unsynced:
    """Writes to one file against the ones an fsync is known to cover."""

    __slots__ = ("synced", "writes")

    def __init__(self) -> None:
        self.writes = 0
        self.synced = 0

    def wrote(self) -> None:
        self.writes += 1

    @property
    def dirty(self) -> bool:
        return self.writes != self.synced

    def mark_clean(self) -> None:
        """An fsync under the owner's lock covered every write so far."""
        self.synced = self.writes


@dataclass(frozen=True)
class Claim:
    """One file to fsync: a duplicate descriptor and the writes it covers."""

    fd: int
    writes: int
    state: Unsynced


def claim(state: Unsynced, fd: int) -> Claim | None:
    """Claim ``state``'s writes so far on ``fd`` (call under the owner's lock); None
    when an fsync already covers them."""
    if not state.dirty:
        return None
    return Claim(os.dup(fd), state.writes, state)


def fsync_claims(claims: list[Claim], lock: threading.RLock) -> None:
    """fsync every claim's file (without ``lock``, unless the caller holds it), then
    mark the writes they covered synced under ``lock``. The duplicates are closed
    whatever happens; a failed fsync leaves its writes unsynced."""
    try:
        for c in claims:
            os.fsync(c.fd)
    finally:
        for c in claims:
            os.close(c.fd)
    with lock:
        for c in claims:
            c.state.synced = max(c.state.synced, c.writes)
