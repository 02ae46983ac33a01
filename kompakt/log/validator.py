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
from kompakt.record.checks import KEY_NULL, OUT_OF_RANGE, RecordChecks
from kompakt.record.decode import RecordBatch, batches_end, iter_batches, leading_batches
from kompakt.record.encode import assemble_batch
from kompakt.record.header import (
    COMPRESSION_MASK,
    CREATE_TIME,
    HEADER_SIZE,
    LOG_APPEND_TIME,
    MAGIC,
    STAMPED_PREFIX,
    TIMESTAMP_TYPE_BIT,
    Header,
    header_of,
    set_base_offset,
    set_max_timestamp,
    set_partition_leader_epoch,
)
from kompakt.record.plain_checks import check_plain
from kompakt.record.stream_scan import CHUNK, Run, stream_parts

LEADER_EPOCH = 0  # single node: the partition's leader epoch never changes
# Decompressed bytes of one record set that validation holds at once; the batches
# beyond it are walked a chunk at a time. A memory bound only: nothing is refused by it.
IN_MEMORY_EXPANSION = 8 << 20
ERRORS_KEPT = 1024  # record errors held before a second pass that keeps them all
# dtype objects made once: numpy converts a scalar type on each call (0.1 us an append)
_UINT8, _INT64 = np.dtype(np.uint8), np.dtype(np.int64)

Buffer = bytes | bytearray | memoryview


class Stamped(NamedTuple):
    """What :func:`assign_offsets_and_timestamps` made: each batch's position and new
    header, the offset after the last batch, the largest maxTimestamp (-1: none), the
    buffers to write, in order (the record set with the new headers), and the number
    of records."""

    headers: list[tuple[int, Header]]
    next_offset: int
    max_timestamp: int
    pieces: list[Buffer]
    record_count: int


def batches_of(records: Buffer, name: str) -> list[RecordBatch]:
    """The whole batches of a record set to append, which must be one or more and end
    exactly at its end: what every append starts with, the broker's own (a
    coordinator's, a marker) as a producer's."""
    batches = leading_batches(records)
    if not batches or batches_end(batches) != len(records):
        raise CorruptRecordError(f"record set for {name} is empty or ends in a partial batch")
    return batches


def validate(
    records: Buffer, config: TopicConfig, name: str, now: int
) -> tuple[list[RecordBatch], list[int | None]]:
    """The batches and each one's largest record timestamp, or the first error.

    ``name`` is the partition's (``topic-partition``), for the error messages.
    """
    batches = batches_of(records, name)
    # The quick pass (kompakt.record.plain_checks) checks every record and each batch's
    # CRC in one compiled walk and gives each batch's largest timestamp; it raises
    # nothing: a set it is unsure of gets the batch checks below, which word the error
    # (a CRC it matched is not computed twice), then the full record pass, which also
    # decides a LogAppendTime topic that is not compacted (the quick pass reads none).
    n = len(batches)
    compact, create_time, _lo, _hi, bounds = _record_rules(config, now)
    maxima: list[int] | None = None
    if compact or create_time:
        found = np.empty(n, _INT64)
        if check_plain(np.frombuffer(records, _UINT8), compact, create_time, *bounds, found) == n:
            maxima = found.tolist()
    limit = config.max_message_bytes
    for b in batches:
        h = b.header
        if h.magic != MAGIC:
            raise InvalidRecordError(f"unsupported record batch magic {h.magic}")
        if maxima is None:
            b.ensure_valid()
        if len(b.buffer) > limit:
            raise RecordTooLargeError(
                f"batch of {h.size} bytes exceeds max.message.bytes={limit} for {name}"
            )
        if h.record_count != h.last_offset_delta + 1:
            raise InvalidRecordError(
                f"inconsistent batch offset range: {h.record_count} records, "
                f"lastOffsetDelta {h.last_offset_delta}"
            )
    if maxima is not None:
        return batches, maxima
    return batches, validate_records(records, batches, config, name, now)


def _record_rules(config: TopicConfig, now: int) -> tuple[bool, bool, int, int, tuple[int, int]]:
    """What ``validateRecord`` judges by: a compacted topic, a CreateTime topic, and the
    KIP-937 timestamp bounds, as they are and clamped to a long for the compiled pass."""
    lo = now - config.message_timestamp_before_max_ms
    hi = now + config.message_timestamp_after_max_ms
    create_time = config.message_timestamp_type != "LogAppendTime"
    return config.compact, create_time, lo, hi, (max(lo, LONG_MIN), min(hi, LONG_MAX))


