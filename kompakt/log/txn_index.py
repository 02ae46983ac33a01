"""A segment's aborted-transaction index: ``<base>.txnindex`` (Kafka's ``TransactionIndex``).

Byte layout, one 34-byte entry per aborted transaction whose ABORT marker lies in the
segment, big-endian, no header and no checksum (Kafka's ``AbortedTxn``)::

    version           int16   always 0
    producerId        int64
    firstOffset       int64   first data offset of the transaction in this partition
    lastOffset        int64   offset of the ABORT marker
    lastStableOffset  int64   the partition's LSO once the transaction was aborted

Entries are appended in marker order, so ``lastOffset`` increases. The file is created
on the first append only (most segments never see an abort) and, like the offset and
time indexes, it is derived data: the loader rebuilds it from the segment's batches
when the log was not shut down cleanly, when its tail is torn (a size that is not a
multiple of 34) or when an abort the batches show is missing from it.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from kompakt.record.decode import Record, RecordBatch
from kompakt.record.header import Header

ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = ENTRY.size  # 34: Kafka's AbortedTxn.TOTAL_SIZE
CURRENT_VERSION = 0


class TxnIndexCorruptError(Exception):
    """A ``.txnindex`` that cannot be read whole (Kafka's ``CorruptIndexException``)."""


@dataclass(frozen=True)
class AbortedTxn:
    """Kafka's ``AbortedTxn``: a producer's aborted transaction in this partition, from
    its first data offset to its ABORT marker, and the partition's last stable offset
    once it was aborted."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def pack(self) -> bytes:
        return ENTRY.pack(
            CURRENT_VERSION,
            self.producer_id,
            self.first_offset,
            self.last_offset,
            self.last_stable_offset,
        )


def parse_entries(data: bytes, name: str = ".txnindex") -> list[AbortedTxn]:
    """The entries of a whole ``.txnindex`` file's bytes; a torn tail or an unknown
    version is :class:`TxnIndexCorruptError`."""
    if len(data) % ENTRY_SIZE:
        raise TxnIndexCorruptError(
            f"{name}: size {len(data)} is not a multiple of {ENTRY_SIZE} (last entry is torn)"
        )
    out = []
    for pos in range(0, len(data), ENTRY_SIZE):
        version, pid, first, last, lso = ENTRY.unpack_from(data, pos)
        if version != CURRENT_VERSION:
            raise TxnIndexCorruptError(
                f"{name}: entry at byte {pos} has version {version}, only 0 is known"
            )
        out.append(AbortedTxn(pid, first, last, lso))
    return out


def read_entries(path: Path | str) -> list[AbortedTxn]:
    """The entries of a ``.txnindex`` file (none when it does not exist)."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return []
    return parse_entries(data, str(path))


class TransactionIndex:
    """One segment's ``.txnindex``, created lazily on the first :meth:`append`.

    ``read_only`` (a log opened read-only): the file is read, never written; a rebuild
    or an append changes the entries in memory only."""

    def __init__(self, path: Path, base_offset: int, read_only: bool = False):
        self.path = Path(path)
        self.base_offset = base_offset
        self.read_only = read_only
        self._entries: list[AbortedTxn] | None = None  # read on first use
        self._absent = False  # the loader saw no file: nothing to read or check
        self._unsynced = False  # written since the last fsync began

    def mark_absent(self) -> None:
        """The loader's directory listing has no such file (most segments never see an
        abort): no read, no check, until the first :meth:`append` creates it."""
        self._entries = []
        self._absent = True

    # -- reading -------------------------------------------------------------------------
    @property
    def entries(self) -> list[AbortedTxn]:
        if self._entries is None:
            self._entries = read_entries(self.path)
        return self._entries

    @property
    def last_offset(self) -> int | None:
        return self.entries[-1].last_offset if self.entries else None

    def collect_aborted(self, fetch_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
        """Kafka's ``TransactionIndex.collectAbortedTxns``: the entries overlapping
        ``[fetch_offset, upper_bound)`` (``lastOffset >= fetchOffset`` and ``firstOffset <
        upperBoundOffset``), and whether the search is complete: an entry whose last
        stable offset reaches ``upper_bound`` means no later segment can hold one that
        started below it."""
        found = []
        for e in self.entries:
            if e.last_offset >= fetch_offset and e.first_offset < upper_bound:
                found.append(e)
            if e.last_stable_offset >= upper_bound:
                return found, True
        return found, False

    def sanity_check(self) -> None:
        """Raises :class:`TxnIndexCorruptError` when the file is torn or unreadable."""
        if self._absent:
            return
        self._entries = None
        _ = self.entries

    # -- writing -------------------------------------------------------------------------
    def append(self, txn: AbortedTxn) -> None:
        """Append one entry; ``lastOffset`` must increase (Kafka throws otherwise)."""
        last = self.last_offset
        if last is not None and txn.last_offset <= last:
            raise ValueError(
                f"{self.path.name}: aborted transaction at {txn.last_offset} appended after "
                f"one at {last}; last offsets must increase"
            )
        entries = self.entries
        if self.read_only:
            entries.append(txn)
            return
        self._absent = False
        with open(self.path, "ab") as f:
            try:
                f.write(txn.pack())
                f.flush()
            except OSError:  # a full disk: no torn entry for the next append to follow
                f.truncate(len(entries) * ENTRY_SIZE)
                raise
        self._unsynced = True
        entries.append(txn)

    def replace(self, entries: list[AbortedTxn]) -> None:
        """Rewrite the file to hold exactly ``entries`` (recovery); no file when empty."""
        if self.read_only:
            self._entries = list(entries)
            return
        self._absent = not entries
        if not entries:
            self.path.unlink(missing_ok=True)
        else:
            tmp = self.path.with_name(self.path.name + ".tmp")
            tmp.write_bytes(b"".join(e.pack() for e in entries))
            os.replace(tmp, self.path)
            self._unsynced = True
        self._entries = list(entries)

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or past ``offset`` (Kafka's ``truncateTo``)."""
        kept = [e for e in self.entries if e.last_offset < offset]
        if len(kept) != len(self.entries):
            self.replace(kept)

    def flush(self) -> None:
        """fsync the file if it was written since the last flush began (an entry
        appended during the fsync marks it again)."""
        if self.read_only or self._absent or not self._unsynced:
            return
        self._unsynced = False
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:  # renamed away by a swap or a deletion meanwhile
            return
        try:
            os.fsync(fd)
        except OSError:
            self._unsynced = True
            raise
        finally:
            os.close(fd)

    def rename(self, new_path: Path) -> None:
        """Follow the segment through the swap protocol (the file may not exist)."""
        try:
            os.replace(self.path, new_path)
        except FileNotFoundError:
            pass
        self.path = Path(new_path)

    def exists(self) -> bool:
        return self.path.exists()


def in_aborted_transaction(h: Header, aborted: dict[int, list[tuple[int, int]]]) -> bool:
    """True for a transactional batch inside one of its producer's aborted transactions
    (``first offset <= base offset < ABORT marker``): what a READ_COMMITTED reader
    drops, as Kafka's consumer does with a Fetch's aborted transactions (it looks at
    transactional batches only). ``aborted`` maps a producer id to its (first offset,
    ABORT marker offset) pairs (:func:`aborted_by_producer`)."""
    return h.is_transactional and any(
        first <= h.base_offset < last for first, last in aborted.get(h.producer_id, ())
    )


def aborted_by_producer(aborted: Iterable[AbortedTxn]) -> dict[int, list[tuple[int, int]]]:
    """The aborted transactions of a partition as :func:`in_aborted_transaction` takes
    them."""
    return aborted_spans((a.producer_id, a.first_offset, a.last_offset) for a in aborted)


def aborted_spans(spans: Iterable[tuple[int, int, int]]) -> dict[int, list[tuple[int, int]]]:
    """(producer id, first offset, ABORT marker offset) triples, as a Spark read range
    carries them, grouped by producer for :func:`in_aborted_transaction`."""
    out: dict[int, list[tuple[int, int]]] = {}
    for producer_id, first, last in spans:
        out.setdefault(producer_id, []).append((first, last))
    return out


def consumer_records(
    batches: Iterable[RecordBatch],
    begin: int,
    end: int,
    aborted: dict[int, list[tuple[int, int]]],
    on_aborted: Callable[[Header], None] | None = None,
    decode: Callable[[RecordBatch], Iterable[Record]] = RecordBatch.records,
) -> Iterator[Record]:
    """The records a consumer reads from ``batches`` (a partition's, in offset order)
    from ``begin`` up to ``end``: data batches only (markers are the consumer's to
    skip), none inside a transaction of ``aborted`` (empty for READ_UNCOMMITTED;
    ``on_aborted`` is told each batch left out). READ_COMMITTED readers pass the last
    stable offset as ``end``. The one loop every offline reader and the console use
    (``decode``: how a batch's records are read; the console's are bounded)."""
    for batch in batches:
        h = batch.header
        if h.base_offset >= end:
            return
        if h.is_control or h.last_offset < begin:
            continue
        if in_aborted_transaction(h, aborted):
            if on_aborted is not None:
                on_aborted(h)
            continue
        for r in decode(batch):
            if begin <= r.offset < end:
                yield r
