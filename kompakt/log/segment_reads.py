"""Reading and recovering a segment's ``.log`` (Kafka's ``LogSegment.read``,
``translateOffset``, ``findOffsetByTimestamp``, ``recover``), as the part of
:class:`~kompakt.log.segment.LogSegment` that reads its batches back."""

from __future__ import annotations

import logging
import os

import numpy as np

from kompakt.errors import CorruptRecordError
from kompakt.log.index import IndexCorruptError
from kompakt.log.syncs import WRITE_AHEAD, is_written_ahead
from kompakt.record.decode import RecordBatch, iter_batches
from kompakt.record.header import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    Header,
    batch_size,
    read_header,
)
from kompakt.record.scan import scan_records
from kompakt.record.stream_scan import first_at_or_after

log = logging.getLogger(__name__)


class SegmentReads:
    """Reading and recovery of :class:`~kompakt.log.segment.LogSegment`, which is one
    (its state: ``size``, the indexes and the ``.log`` descriptor, guarded by ``lock``)."""

    def _load_tail_state(self) -> None:
        """The last offset, the end of the whole batches and the max timestamp from a
        walk of the batches after the last offset-index entry (lock held)."""
        self._tail_known = True
        # walk from the last indexed position to learn the last offset and max timestamp
        _off, pos = self.offset_index.last_entry
        if not 0 <= pos <= self.size:  # a damaged index: its sanity check rebuilds it next
            pos = 0
        self._whole_batches_end = pos
        try:
            for b in self.iter_batches(pos):
                h = b.header
                self._last_offset = h.last_offset
                self._whole_batches_end = b.position + h.size
                if h.max_timestamp > self._max_timestamp:
                    self._max_timestamp, self._shallow_offset_of_max_timestamp = (
                        h.max_timestamp,
                        h.last_offset,
                    )
        except CorruptRecordError:  # zeros written ahead, a damaged tail: the loader recovers
            pass

    def _load_times(self) -> None:
        """The max timestamp merged with the time index's last entry, and the first
        batch's (the roll's age base)."""
        self._times_known = True
        ts, off = self.time_index.last_entry
        if ts >= 0 and (
            ts > self._max_timestamp
            or (ts == self._max_timestamp and off < self._shallow_offset_of_max_timestamp)
        ):
            self._max_timestamp, self._shallow_offset_of_max_timestamp = ts, off
        first = self.read_header_at(0)
        if first is not None:
            self._rolling_timestamp = first.max_timestamp if first.max_timestamp >= 0 else None

    def max_timestamp_and_offset(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record holding :attr:`max_timestamp`, or None
        without one (ListOffsets MAX_TIMESTAMP since KAFKA-16310, Kafka 3.8: the batch
        from :attr:`shallow_offset_of_max_timestamp` whose maxTimestamp matches, then its
        first record with that timestamp, ``RecordBatch.offsetOfMaxTimestamp``). Control
        records count, as Kafka's walk of the batch does."""
        with self.lock:
            ts = self.max_timestamp
            if ts < 0:
                return None
            _o, pos = self.offset_index.lookup(self._shallow_offset_of_max_timestamp)
        for b in self.iter_batches(pos):
            if b.header.max_timestamp == ts:
                scan = scan_records(b.buffer, verify_crc=False, include_control=True)
                hits = np.flatnonzero(scan.timestamp == ts)
                return (int(scan.offset[hits[0]]), ts) if len(hits) else None
        return None

    def read_at(self, position: int, size: int) -> bytes:
        with self.lock:
            return os.pread(self._log_fd(), size, position)

    def read_header_at(self, position: int) -> Header | None:
        if position + HEADER_SIZE > self.size:
            return None
        return read_header(self.read_at(position, HEADER_SIZE))

    def read_all(self) -> bytes:
        return self.read_at(0, self.size)

    def iter_batches(self, position: int = 0, end: int | None = None, chunk: int = 1 << 20):
        """Whole batches from ``position`` up to ``end`` (default: the size now), read in
        chunks; the file is held only while a chunk is read, so a slow consumer of the
        batches never keeps the open-segment cap from closing it."""
        end = self.size if end is None else end
        pos = position
        while pos < end:
            want = min(max(chunk, 0), end - pos)
            data = self.read_at(pos, want)
            got_any = False
            for b in iter_batches(data):
                got_any = True
                yield RecordBatch(b.header, b.buffer, pos + b.position)
                last_end = b.position + b.header.size
            if not got_any:
                if end - pos < LOG_OVERHEAD:
                    return
                size = batch_size(self.read_at(pos, LOG_OVERHEAD))
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
        with self.lock:
            _ts, off = self.time_index.lookup(timestamp)
            _o, pos = self.offset_index.lookup(off)
        for b in self.iter_batches(pos):
            if b.header.max_timestamp >= timestamp and (found := first_at_or_after(b, timestamp)):
                return found
        return None

    def recover(self) -> int:
        """Rebuild indexes from the log, truncating at the first invalid batch.

        Returns the number of invalid bytes truncated (Kafka's ``LogSegment.recover``);
        the zeros a live segment was written ahead with are cut too, but are no damage
        and count for nothing (the loader deletes the segments after a damaged one).
        """
        with self.lock:
            self._unchecked = False  # being rebuilt: no check when first mapped
            self._tail_known = self._times_known = True
            self.offset_index.reset()
            self.time_index.reset()
            self.offset_index.resize(self.offset_index.max_index_size)
            self.time_index.resize(self.time_index.max_index_size)
            return self._recover()

    def _recover(self) -> int:
        self._max_timestamp, self._shallow_offset_of_max_timestamp = -1, self.base_offset
        self._rolling_timestamp = None
        self._last_offset = None
        valid = 0
        since_index = 0
        ahead = False
        try:
            for b in self.iter_batches(0):
                b.ensure_valid()
                h = b.header
                if h.base_offset < self.base_offset or (
                    self._last_offset is not None and h.base_offset <= self._last_offset
                ):
                    raise CorruptRecordError(
                        f"batch offset {h.base_offset} out of order in {self.log_path.name}",
                        position=b.position,
                    )
                if self._rolling_timestamp is None and h.max_timestamp >= 0:
                    self._rolling_timestamp = h.max_timestamp
                if h.max_timestamp > self._max_timestamp:
                    self._max_timestamp, self._shallow_offset_of_max_timestamp = (
                        h.max_timestamp,
                        h.last_offset,
                    )
                if since_index > self.index_interval_bytes:
                    self.offset_index.append(h.last_offset, b.position)
                    self.time_index.maybe_append(
                        self._max_timestamp, self._shallow_offset_of_max_timestamp
                    )
                    since_index = 0
                since_index += h.size
                valid = b.position + h.size
                self._last_offset = h.last_offset
        except (CorruptRecordError, IndexCorruptError) as exc:
            ahead = self.size - valid < WRITE_AHEAD and is_written_ahead(
                self.read_at(valid, self.size - valid)
            )
            if not ahead:
                log.warning("%s: stopping recovery at byte %d: %s", self.log_path, valid, exc)
        self._bytes_since_index = since_index
        self._whole_batches_end = valid
        truncated = self.size - valid
        if truncated and ahead:  # not damage: the segment was being written (syncs.py)
            log.info("%s: cutting %d bytes of zeros written ahead", self.log_path, truncated)
            self.truncate_to_position(valid)
            truncated = 0
        elif truncated:
            log.warning(
                "%s: truncating %d invalid bytes at position %d", self.log_path, truncated, valid
            )
            self.truncate_to_position(valid)
        if self._max_timestamp >= 0:
            self.time_index.maybe_append(
                self._max_timestamp, self._shallow_offset_of_max_timestamp, skip_full_check=True
            )
        return truncated

    def sanity_check(self) -> None:
        with self.lock:
            self.offset_index.sanity_check(self.size)
            self.time_index.sanity_check(self.size)
