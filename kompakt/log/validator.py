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

LEADER_EPOCH = 0  # single node: the partition's leader epoch never changes

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

    Returns each batch's largest record timestamp (None for batches without data
    records), which CreateTime batches then carry as their maxTimestamp.
    """
    cfg = config
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
                    f"Compacted topic cannot accept message without key in topic partition {name}.",
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