def validate_records(
    records: Buffer,
    batches: list[RecordBatch],
    config: TopicConfig,
    name: str,
    now: int,
    capacity: int = ERRORS_KEPT,
) -> list[int | None]:
    """Kafka's ``LogValidator.validateRecord`` over every record: a key on a compacted
    topic, then the timestamp (``validateTimestamp``, KIP-937 bounds). Every offending
    record is listed by its position in the record set (KIP-467's ``RecordError``).

    One compiled pass over the bytes (:mod:`kompakt.record.checks`): uncompressed
    batches in place, compressed payloads in memory up to :data:`IN_MEMORY_EXPANSION`
    bytes in all, and a batch beyond that a chunk at a time (:mod:`kompakt.record.
    stream_scan`), as Kafka's streaming iterator walks it, so its expansion is never held.

    Returns each batch's largest record timestamp (None for batches without data
    records), which CreateTime batches then carry as their maxTimestamp.
    """
    compact, create_time, lo, hi, bounds = _record_rules(config, now)
    if not compact and not create_time and not any(map(_claims_log_append, batches)):
        return [None] * len(batches)  # LogAppendTime, no keys to check: nothing to read
    data = [i for i, b in enumerate(batches) if not b.header.is_control and b.header.record_count]
    with RecordChecks(batches, compact, create_time, *bounds, capacity) as checks:
        _walk(records, batches, data, checks)
        if not checks.complete:  # more errors than kept: check again, keeping them all
            capacity = checks.n_errors
        else:
            found, maxima = checks.found(), checks.batch_maxima()
    if not checks.complete:
        return validate_records(records, batches, config, name, now, capacity)
    _raise_record_errors(found, name, lo, hi)
    return maxima


def _walk(records: Buffer, batches: list[RecordBatch], data: list[int], checks: RecordChecks):
    """Walk the records of the ``data`` batches: uncompressed ones in place, compressed
    payloads in memory up to :data:`IN_MEMORY_EXPANSION`, the rest streamed."""
    plain: list[tuple[int, int, int, int, int]] = []
    packed: list[tuple[int, int, int, bytes]] = []
    streamed: list[tuple[int, int]] = []
    budget = IN_MEMORY_EXPANSION
    row = 0  # rows count data records only
    for i in data:
        b = batches[i]
        h = b.header
        count = h.record_count
        if h.compression == codecs.NONE:
            plain.append((b.position + HEADER_SIZE, b.position + h.size, count, i, row))
        else:
            payload = codecs.decompress_bounded(h.compression, b.buffer[HEADER_SIZE:], budget)
            if payload is None:
                streamed.append((i, row))
            else:
                budget -= len(payload)
                packed.append((i, count, row, payload))
        row += count
    if plain:
        checks.walk(np.frombuffer(records, np.uint8), plain)
    for i, count, row, payload in packed:
        checks.walk(np.frombuffer(payload, np.uint8), [(0, len(payload), count, i, row)])
    del packed
    for i, row in streamed:
        for part in stream_parts(batches[i]):
            if isinstance(part, Run):
                checks.walk(part.buf, [(part.start, part.end, part.count, i, row)])
                row += part.count
            else:
                checks.add(row, i, part.offset_delta, part.timestamp_delta, part.key_len)
                row += 1


def _raise_record_errors(found: list[tuple[int, int, int, int]], name: str, lo: int, hi: int):
    """Raise the records' errors as Kafka's ``processRecordErrors`` does: any timestamp
    error makes the whole set INVALID_TIMESTAMP, otherwise INVALID_RECORD."""
    if not found:
        return
    errors = [(row, _message(kind, offset, ts, name, lo, hi)) for row, kind, offset, ts in found]
    if any(kind != KEY_NULL for _r, kind, _o, _t in found):
        raise InvalidTimestampError(
            "One or more records have been rejected due to invalid timestamp", errors
        )
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
    raise InvalidRecordError(
        f"One or more records have been rejected due to {len(errors)} record errors "
        f"in total, and only showing the first three errors at most: [{shown}]",
        errors,
    )


def _message(kind: int, offset: int, ts: int, name: str, lo: int, hi: int) -> str:
    """Kafka's ``LogValidator`` message for one record's error."""
    if kind == KEY_NULL:
        return f"Compacted topic cannot accept message without key in topic partition {name}."
    if kind == OUT_OF_RANGE:
        return (
            f"Timestamp {ts} of message with offset {offset} is out of range. "
            f"The timestamp should be within [{lo}, {hi}]"
        )
    return (
        f"Invalid timestamp type in message at offset {offset}. "
        "Producer should not set timestamp type to LogAppendTime."
    )


