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

import logging
import os
from pathlib import Path

from kompakt.errors import CorruptRecordError
from kompakt.log.index import IndexCorruptError, OffsetIndex, TimeIndex
from kompakt.log.txn_index import AbortedTxn, TransactionIndex
from kompakt.record.decode import RecordBatch, iter_batches
from kompakt.record.header import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    Header,
    batch_size,
    read_header,
)

log = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIMEINDEX_SUFFIX = ".timeindex"
TXNINDEX_SUFFIX = ".txnindex"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
INT32_MAX = 2**31 - 1


# the files of a segment (the .txnindex exists only once an abort was written to it)
SEGMENT_FILE_TYPES = (LOG_SUFFIX, INDEX_SUFFIX, TIMEINDEX_SUFFIX, TXNINDEX_SUFFIX)
FILENAME_DIGITS = 20


def filename_prefix(offset: int) -> str:
    """The base offset as a file name stem: 20 digits, zero padded (Kafka's
    ``LogFileUtils.filenamePrefixFromOffset``)."""
    return f"{offset:0{FILENAME_DIGITS}d}"


def offset_from_name(name: str) -> int:
    """The base offset a segment file name starts with (``LogFileUtils.offsetFromFileName``)."""
    return int(name.split(".", 1)[0])


def segment_file(
    directory: Path | str, offset: int, kind: str = LOG_SUFFIX, suffix: str = ""
) -> Path:
    """The path of one file of segment ``offset``: ``kind`` is ``LOG_SUFFIX``,
    ``INDEX_SUFFIX``, ... and ``suffix`` a swap-protocol state (``CLEANED_SUFFIX``,
    ``SWAP_SUFFIX``, ``DELETED_SUFFIX``) or "" (Kafka's ``LogFileUtils.logFile`` /
    ``offsetIndexFile`` / ``timeIndexFile``). Every segment file name is built here."""
    return Path(directory) / f"{filename_prefix(offset)}{kind}{suffix}"


def segment_files(directory: Path | str, offset: int, suffix: str = "") -> list[Path]:
    """The ``.log``, ``.index``, ``.timeindex`` and ``.txnindex`` of segment ``offset``
    in one state (the ``.txnindex`` may not exist)."""
    return [segment_file(directory, offset, kind, suffix) for kind in SEGMENT_FILE_TYPES]


def log_file_offset(name: str) -> int | None:
    """The base offset if ``name`` is a live segment's ``.log`` (digits + ``.log``), else
    None: suffixed files (``.log.swap``...) and strangers are not segments."""
    stem, _dot, ext = name.partition(".")
    return int(stem) if "." + ext == LOG_SUFFIX and stem.isdigit() else None


