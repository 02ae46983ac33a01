"""The bounded-memory record walk of a compressed batch (issue 26, decompression bomb)
agrees with the in-memory scan record for record, and refuses what it refuses.

Kafka's ``LogValidator.validateMessagesAndAssignOffsetsCompressed`` walks a compressed
batch with a streaming iterator; small chunks here force records across chunk
boundaries and records larger than a chunk (read with their key and value skipped).
"""

from __future__ import annotations

import numpy as np
import pytest

from kompakt.errors import CorruptRecordError
from kompakt.record import codecs
from kompakt.record.decode import RecordBatch
from kompakt.record.encode import build_batch, encode_record
from kompakt.record.header import HEADER_SIZE
from kompakt.record.scan import scan_records
from kompakt.record.stream_scan import stream_records

CODECS = [codecs.GZIP, codecs.SNAPPY, codecs.LZ4, codecs.ZSTD]


def _records():
    from kompakt.record.decode import Record

    out = []
    for i in range(300):
        key = None if i % 7 == 3 else b"key-%d" % i * (1 + i % 5)
        value = None if i % 11 == 5 else bytes([i % 251]) * (i * 37 % 5000)
        out.append(Record(100 + i, 1_700_000_000_000 + i * 13, key, value, []))
    return out


def _columns(parts):
    offs, tss, nulls = zip(*parts, strict=True) if parts else ((), (), ())
    return np.concatenate(offs), np.concatenate(tss), np.concatenate(nulls)


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("chunk", [7, 1000, 1 << 20])
def test_streamed_columns_equal_the_in_memory_scan(codec, chunk):
    data = build_batch(_records(), compression=codec)
    scan = scan_records(data)
    off, ts, null = _columns(list(stream_records(RecordBatch.from_bytes(data), 0, chunk)))
    assert off.tolist() == scan.offset.tolist()
    assert ts.tolist() == scan.timestamp.tolist()
    assert null.tolist() == scan.key_null.tolist()


def _with_payload(template: bytes, payload: bytes, count: int) -> RecordBatch:
    from kompakt.record.encode import assemble_batch

    h = RecordBatch.from_bytes(template).header
    data = assemble_batch(
        h.base_offset,
        h.partition_leader_epoch,
        h.attributes,
        count - 1,
        h.base_timestamp,
        h.max_timestamp,
        h.producer_id,
        h.producer_epoch,
        h.base_sequence,
        count,
        payload,
    )
    return RecordBatch.from_bytes(data)


@pytest.mark.parametrize("chunk", [5, 64, 1 << 20])
def test_a_cut_or_padded_payload_is_corrupt_as_in_memory(chunk):
    """A record overrunning the batch, or bytes after the last record (Kafka:
    "Incorrect declared batch size"), refused streamed as the kernel refuses them."""
    body = bytearray()
    for i in range(5):
        encode_record(body, i, 0, b"k", b"v" * 200, ())
    template = build_batch(_records()[:1], compression=codecs.ZSTD)
    for payload, count in [
        (bytes(body[:-1]), 5),  # the last record cut
        (bytes(body) + b"\x00", 5),  # a byte after the last record
        (bytes(body), 6),  # one record fewer than declared
        (bytes(body), 4),  # one more than declared
    ]:
        batch = _with_payload(template, codecs.compress(codecs.ZSTD, payload), count)
        with pytest.raises(CorruptRecordError):
            scan_records(batch.buffer)
        with pytest.raises(CorruptRecordError, match="malformed record"):
            list(stream_records(batch, 0, chunk))


def test_a_record_larger_than_a_chunk_is_walked_without_holding_it():
    """A 4 MiB value in 64 KiB chunks: no piece held is larger than two chunks."""
    from kompakt.record.decode import Record

    recs = [Record(i, 1000 + i, b"k%d" % i, b"\0" * (4 << 20), []) for i in range(3)]
    recs.insert(1, Record(9, 5, None, b"x", []))
    data = build_batch(recs, base_offset=0, compression=codecs.ZSTD)
    parts = list(stream_records(RecordBatch.from_bytes(data), 0, 1 << 16))
    off, ts, null = _columns(parts)
    assert off.tolist() == [0, 9, 1, 2]
    assert ts.tolist() == [1000, 5, 1001, 1002]
    assert null.tolist() == [False, True, False, False]


