"""Produce-time checks and rewrites of a record set: Kafka's ``LogValidator``.

:func:`validate` checks every batch (magic, CRC, size, offset range) and every record
(a key on a compacted topic, the timestamp bounds of KIP-937); nothing is written when
any of it fails. :func:`to_topic_codec` recompresses to the topic's
``compression.type`` and :func:`assign_offsets_and_timestamps` stamps offsets, the
leader epoch and each batch's maxTimestamp, as ``validateMessagesAndAssignOffsets``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from kompakt.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    RecordTooLargeError,
)
from kompakt.log.config import LONG_MAX, LONG_MIN, TopicConfig
from kompakt.record import codecs
from kompakt.record.decode import RecordBatch, iter_batches
from kompakt.record.encode import build_batch_like
from kompakt.record.header import (
    CREATE_TIME,
    HEADER_SIZE,
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
from kompakt.record.stream_scan import stream_records

LEADER_EPOCH = 0  # single node: the partition's leader epoch never changes
# Decompressed bytes of one record set that validation holds at once; the batches
# beyond it are walked a chunk at a time. A memory bound only: nothing is refused by it.
IN_MEMORY_EXPANSION = 8 << 20

Buffer = bytes | bytearray | memoryview


class Stamped(NamedTuple):
    """What :func:`assign_offsets_and_timestamps` wrote: each batch's position and new
    header, the offset after the last batch and the largest maxTimestamp (-1: none)."""

    headers: list[tuple[int, Header]]
    next_offset: int
    max_timestamp: int


def validate(
    records: Buffer, config: TopicConfig, name: str, now: int
) -> tuple[list[RecordBatch], list[int | None]]:
    """The batches and each one's largest record timestamp, or the first error.

    ``name`` is the partition's (``topic-partition``), for the error messages.
    """
    batches = list(iter_batches(records))
    consumed = batches[-1].position + batches[-1].header.size if batches else 0
    if not batches or consumed != len(records):
        raise CorruptRecordError(f"record set for {name} is empty or ends in a partial batch")
    limit = config.max_message_bytes
    for b in batches:
        h = b.header
        if h.magic != MAGIC:
            raise InvalidRecordError(f"unsupported record batch magic {h.magic}")
        b.ensure_valid()
        if h.size > limit:
            raise RecordTooLargeError(
                f"batch of {h.size} bytes exceeds max.message.bytes={limit} for {name}"
            )
        if h.record_count != h.last_offset_delta + 1:
            raise InvalidRecordError(
                f"inconsistent batch offset range: {h.record_count} records, "
                f"lastOffsetDelta {h.last_offset_delta}"
            )
    return batches, validate_records(records, batches, config, name, now)


def validate_records(
    records: Buffer, batches: list[RecordBatch], config: TopicConfig, name: str, now: int
) -> list[int | None]:
    """Kafka's ``LogValidator.validateRecord`` over every record: a key on a compacted
    topic, then the timestamp (``validateTimestamp``, KIP-937 bounds). Every offending
    record is listed by its position in the record set (KIP-467's ``RecordError``).

    Compressed payloads are read in memory up to :data:`IN_MEMORY_EXPANSION` bytes in
    all; a batch beyond that is walked a chunk at a time (:mod:`kompakt.record.
    stream_scan`), as Kafka's streaming iterator does, so its expansion is never held.

    Returns each batch's largest record timestamp (None for batches without data
    records), which CreateTime batches then carry as their maxTimestamp.
    """
    cfg = config
    create_time = cfg.message_timestamp_type != "LogAppendTime"
    data = [b for b in batches if not b.header.is_control and b.header.record_count]
    if not cfg.compact and not create_time and not any(_log_append(b) for b in data):
        return [None] * len(batches)  # LogAppendTime, no keys to check: nothing to read
    budget = IN_MEMORY_EXPANSION
    streamed: list[int] = []

    def inflate(i: int, b: RecordBatch) -> bytes | None:
        nonlocal budget
        payload = codecs.decompress_bounded(b.header.compression, b.buffer[HEADER_SIZE:], budget)
        if payload is None:
            streamed.append(i)
        else:
            budget -= len(payload)
        return payload

    scan = scan_records(records, verify_crc=False, decompress=inflate)
    check = _RecordCheck(batches, cfg, name, now)
    rows = np.arange(len(scan))
    counts = np.array([0 if b.header.is_control else b.header.record_count for b in batches])
    if streamed:  # a scanned row's index in the record set counts the streamed records
        skipped = np.zeros(len(batches), np.int64)
        skipped[streamed] = counts[streamed]
        rows = rows + (np.cumsum(skipped) - skipped)[scan.batch_index]
    check.add(rows, scan.offset, scan.timestamp, scan.key_null, scan.batch_index)
    del scan
    first_rows = np.cumsum(counts) - counts
    for i in streamed:
        row = int(first_rows[i])
        for offset, ts, key_null in stream_records(batches[i], i):
            n = len(offset)
            check.add(np.arange(row, row + n), offset, ts, key_null, np.full(n, i, np.int32))
            row += n
    return check.result()


class _RecordCheck:
    """The per-record rules of :func:`validate_records`, fed columns a part at a time
    (all of an in-memory scan, or one chunk of a streamed batch)."""

    def __init__(self, batches: list[RecordBatch], config: TopicConfig, name: str, now: int):
        self.name = name
        self.compact = config.compact
        self.create_time = config.message_timestamp_type != "LogAppendTime"
        self.lo = now - config.message_timestamp_before_max_ms
        self.hi = now + config.message_timestamp_after_max_ms
        self.batch_log_append = np.array([_log_append(b) for b in batches], np.bool_)
        self.per_batch = np.full(len(batches), LONG_MIN, np.int64)
        self.present = np.zeros(len(batches), np.bool_)
        self.errors: list[tuple[int, str]] = []
        self.bad_timestamp = False

    def add(
        self,
        rows: np.ndarray,
        offset: np.ndarray,
        ts: np.ndarray,
        key_null: np.ndarray,
        batch_index: np.ndarray,
    ) -> None:
        """Check records (``rows``: their positions in the record set)."""
        n = len(rows)
        lo, hi = self.lo, self.hi
        key_bad = key_null if self.compact else np.zeros(n, np.bool_)
        stamped = ts != NO_TIMESTAMP if self.create_time else np.zeros(n, np.bool_)
        out_of_range = stamped & ((ts < max(lo, LONG_MIN)) | (ts > min(hi, LONG_MAX)))
        claims_log_append = ~stamped & self.batch_log_append[batch_index]
        for j in np.flatnonzero(key_bad | out_of_range | claims_log_append).tolist():
            i = int(rows[j])
            if key_bad[j]:
                self.errors.append(
                    (
                        i,
                        "Compacted topic cannot accept message without key in topic "
                        f"partition {self.name}.",
                    )
                )
            elif out_of_range[j]:
                self.bad_timestamp = True
                self.errors.append(
                    (
                        i,
                        f"Timestamp {int(ts[j])} of message with offset {int(offset[j])} is "
                        f"out of range. The timestamp should be within [{lo}, {hi}]",
                    )
                )
            else:
                self.bad_timestamp = True
                self.errors.append(
                    (
                        i,
                        f"Invalid timestamp type in message at offset {int(offset[j])}. "
                        "Producer should not set timestamp type to LogAppendTime.",
                    )
                )
        if n:
            np.maximum.at(self.per_batch, batch_index, ts)
            self.present[batch_index] = True

    def result(self) -> list[int | None]:
        """Each batch's largest timestamp, or the errors found, as Kafka raises them."""
        errors = sorted(self.errors)
        if self.bad_timestamp:
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
        return [int(m) if p else None for m, p in zip(self.per_batch, self.present, strict=True)]


