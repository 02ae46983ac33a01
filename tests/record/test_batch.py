"""RecordBatch v2 encode/decode, checked against independent readers and writers.

Kafka's format rules: ``DefaultRecordBatch`` (header layout, CRC-32C from attributes on,
baseOffset outside the CRC) and ``DefaultRecord`` (zig-zag varints, -1 for null).
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kio.records.readers import read_batch as kio_read_batch

from kompakt.errors import CorruptRecordError
from kompakt.record import codecs, kernel
from kompakt.record.decode import Record, RecordBatch, iter_batches
from kompakt.record.encode import (
    assemble_batch,
    build_batch,
    build_control_batch,
    build_empty_batch,
    build_simple_batch,
)
from kompakt.record.header import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    DELETE_HORIZON_BIT,
    HEADER_SIZE,
    TRANSACTIONAL_BIT,
    set_base_offset,
)
from kompakt.record.varint import (
    MAX_VARINT_BYTES,
    TRUNCATED,
    decode_varint,
    read_varint,
    write_varint,
)

ALL_CODECS = [codecs.NONE, codecs.GZIP, codecs.SNAPPY, codecs.LZ4, codecs.ZSTD]

keys = st.one_of(st.none(), st.binary(max_size=40))
values = st.one_of(st.none(), st.binary(max_size=200))
headers = st.lists(
    st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=8))), max_size=3
)
records_st = st.lists(st.tuples(keys, values, headers), min_size=1, max_size=30)


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_varint_roundtrip_zigzag_like_protobuf_sint64(n):
    out = bytearray()
    write_varint(out, n)
    assert read_varint(bytes(out), 0) == (n, len(out))


@settings(deadline=None)  # the first example compiles the kernel
@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_numba_varint_is_the_python_varint_compiled(n):
    """The kernel's varints are varint.py's bodies under numba: same bytes, same value."""
    out = bytearray()
    write_varint(out, n)
    buf = np.zeros(MAX_VARINT_BYTES, np.uint8)
    assert bytes(buf[: kernel.encode_varint(buf, 0, n)]) == bytes(out)
    assert kernel.varint_size(n) == len(out)
    assert kernel.decode_varint(np.frombuffer(bytes(out), np.uint8), 0, len(out)) == (n, len(out))


def test_header_fields_roundtrip_including_producer_and_flags():
    data = build_batch(
        [Record(100, 5000, b"k", b"v"), Record(103, 5007, b"k2", None)],
        producer_id=42,
        producer_epoch=3,
        base_sequence=17,
        transactional=True,
        partition_leader_epoch=9,
        last_offset=105,
    )
    b = RecordBatch.from_bytes(data)
    b.ensure_valid()
    h = b.header
    assert (h.base_offset, h.last_offset, h.record_count) == (100, 105, 2)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (42, 3, 17)
    assert h.is_transactional and not h.is_control
    assert h.partition_leader_epoch == 9
    assert (h.base_timestamp, h.max_timestamp) == (5000, 5007)
    assert [r.offset for r in b.records()] == [100, 103]
    assert b.records()[1].value is None


def test_delete_horizon_bit_keeps_absolute_record_timestamps_kip_534():
    data = build_batch([Record(0, 1000, b"k", None)], delete_horizon=99_999)
    h = RecordBatch.from_bytes(data).header
    assert h.has_delete_horizon and h.delete_horizon == 99_999 and h.attributes & 0x40
    assert RecordBatch.from_bytes(data).records()[0].timestamp == 1000


@pytest.mark.parametrize("ctype", [CONTROL_ABORT, CONTROL_COMMIT])
def test_control_batch_markers_roundtrip(ctype):
    data = build_control_batch(
        ctype, producer_id=7, producer_epoch=1, coordinator_epoch=5, timestamp=1
    )
    b = RecordBatch.from_bytes(data)
    assert b.header.is_control and b.header.is_transactional
    marker = b.control_record()
    assert (marker.type, marker.coordinator_epoch) == (ctype, 5)
    kb = DefaultRecordBatch(data)
    assert kb.is_control_batch and kb.validate_crc()


def test_empty_batch_keeps_offsets_and_producer_state_like_kafka_cleaner():
    src = RecordBatch.from_bytes(
        build_batch(
            [Record(10, 1, b"a", b"1"), Record(11, 2, b"b", b"2")],
            producer_id=5,
            producer_epoch=0,
            base_sequence=0,
        )
    )
    empty = RecordBatch.from_bytes(build_empty_batch(src.header))
    empty.ensure_valid()
    assert len(empty.buffer) == HEADER_SIZE
    h = empty.header
    assert (h.record_count, h.base_offset, h.last_offset, h.producer_id) == (0, 10, 11, 5)
    assert h.base_timestamp == -1


@pytest.mark.parametrize("codec", [c for c in ALL_CODECS if c != codecs.NONE])
def test_empty_compressed_batch_has_no_records_like_kafka_default_record_batch(codec):
    """Kafka's ``DefaultRecordBatch.iterator``: count 0 is an empty iterator, no decompression."""
    src = RecordBatch.from_bytes(
        build_batch([Record(10, 1, b"a", b"1")], compression=codec, producer_id=5)
    )
    h = src.header
    # a header-only batch that still names its codec (as an older cleaner wrote them)
    data = assemble_batch(
        h.base_offset,
        h.partition_leader_epoch,
        h.attributes,
        h.last_offset_delta,
        -1,
        h.max_timestamp,
        h.producer_id,
        h.producer_epoch,
        h.base_sequence,
        0,
        b"",
    )
    empty = RecordBatch.from_bytes(data)
    assert empty.header.compression == codec and empty.header.record_count == 0
    assert empty.records() == []


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_empty_batch_is_uncompressed_without_delete_horizon_like_kafka_write_empty_header(codec):
    """Kafka's ``DefaultRecordBatch.writeEmptyHeader`` writes CompressionType.NONE and no
    delete horizon, keeping the timestamp type and the transactional bit."""
    src = RecordBatch.from_bytes(
        build_batch(
            [Record(10, 1, b"a", b"1")],
            compression=codec,
            producer_id=5,
            producer_epoch=0,
            base_sequence=0,
            transactional=True,
        )
    )
    h = src.header
    stamped = assemble_batch(
        h.base_offset,
        h.partition_leader_epoch,
        h.attributes | DELETE_HORIZON_BIT,
        h.last_offset_delta,
        99,
        h.max_timestamp,
        h.producer_id,
        h.producer_epoch,
        h.base_sequence,
        h.record_count,
        bytes(src.buffer[HEADER_SIZE:]),
    )
    empty = RecordBatch.from_bytes(build_empty_batch(RecordBatch.from_bytes(stamped).header))
    empty.ensure_valid()
    e = empty.header
    assert e.compression == codecs.NONE
    assert not e.attributes & DELETE_HORIZON_BIT
    assert e.attributes & TRANSACTIONAL_BIT
    assert (e.base_timestamp, e.max_timestamp, e.record_count) == (-1, h.max_timestamp, 0)
    assert empty.records() == []


