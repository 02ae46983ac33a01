"""Open transactions of one partition: the state behind its last stable offset.

Kafka keeps the open ("ongoing") transactions of a partition in its
``ProducerStateManager`` (``firstUnstableOffset``) and the aborted ones in each segment's
``TransactionIndex`` (:mod:`kompakt.log.txn_index`). :class:`TransactionTracker` is the
first part, fed as batches are appended (Kafka's ``ProducerAppendInfo.append``): a
transactional data batch opens its producer's transaction at its base offset unless one
is open, a control batch (COMMIT/ABORT marker) closes it, and closing with ABORT gives
the :class:`~kompakt.log.txn_index.AbortedTxn` the caller writes to the marker's
segment's ``.txnindex``. At open, :class:`~kompakt.log.partition_log.PartitionLog`
rebuilds it with one walk over the batch headers; reads never feed it.
"""

from __future__ import annotations

import mmap
import os
import struct
import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from kompakt.errors import CorruptRecordError
from kompakt.log.txn_index import AbortedTxn
from kompakt.record.decode import RecordBatch
from kompakt.record.header import (
    CONTROL_ABORT,
    CONTROL_KEY,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TRANSACTIONAL_BIT,
    Header,
    read_header,
)
from kompakt.record.varint import read_varint

if TYPE_CHECKING:
    from kompakt.log.segment import LogSegment

__all__ = ["AbortedTxn", "TransactionTracker", "control_type", "replay_files", "replay_segments"]


class TransactionTracker:
    """Open transactions of one partition (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.ongoing: dict[int, int] = {}
        """First offset of each producer's open transaction."""

    def on_batch(
        self, header: Header, marker: int | None = None, complete_below: int = 0
    ) -> AbortedTxn | None:
        """Apply one appended batch; ``marker`` is a control batch's type (COMMIT or
        ABORT, :func:`control_type`). Returns the aborted transaction an ABORT marker
        closes, with the partition's last stable offset once it is closed (Kafka's
        ``ProducerStateManager.lastStableOffset(completedTxn)``: the first offset of the
        earliest other open transaction, else the offset after the marker).
        A data batch below ``complete_below`` belongs to a transaction known to be
        complete and opens none (replay after a clean)."""
        h = header
        if not h.is_transactional:
            return None
        with self._lock:
            if not h.is_control:
                if h.last_offset >= complete_below:
                    self.ongoing.setdefault(h.producer_id, h.base_offset)
                return None
            first = self.ongoing.pop(h.producer_id, None)
            if first is None or marker != CONTROL_ABORT:
                return None
            lso = min(self.ongoing.values(), default=h.last_offset + 1)
            return AbortedTxn(h.producer_id, first, h.last_offset, lso)

    def first_unstable_offset(self) -> int | None:
        """The first offset of the earliest open transaction (Kafka's
        ``ProducerStateManager.firstUnstableOffset``), None when none is open."""
        with self._lock:
            return min(self.ongoing.values(), default=None)

    def snapshot(self) -> dict[int, int]:
        with self._lock:
            return dict(self.ongoing)

    def restore(self, ongoing: dict[int, int]) -> None:
        with self._lock:
            self.ongoing = dict(ongoing)


def control_type(batch: RecordBatch) -> int | None:
    """COMMIT or ABORT from a marker's key (Kafka's ``ControlRecordType.parse``)."""
    for r in batch.records():
        if r.key is not None and len(r.key) >= CONTROL_KEY.size:
            return CONTROL_KEY.unpack_from(bytes(r.key))[1]
    return None


def marker_type(data: bytes | memoryview, header: Header | None = None) -> int | None:
    """COMMIT or ABORT from one control batch's bytes (None for an empty batch).

    Fast path for the marker as Kafka writes it (uncompressed, one record): the key of
    the first record, read in place; anything else goes through the record decoder."""
    h = read_header(data, 0) if header is None else header
    if h.compression == 0 and h.record_count == 1:
        try:
            pos = read_varint(data, HEADER_SIZE)[1]  # record length
            pos += 1  # attributes
            pos = read_varint(data, pos)[1]  # timestamp delta
            pos = read_varint(data, pos)[1]  # offset delta
            key_len, pos = read_varint(data, pos)
            if key_len >= CONTROL_KEY.size and pos + key_len <= len(data):
                return CONTROL_KEY.unpack_from(data, pos)[1]
        except CorruptRecordError:
            pass
    return control_type(RecordBatch.from_bytes(data))


_LENGTH_AND_ATTRIBUTES = struct.Struct(">8xi9xh")  # batchLength (8), attributes (21)


def _transactional_batches(buf: mmap.mmap, end: int) -> Iterator[tuple[int, int]]:
    """(position, size) of each transactional batch, stepping from header to header
    (plain Python: no numba start-up at log open); a torn tail ends the walk."""
    pos = 0
    while pos + HEADER_SIZE <= end:
        length, attributes = _LENGTH_AND_ATTRIBUTES.unpack_from(buf, pos)
        size = LOG_OVERHEAD + length
        if size < HEADER_SIZE or pos + size > end:
            return
        if attributes & TRANSACTIONAL_BIT:
            yield pos, size
        pos += size


def replay_segments(
    segments: Sequence[LogSegment], tracker: TransactionTracker, complete_below: int = 0
) -> dict[int, list[AbortedTxn]]:
    """Feed ``tracker`` the transactional batches of ``segments`` in offset order (how
    Kafka's ``LogLoader`` rebuilds the producer state) and return, per segment base
    offset, the aborted transactions its ABORT markers close: what its ``.txnindex``
    must hold. ``complete_below``: see :meth:`TransactionTracker.on_batch`."""
    files = [(s.base_offset, s.log_path, s.size) for s in segments]
    return replay_files(files, tracker, complete_below)


def replay_files(
    files: Sequence[tuple[int, str | os.PathLike, int | None]],
    tracker: TransactionTracker,
    complete_below: int = 0,
) -> dict[int, list[AbortedTxn]]:
    """:func:`replay_segments` over ``(base offset, .log path, size or None for the
    whole file)``, read-only: only batch headers are read (the file is memory-mapped),
    plus each transactional marker's key; a torn tail ends a file."""
    out: dict[int, list[AbortedTxn]] = {}
    for base, path, size in files:
        found: list[AbortedTxn] = []
        out[base] = found
        if size == 0:  # nothing to read (a read-only open's empty partition has no file)
            continue
        with open(path, "rb") as f:
            n = os.fstat(f.fileno()).st_size if size is None else size
            if not n:
                continue
            with mmap.mmap(f.fileno(), n, access=mmap.ACCESS_READ) as m:
                for pos, batch_size in _transactional_batches(m, n):
                    h = read_header(m, pos)
                    ctl = marker_type(m[pos : pos + batch_size], h) if h.is_control else None
                    aborted = tracker.on_batch(h, ctl, complete_below)
                    if aborted is not None:
                        found.append(aborted)
    return out