def codec_for(config: TopicConfig) -> int | None:
    """The codec id of the topic's ``compression.type``; None for ``producer``."""
    name = config.compression_type
    if name == "producer":
        return None
    return codecs.NONE if name == "uncompressed" else codecs.codec_id(name)


def to_topic_codec(
    buf: bytearray, batches: list[RecordBatch], config: TopicConfig
) -> tuple[bytearray, list[RecordBatch]]:
    """The record set in the topic's ``compression.type`` (Kafka's LogValidator
    recompresses when the producer's codec differs); unchanged otherwise."""
    target = codec_for(config)
    if target is None or all(b.header.compression == target for b in batches):
        return buf, batches
    buf = bytearray(b"".join(_recompress(b, target) for b in batches))
    return buf, list(iter_batches(buf))


def assign_offsets_and_timestamps(
    buf: bytearray,
    batches: list[RecordBatch],
    maxes: list[int | None],
    first_offset: int,
    now: int,
    log_append_time: bool,
) -> Stamped:
    """Write offsets from ``first_offset``, the leader epoch and each batch's timestamp
    into ``buf`` in place (the CRC is recomputed when the timestamp changes).

    Like Kafka's ``LogValidator``, the broker owns each batch's maxTimestamp: with
    LogAppendTime it is the append time (type bit set), with CreateTime the largest
    record timestamp (type bit clear).
    """
    next_offset = first_offset
    headers: list[tuple[int, Header]] = []
    max_ts = -1
    for b, batch_max in zip(batches, maxes, strict=True):
        set_base_offset(buf, b.position, next_offset)
        set_partition_leader_epoch(buf, b.position, LEADER_EPOCH)
        h = b.header._replace(base_offset=next_offset, partition_leader_epoch=LEADER_EPOCH)
        if log_append_time:
            set_log_append_time(buf, b.position, now)
            h = h._replace(max_timestamp=now, attributes=h.attributes | TIMESTAMP_TYPE_BIT)
        elif batch_max is not None:
            set_max_timestamp(buf, b.position, batch_max, CREATE_TIME)
            h = h._replace(max_timestamp=batch_max, attributes=h.attributes & ~TIMESTAMP_TYPE_BIT)
        headers.append((b.position, h))
        max_ts = max(max_ts, h.max_timestamp)
        next_offset = h.next_offset
    return Stamped(headers, next_offset, max_ts)


def _log_append(batch: RecordBatch) -> bool:
    return bool(batch.header.attributes & TIMESTAMP_TYPE_BIT)


def _recompress(batch: RecordBatch, codec: int) -> bytes:
    """Rewrite a batch with the topic's ``compression.type`` (Kafka's LogValidator)."""
    h = batch.header
    if h.compression == codec or h.is_control:
        return bytes(batch.buffer)
    return build_batch_like(h, batch.records(), compression=codec)
