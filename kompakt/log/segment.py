"""One log segment: ``<base>.log`` with its ``.index``, ``.timeindex`` and ``.txnindex``.

The ``.log`` holds record batches back to back, exactly as a Kafka broker writes them;
its name is the base offset, 20 digits, zero padded. The indexes are sparse and derived
(``recover`` rebuilds the offset and time indexes; the ``.txnindex`` needs the open
transactions of earlier segments, so :class:`~kompakt.log.partition_log.PartitionLog`
rebuilds it with its producer state, as Kafka's ``LogSegment.recover`` is handed the
``ProducerStateManager``). A segment only grows at its end; readers use ``os.pread``
so they see whole batches below the size they were given while appends go on.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
from pathlib import Path

from kompakt.log.index import IndexCorruptError
from kompakt.log.offset_index import OffsetIndex
from kompakt.log.open_segments import OpenSegments
from kompakt.log.segment_files import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    INT32_MAX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIMEINDEX_SUFFIX,
    TXNINDEX_SUFFIX,
    filename_prefix,
    log_file_offset,
    offset_from_name,
    segment_file,
    segment_files,
)
from kompakt.log.segment_reads import SegmentReads
from kompakt.log.syncs import Claim, Unsynced, append_ahead, claim, fsync_claims, pwrite_all
from kompakt.log.time_index import TimeIndex
from kompakt.log.txn_index import AbortedTxn, TransactionIndex
from kompakt.record.header import CONTROL_BIT, TRANSACTIONAL_BIT, Header

log = logging.getLogger(__name__)
TXN_OR_CONTROL = TRANSACTIONAL_BIT | CONTROL_BIT

__all__ = [  # the names other modules import from here (kompakt.log.segment_files)
    "CLEANED_SUFFIX",
    "DELETED_SUFFIX",
    "INDEX_SUFFIX",
    "LOG_SUFFIX",
    "SWAP_SUFFIX",
    "TIMEINDEX_SUFFIX",
    "TXNINDEX_SUFFIX",
    "LogSegment",
    "filename_prefix",
    "log_file_offset",
    "offset_from_name",
    "segment_file",
    "segment_files",
]


class LogSegment(SegmentReads):
    """One segment; its files open on first use and close again under the open-segment
    cap (``handles``, :class:`~kompakt.log.open_segments.OpenSegments`).

    ``lazy``: an existing segment loaded at start-up opens nothing now (Kafka's
    ``LazyIndex`` and, beyond Kafka, its ``.log`` too): the size and mtime come from one
    ``stat``, the last offset and max timestamp from a walk of the tail on first use, and
    the indexes are sanity-checked when first mapped (rebuilt from the ``.log`` when they
    fail, as the loader would have). Every use of the files holds ``lock``, which the
    cap tries before closing them.

    ``read_only`` (a log opened read-only, e.g. for a dry run): loaded lazily, nothing is
    created or written; the ``.log`` is opened ``O_RDONLY``, the indexes are read into
    memory and a recovery rebuilds them and cuts a torn tail there only
    (:meth:`truncate_to_position` moves :attr:`size`, not the file's end). A missing
    ``.log`` (an empty partition) reads as an empty segment.
    """

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int = 4096,
        max_index_size: int = 10 * 1024 * 1024,
        suffix: str = "",
        created_ms: int | None = None,
        writable: bool = True,
        handles: OpenSegments | None = None,
        lazy: bool = False,
        read_only: bool = False,
    ):
        self.dir = directory if isinstance(directory, Path) else Path(directory)
        self.read_only = read_only
        lazy = lazy or read_only
        writable = writable and not read_only
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.suffix = suffix
        self.writable = writable
        self.handles = handles
        self.lock = threading.RLock()
        self.log_path = segment_file(self.dir, base_offset, LOG_SUFFIX, suffix)
        self._fd: int | None = None
        self._closed = False
        self._log_sync = Unsynced()  # writes to the .log against the fsyncs covering them
        self._max_index_size = max_index_size
        self._lazy = lazy
        # the index objects themselves are made on first use too: a segment nobody reads
        # since start-up costs one stat and no path but its .log's
        self._offset_index: OffsetIndex | None = None
        self._time_index: TimeIndex | None = None
        self._txn_index: TransactionIndex | None = None
        self._txn_absent = False
        if lazy:
            try:
                st = os.stat(self.log_path)
                self.size, mtime_ms = st.st_size, int(st.st_mtime * 1000)
            except FileNotFoundError:
                if not read_only:
                    raise
                self.size, mtime_ms = 0, created_ms or 0
        else:
            with self.lock:
                fd = self._open_log(os.O_CREAT)
                self.size = os.fstat(fd).st_size
                mtime_ms = int(os.fstat(fd).st_mtime * 1000)
        self._file_end = self.size  # the file's size: past :attr:`size` when written ahead
        self._unchecked = lazy
        """Indexes not yet sanity-checked (a lazy load checks them when first mapped)."""
        if not lazy:
            _ = self.offset_index, self.time_index
        self.txn_index_stale = False
        """Set by the loader when the ``.txnindex`` must be rebuilt from the batches."""
        self._bytes_since_index = 0
        self._max_timestamp = -1
        self._shallow_offset_of_max_timestamp = base_offset
        self._rolling_timestamp: int | None = None  # first batch's max timestamp
        self.created_ms = created_ms if created_ms is not None else mtime_ms
        self._last_offset: int | None = None  # last offset of the last batch, once known
        self._whole_batches_end = 0  # where the walk at load found the last whole batch end
        self._tail_known = self._times_known = not self.size
        self.holds_txn_batches: bool | None = False if not self.size else None
        """Whether a transactional batch or marker is in this segment: known from the
        appends of a segment made empty, else None until a reader that walked its
        headers says (the Spark engine's transaction pass skips a segment without)."""
        if not lazy and self.size:
            self._load_tail_state()

    # -- files ---------------------------------------------------------------------------
    def _index_path(self, kind: str) -> Path:
        return segment_file(self.dir, self.base_offset, kind, self.suffix)

    def _index(self, attr: str, cls: type, suffix: str):
        """The segment's ``cls`` index in ``attr``, made on first use (Kafka's
        ``LazyIndex``): a segment loaded at start costs no file until it is read."""
        idx = getattr(self, attr)
        if idx is None:
            with self.lock:
                if getattr(self, attr) is None:
                    made = cls(
                        self._index_path(suffix),
                        self.base_offset,
                        self._max_index_size,
                        self.writable,
                        lazy=self._lazy,
                        lock=self.lock,
                        on_open=self._index_opened,
                        memory=self.read_only,
                    )
                    made._closed = self._closed
                    setattr(self, attr, made)
                idx = getattr(self, attr)
        return idx

    @property
    def offset_index(self) -> OffsetIndex:
        idx = self._offset_index  # made already: every append and roll check asks
        return idx if idx is not None else self._index("_offset_index", OffsetIndex, INDEX_SUFFIX)

    @property
    def time_index(self) -> TimeIndex:
        idx = self._time_index
        return idx if idx is not None else self._index("_time_index", TimeIndex, TIMEINDEX_SUFFIX)

    @property
    def txn_index(self) -> TransactionIndex:
        idx = self._txn_index
        if idx is None:
            with self.lock:
                if self._txn_index is None:
                    self._txn_index = TransactionIndex(
                        self._index_path(TXNINDEX_SUFFIX), self.base_offset, self.read_only
                    )
                    if self._txn_absent:
                        self._txn_index.mark_absent()
                idx = self._txn_index
        return idx

    def mark_txn_index_absent(self) -> None:
        """The loader's listing has no ``.txnindex`` for this segment."""
        self._txn_absent = True
        if self._txn_index is not None:
            self._txn_index.mark_absent()

    def check_txn_index(self) -> None:
        """The ``.txnindex`` sanity check (Kafka's ``LogSegment.sanityCheck`` keeps only
        this one at load); nothing to read when the loader saw no file."""
        if self._txn_absent and self._txn_index is None:
            return
        self.txn_index.sanity_check()

    @property
    def txn_index_absent(self) -> bool:
        """No ``.txnindex`` file, as far as this process knows without looking."""
        if self._txn_index is None:
            return self._txn_absent
        return self._txn_index._absent

    def collect_aborted(self, fetch_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
        """The ``.txnindex`` entries overlapping ``[fetch_offset, upper_bound)`` and whether
        the search is complete (:meth:`TransactionIndex.collect_aborted`); a segment
        known to have no file answers without making its index object."""
        if self.txn_index_absent:
            return [], False
        return self.txn_index.collect_aborted(fetch_offset, upper_bound)

    def _indexes(self) -> list[OffsetIndex | TimeIndex]:
        """The index objects made so far."""
        return [i for i in (self._offset_index, self._time_index) if i is not None]

    def _open_log(self, flags: int = 0) -> int:
        """The ``.log`` descriptor, opened if closed (call with :attr:`lock` held)."""
        fd = self._fd
        if fd is None:
            if self._closed:
                raise OSError(errno.EBADF, f"segment {self.log_path.name} is closed")
            mode = os.O_RDONLY if self.read_only else os.O_RDWR | flags
            fd = self._fd = os.open(self.log_path, mode, 0o644)
            if self.handles is not None and not self.suffix:
                self.handles.touch(self)
        return fd

    def _log_fd(self) -> int:
        """The ``.log`` descriptor for one use (lock held); marks the segment recent."""
        fd = self._fd
        if fd is None:
            return self._open_log()
        if self.handles is not None and not self.suffix:
            self.handles.touch(self)
        return fd

    def _index_opened(self, _index: object) -> None:
        if self.handles is not None and not self.suffix:
            self.handles.touch(self)
        if self._unchecked:
            self._unchecked = False
            try:
                self.sanity_check()
            except IndexCorruptError as exc:
                log.warning("%s: %s; rebuilding indexes", self.log_path, exc)
                self.recover()
                if not self.writable:
                    self.offset_index.trim_to_valid_size()
                    self.time_index.trim_to_valid_size()

    def release_files(self) -> bool:
        """Close the open files unless the segment is in use (the cap's eviction);
        everything known stays, and the next use reopens. False when busy."""
        owned = getattr(self.lock, "_is_owned", None)
        if owned is not None and owned():  # this thread is inside one of its operations
            return False
        if not self.lock.acquire(blocking=False):
            return False
        try:
            self._close_files()
        finally:
            self.lock.release()
        return True

    def _close_files(self) -> None:
        for idx in self._indexes():
            idx.close_files()
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    @property
    def files_open(self) -> bool:
        return self._fd is not None or any(i.is_open for i in self._indexes())

    # -- state ---------------------------------------------------------------------------
    def _tail(self) -> None:
        """The last offset and the end of the whole batches, from a walk of the batches
        after the last offset-index entry (all a start-up needs of the active segment)."""
        if not self._tail_known:
            with self.lock:
                if not self._tail_known:
                    self._load_tail_state()

    def _times(self) -> None:
        """The max timestamp and the first batch's: the walk's, merged with the time
        index's last entry and the first header (read when first asked for)."""
        if not self._times_known:
            self._tail()
            with self.lock:
                if not self._times_known:
                    self._load_times()

    @property
    def last_offset(self) -> int | None:
        if not self._tail_known:  # asked on every append: the walk only once
            self._tail()
        return self._last_offset

    @property
    def max_timestamp(self) -> int:
        self._times()
        return self._max_timestamp

    @property
    def shallow_offset_of_max_timestamp(self) -> int:
        """The last offset of the first batch holding :attr:`max_timestamp` (Kafka's
        ``shallowOffsetOfMaxTimestampSoFar``): what the time index stores, kept per batch
        so an append reads no record."""
        self._times()
        return self._shallow_offset_of_max_timestamp

    @property
    def rolling_timestamp(self) -> int | None:
        self._times()
        return self._rolling_timestamp

    @property
    def whole_batches_end(self) -> int:
        self._tail()
        return self._whole_batches_end

    @property
    def next_offset(self) -> int:
        last = self.last_offset
        return self.base_offset if last is None else last + 1

    @property
    def largest_timestamp(self) -> int:
        """Kafka's ``largestTimestamp``: max record timestamp, else the file's mtime."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        return self.last_modified_ms()

    def last_modified_ms(self) -> int:
        try:
            return int(os.stat(self.log_path).st_mtime * 1000)
        except FileNotFoundError:
            if not self.read_only:
                raise
            return self.created_ms  # the empty segment of an empty partition, read-only

    def set_last_modified_ms(self, ms: int) -> None:
        os.utime(self.log_path, ns=(ms * 1_000_000, ms * 1_000_000))

    def should_roll(
        self, batch_size: int, max_offset: int, now_ms: int, max_segment_bytes: int, roll_ms: int
    ) -> bool:
        """Kafka's ``LogSegment.shouldRoll``: size, age, full index, offset overflow."""
        if self.size == 0:
            return False
        if not self._times_known:  # asked on every append: the property's walk once
            self._times()
        rolling = self._rolling_timestamp
        age_base = rolling if rolling is not None else self.created_ms
        # the indexes as made (an index object is always true), else the properties make them
        offsets = self._offset_index or self.offset_index
        times = self._time_index or self.time_index
        return (
            self.size > max_segment_bytes - batch_size
            or now_ms - age_base > roll_ms
            or offsets.is_full()
            or times.is_full()
            or not 0 <= max_offset - self.base_offset <= INT32_MAX  # a relative offset's range
        )

    # -- writing -------------------------------------------------------------------------
    def append(
        self,
        data: bytes | bytearray | memoryview | list[bytes | bytearray | memoryview],
        headers: list[tuple[int, Header]],
    ) -> None:
        """Append whole, validated batches; ``headers`` gives (relative position, header).
        ``data`` is the bytes, or a list of pieces written back to back in one
        ``pwritev`` (new batch headers beside the records they came with).

        All or nothing: if a write fails (full disk), the log and both indexes are cut
        back to where they were and the in-memory state is unchanged.
        """
        pieces = data if isinstance(data, list) else [data]
        with self.lock:
            if not self._times_known:
                self._times()
            start = self.size
            offsets = self._offset_index or self.offset_index  # made already: no frame
            times = self._time_index or self.time_index
            saved = (
                self._rolling_timestamp, self._max_timestamp, self._shallow_offset_of_max_timestamp,
                self._bytes_since_index, self._last_offset, offsets.entries, times.entries,
            )  # fmt: skip
            try:
                fd = self._log_fd()
                self._log_sync.wrote()
                if self.writable and not self.suffix:  # a live segment: written ahead
                    length, self._file_end = append_ahead(fd, pieces, start, self._file_end)
                else:
                    length = pwrite_all(fd, pieces, start)
                interval = self.index_interval_bytes
                for rel_pos, h in headers:
                    ts = h.max_timestamp
                    last = h.last_offset
                    if self._rolling_timestamp is None and ts >= 0:
                        self._rolling_timestamp = ts
                    if ts > self._max_timestamp:
                        self._max_timestamp = ts
                        self._shallow_offset_of_max_timestamp = last
                    if self._bytes_since_index > interval:
                        offsets.append(last, start + rel_pos)
                        times.maybe_append(
                            self._max_timestamp, self._shallow_offset_of_max_timestamp
                        )
                        self._bytes_since_index = 0
                    self._bytes_since_index += h.size
                    self._last_offset = last
                    if h.attributes & TXN_OR_CONTROL:  # the two flags in one test
                        self.holds_txn_batches = True
            except OSError:
                (
                    self._rolling_timestamp, self._max_timestamp, self._shallow_offset_of_max_timestamp,
                    self._bytes_since_index, self._last_offset, off_entries, time_entries,
                ) = saved  # fmt: skip
                try:
                    os.ftruncate(self._log_fd(), start)
                    self._file_end = start
                    self.offset_index.entries = min(self.offset_index.entries, off_entries)
                    self.time_index.entries = min(self.time_index.entries, time_entries)
                except OSError:
                    log.exception("%s: cannot roll back a failed append", self.log_path)
                raise
            self.size = start + length

    def update_txn_index(self, txn: AbortedTxn) -> None:
        """Record an aborted transaction whose ABORT marker is in this segment (Kafka's
        ``LogSegment.updateTxnIndex``); the ``.txnindex`` is created on the first one."""
        self.txn_index.append(txn)

    def claim_sync(self, indexes: bool = True) -> list[Claim]:
        """The files :meth:`flush` would fsync (the ``.log``, and its offset and time
        indexes unless ``indexes`` is false), claimed under the segment's lock for
        fsyncs outside it (:mod:`kompakt.log.syncs`); a segment nobody wrote to since
        is not opened for it (a clean shutdown of 10,000 partitions fsyncs only theirs).
        A closed segment has nothing to claim: retention or a clean removed it while
        its log's flush ran, and a cleaned segment arrives fsynced."""
        with self.lock:
            if self._closed:
                return []
            found = [claim(self._log_sync, self._log_fd())] if self._log_sync.dirty else []
            if indexes:
                found += [idx.claim_sync() for idx in self._indexes()]
        return [c for c in found if c is not None]

    def flush(self, indexes: bool = True) -> None:
        """fsync what was written since the last flush (Kafka's ``LogSegment.flush``:
        the ``.log``, the indexes and the ``.txnindex``; only the ``.log`` when
        ``indexes`` is false). The fsyncs run without the segment's lock, so appends
        and reads go on meanwhile."""
        fsync_claims(self.claim_sync(indexes), self.lock)
        if indexes:
            self.flush_txn_index()

    def flush_txn_index(self) -> None:
        """fsync the ``.txnindex`` if it was written since (not made for it)."""
        if self._txn_index is not None:
            self._txn_index.flush()

    def on_become_inactive(self) -> None:
        """On roll: final time-index entry, indexes and the ``.log`` trimmed to their
        used size (Kafka's ``onBecomeInactiveSegment``)."""
        with self.lock:
            self.trim_to_size()
            if self.max_timestamp >= 0:
                self.time_index.maybe_append(
                    self.max_timestamp, self.shallow_offset_of_max_timestamp, skip_full_check=True
                )
            self.offset_index.trim_to_valid_size()
            self.time_index.trim_to_valid_size()
            self.writable = self.offset_index.writable = self.time_index.writable = False

    def trim_indexes(self) -> None:
        """Trim the indexes made so far to their used size (an index nobody opened since
        load is as the last close left it)."""
        with self.lock:
            for idx in self._indexes():
                idx.trim_to_valid_size()

    def trim_to_size(self) -> None:
        """Cut the zeros written ahead of the size (:data:`~kompakt.log.syncs.WRITE_AHEAD`):
        the file then ends at the last batch, as a segment no longer written must."""
        with self.lock:
            if self._file_end > self.size and not self.read_only:
                os.ftruncate(self._log_fd(), self.size)
                self._log_sync.wrote()
                self._file_end = self.size

    def truncate_to_position(self, position: int) -> None:
        with self.lock:
            if self.read_only:  # readers stop at the size: the cut is in memory only
                self.size = min(self.size, position)
                return
            os.ftruncate(self._log_fd(), position)
            self._log_sync.wrote()
            self.size = self._file_end = position

    # -- files ---------------------------------------------------------------------------
    def files(self) -> list[Path]:
        """The segment's files on disk (the ``.txnindex`` only when it exists)."""
        out = [self.log_path, self.offset_index.path, self.time_index.path]
        if self.txn_index.exists():
            out.append(self.txn_index.path)
        return out

    def change_suffix(self, new_suffix: str) -> None:
        """Rename all files from the current suffix to ``new_suffix`` (swap protocol).

        Only a live segment (no suffix) counts against the open-segment cap: a
        ``.deleted`` one keeps its files open for the readers still on it until
        ``file.delete.delay.ms`` closes it."""
        with self.lock:
            old = str(self.log_path)
            new = Path(old[: len(old) - len(self.suffix)] + new_suffix)
            os.replace(old, new)
            self.log_path = new
            for idx in (self.offset_index, self.time_index, self.txn_index):
                old = str(idx.path)
                idx.rename(Path(old[: len(old) - len(self.suffix)] + new_suffix))
            self.suffix = new_suffix
            if self.handles is not None:
                if new_suffix:
                    self.handles.forget(self)
                elif self.files_open:
                    self.handles.touch(self)

    def close(self) -> None:
        with self.lock:
            if self._file_end > self.size and not self._closed:
                try:  # a closing owner trims first, then fsyncs (PartitionLog.close)
                    self.trim_to_size()
                except OSError as exc:  # recovery cuts the zeros as a torn tail
                    log.warning("%s: cannot trim the file to its size: %s", self.log_path, exc)
            for idx in self._indexes():
                idx.close()  # may reopen a file the cap closed, to write what is pending
            if self.handles is not None:
                self.handles.forget(self)
            fd, self._fd = self._fd, None
            self._closed = True
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass

    def delete_files(self) -> None:
        self.close()
        for p in self.files():
            try:
                p.unlink()
            except FileNotFoundError:
                pass

    def __repr__(self) -> str:
        return f"LogSegment({self.log_path.name}, size={self.size}, next={self.next_offset})"
