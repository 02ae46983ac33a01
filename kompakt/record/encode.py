"""Encoding v2 batches: records, whole batches, control markers, the cleaner's rebuilds.

Kafka's ``MemoryRecordsBuilder`` / ``DefaultRecord.writeTo`` /
``DefaultRecordBatch.writeHeader``. ``assemble_batch`` is the one place a header is
packed and its CRC computed; every builder here, and the cleaner's numba rebuild, ends in it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from kompakt.record import codecs
from kompakt.record.decode import Record
from kompakt.record.header import (
    ATTRIBUTES_POS,
    COMPRESSION_MASK,
    CONTROL_BIT,
    CONTROL_KEY,
    CONTROL_RECORD_VERSION,
    CONTROL_VALUE,
    CRC_POS,
    CREATE_TIME,
    DELETE_HORIZON_BIT,
    HEADER,
    HEADER_SIZE,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    MAGIC,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    Header,
    crc32c,
)
from kompakt.record.varint import write_varint

NULL_LENGTH = -1  # the varint length of a null key, value or header value


def encode_record(
    out: bytearray,
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes | None]] = (),
) -> None:
    """Append one record (Kafka's ``DefaultRecord.writeTo``) to ``out``."""
    body = bytearray(b"\x00")  # record attributes: unused, always 0
    write_varint(body, timestamp_delta)
    write_varint(body, offset_delta)
    _write_bytes(body, key)
    _write_bytes(body, value)
    write_varint(body, len(headers))
    for hk, hv in headers:
        _write_bytes(body, hk.encode() if isinstance(hk, str) else bytes(hk))
        _write_bytes(body, hv)
    write_varint(out, len(body))
    out += body


def _write_bytes(out: bytearray, data: bytes | None) -> None:
    """A varint length and the bytes; null is length -1 and nothing after it."""
    if data is None:
        write_varint(out, NULL_LENGTH)
    else:
        write_varint(out, len(data))
        out += data


def build_batch(
    records: Iterable[Record],
    *,
    base_offset: int | None = None,
    compression: int = codecs.NONE,
    timestamp_type: int = CREATE_TIME,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    transactional: bool = False,
    control: bool = False,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    last_offset: int | None = None,
    delete_horizon: int | None = None,
    max_timestamp: int | None = None,
) -> bytes:
    """Encode records (with absolute offsets and timestamps) as one v2 batch.

    Offsets may have gaps (cleaned batches); ``last_offset`` keeps a batch's original
    lastOffsetDelta when its last records were removed. With ``delete_horizon`` the
    horizon bit is set and baseTimestamp holds it (KIP-534); record timestamps stay
    absolute because their deltas are taken from the horizon. An empty record list
    builds the header-only batch Kafka keeps for producer state (baseTimestamp -1).
    """
    recs = list(records)
    if base_offset is None:
        base_offset = recs[0].offset if recs else 0
    if last_offset is None:
        last_offset = recs[-1].offset if recs else base_offset
    if delete_horizon is not None:
        base_ts = delete_horizon
    elif recs:
        base_ts = recs[0].timestamp
    else:
        base_ts = NO_TIMESTAMP
    if max_timestamp is None:
        max_timestamp = max((r.timestamp for r in recs), default=NO_TIMESTAMP)
    body = bytearray()
    for r in recs:
        encode_record(
            body, r.offset - base_offset, r.timestamp - base_ts, r.key, r.value, r.headers
        )
    payload = codecs.compress(compression, bytes(body)) if compression else bytes(body)
    attributes = compression & COMPRESSION_MASK
    if timestamp_type == LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_BIT
    if transactional:
        attributes |= TRANSACTIONAL_BIT
    if control:
        attributes |= CONTROL_BIT
    if delete_horizon is not None:
        attributes |= DELETE_HORIZON_BIT
    return assemble_batch(
        base_offset,
        partition_leader_epoch,
        attributes,
        last_offset - base_offset,
        base_ts,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        len(recs),
        payload,
    )


def build_batch_like(
    header: Header,
    records: Iterable[Record],
    *,
    compression: int | None = None,
    delete_horizon: int | None = None,
) -> bytes:
    """Re-encode ``records`` as the batch ``header`` describes: same base offset and
    ``lastOffset``, timestamp type, producer fields, flags and leader epoch; its own
    codec unless ``compression`` says otherwise (recompression, the cleaner's rewrite)."""
    return build_batch(
        records,
        base_offset=header.base_offset,
        compression=header.compression if compression is None else compression,
        timestamp_type=header.timestamp_type,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        transactional=header.is_transactional,
        control=header.is_control,
        partition_leader_epoch=header.partition_leader_epoch,
        last_offset=header.last_offset,
        delete_horizon=delete_horizon,
    )


def assemble_batch(
    base_offset: int,
    partition_leader_epoch: int,
    attributes: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    record_count: int,
    payload: bytes | memoryview,
) -> bytes:
    """Header + (already encoded, maybe compressed) records, CRC computed: a whole batch."""
    buf = bytearray(HEADER_SIZE + len(payload))
    HEADER.pack_into(
        buf,
        0,
        base_offset,
        HEADER_SIZE - LOG_OVERHEAD + len(payload),
        partition_leader_epoch,
        MAGIC,
        0,
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        record_count,
    )
    buf[HEADER_SIZE:] = payload
    crc = crc32c(memoryview(buf)[ATTRIBUTES_POS:])
    buf[CRC_POS:ATTRIBUTES_POS] = crc.to_bytes(ATTRIBUTES_POS - CRC_POS, "big")
    return bytes(buf)


def build_simple_batch(
    items: Iterable[tuple[bytes | None, bytes | None]]
    | Iterable[tuple[bytes | None, bytes | None, Sequence[tuple[str, bytes | None]]]],
    *,
    timestamp: int,
    base_offset: int = 0,
    compression: int = codecs.NONE,
    **kwargs,
) -> bytes:
    """Batch of (key, value[, headers]) items at consecutive offsets, one timestamp."""
    recs = []
    for i, item in enumerate(items):
        headers = tuple(item[2]) if len(item) > 2 else ()
        recs.append(Record(base_offset + i, timestamp, item[0], item[1], headers))
    return build_batch(recs, base_offset=base_offset, compression=compression, **kwargs)


def build_control_batch(
    control_type: int,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int = 0,
    timestamp: int,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """A transaction marker batch (COMMIT or ABORT), transactional + control bits set."""
    key = CONTROL_KEY.pack(CONTROL_RECORD_VERSION, control_type)
    value = CONTROL_VALUE.pack(CONTROL_RECORD_VERSION, coordinator_epoch)
    return build_batch(
        [Record(base_offset, timestamp, key, value)],
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transactional=True,
        control=True,
        partition_leader_epoch=partition_leader_epoch,
    )


def build_empty_batch(header: Header) -> bytes:
    """The header-only batch the cleaner keeps for a producer's last batch (count 0).

    As Kafka's ``DefaultRecordBatch.writeEmptyHeader``: uncompressed (there is no
    payload to decompress) and with no KIP-534 delete horizon; the timestamp type,
    transactional and control bits stay.
    """
    return assemble_batch(
        header.base_offset,
        header.partition_leader_epoch,
        header.attributes & ~(COMPRESSION_MASK | DELETE_HORIZON_BIT),
        header.last_offset_delta,
        NO_TIMESTAMP,
        header.max_timestamp,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        0,
        b"",
    )
