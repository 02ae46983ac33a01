"""The console's bounded reading of a batch's records (kompakt.record.preview): what a
small batch shows is what ``RecordBatch.records`` decodes; a batch that expands far
past its size (Kafka bounds the compressed size only) is read a chunk at a time, each
field cut to what is shown, in bounded memory, and a page's decompression is bounded."""

from __future__ import annotations

import tracemalloc

import pytest

from kompakt.errors import CorruptRecordError
from kompakt.record import codecs
from kompakt.record.decode import Record, RecordBatch
from kompakt.record.encode import build_batch
from kompakt.record.preview import Allowance, PreviewBudgetError, preview_records


def _batch(records, codec=codecs.ZSTD) -> RecordBatch:
    return RecordBatch.from_bytes(build_batch(records, compression=codec))


def _records():
    return [
        Record(7 + i, 1_700_000_000_000 + i, None if i == 3 else b"k%d" % i,
               None if i == 5 else b"v" * (i * 300), ((f"h{i}", b"x"), ("n", None)))
        for i in range(40)
    ]  # fmt: skip


@pytest.mark.parametrize(
    "codec", [codecs.NONE, codecs.GZIP, codecs.SNAPPY, codecs.LZ4, codecs.ZSTD]
)
def test_a_small_batch_shows_what_records_decodes(codec):
    batch = _batch(_records(), codec)
    shown = list(preview_records(batch, Allowance(1 << 30)))
    assert [tuple(s[:5]) for s in shown] == [tuple(r) for r in batch.records()]
    assert all(not s.key_cut and not s.value_cut for s in shown)
    assert shown[5].value_size == -1 and shown[6].value_size == 1800


@pytest.mark.parametrize("chunk", [7, 1000, 1 << 20])
def test_a_streamed_batch_keeps_each_fields_start_and_its_size(chunk, monkeypatch):
    monkeypatch.setattr("kompakt.record.preview.WHOLE", 0)  # every batch streamed
    records = _records()
    records[9] = records[9]._replace(key=b"K" * 5000, value=b"V" * 9000)
    batch = _batch(records)
    shown = list(preview_records(batch, Allowance(1 << 30), keep=1000, chunk=chunk))
    assert [s.offset for s in shown] == [r.offset for r in records]
    assert [s.timestamp for s in shown] == [r.timestamp for r in records]
    big = shown[9]
    assert (big.key, big.key_size, big.key_cut) == (b"K" * 1000, 5000, True)
    assert (big.value, big.value_size, big.value_cut) == (b"V" * 1000, 9000, True)
    assert shown[3].key is None and shown[5].value is None
    cut = [
        r._replace(key=r.key and r.key[:1000], value=r.value and r.value[:1000]) for r in records
    ]
    assert [tuple(s[:5]) for s in shown] == [tuple(r) for r in cut]
    assert [s.value_size for s in shown] == [
        -1 if r.value is None else len(r.value) for r in records
    ]


def test_a_value_of_256_mib_in_a_few_kib_is_shown_in_bounded_memory():
    """A batch of a few KiB of zstd whose one value expands to 256 MiB: the page held
    twice the expansion (2 GiB values took the broker past its memory); now about a
    chunk and what is shown."""
    value = 256 << 20
    batch = _batch([Record(0, 1_700_000_000_000, b"k", b"\0" * value, ())])
    assert batch.header.size < 64 << 10
    tracemalloc.start()
    try:
        shown = list(preview_records(batch, Allowance(1 << 30)))
        _now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert shown[0].value_size == value and len(shown[0].value) == 64 << 10
    assert peak < 16 << 20


def test_the_page_allowance_stops_a_look_at_many_expanding_batches():
    allowance = Allowance(100 << 20)
    batch = _batch([Record(0, 1_700_000_000_000, b"k", b"\0" * (60 << 20), ())])
    list(preview_records(batch, allowance))
    with pytest.raises(PreviewBudgetError, match="expand to more than 104857600 bytes"):
        list(preview_records(batch, allowance))


def test_a_cut_or_padded_streamed_batch_is_corrupt(monkeypatch):
    monkeypatch.setattr("kompakt.record.preview.WHOLE", 0)
    good = _batch(_records()[:4])
    payload = codecs.decompress(codecs.ZSTD, good.buffer[61:])
    for bad in (payload[:-1], payload + b"\0"):
        data = bytearray(good.buffer[:61]) + codecs.compress(codecs.ZSTD, bytes(bad))
        data[8:12] = (len(data) - 12).to_bytes(4, "big")
        batch = RecordBatch.from_bytes(bytes(data))
        with pytest.raises(CorruptRecordError):
            list(preview_records(batch, Allowance(1 << 30)))
