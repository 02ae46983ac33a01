"""Kafka's ``.index``: offset -> byte position, one entry per ``index.interval.bytes``
(Kafka's ``OffsetIndex``); the file mechanics are :class:`~kompakt.log.index.AbstractIndex`'s."""

from __future__ import annotations

import struct

from kompakt.log.index import AbstractIndex, IndexCorruptError, opened


class OffsetIndex(AbstractIndex):
    """``.index``: 8-byte entries ``relativeOffset int32 | position int32``.

    Sparse: one entry per ``index.interval.bytes`` appended. A lookup gives the greatest
    indexed offset <= the target and the byte position to start scanning from.
    """

    _ENTRY = struct.Struct(">ii")
    ENTRY_SIZE = _ENTRY.size

    def append(self, offset: int, position: int) -> None:
        """Kafka's ``OffsetIndex.append``: refused when full or not past the last entry.
        Asked on every indexed append: the lock taken here rather than by ``opened``'s
        extra frame, the last entry read as the last write kept it."""
        with self._lock:
            self._ready()
            if self.is_full():
                raise IndexCorruptError(f"index {self.path.name} is full")
            rel = offset - self.base_offset
            n = self._entries
            if n and rel <= self._last(n)[0]:
                raise IndexCorruptError(
                    f"index entry offset {offset} not larger than last in {self.path.name}"
                )
            self._write(rel, position)

    @opened
    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the largest entry <= offset; (base, 0) when none."""
        i = self._search(offset - self.base_offset, 0)
        if i < 0:
            return self.base_offset, 0
        rel, pos = self._raw(i)
        return self.base_offset + rel, pos

    @opened
    def entry(self, i: int) -> tuple[int, int]:
        rel, pos = self._raw(i)
        return self.base_offset + rel, pos

    @property
    @opened
    def last_entry(self) -> tuple[int, int]:
        """(offset, position) of the last entry; (base, 0) when empty, as ``lookup`` of
        any offset past it: where a walk to the end of the segment starts."""
        return self.entry(self.entries - 1) if self.entries else (self.base_offset, 0)

    @property
    @opened
    def last_offset(self) -> int:
        return self.entry(self.entries - 1)[0] if self.entries else self.base_offset

    @opened
    def truncate_to(self, offset: int) -> None:
        """Drop entries for offsets >= offset."""
        i = self._search(offset - self.base_offset, 0)
        n = i + 1
        if n > 0 and self.entry(i)[0] >= offset:
            n -= 1
        self.truncate_entries(n)

    @opened
    def sanity_check(self, log_size: int) -> None:
        """Kafka's ``OffsetIndex.sanityCheck`` plus monotonic entries within the log."""
        last_rel, last_pos = -1, -1
        for i in range(self.entries):
            rel, pos = self._raw(i)
            if rel <= last_rel or pos <= last_pos or rel < 0 or pos >= max(log_size, 1):
                raise IndexCorruptError(f"corrupt offset index {self.path.name} at entry {i}")
            last_rel, last_pos = rel, pos
