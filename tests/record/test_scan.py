"""The batch-level scan agrees with the record-by-record decoder on every field it returns."""

from __future__ import annotations

import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kompakt.errors import CorruptRecordError
from kompakt.record import codecs
from kompakt.record.decode import Record, RecordBatch, iter_batches
from kompakt.record.encode import (
    assemble_batch,
    build_batch,
    build_control_batch,
    build_simple_batch,
)
from kompakt.record.header import CONTROL_COMMIT, HEADER_SIZE
from kompakt.record.scan import HELD, payload_expansion, scan_records
from kompakt.record.stream_scan import stream_columns

batch_st = st.tuples(
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.binary(max_size=12)),
            st.one_of(st.none(), st.binary(max_size=30)),
        ),
        min_size=1,
        max_size=12,
    ),
    st.sampled_from([codecs.NONE, codecs.GZIP, codecs.SNAPPY, codecs.LZ4, codecs.ZSTD]),
    st.integers(min_value=0, max_value=2**40),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(batch_st, min_size=1, max_size=8))
def test_scan_matches_full_decode_for_mixed_codecs(batches):
    data, offset = b"", 0
    for items, codec, ts in batches:
        data += build_simple_batch(items, timestamp=ts, base_offset=offset, compression=codec)
        offset += len(items)
    scan = scan_records(data)
    want = [r for b in iter_batches(data) for r in b.records()]
    assert scan.offset.tolist() == [r.offset for r in want]
    assert scan.timestamp.tolist() == [r.timestamp for r in want]
    assert [scan.key(i) for i in range(len(scan))] == [r.key for r in want]
    assert scan.value_null.tolist() == [r.value is None for r in want]
    positions = [b.position for b in iter_batches(data)]
    assert [positions[i] for i in scan.batch_index] == [
        b.position for b in iter_batches(data) for _ in b.records()
    ]
    assert scan.end_position == len(data)


def test_control_batches_are_listed_but_their_records_skipped_by_default():
    data = build_simple_batch([(b"k", b"v")], timestamp=1) + build_control_batch(
        1, producer_id=1, producer_epoch=0, timestamp=2, base_offset=1
    )
    scan = scan_records(data)
    assert len(scan) == 1 and len(scan.batch_position) == 2
    assert len(scan_records(data, include_control=True)) == 2


def test_scan_reports_corrupt_batch_position():
    good = build_simple_batch([(b"k", b"v")], timestamp=1)
    bad = bytearray(build_simple_batch([(b"k", b"v")], timestamp=1, base_offset=1))
    bad[-1] ^= 1
    with pytest.raises(CorruptRecordError) as err:
        scan_records(good + bytes(bad))
    assert err.value.position == len(good)


@pytest.mark.parametrize("codec", [codecs.NONE, codecs.GZIP])
def test_scan_rejects_bytes_after_the_last_record_like_kafka_incorrect_declared_batch_size(codec):
    """Kafka's ``DefaultRecordBatch`` iterator fails a batch whose records end before its
    declared size ("Incorrect declared batch size, records still remaining"), as
    ``RecordBatch.records()`` does; the scan used to skip the leftover bytes."""
    good = RecordBatch.from_bytes(build_simple_batch([(b"k", b"v")], timestamp=1))
    h = good.header
    payload = bytes(good.records_payload()) + b"\x00"
    padded = assemble_batch(
        h.base_offset,
        h.partition_leader_epoch,
        h.attributes | codec,
        h.last_offset_delta,
        h.base_timestamp,
        h.max_timestamp,
        h.producer_id,
        h.producer_epoch,
        h.base_sequence,
        h.record_count,
        codecs.compress(codec, payload) if codec else payload,
    )
    with pytest.raises(CorruptRecordError):
        RecordBatch.from_bytes(padded).records()
    with pytest.raises(CorruptRecordError):
        scan_records(padded)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=2**63 - 1), min_size=1, max_size=5))
def test_scan_reads_64_bit_timestamp_deltas_like_the_python_decoder(timestamps):
    """A record's timestamp delta is a varlong (Kafka ``ByteUtils.readVarlong``): deltas of
    2^62 and more set bit 63 of the zig-zag value, which the numba decoder used to
    sign-extend, so scan and ``records()`` disagreed."""
    recs = [Record(i, t, b"k", b"v") for i, t in enumerate(timestamps)]
    data = build_batch(recs)
    assert scan_records(data).timestamp.tolist() == [r.timestamp for r in recs]
    assert [r.timestamp for r in RecordBatch.from_bytes(data).records()] == [
        r.timestamp for r in recs
    ]


