"""One partition's segments on disk (Kafka's ``LocalLog``): the ordered segment list,
the last one active; opening it through :class:`~kompakt.log.loader.LogLoader`, rolling,
flushing, and reading whole batches like a Kafka fetch.

:class:`~kompakt.log.partition_log.PartitionLog` (Kafka's ``UnifiedLog``) builds on it:
offsets and appends, producer state and transactions, retention and the cleaner's swap.
"""

from __future__ import annotations

import bisect
import functools
import logging
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np

from kompakt.errors import CorruptRecordError, KafkaStorageError, OffsetOutOfRangeError
from kompakt.log.checkpoint import fsync_dir
from kompakt.log.clock import Clock
from kompakt.log.config import TopicConfig
from kompakt.log.loader import LogLoader
from kompakt.log.open_segments import OpenSegments
from kompakt.log.segment import LogSegment
from kompakt.record.decode import iter_batches
from kompakt.record.plain_checks import UNSURE, check_served

log = logging.getLogger(__name__)


class LocalLog:
    """The segments of one partition. Every method that reads or changes the segment
    list holds ``lock`` (guards ``segments`` and ``_bases``)."""

    dir: Path
    topic: str
    partition: int
    config: TopicConfig
    clock: Clock
    lock: threading.RLock
    handles: OpenSegments | None
    read_only: bool
    segments: list[LogSegment]
    _bases: list[int]
    log_start_offset: int
    recovery_point: int
    durable_offset: int  # the .log files are fsynced below it (>= recovery_point)
    last_flush_ms: int
    offline: str | None
    on_io_error: Callable[..., None] | None

    def _before_roll(self, base: int) -> None:
        """Called after the old active segment is flushed, before the new one at
        ``base`` is made (the producer-state snapshot of Kafka's ``UnifiedLog.roll``)."""

    def io_failed(self, exc: OSError, what: str) -> None:
        """Report an I/O error on this log's files to whoever watches its dir."""
        if self.on_io_error is not None:
            self.on_io_error(self, exc, what)

    def check_online(self) -> None:
        if self.offline is not None:
            raise KafkaStorageError(
                f"{self.name} is offline: log dir {self.dir.parent} failed ({self.offline})"
            )

    def segment_kwargs(self) -> dict:
        """The index settings every segment of this log is opened with (from the topic
        config), for whoever writes one beside it: the loader and the cleaner engines."""
        return {
            "index_interval_bytes": self.config.index_interval_bytes,
            "max_index_size": self.config.segment_index_bytes,
        }

    def _load(self, needs_recovery: bool, recovery_point: int | None, cleaned: int) -> None:
        loader = LogLoader(
            self.dir, self.segment_kwargs(), self.clock, self.handles, self.read_only
        )
        for seg in loader.load(needs_recovery, recovery_point):
            self._add(seg)

    def _add(self, seg: LogSegment) -> None:
        i = bisect.bisect_left(self._bases, seg.base_offset)
        self._bases.insert(i, seg.base_offset)
        self.segments.insert(i, seg)

    def _remove(self, seg: LogSegment) -> None:
        i = self.segments.index(seg)
        del self.segments[i]
        del self._bases[i]

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        for seg in reversed(self.segments):
            last = seg.last_offset  # asked on every append: the property once
            if last is not None:
                return last + 1
        # an offline stand-in has no segments: what its checkpoint said, if anything
        return self.segments[-1].base_offset if self.segments else self.log_start_offset

    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    _roll_ms_of: tuple[TopicConfig | None, int] = (None, 0)  # the last config's answer

    def roll_ms(self) -> int:
        """Compacted topics roll at min(segment.ms, max.compaction.lag.ms), like Kafka.
        Asked on every append: worked out once per config (a change replaces it)."""
        cfg, roll = self._roll_ms_of
        if cfg is not self.config:
            cfg = self.config
            roll = cfg.segment_ms - self._jitter()
            if cfg.compact:
                roll = min(roll, cfg.max_compaction_lag_ms)
            self._roll_ms_of = (cfg, roll)
        return roll

    def _jitter(self) -> int:
        """Kafka's ``LogConfig.randomSegmentJitter``: ``% min(segment.jitter.ms,
        segment.ms)``, so the roll time stays above 0 however large the jitter."""
        jitter = min(self.config.segment_jitter_ms or 0, self.config.segment_ms)
        return (hash((self.topic, self.partition)) % jitter) if jitter > 0 else 0

    def _maybe_roll(self, size: int, max_offset: int, first_offset: int, now: int) -> LogSegment:
        seg = self.segments[-1]  # the active segment, without the property's frame
        if seg.should_roll(size, max_offset, now, self.config.segment_bytes, self.roll_ms()):
            return self.roll(first_offset, now)
        return seg

    def roll(self, base_offset: int | None = None, now: int | None = None) -> LogSegment:
        with self.lock:
            old = self.active_segment
            base = self.log_end_offset if base_offset is None else base_offset
            if old.size == 0 and old.base_offset == base:
                return old
            try:
                old.on_become_inactive()
            except OSError as exc:
                self.io_failed(exc, f"rolling {self.name}")
                raise
            # Kafka's roll flushes up to the new segment's base (flushUptoOffsetExclusive):
            # every segment before it is then whole on disk, indexes too, and the recovery
            # point moves there; acks=all fsyncs only the .log and leaves it
            self._sync(True)
            try:
                self._before_roll(base)
                seg = LogSegment(
                    self.dir,
                    base,
                    created_ms=self.clock() if now is None else now,
                    handles=self.handles,
                    **self.segment_kwargs(),
                )
            except OSError as exc:
                self.io_failed(exc, f"rolling {self.name}")
                raise
            self._add(seg)
            log.debug("%s: rolled new segment at offset %d", self.name, base)
            return seg

    def flush(self, now_ms: int | None = None) -> None:
        """fsync every segment with data past the recovery point, its indexes too, then
        move the recovery point to the log end offset (Kafka's ``UnifiedLog.flush``)."""
        self._sync(True)
        with self.lock:
            self.last_flush_ms = self.clock() if now_ms is None else now_ms

    def flush_records(self) -> None:
        """fsync the ``.log`` files up to the log end offset, which :attr:`durable_offset`
        then reaches: what acks=all needs. The indexes are not fsynced and the recovery
        point stays, so a crash's recovery rebuilds them from the records (Kafka's
        ``LogLoader.recoverLog`` re-validates every segment from the recovery point)."""
        self._sync(False)

    def _sync(self, indexes: bool) -> None:
        """Kafka's ``UnifiedLog.flush`` / ``LocalLog.flush``: the log's lock is held only
        to pick the segments past the flushed point and to move the point; the fsyncs
        run without it (:meth:`LogSegment.flush`), so appends go on meanwhile. A segment
        made since the flushed point also gets its directory entry fsynced
        (``Utils.flushDirIfExists``: a new file needs it to survive a power loss)."""
        with self.lock:
            end = self.log_end_offset
            since = self.recovery_point if indexes else self.durable_offset
            # segments before the one holding the flushed point end below it
            first = max(0, bisect.bisect_right(self._bases, since) - 1)
            segments = self.segments[first:]
            new_files = end > since and any(s.base_offset >= since for s in segments)
        try:
            for seg in segments:
                seg.flush(indexes)
            if new_files:
                fsync_dir(self.dir)
        except FileNotFoundError:
            # the topic's folder renamed for deletion meanwhile (Kafka's flushDirIfExists
            # lets it go): nothing of it needs to survive
            if self.dir.exists():
                raise
        except OSError as exc:
            self.io_failed(exc, f"flushing {self.name}")
            raise
        with self.lock:
            self.durable_offset = max(self.durable_offset, end)
            if indexes:
                self.recovery_point = max(self.recovery_point, end)

    def _flush_if_due(self, now: int, end: int) -> None:
        """Kafka's two flush triggers, both checked after an append that ended at
        ``end``: ``flush.messages`` unflushed offsets (``UnifiedLog.append``:
        ``unflushedMessages >= flushInterval``) and ``flush.ms`` since the last flush
        (``LogManager.flushDirtyLogs``, which Kafka runs on a timer). Both default to
        Long.MAX_VALUE: no flush but the periodic one."""
        cfg = self.config
        if (
            end - self.recovery_point >= cfg.flush_messages
            or now - self.last_flush_ms >= cfg.flush_ms
        ):
            self.flush(now)

    def read(self, offset: int, max_bytes: int, min_one_batch: bool = True) -> bytes:
        """Whole batches from the one containing ``offset``, up to ``max_bytes``.

        Like a Kafka fetch, the data may start before ``offset`` (the client skips)
        and comes from one segment. Past compaction gaps the next batch present is
        returned. ``offset == log_end_offset`` reads nothing.
        """
        with self.lock:
            leo = self.log_end_offset
            if offset < self.log_start_offset or offset > leo:
                raise OffsetOutOfRangeError(
                    f"offset {offset} is out of range [{self.log_start_offset}, {leo}] "
                    f"for {self.name}"
                )
            segments = self.segments[max(0, bisect.bisect_right(self._bases, offset) - 1) :]
            sizes = [s.size for s in segments]
        if offset == leo:
            return b""
        try:
            for seg, end in zip(segments, sizes, strict=True):
                found = seg.translate_offset(offset)
                if found is None:
                    continue
                pos, h = found
                if h.size > max_bytes:
                    data = seg.read_at(pos, h.size) if min_one_batch else b""
                else:
                    data = seg.read_at(pos, min(max_bytes, end - pos))
                return self._verified(seg, pos, data)
        except OSError as exc:
            # Kafka's LocalLog.read runs under maybeHandleIOException: a read error takes
            # the log dir offline (LogDirFailureChannel) and the fetch answers
            # KAFKA_STORAGE_ERROR, rather than UNKNOWN_SERVER_ERROR and a traceback
            self.io_failed(exc, f"reading {self.name}")
            raise KafkaStorageError(f"I/O error reading {self.name}: {exc}") from exc
        return b""

    def _verified(self, seg: LogSegment, pos: int, data: bytes) -> bytes:
        """The whole, CRC-valid batches at the start of ``data``.

        Beyond Kafka (whose broker serves a corrupt batch and leaves the CRC check to
        the consumer): a fetch stops before a batch that fails its CRC, and one that
        starts there is CORRUPT_MESSAGE, with the file and position in the broker log.
        A compiled walk finds the valid batches (a few hundredths of a ms per MB); the
        batches' own checks run only when it is unsure, and word the error.
        """
        valid = check_served(np.frombuffer(data, np.uint8))
        if valid != UNSURE:
            return data[:valid]
        last = 0
        try:
            for b in iter_batches(data):
                b.ensure_valid()
                last = b.position + b.header.size
        except CorruptRecordError as exc:
            if last == 0:
                where = pos + (exc.position or 0)
                log.error(
                    "%s: corrupt batch in %s at position %d: %s",
                    self.name,
                    seg.log_path,
                    where,
                    exc,
                )
                raise CorruptRecordError(
                    f"corrupt record batch in {seg.log_path} at position {where}: {exc}",
                    position=where,
                    file=str(seg.log_path),
                ) from exc
        return data[:last]

    def iter_batches(self, start_offset: int = 0):
        """Every batch from ``start_offset`` on (convenience for tools and tests)."""
        with self.lock:  # from the segment holding it: the ones before are not opened
            segments = self.segments[max(0, bisect.bisect_right(self._bases, start_offset) - 1) :]
        for seg in segments:
            if seg.next_offset <= start_offset:
                continue
            for b in seg.iter_batches():
                if b.header.last_offset >= start_offset:
                    yield b

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """ListOffsets by time: first record with timestamp >= target, as (offset, ts)."""
        with self.lock:
            segments = list(self.segments)
        for seg in segments:
            if seg.max_timestamp >= timestamp:
                found = seg.find_offset_by_timestamp(timestamp)
                if found is not None:
                    off, ts = found
                    return max(off, self.log_start_offset), ts
        return None

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """ListOffsets MAX_TIMESTAMP (-3): (offset, timestamp) of the first record holding
        the largest timestamp, found in the first segment that holds it (Kafka 3.8,
        KAFKA-16310); the segment owns the walk into its batch."""
        with self.lock:
            best = max(self.segments, key=lambda s: s.max_timestamp)
        return best.max_timestamp_and_offset()

    def segments_snapshot(self) -> list[LogSegment]:
        with self.lock:
            return list(self.segments)

    @functools.cached_property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"
