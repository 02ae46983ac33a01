"""Kafka's sparse segment indexes: ``.index`` (offset -> position) and ``.timeindex``.

Both are files of fixed-width big-endian entries, memory-mapped, preallocated to
``segment.index.bytes`` (rounded down to a whole entry) while the segment is active and
trimmed to the used size when it rolls or the log closes. They are derived data: no
checksum; a missing or inconsistent index is rebuilt from the ``.log`` (see
``LogSegment.recover``). This base class holds the file mechanics; its subclasses
(:mod:`kompakt.log.offset_index`, :mod:`kompakt.log.time_index`) only say what an entry
holds.

New entries are kept in memory (``_pending``, served to lookups from there) and written
to the file in one ``pwrite`` when :data:`PENDING_BYTES` of them gathered, and at every
flush, trim (roll, close) and truncation: an 8-byte ``pwrite`` on every append cost a
sixth of the append's own time. Kafka stores the entry into its mmap, which costs a
memory store; the write here stays a ``pwrite`` so a full disk fails it with ENOSPC
instead of a SIGBUS. A crash loses at most the entries not yet written: the newest ones,
so what is on disk is still a correct sparse index (a lookup starts earlier and walks
forward), and recovery rebuilds the indexes of every segment past the recovery point.

Opened on first use, as Kafka's ``LazyIndex``: a segment loaded at start-up maps no index
until a read, an append or a check needs it, and :meth:`AbstractIndex.close_files` (the
open-segment cap, :mod:`kompakt.log.open_segments`) unmaps it again while the object
keeps its entry count and length, so the next use reopens it as it was. Every method
that touches the file holds the owner's lock (the segment's), which is what the cap
tries before it closes anything.

``memory`` (a log opened read-only, :class:`~kompakt.log.manager.LogManager`'s
``read_only``): the file is read once and never written, mapped or created; a rebuild
(recovery, a failed sanity check) happens in memory only, so a dry run leaves the
``.index``/``.timeindex`` files as it found them.
"""

from __future__ import annotations

import errno
import functools
import io
import mmap
import os
import struct
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Self

from kompakt.errors import CorruptRecordError
from kompakt.log.syncs import Claim, Unsynced, claim, fsync_claims, pwrite_all

_ZERO_BLOCK_SIZE = 1 << 16
_ZERO_BLOCK = bytes(_ZERO_BLOCK_SIZE)
PENDING_BYTES = 4096
"""Entries kept in memory before they are written (a page: 512 offset entries)."""


def _data_end(fd: int, end: int) -> int:
    """Where the file's data ends within ``[0, end)``: past it are only holes (never
    written, so zeros). ``end`` when the file system cannot say (no ``SEEK_HOLE``)."""
    last = pos = 0
    try:
        while pos < end:
            data = os.lseek(fd, pos, os.SEEK_DATA)
            if data >= end:
                break
            pos = os.lseek(fd, data, os.SEEK_HOLE)
            last = min(pos, end)
    except OSError as exc:
        if exc.errno != errno.ENXIO:  # ENXIO: no data at or past pos
            return end
    return last


class IndexCorruptError(CorruptRecordError):
    """An index file fails its sanity check; the caller rebuilds it."""


