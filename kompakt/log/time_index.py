"""Kafka's ``.timeindex``: max timestamp -> offset, so a time lookup finds where records
at or after it begin (Kafka's ``TimeIndex``); the file mechanics are
:class:`~kompakt.log.index.AbstractIndex`'s."""

from __future__ import annotations

import struct

from kompakt.log.index import AbstractIndex, IndexCorruptError, opened


class TimeIndex(AbstractIndex):
    """``.timeindex``: 12-byte entries ``timestamp int64 | relativeOffset int32``.

    An entry is added when a batch's max timestamp exceeds every earlier one, at most
    one per index interval, so lookups find where records at or after a time begin.
    """

    _ENTRY = struct.Struct(">qi")
    ENTRY_SIZE = _ENTRY.size

    _SPARE = 1  # Kafka keeps the last slot free so a roll can always write the final entry

    @property
    @opened
    def last_entry(self) -> tuple[int, int]:
        """(timestamp, offset) of the last entry; (-1, base) when empty."""
        if not self.entries:
            return -1, self.base_offset
        ts, rel = self._raw(self.entries - 1)
        return ts, self.base_offset + rel

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Kafka's ``TimeIndex.maybeAppend``: an entry when ``timestamp`` is past the last
        one; refused when full, but the roll's final entry (``skip_full_check``) takes
        the slot kept for it. Asked on every indexed append, as ``OffsetIndex.append``."""
        with self._lock:
            self._ready()
            n = self._entries
            if not skip_full_check and self.is_full():
                raise IndexCorruptError(f"time index {self.path.name} is full")
            last_ts, last_rel = self._last(n) if n else (-1, 0)
            if n and offset < self.base_offset + last_rel:
                raise IndexCorruptError(f"time index offset {offset} goes backwards")
            if timestamp > last_ts:
                if n >= self.max_entries:
                    return
                self._write(timestamp, offset - self.base_offset)

    @opened
    def lookup(self, timestamp: int) -> tuple[int, int]:
        """(timestamp, offset) of the last entry with timestamp <= target, or (-1, base)."""
        i = self._search(timestamp, 0)
        if i < 0:
            return -1, self.base_offset
        ts, rel = self._raw(i)
        return ts, self.base_offset + rel

    @opened
    def truncate_to(self, offset: int) -> None:
        n = self.entries
        while n > 0 and self.base_offset + self._raw(n - 1)[1] >= offset:
            n -= 1
        self.truncate_entries(n)

    @opened
    def sanity_check(self, log_size: int) -> None:
        last_ts, last_rel = -1, -1
        for i in range(self.entries):
            ts, rel = self._raw(i)
            if ts < last_ts or rel < last_rel or rel < 0:
                raise IndexCorruptError(f"corrupt time index {self.path.name} at entry {i}")
            last_ts, last_rel = ts, rel