@pytest.mark.parametrize("codec", CODECS)
def test_decompress_chunks_bounds_every_piece_and_rejects_a_cut_stream(codec):
    raw = b"\0" * (8 << 20) + bytes(range(256)) * 100
    comp = codecs.compress(codec, raw)
    pieces = list(codecs.decompress_chunks(codec, comp, 1 << 16))
    assert b"".join(pieces) == raw
    assert max(map(len, pieces)) <= (1 << 16 if codec != codecs.SNAPPY else 32 * 1024)
    assert codecs.decompress_bounded(codec, comp, len(raw) - 1) is None
    assert codecs.decompress_bounded(codec, comp, len(raw)) == raw
    with pytest.raises(CorruptRecordError):
        b"".join(codecs.decompress_chunks(codec, comp[:-2], 1 << 16))


def test_a_record_longer_than_an_int_varint_is_corrupt_even_when_its_bytes_are_there():
    """Kafka reads a record's length with ``ByteUtils.readVarint`` (32 bits), so a record
    of 2 GiB or more never reads back as itself and a broker must not store it. 64 KiB
    of zstd holding a record of 2**31 + 16 bytes, every byte of it there, was accepted,
    and every consumer then stalled on it."""
    import zstandard

    from kompakt.record.varint import varint_size, write_varint

    length = 2**31 + 16
    value = length - 5 - 5  # attributes, 3 one-byte varints, the header count; 5: its own
    assert varint_size(value) == 5
    head = bytearray()
    for v in (length,):
        write_varint(head, v)
    head += b"\0"  # attributes
    for v in (0, 0, -1, value):  # timestamp delta, offset delta, a null key, the value
        write_varint(head, v)
    squeeze = zstandard.ZstdCompressor(level=1).compressobj()
    pieces = [squeeze.compress(bytes(head))]
    zeros = bytes(16 << 20)
    left = value
    while left:
        pieces.append(squeeze.compress(zeros[: min(left, len(zeros))]))
        left -= min(left, len(zeros))
    pieces += [squeeze.compress(b"\0"), squeeze.flush()]  # no headers
    template = build_batch(_records()[:1], compression=codecs.ZSTD)
    batch = _with_payload(template, b"".join(pieces), 1)
    with pytest.raises(CorruptRecordError):
        list(stream_records(batch, 0))


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("chunk", [64, 4096, 1 << 20])
def test_retained_records_is_the_in_memory_rebuild_a_chunk_at_a_time(codec, chunk):
    """The cleaner's re-encoding of a batch's kept records (Kafka's
    ``buildRetainedRecordsInto``: each kept record as it was, its timestamp delta
    against the new base), streamed: records longer than a chunk are copied through."""
    from kompakt.record.kernel import LAYOUT, copy_retained, locate_records
    from kompakt.record.stream_scan import retained_records
    from kompakt.record.varint import MAX_VARINT_BYTES

    batch = RecordBatch.from_bytes(build_batch(_records(), compression=codec))
    n = batch.header.record_count
    rng = np.random.default_rng(chunk + codec)
    keep = rng.random(n) < 0.6
    ts = np.array([r.timestamp for r in batch.records()], np.int64) + rng.integers(0, 9, n)
    base = int(ts[keep][0]) - 5
    payload = codecs.decompress(codec, batch.buffer[HEADER_SIZE:])
    src = np.frombuffer(payload, np.uint8)
    loc = locate_records(src, [0], [len(src)], [batch], [0], LAYOUT)
    out = np.empty(len(src) + MAX_VARINT_BYTES * n, np.uint8)
    w = copy_retained(src, loc.body_pos, loc.tail_pos, loc.rec_end, keep, ts, base, out)
    assert b"".join(retained_records(batch, keep, ts, base, chunk)) == out[:w].tobytes()
