"""Reading transaction markers and replaying transactional batches from segment files.

Kafka keeps the open ("ongoing") transactions of a partition in its
``ProducerStateManager`` (:mod:`kompakt.log.producer_state`, fed at append) and the
aborted ones in each segment's ``TransactionIndex`` (:mod:`kompakt.log.txn_index`). At
open, :class:`~kompakt.log.partition_log.PartitionLog` rebuilds the open ones with one
walk over the batch headers (:func:`replay_segments`, Kafka's ``LogLoader``); the Spark
source does the same read-only (:func:`replay_files`). Also the one reader of a
marker's type (:func:`marker_type`).
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from kompakt.errors import CorruptRecordError
from kompakt.log.producer_state import ProducerStateManager
from kompakt.log.txn_index import AbortedTxn
from kompakt.record.decode import RecordBatch
from kompakt.record.header import (
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

__all__ = ["AbortedTxn", "control_type", "marker_type", "replay_files", "replay_segments"]


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
    segments: Sequence[LogSegment], tracker: ProducerStateManager, complete_below: int = 0
) -> dict[int, list[AbortedTxn]]:
    """Feed ``tracker`` the transactional batches of ``segments`` in offset order (how
    Kafka's ``LogLoader`` rebuilds the producer state) and return, per segment base
    offset, the aborted transactions its ABORT markers close: what its ``.txnindex``
    must hold. ``complete_below``: see :meth:`ProducerStateManager.on_batch`."""
    files = [(s.base_offset, s.log_path, s.size) for s in segments]
    return replay_files(files, tracker, complete_below)


def replay_files(
    files: Sequence[tuple[int, str | os.PathLike, int | None]],
    tracker: ProducerStateManager,
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
