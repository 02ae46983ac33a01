"""One partition's log: an ordered list of segments, the last one active.

Appends assign offsets and may roll; reads return whole batches like a Kafka fetch;
retention deletes whole segments from the start. Loading follows Kafka's ``LogLoader``:
half-done cleaner swaps are finished or rolled back, stray files removed, and after an
unclean shutdown every segment from the recovery point on is re-validated, its indexes
rebuilt and a torn tail truncated.
"""

from __future__ import annotations

import bisect
import errno
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kompakt.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    SegmentsChangedError,
)
from kompakt.log.checkpoint import fsync_dir
from kompakt.log.config import LONG_MAX, LONG_MIN, TopicConfig
from kompakt.log.index import IndexCorruptError
from kompakt.log.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIMEINDEX_SUFFIX,
    LogSegment,
    offset_from_name,
    segment_file,
)
from kompakt.record import codecs
from kompakt.record.decode import RecordBatch, iter_batches
from kompakt.record.encode import build_batch_like
from kompakt.record.header import (
    CREATE_TIME,
    MAGIC,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_BIT,
    Header,
    set_base_offset,
    set_log_append_time,
    set_max_timestamp,
    set_partition_leader_epoch,
)
from kompakt.record.scan import scan_records

log = logging.getLogger(__name__)

Clock = Callable[[], int]
LEADER_EPOCH = 0  # single node: the partition's leader epoch never changes


@dataclass
class AppendInfo:
    first_offset: int
    last_offset: int
    max_timestamp: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int
    record_count: int
    batch_count: int


def _codec_for(config: TopicConfig) -> int | None:
    name = config.compression_type
    if name == "producer":
        return None
    return codecs.NONE if name == "uncompressed" else codecs.codec_id(name)