class LogSegment:
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
    ):
        self.dir = Path(directory)
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.suffix = suffix
        self.log_path = segment_file(self.dir, base_offset, LOG_SUFFIX, suffix)
        self._fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644)
        self.size = os.fstat(self._fd).st_size
        self.offset_index = OffsetIndex(
            segment_file(self.dir, base_offset, INDEX_SUFFIX, suffix),
            base_offset,
            max_index_size,
            writable,
        )
        self.time_index = TimeIndex(
            segment_file(self.dir, base_offset, TIMEINDEX_SUFFIX, suffix),
            base_offset,
            max_index_size,
            writable,
        )
        self.txn_index = TransactionIndex(
            segment_file(self.dir, base_offset, TXNINDEX_SUFFIX, suffix), base_offset
        )
        self.txn_index_stale = False
        """Set by the loader when the ``.txnindex`` must be rebuilt from the batches."""
        self._bytes_since_index = 0
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset
        self.rolling_timestamp: int | None = None  # first batch's max timestamp
        self.created_ms = (
            created_ms if created_ms is not None else int(os.stat(self._fd).st_mtime * 1000)
        )
        self.last_offset: int | None = None  # last offset of the last batch, once known
        self.whole_batches_end = 0  # where the walk at load found the last whole batch end
        if self.size:
            self._load_tail_state()

    # -- state ---------------------------------------------------------------------------
    def _load_tail_state(self) -> None:
        ts, off = self.time_index.last_entry
        if ts >= 0:
            self.max_timestamp, self.offset_of_max_timestamp = ts, off
        first = self.read_header_at(0)
        if first is not None:
            self.rolling_timestamp = first.max_timestamp if first.max_timestamp >= 0 else None
        # walk from the last indexed position to learn the last offset and max timestamp
        _off, pos = self.offset_index.last_entry
        if not 0 <= pos <= self.size:  # a damaged index: its sanity check rebuilds it next
            pos = 0
        self.whole_batches_end = pos
        for b in self.iter_batches(pos):
            h = b.header
            self.last_offset = h.last_offset
            self.whole_batches_end = b.position + h.size
            if h.max_timestamp > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = h.max_timestamp, h.last_offset

    @property
    def next_offset(self) -> int:
        return self.base_offset if self.last_offset is None else self.last_offset + 1

    @property
    def largest_timestamp(self) -> int:
        """Kafka's ``largestTimestamp``: max record timestamp, else the file's mtime."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        return int(os.stat(self._fd).st_mtime * 1000)

    def last_modified_ms(self) -> int:
        return int(os.stat(self._fd).st_mtime * 1000)

    def set_last_modified_ms(self, ms: int) -> None:
        os.utime(self.log_path, ns=(ms * 1_000_000, ms * 1_000_000))

    def can_convert_to_relative(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= INT32_MAX

    def should_roll(
        self, batch_size: int, max_offset: int, now_ms: int, max_segment_bytes: int, roll_ms: int
    ) -> bool:
        """Kafka's ``LogSegment.shouldRoll``: size, age, full index, offset overflow."""
        if self.size == 0:
            return False
        age_base = self.rolling_timestamp if self.rolling_timestamp is not None else self.created_ms
        return (
            self.size > max_segment_bytes - batch_size
            or now_ms - age_base > roll_ms
            or self.offset_index.is_full()
            or self.time_index.is_full()
            or not self.can_convert_to_relative(max_offset)
        )

    # -- writing -------------------------------------------------------------------------
    def append(self, data: bytes | memoryview, headers: list[tuple[int, Header]]) -> None:
        """Append whole, validated batches; ``headers`` gives (relative position, header).

        All or nothing: if a write fails (full disk), the log and both indexes are cut
        back to where they were and the in-memory state is unchanged.
        """
        start = self.size
        saved = (
            self.rolling_timestamp,
            self.max_timestamp,
            self.offset_of_max_timestamp,
            self._bytes_since_index,
            self.last_offset,
            self.offset_index.entries,
            self.time_index.entries,
        )
        view = memoryview(data)
        try:
            written = 0
            while written < len(view):
                written += os.pwrite(self._fd, view[written:], start + written)
            for rel_pos, h in headers:
                if self.rolling_timestamp is None and h.max_timestamp >= 0:
                    self.rolling_timestamp = h.max_timestamp
                if h.max_timestamp > self.max_timestamp:
                    self.max_timestamp = h.max_timestamp
                    self.offset_of_max_timestamp = h.last_offset
                if self._bytes_since_index > self.index_interval_bytes:
                    self.offset_index.append(h.last_offset, start + rel_pos)
                    self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
                    self._bytes_since_index = 0
                self._bytes_since_index += h.size
                self.last_offset = h.last_offset
        except OSError:
            (
                self.rolling_timestamp,
                self.max_timestamp,
                self.offset_of_max_timestamp,
                self._bytes_since_index,
                self.last_offset,
                off_entries,
                time_entries,
            ) = saved
            try:
                os.ftruncate(self._fd, start)
                self.offset_index.entries = min(self.offset_index.entries, off_entries)
                self.time_index.entries = min(self.time_index.entries, time_entries)
            except OSError:
                log.exception("%s: cannot roll back a failed append", self.log_path)
            raise
        self.size = start + len(view)

    def update_txn_index(self, txn: AbortedTxn) -> None:
        """Record an aborted transaction whose ABORT marker is in this segment (Kafka's
        ``LogSegment.updateTxnIndex``); the ``.txnindex`` is created on the first one."""
        self.txn_index.append(txn)

    def flush(self) -> None:
        os.fsync(self._fd)
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def on_become_inactive(self) -> None:
        """On roll: final time-index entry, indexes trimmed to their used size (Kafka)."""
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(
                self.max_timestamp, self.offset_of_max_timestamp, skip_full_check=True
            )
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()

    def truncate_to_position(self, position: int) -> None:
        os.ftruncate(self._fd, position)
        self.size = position

    # -- reading -------------------------------------------------------------------------
    def read_at(self, position: int, size: int) -> bytes:
        return os.pread(self._fd, size, position)

    def read_header_at(self, position: int) -> Header | None:
        if position + HEADER_SIZE > self.size:
            return None
        return read_header(os.pread(self._fd, HEADER_SIZE, position))

    def read_all(self) -> bytes:
        return os.pread(self._fd, self.size, 0)

    def iter_batches(self, position: int = 0, end: int | None = None, chunk: int = 1 << 20):
        """Whole batches from ``position`` up to ``end`` (default: the size now), read in chunks."""
        end = self.size if end is None else end
        pos = position
        while pos < end:
            want = min(max(chunk, 0), end - pos)
            data = os.pread(self._fd, want, pos)
            got_any = False
            for b in iter_batches(data):
                got_any = True
                yield RecordBatch(b.header, b.buffer, pos + b.position)
                last_end = b.position + b.header.size
            if not got_any:
                if end - pos < LOG_OVERHEAD:
                    return
                size = batch_size(os.pread(self._fd, LOG_OVERHEAD, pos))
                if pos + size > end:
                    return
                chunk = size  # a batch bigger than the chunk
                continue
            pos += last_end

    def translate_offset(self, offset: int, start_position: int = 0) -> tuple[int, Header] | None:
        """Position and header of the first batch whose last offset >= offset."""
        _o, pos = self.offset_index.lookup(offset)
        pos = max(pos, start_position)
        for b in self.iter_batches(pos):
            if b.header.last_offset >= offset:
                return b.position, b.header
        return None

    def find_offset_by_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= target (ListOffsets)."""
        _ts, off = self.time_index.lookup(timestamp)
        _o, pos = self.offset_index.lookup(off)
        for b in self.iter_batches(pos):
            if b.header.max_timestamp >= timestamp:
                for r in b.records():
                    if r.timestamp >= timestamp:
                        return r.offset, r.timestamp
        return None

    # -- recovery ------------------------------------------------------------------------
    def recover(self) -> int:
        """Rebuild indexes from the log, truncating at the first invalid batch.

        Returns the number of bytes truncated (Kafka's ``LogSegment.recover``).
        """
        self.offset_index.reset()
        self.time_index.reset()
        self.offset_index.resize(self.offset_index.max_index_size)
        self.time_index.resize(self.time_index.max_index_size)
        self.max_timestamp, self.offset_of_max_timestamp = -1, self.base_offset
        self.rolling_timestamp = None
        self.last_offset = None
        valid = 0
        since_index = 0
        try:
            for b in self.iter_batches(0):
                b.ensure_valid()
                h = b.header
                if h.base_offset < self.base_offset or (
                    self.last_offset is not None and h.base_offset <= self.last_offset
                ):
                    raise CorruptRecordError(
                        f"batch offset {h.base_offset} out of order in {self.log_path.name}",
                        position=b.position,
                    )
                if self.rolling_timestamp is None and h.max_timestamp >= 0:
                    self.rolling_timestamp = h.max_timestamp
                if h.max_timestamp > self.max_timestamp:
                    self.max_timestamp, self.offset_of_max_timestamp = (
                        h.max_timestamp,
                        h.last_offset,
                    )
                if since_index > self.index_interval_bytes:
                    self.offset_index.append(h.last_offset, b.position)
                    self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
                    since_index = 0
                since_index += h.size
                valid = b.position + h.size
                self.last_offset = h.last_offset
        except (CorruptRecordError, IndexCorruptError) as exc:
            log.warning("%s: stopping recovery at byte %d: %s", self.log_path, valid, exc)
        self._bytes_since_index = since_index
        truncated = self.size - valid
        if truncated:
            log.warning(
                "%s: truncating %d invalid bytes at position %d", self.log_path, truncated, valid
            )
            self.truncate_to_position(valid)
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(
                self.max_timestamp, self.offset_of_max_timestamp, skip_full_check=True
            )
        return truncated

    def sanity_check(self) -> None:
        self.offset_index.sanity_check(self.size)
        self.time_index.sanity_check(self.size)

    # -- files ---------------------------------------------------------------------------
    def files(self) -> list[Path]:
        """The segment's files on disk (the ``.txnindex`` only when it exists)."""
        out = [self.log_path, self.offset_index.path, self.time_index.path]
        if self.txn_index.exists():
            out.append(self.txn_index.path)
        return out

    def change_suffix(self, new_suffix: str) -> None:
        """Rename all files from the current suffix to ``new_suffix`` (swap protocol)."""
        for attr in ("log_path",):
            old = getattr(self, attr)
            new = Path(str(old)[: len(str(old)) - len(self.suffix)] + new_suffix)
            os.replace(old, new)
            setattr(self, attr, new)
        for idx in (self.offset_index, self.time_index, self.txn_index):
            old = str(idx.path)
            idx.rename(Path(old[: len(old) - len(self.suffix)] + new_suffix))
        self.suffix = new_suffix

    def close(self) -> None:
        self.offset_index.close()
        self.time_index.close()
        try:
            os.close(self._fd)
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