def opened(method):
    """Run ``method`` under the owner's lock with the file open (reopened if closed)."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with self._lock:
            self._ready()
            return method(self, *args, **kwargs)

    return wrapper


class AbstractIndex:
    ENTRY_SIZE = 0
    _SPARE = 0  # slots kept free for a final entry (the time index's, at roll)
    _ENTRY: struct.Struct
    _file: io.BufferedRandom | None
    _mmap: mmap.mmap | bytes | None

    def __init__(
        self,
        path: Path,
        base_offset: int,
        max_index_size: int,
        writable: bool = True,
        *,
        lazy: bool = False,
        lock: threading.RLock | None = None,
        on_open: Callable[[AbstractIndex], None] | None = None,
        memory: bool = False,
    ):
        self.path = Path(path)
        self.base_offset = base_offset
        self.max_index_size = max(
            self.ENTRY_SIZE, max_index_size - max_index_size % self.ENTRY_SIZE
        )
        self._capacity: int | None = None  # max_entries, worked out when first asked
        self.writable = writable
        self._lock = lock if lock is not None else threading.RLock()
        self._on_open = on_open
        self._read_only = False
        self._memory = memory
        self._file = None
        self._mmap = None
        self._entries: int | None = None  # known from the first open on
        self._written = 0  # entries in the file; the ones after them are in _pending
        self._pending = bytearray()
        self._tail: tuple[int, tuple[int, int]] | None = None  # see _last
        self._length: int | None = None  # the file's length, likewise
        self._sync = Unsynced()  # writes against the fsyncs that covered them
        self._closed = False
        if not lazy:
            with self._lock:
                self._open()

    def _open(self) -> None:
        """Open and map the file: the first time as Kafka's ``AbstractIndex`` constructor
        (a new or writable index is preallocated to ``max_index_size``, the entries of an
        existing one counted), afterwards as it was left. A closed index stays closed."""
        if self._closed:
            raise OSError(errno.EBADF, f"index {self.path.name} is closed")
        if self._memory:
            self._load_into_memory()
            return
        if self._length is not None:  # reopened after close_files: nothing to learn
            self._file = open(self.path, "r+b")  # noqa: SIM115
            if self._length:
                self._mmap = mmap.mmap(self._file.fileno(), self._length)
            if self._on_open is not None:
                self._on_open(self)
            return
        found = True
        try:
            self._file = open(self.path, "r+b")  # noqa: SIM115
        except FileNotFoundError:
            found = False
            self._file = open(self.path, "w+b")  # noqa: SIM115
        length = os.fstat(self._file.fileno()).st_size
        exists = length > 0
        entries = length // self.ENTRY_SIZE if exists else 0
        if self.writable and not found:
            length = self.max_index_size
            self._file.truncate(length)
        elif length % self.ENTRY_SIZE:
            length -= length % self.ENTRY_SIZE
        self._set_length(length)
        self._mmap = mmap.mmap(self._file.fileno(), length) if length else None
        self._entries = self._written = self._trailing_entries(entries) if exists else 0
        if self._on_open is not None:
            self._on_open(self)

    def _load_into_memory(self) -> None:
        """The file's entries as a ``bytearray`` (none when it does not exist); from
        then on the index lives in memory (``_read_only``: never reopened)."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            data = b""
        length = len(data) - len(data) % self.ENTRY_SIZE
        self._mmap = bytearray(data[:length])
        self._set_length(length)
        self._read_only = True
        self._entries = self._written = self._trailing_entries(length // self.ENTRY_SIZE)
        del self._mmap[self._entries * self.ENTRY_SIZE :]
        if self._on_open is not None:
            self._on_open(self)

    @property
    def is_open(self) -> bool:
        return self._file is not None

    @property
    def entries(self) -> int:
        if self._entries is None:
            with self._lock:
                if self._entries is None:
                    self._open()
        assert self._entries is not None
        return self._entries

    @entries.setter
    def entries(self, n: int) -> None:
        """Forget the entries from ``n`` on (a failed append's rollback): the unwritten
        ones go; written ones stay in the file past the count, as before the append."""
        written = self._written
        if n < written:
            self._written = n
            self._pending.clear()
        else:
            del self._pending[(n - written) * self.ENTRY_SIZE :]
        self._entries = n

    @property
    def length(self) -> int:
        """The file's length in bytes (mapped or preallocated), known once opened."""
        if self._length is None:
            _ = self.entries
        assert self._length is not None
        return self._length

    def close_files(self) -> None:
        """Unmap and close, keeping what is known; the next use reopens (the cap's
        eviction: no flush, the written entries are in the page cache and
        :meth:`flush` fsyncs them later). An index read into memory has nothing open."""
        with self._lock:
            if self._read_only:
                return
            if isinstance(self._mmap, mmap.mmap):
                self._mmap.close()
            self._mmap = None
            if self._file is not None:
                self._file.close()
                self._file = None

    @classmethod
    def read_only(cls, path: Path, base_offset: int) -> Self:
        """The entries of ``path`` as they are now, for a reader that does not own the log
        (the Spark source beside a broker). The file is read in one go, never mapped or
        created: the owner may trim it (on roll) or swap it away at any moment, and a
        mapped page past a trimmed end would fault the reader. Raises
        ``FileNotFoundError`` when there is no index; mutators raise
        ``io.UnsupportedOperation``."""
        index = cls.__new__(cls)
        index.path = Path(path)
        index.base_offset = base_offset
        with open(index.path, "rb") as f:
            data = f.read()
        length = len(data) - len(data) % cls.ENTRY_SIZE
        index.max_index_size = length
        index._set_length(length)
        index._file = None
        index._read_only = True
        index._memory = False
        index._lock = threading.RLock()
        index._on_open = None
        index.writable = False
        index._sync = Unsynced()
        index._closed = False
        index._mmap = data[:length] if length else None
        index._entries = index._written = index._trailing_entries(length // cls.ENTRY_SIZE)
        index._pending = bytearray()
        index._tail = None
        return index

    # -- subclass hooks ------------------------------------------------------------------
    def _trailing_entries(self, n: int) -> int:
        """Entries in use: a preallocated file after a crash has zero-filled tail slots.

        Entries up to the last non-zero byte, found by comparing 64 KiB blocks with
        zeros from the end: a 10 MiB preallocated index has over a million slots, and a
        Python loop over them made every restart after a crash cost ~0.4 s per partition.
        The blocks compared start where the file's data ends (``SEEK_HOLE``): the
        preallocated tail is a hole, and reading 20 MiB of it per partition made a start
        after a crash with 10,000 partitions take 177 s.
        """
        if n <= 0 or self._mmap is None:
            return 0
        end = n * self.ENTRY_SIZE
        if self._file is not None:
            end = _data_end(self._file.fileno(), end)
        while end > 0:
            start = max(0, end - _ZERO_BLOCK_SIZE)
            block = self._mmap[start:end]
            if block != _ZERO_BLOCK[: end - start]:
                used = start + len(block.rstrip(b"\0"))
                return -(-used // self.ENTRY_SIZE)
            end = start
        return 0

    def _ready(self) -> None:
        """Open the file if it is closed (lock held): what every use of it starts with."""
        if self._file is None and not self._read_only:
            self._open()

    def _last(self, n: int) -> tuple[int, int]:
        """The last of ``n`` entries: as :meth:`_write` kept it while the count is still
        the one it made (only a write raises the count after the first open, so an
        entry dropped and rewritten since is the kept one too), else from the file."""
        tail = self._tail
        if tail is not None and tail[0] == n:
            return tail[1]
        return self._raw(n - 1)

    def _raw(self, i: int) -> tuple[int, int]:
        written = self._written
        if i >= written:  # not in the file yet
            return self._ENTRY.unpack_from(self._pending, (i - written) * self.ENTRY_SIZE)
        assert self._mmap is not None
        return self._ENTRY.unpack_from(self._mmap, i * self.ENTRY_SIZE)

    # -- common mechanics ----------------------------------------------------------------
    @property
    def writable(self) -> bool:
        """Whether the index is the active segment's, which may grow (:attr:`max_entries`)."""
        return self._writable

    @writable.setter
    def writable(self, value: bool) -> None:
        self._writable = value
        self._capacity = None

    def _set_length(self, length: int) -> None:
        """The file's (or the in-memory entries') length changed: :attr:`max_entries` too."""
        self._length = length
        self._capacity = None

    @property
    def max_entries(self) -> int:
        """Entries the index may hold: a writable (active) index grows to
        ``max_index_size`` when its entries are written (:meth:`_write_pending`), as
        Kafka resizes the active segment's indexes at load; only then is the file
        extended. Kept until the length or :attr:`writable` changes."""
        cap = self._capacity
        if cap is None:
            length = self.length
            cap = (
                max(length, self.max_index_size) if self._writable else length
            ) // self.ENTRY_SIZE
            self._capacity = cap
        return cap

    def is_full(self) -> bool:
        """No slot left (the time index keeps its last one for the roll's entry); asked
        on every append, so it reads the known count and capacity without the
        properties' layers."""
        n = self._entries
        if n is None:
            n = self.entries
        cap = self._capacity
        if cap is None:
            cap = self.max_entries
        return n >= cap - self._SPARE

    def size_bytes(self) -> int:
        return self.entries * self.ENTRY_SIZE

    def _fd(self) -> int:
        if self._file is None:
            raise io.UnsupportedOperation(f"index {self.path.name} was opened read-only")
        return self._file.fileno()

    def _pwrite(self, data: bytes, position: int) -> None:
        """Write at ``position``: to the file, or to the entries of an index in memory."""
        if self._memory and isinstance(self._mmap, bytearray):
            self._mmap[position : position + len(data)] = data
            return
        os.pwrite(self._fd(), data, position)

    def _write(self, key: int, value: int) -> None:
        """Append one entry (the caller holds the lock, opened the file and found a slot
        for it), kept in memory until :data:`PENDING_BYTES` gathered
        (:meth:`_write_pending`)."""
        n = self._entries
        assert n is not None
        entry = self._ENTRY.pack(key, value)
        if self._memory:
            if (n + 1) * self.ENTRY_SIZE > self.length:
                self.resize(self.max_index_size)
            self._pwrite(entry, n * self.ENTRY_SIZE)
            self._written = n + 1
        else:
            if self._file is None:
                self._fd()  # a reader's index (read_only): refused there
            self._pending += entry
        self._sync.wrote()
        self._entries = n + 1
        self._tail = (n + 1, (key, value))
        if len(self._pending) >= PENDING_BYTES:
            self._write_pending()

    def _write_pending(self) -> None:
        """Write the entries kept in memory to the file (lock held, file open), growing
        an active index found trimmed at load to ``max_index_size`` first. ``pwrite``,
        not a store into the mmap: on a full disk a store into a sparse page raises
        SIGBUS and kills the broker, while ``pwrite`` fails with ENOSPC (the entries
        then stay pending)."""
        pending = self._pending
        if not pending:
            return
        start = self._written * self.ENTRY_SIZE
        end = start + len(pending)
        assert self._length is not None
        if end > self._length:
            self.resize(max(self.max_index_size, end))
        pwrite_all(self._fd(), [pending], start)
        self._written += len(pending) // self.ENTRY_SIZE
        pending.clear()

    def _write_pending_opened(self) -> None:
        """:meth:`_write_pending`, the file opened first if the cap closed it (lock
        held): what a trim and a close leave nothing behind with."""
        if self._pending:
            if self._file is None:
                self._open()
            self._write_pending()

    def _search(self, target: int, key_of: int) -> int:
        """Index of the largest entry whose ``key_of`` field is <= target, or -1."""
        lo, hi = 0, self.entries - 1
        if hi < 0 or self._raw(0)[key_of] > target:
            return -1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self._raw(mid)[key_of] <= target:
                lo = mid
            else:
                hi = mid - 1
        return lo

    @opened
    def truncate_entries(self, n: int) -> None:
        """Keep the first ``n`` entries; the file's slots after them are zeroed."""
        if not self._memory:
            self._fd()
        n = max(0, min(n, self.entries))
        start = n * self.ENTRY_SIZE
        end = self._written * self.ENTRY_SIZE  # the unwritten ones are only forgotten
        if end > start:
            self._pwrite(bytes(end - start), start)
            self._sync.wrote()
        self.entries = n

    def reset(self) -> None:
        self.truncate_entries(0)

    @property
    def dirty(self) -> bool:
        """Written since the last fsync that completed."""
        return self._sync.dirty

    def claim_sync(self) -> Claim | None:
        """What :meth:`flush` would fsync, claimed under the owner's lock for an fsync
        outside it (:mod:`kompakt.log.syncs`); None when clean (an index closed by the
        cap is not reopened for it) or in memory."""
        with self._lock:
            if not self._sync.dirty or self._read_only:
                return None
            if self._file is None:
                self._open()
            self._write_pending()
            return claim(self._sync, self._fd())

    def flush(self) -> None:
        """fsync what was written since the last flush; the fsync runs without the
        owner's lock."""
        found = self.claim_sync()
        if found is not None:
            fsync_claims([found], self._lock)

    def trim_to_valid_size(self) -> None:
        """Shrink the file to the used entries (on roll and close, like Kafka); an index
        already that size is not opened for it."""
        with self._lock:
            if self._length is None and not self.is_open:
                return  # never opened since load: as it was found (trimmed at close)
            self._write_pending_opened()
            if self.length != self.entries * self.ENTRY_SIZE:
                self.resize(self.entries * self.ENTRY_SIZE)

    @opened
    def resize(self, new_size: int) -> None:
        """Set the file's length and remap (no msync: entries are written with
        ``pwrite``, so the mapping holds no dirty pages of its own; :meth:`flush`
        fsyncs them). In memory only the length changes: entries grow on write, so a
        rebuilt index costs its entries, not ``segment.index.bytes``."""
        new_size -= new_size % self.ENTRY_SIZE
        if self._memory and isinstance(self._mmap, bytearray):
            del self._mmap[new_size:]
            self._set_length(new_size)
            return
        self._fd()
        assert self._file is not None
        if isinstance(self._mmap, mmap.mmap):
            self._mmap.close()
            self._mmap = None
        self._file.truncate(new_size)
        self._set_length(new_size)
        if new_size:
            self._mmap = mmap.mmap(self._file.fileno(), new_size)

    def close(self) -> None:
        """Write what is pending, flush and close for good (the segment is closed or
        deleted)."""
        with self._lock:
            if not self._closed:
                self._write_pending_opened()
            if self._sync.dirty and self.is_open:
                os.fsync(self._fd())
                self._sync.mark_clean()
            self.close_files()
            self._closed = True

    def rename(self, new_path: Path) -> None:
        with self._lock:
            os.replace(self.path, new_path)
            self.path = Path(new_path)