def test_base_offset_is_outside_the_crc():
    data = bytearray(build_simple_batch([(b"k", b"v")], timestamp=1))
    set_base_offset(data, 0, 12345)
    b = RecordBatch.from_bytes(bytes(data))
    b.ensure_valid()
    assert b.records()[0].offset == 12345


def test_flipped_bit_fails_crc_with_corrupt_record_error():
    data = bytearray(build_simple_batch([(b"key", b"value")], timestamp=1))
    data[-2] ^= 0x10
    with pytest.raises(CorruptRecordError, match="CRC"):
        RecordBatch.from_bytes(bytes(data)).ensure_valid()


def test_iter_batches_stops_at_partial_tail_and_rejects_impossible_length():
    a = build_simple_batch([(b"a", b"1")], timestamp=1)
    b = build_simple_batch([(b"b", b"2")], timestamp=1, base_offset=1)
    got = list(iter_batches(a + b[:-3]))
    assert len(got) == 1
    bad = bytearray(a)
    struct.pack_into(">i", bad, 8, 3)
    with pytest.raises(CorruptRecordError):
        list(iter_batches(bytes(bad)))


@pytest.mark.parametrize("codec", ALL_CODECS)
@given(items=records_st)
def test_kompakt_batches_parse_with_kafka_python_reader(codec, items):
    data = build_simple_batch(items, timestamp=1_700_000_000_000, base_offset=7, compression=codec)
    kb = DefaultRecordBatch(data)
    assert kb.validate_crc()
    got = [(r.offset, r.key, r.value, [(k, v) for k, v in r.headers]) for r in kb]
    want = [(7 + i, k, v, [(hk, hv) for hk, hv in h]) for i, (k, v, h) in enumerate(items)]
    assert got == want


@pytest.mark.parametrize("codec", ALL_CODECS)
@given(items=records_st, ts=st.integers(min_value=0, max_value=2**41))
def test_kafka_python_built_batches_decode_identically(codec, items, ts):
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 24,
    )
    for i, (k, v, h) in enumerate(items):
        builder.append(i, timestamp=ts + i, key=k, value=v, headers=[(hk, hv) for hk, hv in h])
    data = bytes(builder.build())
    b = RecordBatch.from_bytes(data)
    b.ensure_valid()
    assert b.header.compression in (
        codecs.NONE,
        codec,
    )  # kafka-python skips codecs that do not shrink
    got = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in b.records()]
    want = [(i, ts + i, k, v, [(hk, hv) for hk, hv in h]) for i, (k, v, h) in enumerate(items)]
    assert got == want


@given(items=records_st)
def test_uncompressed_kompakt_batches_parse_with_kio(items):
    data = build_simple_batch(items, timestamp=1_700_000_000_000, base_offset=3)
    batch, size = kio_read_batch(data, 0)
    assert size == len(data)
    assert [(r.offset, r.key, r.value) for r in batch.records] == [
        (3 + i, k, v) for i, (k, v, _h) in enumerate(items)
    ]
    assert [[(h.key.decode(), h.value) for h in r.headers] for r in batch.records] == [
        [(hk, hv) for hk, hv in h] for _k, _v, h in items
    ]


def test_snappy_is_written_with_xerial_framing_and_plain_snappy_is_read():
    payload = b"x" * 100_000
    framed = codecs.compress(codecs.SNAPPY, payload)
    assert framed.startswith(b"\x82SNAPPY\x00")
    assert codecs.decompress(codecs.SNAPPY, framed) == payload
    import cramjam

    assert codecs.decompress(codecs.SNAPPY, bytes(cramjam.snappy.compress_raw(payload))) == payload


def test_garbage_compressed_payload_is_a_corrupt_record_error():
    with pytest.raises(CorruptRecordError):
        codecs.decompress(codecs.ZSTD, b"not zstd at all")


@settings(deadline=None)
@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_a_varint_cut_short_is_truncated_in_python_and_in_the_kernel(n):
    """Kafka's ``ByteUtils.readVarint`` fails on a varint the buffer ends inside; the one-
    and two-byte fast paths must not read the byte past ``end``."""
    out = bytearray()
    write_varint(out, n)
    data = bytes(out) + b"\x01"  # a byte after ``end`` that would complete a cut varint
    for cut in range(len(out)):
        assert decode_varint(data, 0, cut) == (0, TRUNCATED)
        assert kernel.decode_varint(np.frombuffer(data, np.uint8), 0, cut) == (0, TRUNCATED)