def test_scan_stops_at_a_torn_tail_and_rejects_an_impossible_length_as_iter_batches_does():
    """Kafka's batch iterator ends quietly at a partial batch (a fetch cut by max.bytes,
    a torn write) but fails a batch length smaller than a header; the scan walks the
    headers in its compiled pass and must draw the same line."""
    one = build_simple_batch([(b"k", b"v")], timestamp=1)
    two = build_simple_batch([(b"k2", b"v2")], timestamp=1, base_offset=1)
    torn = one + two[:-3]
    scan = scan_records(torn)
    assert scan.offset.tolist() == [0] and scan.end_position == len(one)
    scan = scan_records(one + two + one, len(one), len(one) + len(two))
    assert scan.offset.tolist() == [1] and scan.batch_position.tolist() == [len(one)]
    impossible = bytearray(two)
    impossible[8:12] = (10).to_bytes(4, "big")  # batchLength below the 49 a header needs
    with pytest.raises(CorruptRecordError) as err:
        scan_records(one + bytes(impossible))
    assert err.value.position == len(one)
    bad_magic = bytearray(two)
    bad_magic[16] = 1
    with pytest.raises(CorruptRecordError, match="magic"):
        scan_records(one + bytes(bad_magic))
    assert len(scan_records(one + bytes(bad_magic), verify_crc=False)) == 2


@pytest.mark.parametrize("codec", [codecs.GZIP, codecs.SNAPPY, codecs.LZ4, codecs.ZSTD])
def test_payload_expansion_counts_what_scan_records_decompresses(codec):
    data = b"".join(
        build_simple_batch(
            [(b"k%d" % i, b"v" * (i * 500))] * 3, timestamp=0, base_offset=3 * i, compression=c
        )
        for i, c in enumerate([codec, codecs.NONE, codec])
    ) + build_control_batch(
        CONTROL_COMMIT, producer_id=1, producer_epoch=0, timestamp=0, base_offset=9
    )
    packed = [b for b in iter_batches(data) if b.header.compression != codecs.NONE]
    want = sum(len(codecs.decompress(codec, b.buffer[HEADER_SIZE:])) for b in packed)
    assert payload_expansion(data, 1 << 30) == want
    assert want - 1 < payload_expansion(data, want - 1) <= want  # past the limit: stops


def test_payload_expansion_never_holds_a_payload():
    """A few KiB of zstd whose one value is 256 MiB: counted a MiB at a time, and once
    past the limit the rest is left unread (Kafka bounds the compressed size only)."""
    data = build_batch([Record(0, 0, b"k", b"\0" * (256 << 20), ())], compression=codecs.ZSTD)
    assert len(data) < 64 << 10
    tracemalloc.start()
    try:
        total = payload_expansion(data, 1 << 30)
        _now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert total > 256 << 20 and peak < 8 << 20
    assert (1 << 20) < payload_expansion(data, 1 << 20) <= 2 << 20


def _columns(scan) -> tuple:
    return (
        scan.offset.tolist(),
        scan.timestamp.tolist(),
        [scan.key(i) for i in range(len(scan))],
        scan.value_null.tolist(),
        scan.value_size.tolist(),
        scan.batch_index.tolist(),
        scan.key_offsets.tolist(),
    )


@settings(max_examples=40, deadline=None)
@given(st.lists(batch_st, min_size=1, max_size=8), st.integers(1, 400))
def test_a_scan_holding_little_streams_and_groups_what_it_holds_everything(batches, held):
    """With a few bytes held at once, every compressed batch is walked a chunk at a
    time or in small groups: the columns are those of the scan that holds everything."""
    from kompakt.record import scan as scan_module

    data, offset = b"", 0
    for items, codec, ts in batches:
        data += build_simple_batch(items, timestamp=ts, base_offset=offset, compression=codec)
        offset += len(items)
    whole = _columns(scan_records(data))
    before, scan_module.HELD = scan_module.HELD, held
    try:
        assert _columns(scan_records(data)) == whole
    finally:
        scan_module.HELD = before


@pytest.mark.parametrize("chunk", [7, 64, 1 << 20])
def test_stream_columns_read_keys_and_value_sizes_across_chunks(chunk):
    items = [(b"key-%d" % i * (i % 5), None if i % 4 == 3 else b"v" * (i * 37)) for i in range(30)]
    items[7] = (None, b"x" * 900)
    data = build_simple_batch(items, timestamp=5, base_offset=100, compression=codecs.ZSTD)
    streamed = stream_columns(next(iter_batches(data)), 0, chunk)
    want = scan_records(data)
    assert streamed.offset.tolist() == want.offset.tolist()
    assert streamed.value_len.tolist() == want.value_size.tolist()
    assert streamed.key_len.tolist() == [-1 if k is None else len(k) for k, _v in items]
    assert streamed.key_data.tobytes() == b"".join(k or b"" for k, _v in items)


def test_a_segment_of_expanding_batches_is_scanned_in_bounded_memory():
    """Three 16 KiB zstd batches, each one value of 128 MiB: the scan held every payload
    and then their join (a cleaner of six 512 MiB values took 6.5 GB); now at most
    :data:`HELD` and a chunk."""
    big = build_batch([Record(0, 7, b"wide", b"\0" * (128 << 20), ())], compression=codecs.ZSTD)
    data = b"".join(
        build_batch(
            [Record(i, 7, b"wide", b"\0" * (128 << 20), ())], compression=codecs.ZSTD
        ).replace(big[:8], (i).to_bytes(8, "big"), 1)
        if i
        else big
        for i in range(3)
    )
    tracemalloc.start()
    try:
        scan = scan_records(data, verify_crc=False)
        _now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert scan.value_size.tolist() == [128 << 20] * 3 and scan.key(2) == b"wide"
    assert peak < HELD + (8 << 20)