class PartitionLog:
    def __init__(
        self,
        directory: Path,
        topic: str,
        partition: int,
        config: TopicConfig,
        *,
        clock: Clock,
        recovery_point: int | None = None,
        needs_recovery: bool = False,
        log_start_offset: int = 0,
        schedule_delete: Callable[..., None] | None = None,
    ):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.topic = topic
        self.partition = partition
        self.config = config
        self.clock = clock
        self.lock = threading.RLock()
        self.append_listeners: list[Callable[[PartitionLog], None]] = []
        self._schedule_delete = schedule_delete
        self.segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._load(needs_recovery, recovery_point)
        self.log_start_offset = max(log_start_offset, self.segments[0].base_offset)
        if self.log_start_offset > self.log_end_offset:
            self.log_start_offset = self.segments[0].base_offset
        self.recovery_point = self.log_end_offset
        self.uncleanable_reason: str | None = None

    # -- loading -------------------------------------------------------------------------
    def _segment_kwargs(self) -> dict:
        return {
            "index_interval_bytes": self.config.index_interval_bytes,
            "max_index_size": self.config.segment_index_bytes,
        }

    def _load(self, needs_recovery: bool, recovery_point: int | None) -> None:
        self._complete_swaps()
        bases = sorted(
            offset_from_name(p.name) for p in self.dir.iterdir() if p.name.endswith(LOG_SUFFIX)
        )
        for p in self.dir.iterdir():  # orphan index files, like Kafka's LogLoader
            if p.name.endswith((INDEX_SUFFIX, TIMEINDEX_SUFFIX)):
                if offset_from_name(p.name) not in bases:
                    p.unlink()
        for i, base in enumerate(bases):
            missing_index = not all(
                segment_file(self.dir, base, s).exists() for s in (INDEX_SUFFIX, TIMEINDEX_SUFFIX)
            )
            seg = LogSegment(self.dir, base, writable=i == len(bases) - 1, **self._segment_kwargs())
            self._add(seg)
            if missing_index:
                log.info("%s: rebuilding missing index files", seg.log_path)
                seg.recover()
        if not self.segments:
            self._add(LogSegment(self.dir, 0, created_ms=self.clock(), **self._segment_kwargs()))
            return
        if needs_recovery:
            self._recover(recovery_point)
        else:
            for seg in self.segments:
                try:
                    seg.sanity_check()
                except IndexCorruptError as exc:
                    log.warning("%s: %s; rebuilding indexes", seg.log_path, exc)
                    seg.recover()
            active = self.segments[-1]
            if active.whole_batches_end != active.size:
                # Beyond Kafka, which trusts the clean-shutdown marker: a file restored or
                # copied mid-write ends in a partial batch; appending after it would hide
                # every later batch from readers. Recovery cuts it at the last valid batch.
                log.warning(
                    "%s: ends in a partial batch at byte %d despite a clean shutdown; recovering",
                    active.log_path,
                    active.whole_batches_end,
                )
                self._recover(active.base_offset)

    def _recover(self, recovery_point: int | None) -> None:
        """Kafka's ``LogLoader.recoverLog``: re-validate segments past the recovery point."""
        start = 0
        if recovery_point is not None:
            start = max(0, bisect.bisect_right(self._bases, recovery_point) - 1)
        for i in range(start, len(self.segments)):
            seg = self.segments[i]
            truncated = seg.recover()
            if truncated:
                rest = self.segments[i + 1 :]
                if rest:
                    log.warning(
                        "%s: corrupt segment %s; deleting %d later segments",
                        self.dir.name,
                        seg.log_path.name,
                        len(rest),
                    )
                for later in rest:
                    self._remove(later)
                    later.delete_files()
                break
        for seg in self.segments[:-1]:
            seg.offset_index.trim_to_valid_size()
            seg.time_index.trim_to_valid_size()

    def _complete_swaps(self) -> None:
        """Resolve a cleaner swap interrupted by a crash (Kafka ``LogLoader``).

        ``.deleted`` files go; every ``.cleaned`` file goes, with any ``.swap`` at or
        beyond the smallest ``.cleaned`` offset (the swap had not finished writing);
        remaining ``.swap`` files replace the segments they cover.
        """
        names = list(self.dir.iterdir())
        for p in names:
            if p.name.endswith(DELETED_SUFFIX) or p.name.endswith(".tmp"):
                p.unlink(missing_ok=True)
        cleaned = [p for p in names if p.name.endswith(CLEANED_SUFFIX)]
        min_cleaned = min((offset_from_name(p.name) for p in cleaned), default=None)
        for p in cleaned:
            p.unlink(missing_ok=True)
        swaps = [p for p in self.dir.iterdir() if p.name.endswith(SWAP_SUFFIX)]
        for p in swaps:
            if min_cleaned is not None and offset_from_name(p.name) >= min_cleaned:
                p.unlink(missing_ok=True)
        swap_logs = sorted(
            p for p in self.dir.iterdir() if p.name.endswith(LOG_SUFFIX + SWAP_SUFFIX)
        )
        # an index .swap without its .log.swap: the crash came inside the final rename,
        # after the log got its name; drop it and let the index be rebuilt (Kafka
        # deletes index swap files and rebuilds indexes too)
        swap_bases = {offset_from_name(p.name) for p in swap_logs}
        for p in list(self.dir.iterdir()):
            if p.name.endswith(SWAP_SUFFIX) and offset_from_name(p.name) not in swap_bases:
                p.unlink(missing_ok=True)
        for p in swap_logs:
            base = offset_from_name(p.name)
            seg = LogSegment(
                self.dir, base, suffix=SWAP_SUFFIX, writable=False, **self._segment_kwargs()
            )
            seg.recover()
            end = seg.next_offset
            seg.close()
            for q in self.dir.iterdir():
                if q.name.endswith(
                    (LOG_SUFFIX, INDEX_SUFFIX, TIMEINDEX_SUFFIX)
                ) and not q.name.endswith(SWAP_SUFFIX):
                    if base <= offset_from_name(q.name) < end:
                        q.unlink()
            for q in list(self.dir.iterdir()):
                if q.name.endswith(SWAP_SUFFIX) and offset_from_name(q.name) == base:
                    q.rename(q.with_name(q.name[: -len(SWAP_SUFFIX)]))
            log.info("%s: completed interrupted swap of segment %d", self.dir.name, base)

    def _add(self, seg: LogSegment) -> None:
        i = bisect.bisect_left(self._bases, seg.base_offset)
        self._bases.insert(i, seg.base_offset)
        self.segments.insert(i, seg)

    def _remove(self, seg: LogSegment) -> None:
        i = self.segments.index(seg)
        del self.segments[i]
        del self._bases[i]

    # -- offsets -------------------------------------------------------------------------
    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        for seg in reversed(self.segments):
            if seg.last_offset is not None:
                return seg.next_offset
        return self.segments[-1].base_offset

    @property
    def high_watermark(self) -> int:
        return self.log_end_offset  # single node: everything appended is replicated

    @property
    def last_stable_offset(self) -> int:
        return self.high_watermark

    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    # -- append --------------------------------------------------------------------------
    def validate(
        self, records: bytes | bytearray | memoryview, now_ms: int | None = None
    ) -> list[RecordBatch]:
        """Kafka's ``LogValidator`` checks; nothing is written when any batch fails."""
        return self._validated(records, self.clock() if now_ms is None else now_ms)[0]

    def _validated(
        self, records: bytes | bytearray | memoryview, now: int
    ) -> tuple[list[RecordBatch], list[int | None]]:
        """The batches and each one's largest record timestamp, or the first error."""
        batches = list(iter_batches(records))
        consumed = batches[-1].position + batches[-1].header.size if batches else 0
        if not batches or consumed != len(records):
            raise CorruptRecordError(
                f"record set for {self.name} is empty or ends in a partial batch"
            )
        limit = self.config.max_message_bytes
        for b in batches:
            h = b.header
            if h.magic != MAGIC:
                raise InvalidRecordError(f"unsupported record batch magic {h.magic}")
            b.ensure_valid()
            if h.size > limit:
                raise RecordTooLargeError(
                    f"batch of {h.size} bytes exceeds max.message.bytes={limit} for {self.name}"
                )
            if h.record_count != h.last_offset_delta + 1:
                raise InvalidRecordError(
                    f"inconsistent batch offset range: {h.record_count} records, "
                    f"lastOffsetDelta {h.last_offset_delta}"
                )
        return batches, self._validate_records(records, batches, now)

    def _validate_records(
        self, records: bytes | bytearray | memoryview, batches: list[RecordBatch], now: int
    ) -> list[int | None]:
        """Kafka's ``LogValidator.validateRecord`` over every record: a key on a compacted
        topic, then the timestamp (``validateTimestamp``, KIP-937 bounds). Every offending
        record is listed by its position in the record set (KIP-467's ``RecordError``).

        Returns each batch's largest record timestamp (None for batches without data
        records), which CreateTime batches then carry as their maxTimestamp.
        """
        cfg = self.config
        create_time = cfg.message_timestamp_type != "LogAppendTime"
        lo = now - cfg.message_timestamp_before_max_ms
        hi = now + cfg.message_timestamp_after_max_ms
        maxes: list[int | None] = [None] * len(batches)
        data = [b for b in batches if not b.header.is_control and b.header.record_count]
        if not cfg.compact and not create_time and not any(_log_append(b) for b in data):
            return maxes  # LogAppendTime, no keys to check: nothing to read per record
        scan = scan_records(records, verify_crc=False)
        ts = scan.timestamp
        key_bad = scan.key_null if cfg.compact else np.zeros(len(scan), np.bool_)
        stamped = ts != NO_TIMESTAMP if create_time else np.zeros(len(scan), np.bool_)
        out_of_range = stamped & ((ts < max(lo, LONG_MIN)) | (ts > min(hi, LONG_MAX)))
        batch_log_append = np.array([_log_append(b) for b in batches], np.bool_)
        claims_log_append = ~stamped & batch_log_append[scan.batch_index]
        errors: list[tuple[int, str]] = []
        bad_timestamp = False
        for i in np.flatnonzero(key_bad | out_of_range | claims_log_append).tolist():
            offset = int(scan.offset[i])
            if key_bad[i]:
                errors.append(
                    (
                        i,
                        "Compacted topic cannot accept message without key in topic "
                        f"partition {self.name}.",
                    )
                )
            elif out_of_range[i]:
                bad_timestamp = True
                errors.append(
                    (
                        i,
                        f"Timestamp {int(ts[i])} of message with offset {offset} is out of "
                        f"range. The timestamp should be within [{lo}, {hi}]",
                    )
                )
            else:
                bad_timestamp = True
                errors.append(
                    (
                        i,
                        f"Invalid timestamp type in message at offset {offset}. "
                        "Producer should not set timestamp type to LogAppendTime.",
                    )
                )
        if bad_timestamp:
            raise InvalidTimestampError(
                "One or more records have been rejected due to invalid timestamp", errors
            )
        if errors:
            shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
            raise InvalidRecordError(
                f"One or more records have been rejected due to {len(errors)} record errors "
                f"in total, and only showing the first three errors at most: [{shown}]",
                errors,
            )
        if len(scan):
            per_batch = np.full(len(batches), LONG_MIN, np.int64)
            np.maximum.at(per_batch, scan.batch_index, ts)
            present = np.zeros(len(batches), np.bool_)
            present[scan.batch_index] = True
            maxes = [int(m) if p else None for m, p in zip(per_batch, present, strict=True)]
        return maxes

    def append(
        self, records: bytes | bytearray | memoryview, now_ms: int | None = None
    ) -> AppendInfo:
        """Validate, assign offsets and append a produce request's record set.

        Like Kafka's ``LogValidator``, the broker owns each batch's maxTimestamp: with
        LogAppendTime it is the append time (type bit set), with CreateTime the largest
        record timestamp (type bit clear); the CRC is recomputed when either changes.
        """
        now = self.clock() if now_ms is None else now_ms
        buf = bytearray(records)
        batches, maxes = self._validated(buf, now)
        target = _codec_for(self.config)
        if target is not None and any(b.header.compression != target for b in batches):
            buf = bytearray(b"".join(_recompress(b, target) for b in batches))
            batches = list(iter_batches(buf))
        log_append = self.config.message_timestamp_type == "LogAppendTime"
        with self.lock:
            next_offset = self.log_end_offset
            first = next_offset
            headers: list[tuple[int, Header]] = []
            max_ts = -1
            for b, batch_max in zip(batches, maxes, strict=True):
                set_base_offset(buf, b.position, next_offset)
                set_partition_leader_epoch(buf, b.position, LEADER_EPOCH)
                h = b.header._replace(base_offset=next_offset, partition_leader_epoch=LEADER_EPOCH)
                if log_append:
                    set_log_append_time(buf, b.position, now)
                    h = h._replace(max_timestamp=now, attributes=h.attributes | TIMESTAMP_TYPE_BIT)
                elif batch_max is not None:
                    set_max_timestamp(buf, b.position, batch_max, CREATE_TIME)
                    h = h._replace(
                        max_timestamp=batch_max, attributes=h.attributes & ~TIMESTAMP_TYPE_BIT
                    )
                headers.append((b.position, h))
                max_ts = max(max_ts, h.max_timestamp)
                next_offset = h.next_offset
            try:
                seg = self._maybe_roll(len(buf), next_offset - 1, first, now)
                seg.append(buf, headers)
            except OSError as exc:  # the segment has cut itself back to `before`
                raise KafkaStorageError(f"cannot append to {self.name}: {exc.strerror}") from exc
        for listener in list(self.append_listeners):
            listener(self)
        return AppendInfo(
            first_offset=first,
            last_offset=next_offset - 1,
            max_timestamp=max_ts,
            log_append_time=now if log_append else -1,
            log_start_offset=self.log_start_offset,
            record_count=sum(h.record_count for _p, h in headers),
            batch_count=len(headers),
        )

    def roll_ms(self) -> int:
        """Compacted topics roll at min(segment.ms, max.compaction.lag.ms), like Kafka."""
        roll = self.config.segment_ms - self._jitter()
        if self.config.compact:
            roll = min(roll, self.config.max_compaction_lag_ms)
        return roll

    def _jitter(self) -> int:
        jitter = self.config.get("segment.jitter.ms") or 0
        return (hash((self.topic, self.partition)) % jitter) if jitter > 0 else 0

    def _maybe_roll(self, size: int, max_offset: int, first_offset: int, now: int) -> LogSegment:
        seg = self.active_segment
        if seg.should_roll(size, max_offset, now, self.config.segment_bytes, self.roll_ms()):
            return self.roll(first_offset, now)
        return seg

    def roll(self, base_offset: int | None = None, now: int | None = None) -> LogSegment:
        with self.lock:
            old = self.active_segment
            base = self.log_end_offset if base_offset is None else base_offset
            if old.size == 0 and old.base_offset == base:
                return old
            old.flush()
            old.on_become_inactive()
            seg = LogSegment(
                self.dir,
                base,
                created_ms=self.clock() if now is None else now,
                **self._segment_kwargs(),
            )
            self._add(seg)
            log.debug("%s: rolled new segment at offset %d", self.name, base)
            return seg

    def flush(self) -> None:
        with self.lock:
            for seg in self.segments:
                if seg.next_offset > self.recovery_point or seg is self.active_segment:
                    seg.flush()
            self.recovery_point = self.log_end_offset

    # -- read ----------------------------------------------------------------------------
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
        return b""

    def _verified(self, seg: LogSegment, pos: int, data: bytes) -> bytes:
        """The whole, CRC-valid batches at the start of ``data``.

        Beyond Kafka (whose broker serves a corrupt batch and leaves the CRC check to
        the consumer): a fetch stops before a batch that fails its CRC, and one that
        starts there is CORRUPT_MESSAGE, with the file and position in the broker log.
        """
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
        with self.lock:
            segments = list(self.segments)
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
        """ListOffsets MAX_TIMESTAMP (-3): (offset, timestamp) of the largest timestamp."""
        with self.lock:
            best = max(self.segments, key=lambda s: s.max_timestamp)
        if best.max_timestamp < 0:
            return None
        return best.offset_of_max_timestamp, best.max_timestamp

    # -- retention -----------------------------------------------------------------------
    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: move the log start offset forward (never back)."""
        with self.lock:
            if offset > self.high_watermark or offset < 0:
                raise OffsetOutOfRangeError(
                    f"cannot delete records before {offset}: high watermark is "
                    f"{self.high_watermark} for {self.name}"
                )
            if offset > self.log_start_offset:
                self.log_start_offset = offset
            self._delete_segments(self._start_breached())
            return self.log_start_offset

    def _start_breached(self) -> list[LogSegment]:
        out = []
        for seg, nxt in zip(self.segments, self.segments[1:], strict=False):
            if nxt.base_offset <= self.log_start_offset:
                out.append(seg)
            else:
                break
        return out

    def apply_retention(self, now_ms: int | None = None) -> int:
        """Kafka's ``UnifiedLog.deleteOldSegments``: segments below the log start offset,
        then (with ``delete`` in ``cleanup.policy``) those past ``retention.bytes`` and
        those past ``retention.ms``; returns the number of segments deleted.

        Each pass takes a prefix of the log (:meth:`_deletable_segments`), and that
        includes the active segment when it breaches too and is not empty: Kafka then
        rolls a new, empty active segment first, so an idle topic's records expire and
        its log start offset becomes the log end offset.
        """
        now = self.clock() if now_ms is None else now_ms
        with self.lock:
            deleted = self._delete_old_segments(self._start_offset_breach)
            if self.config.delete:
                deleted += self._delete_retention_size_breached()
                deleted += self._delete_retention_ms_breached(now)
            return deleted

    def _start_offset_breach(self, seg: LogSegment, nxt: LogSegment | None) -> bool:
        # never the last segment: the log start offset may equal the log end offset
        return nxt is not None and nxt.base_offset <= self.log_start_offset

    def _delete_retention_ms_breached(self, now: int) -> int:
        """Kafka's ``deleteRetentionMsBreachedSegments``."""
        retention_ms = self.config.retention_ms
        if retention_ms < 0:
            return 0
        return self._delete_old_segments(
            lambda seg, _nxt: now - seg.largest_timestamp > retention_ms, now
        )

    def _delete_retention_size_breached(self) -> int:
        """Kafka's ``deleteRetentionSizeBreachedSegments``: the oldest segments while the
        log stays at least ``retention.bytes`` without them (so the active segment goes
        only with ``retention.bytes=0``)."""
        retention_bytes = self.config.retention_bytes
        size = self.size_bytes()
        if retention_bytes < 0 or size < retention_bytes:
            return 0
        diff = size - retention_bytes

        def breached(seg: LogSegment, _nxt: LogSegment | None) -> bool:
            nonlocal diff
            if diff - seg.size >= 0:
                diff -= seg.size
                return True
            return False

        return self._delete_old_segments(breached)

    def _delete_old_segments(
        self,
        predicate: Callable[[LogSegment, LogSegment | None], bool],
        now: int | None = None,
    ) -> int:
        doomed = self._deletable_segments(predicate)
        if doomed:
            self._delete_segments(doomed, now)
        return len(doomed)

    def _deletable_segments(
        self, predicate: Callable[[LogSegment, LogSegment | None], bool]
    ) -> list[LogSegment]:
        """Kafka's ``UnifiedLog.deletableSegments``: from the oldest segment while
        ``predicate`` holds. A segment qualifies only if all its offsets are below the
        high watermark (the log start offset never passes it); a last segment that is
        empty never does."""
        out: list[LogSegment] = []
        segs = self.segments
        hw = self.high_watermark
        for i, seg in enumerate(segs):
            nxt = segs[i + 1] if i + 1 < len(segs) else None
            last_and_empty = nxt is None and seg.size == 0
            upper = nxt.base_offset if nxt is not None else self.log_end_offset
            if hw >= upper and predicate(seg, nxt) and not last_and_empty:
                out.append(seg)
            else:
                break
        return out

    def _delete_segments(self, doomed: list[LogSegment], now: int | None = None) -> None:
        """Remove a prefix of the log (Kafka's ``UnifiedLog.deleteSegments``). There is
        always at least one segment: deleting them all rolls a new active one first, at
        the log end offset, which becomes the log start offset."""
        if not doomed:
            return
        if len(doomed) == len(self.segments):
            new = self.roll(now=now)
            if doomed[-1] is new:  # an empty active segment stays as the new one
                doomed = doomed[:-1]
                if not doomed:
                    return
        for seg in doomed:
            self._remove(seg)
        self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
        paths: list[Path] = []
        for seg in doomed:
            seg.close()
            for p in seg.files():
                if p.exists():
                    target = p.with_name(p.name + DELETED_SUFFIX)
                    os.replace(p, target)
                    paths.append(target)
            log.info("%s: deleted segment %d (%d bytes)", self.name, seg.base_offset, seg.size)
        if self._schedule_delete is not None:
            self._schedule_delete(paths, self.config.file_delete_delay_ms)
        else:
            for p in paths:
                p.unlink(missing_ok=True)

    # -- cleaner swap --------------------------------------------------------------------
    def replace_segments(self, new: LogSegment, old: list[LogSegment]) -> None:
        """Swap a cleaned segment in for ``old`` (Kafka's ``LocalLog.replaceSegments``).

        ``new`` arrives flushed with suffix ``.cleaned``. Order on disk: ``.cleaned`` ->
        ``.swap``; old files -> ``.deleted``; ``.swap`` -> final name; fsync the dir. A crash
        at any step is finished or rolled back by :meth:`_complete_swaps` on the next open.
        Old segments stay open for readers until ``file.delete.delay.ms`` has passed.
        The partition lock is held only for the renames.
        """
        with self.lock:
            live = {id(s) for s in self.segments}
            if not old or any(id(s) not in live for s in old):
                raise SegmentsChangedError(
                    f"{self.name}: segments changed during the clean (retention or "
                    "DeleteRecords removed some); the clean is abandoned"
                )
            new.change_suffix(SWAP_SUFFIX)
            fsync_dir(self.dir)
            for seg in old:
                self._remove(seg)
            self._add(new)
            deleted: list[Path] = []
            for seg in old:
                seg.change_suffix(DELETED_SUFFIX)
                deleted += seg.files()
            new.change_suffix("")
            fsync_dir(self.dir)

        def close_old() -> None:
            for seg in old:
                seg.close()

        if self._schedule_delete is not None:
            self._schedule_delete(deleted, self.config.file_delete_delay_ms, close_old)
        else:
            close_old()
            for p in deleted:
                p.unlink(missing_ok=True)

    def segments_snapshot(self) -> list[LogSegment]:
        with self.lock:
            return list(self.segments)

    # -- lifecycle -----------------------------------------------------------------------
    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    def close(self) -> None:
        with self.lock:
            for seg in self.segments:
                try:
                    seg.flush()
                    seg.offset_index.trim_to_valid_size()
                    seg.time_index.trim_to_valid_size()
                except OSError as exc:
                    if exc.errno != errno.EBADF:
                        raise
                seg.close()

    def __repr__(self) -> str:
        return (
            f"PartitionLog({self.name}, start={self.log_start_offset}, "
            f"end={self.log_end_offset}, segments={len(self.segments)})"
        )


def _log_append(batch: RecordBatch) -> bool:
    return bool(batch.header.attributes & TIMESTAMP_TYPE_BIT)


def _recompress(batch: RecordBatch, codec: int) -> bytes:
    """Rewrite a batch with the topic's ``compression.type`` (Kafka's LogValidator)."""
    h = batch.header
    if h.compression == codec or h.is_control:
        return bytes(batch.buffer)
    return build_batch_like(h, batch.records(), compression=codec)
