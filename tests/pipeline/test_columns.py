"""The pipeline's full-record columnar decode agrees with the record-by-record decoder."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kompakt.pipeline.columns import decode_batches
from kompakt.pipeline.schema import arrow_schema, to_record_batch
from kompakt.record import codecs
from kompakt.record.decode import iter_batches
from kompakt.record.encode import build_simple_batch
from kompakt.record.header import LOG_APPEND_TIME

header_st = st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=6)))
item_st = st.tuples(
    st.one_of(st.none(), st.binary(max_size=12)),
    st.one_of(st.none(), st.binary(max_size=40)),
    st.lists(header_st, max_size=3),
)
batch_st = st.tuples(
    st.lists(item_st, min_size=1, max_size=10),
    st.sampled_from([codecs.NONE, codecs.GZIP, codecs.SNAPPY, codecs.LZ4, codecs.ZSTD]),
    st.integers(min_value=0, max_value=2**41),
    st.booleans(),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(batch_st, min_size=1, max_size=6))
def test_decode_matches_full_decoder_on_every_field(batches):
    data, offset = b"", 0
    for items, codec, ts, log_append in batches:
        kwargs = {"timestamp_type": LOG_APPEND_TIME} if log_append else {}
        data += build_simple_batch(
            items, timestamp=ts, base_offset=offset, compression=codec, **kwargs
        )
        offset += len(items)
    parsed = list(iter_batches(data))
    want = [(b, r) for b in parsed for r in b.records()]
    cols = decode_batches(parsed)
    rb = to_record_batch(cols, "topic", 7)
    assert rb.schema.equals(arrow_schema())
    rows = rb.to_pylist()
    assert [row["offset"] for row in rows] == [r.offset for _b, r in want]
    assert [row["key"] for row in rows] == [r.key for _b, r in want]
    assert [row["value"] for row in rows] == [r.value for _b, r in want]
    # round, not int: 134981256.413 s * 1000 is 134981256412.99998 in floating point
    assert [round(row["timestamp"].timestamp() * 1000) for row in rows] == [
        r.timestamp for _b, r in want
    ]
    assert [row["timestampType"] for row in rows] == [b.header.timestamp_type for b, _r in want]
    assert [[(h["key"], h["value"]) for h in row["headers"]] for row in rows] == [
        list(r.headers) for _b, r in want
    ]
    assert {row["topic"] for row in rows} == {"topic"} and {row["partition"] for row in rows} == {7}