def to_topic_codec(
    buf: Buffer, batches: list[RecordBatch], config: TopicConfig
) -> tuple[Buffer, list[RecordBatch]]:
    """The record set in the topic's ``compression.type`` (Kafka's LogValidator
    recompresses when the producer's codec differs); unchanged otherwise, and for
    ``producer``, the default, which keeps the producer's codec."""
    name = config.compression_type
    if name == "producer":
        return buf, batches
    target = codecs.NONE if name == "uncompressed" else codecs.codec_id(name)
    if all(b.header.compression == target for b in batches):
        return buf, batches
    limit = config.max_message_bytes
    buf = bytearray(b"".join(_recompress(b, target, limit) for b in batches))
    return buf, list(iter_batches(buf))


def assign_offsets_and_timestamps(
    batches: list[RecordBatch],
    maxes: list[int | None],
    first_offset: int,
    now: int,
    log_append_time: bool,
) -> Stamped:
    """Stamp offsets from ``first_offset``, the leader epoch and each batch's timestamp;
    the batches' bytes are not changed: the result's pieces are what to write.

    Like Kafka's ``LogValidator``, the broker owns each batch's maxTimestamp: with
    LogAppendTime it is the append time (type bit set), with CreateTime the largest
    record timestamp (type bit clear). A batch whose maxTimestamp or type changes is
    copied and gets a new CRC; any other only gets its first 16 bytes (base offset,
    length, leader epoch: outside the CRC) new, and its rest is written from the
    batch's bytes as they came, without a copy of the record set.
    """
    next_offset = first_offset
    headers: list[tuple[int, Header]] = []
    pieces: list[Buffer] = []
    max_ts = -1
    records = 0
    prefix = STAMPED_PREFIX
    for b, batch_max in zip(batches, maxes, strict=True):
        h = b.header
        if log_append_time:
            ts, attributes, kind = now, h.attributes | TIMESTAMP_TYPE_BIT, LOG_APPEND_TIME
        elif batch_max is not None:
            ts, attributes, kind = batch_max, h.attributes & ~TIMESTAMP_TYPE_BIT, CREATE_TIME
        else:
            ts, attributes, kind = h.max_timestamp, h.attributes, None
        if kind is not None and (ts != h.max_timestamp or attributes != h.attributes):
            whole = bytearray(b.buffer)
            set_max_timestamp(whole, 0, ts, kind)
            set_base_offset(whole, 0, next_offset)
            set_partition_leader_epoch(whole, 0, LEADER_EPOCH)
            pieces.append(whole)
        else:
            head = prefix.pack(next_offset, h.batch_length, LEADER_EPOCH)
            pieces += (head, b.buffer[prefix.size :])  # the batch's own bytes, no copy
        # a tuple of the fields: _replace costs four times as much, per batch of every append
        h = header_of((
            next_offset, h.batch_length, LEADER_EPOCH, h.magic, h.crc, attributes,
            h.last_offset_delta, h.base_timestamp, ts, h.producer_id, h.producer_epoch,
            h.base_sequence, h.record_count,
        ))  # fmt: skip
        headers.append((b.position, h))
        max_ts = max(max_ts, ts)
        records += h.record_count
        next_offset = h.next_offset
    # tuple.__new__: the NamedTuple without its Python __new__ frame, once per append
    return tuple.__new__(Stamped, (headers, next_offset, max_ts, pieces, records))


def _claims_log_append(batch: RecordBatch) -> bool:
    """A data batch (not a control batch, records in it) with the LogAppendTime bit."""
    h = batch.header
    return bool(h.attributes & TIMESTAMP_TYPE_BIT) and not h.is_control and h.record_count != 0


def _recompress(batch: RecordBatch, codec: int, limit: int) -> bytes:
    """Rewrite a batch with the topic's ``compression.type`` (Kafka's LogValidator).

    The records' bytes are the same under every codec, so the payload is decompressed
    and compressed again a chunk at a time: a batch's expansion is never held (a bomb
    accepted on a topic of another codec expanded whole here). A result over
    ``max.message.bytes`` (``limit``) is refused, as Kafka's UnifiedLog.append checks a
    recompressed batch again, as soon as it grows past it."""
    h = batch.header
    if h.compression == codec or h.is_control:
        return bytes(batch.buffer)
    pieces = codecs.decompress_chunks(h.compression, batch.buffer[HEADER_SIZE:], CHUNK)
    payload = bytearray()
    for out in codecs.compress_chunks(codec, pieces):
        payload += out
        if HEADER_SIZE + len(payload) > limit:
            raise RecordTooLargeError(
                f"Message batch size is over {limit} bytes once recompressed to "
                f"{codecs.NAMES.get(codec)}, which exceeds the maximum configured size of "
                f"{limit} (max.message.bytes)."
            )
    attributes = (h.attributes & ~COMPRESSION_MASK) | codec
    return assemble_batch(
        h.base_offset, h.partition_leader_epoch, attributes, h.last_offset_delta,
        h.base_timestamp, h.max_timestamp, h.producer_id, h.producer_epoch,
        h.base_sequence, h.record_count, payload,
    )  # fmt: skip
