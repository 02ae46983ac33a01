"""Writes and fsyncs of a log's files: a record set written in one ``pwritev``
(:func:`pwrite_all`), and fsyncs that run outside the owner's lock (Kafka's ``LocalLog.flush`` walks the
segments and fsyncs them without the log's lock; only the recovery point is updated
under it).

A file's writes are counted (:class:`Unsynced`); a flush *claims* them under the
owner's lock (a duplicate of the descriptor and the count it covers), releases the
lock, fsyncs, then marks the count synced. Appends and reads go on meanwhile; the
open-segment cap may close the original descriptor (the duplicate stays valid, and an
fsync of either flushes the same file); and a second flush running at the same time
does not take the first one's fsync, still in flight, as done: the count is marked
synced only once an fsync that covered it returned.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

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
