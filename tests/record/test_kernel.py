"""The numba record kernel against the Python codec (Kafka ``DefaultRecord`` layout).

``copy_retained`` is the record part of the cleaner's rebuild (Kafka's
``buildRetainedRecordsInto``): it must write exactly what the Python encoder writes for
the same retained records, or a cleaned segment would differ between the paths.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kompakt.record.decode import Record, RecordBatch
from kompakt.record.encode import build_batch
from kompakt.record.kernel import KEYS, LAYOUT, VALUES, copy_retained, locate_records
from kompakt.record.varint import MAX_VARINT_BYTES

records_st = st.lists(
    st.tuples(
        st.one_of(st.none(), st.binary(max_size=10)),
        st.one_of(st.none(), st.binary(max_size=20)),
        st.lists(
            st.tuples(st.text(max_size=4), st.one_of(st.none(), st.binary(max_size=4))), max_size=2
        ),
        st.integers(min_value=0, max_value=2**45),
    ),
    min_size=1,
    max_size=15,
)


def _payload(data: bytes) -> np.ndarray:
    return np.frombuffer(bytes(RecordBatch.from_bytes(data).records_payload()), np.uint8)


@settings(max_examples=60, deadline=None)
@given(records_st, st.data())
def test_copy_retained_writes_what_the_python_encoder_writes(items, data):
    recs = [Record(100 + i, ts, k, v, tuple(h)) for i, (k, v, h, ts) in enumerate(items)]
    batch = RecordBatch.from_bytes(build_batch(recs))
    keep = np.array(data.draw(st.lists(st.booleans(), min_size=len(recs), max_size=len(recs))))
    horizon = data.draw(st.integers(min_value=0, max_value=2**46))
    src = _payload(bytes(batch.buffer))
    loc = locate_records(src, [0], [len(src)], [batch], [0], LAYOUT)
    out = np.empty(len(src) + MAX_VARINT_BYTES * len(recs), np.uint8)
    ts = np.array([r.timestamp for r in recs], np.int64)
    n = copy_retained(src, loc.body_pos, loc.tail_pos, loc.rec_end, keep, ts, horizon, out)
    kept = [r for r, k in zip(recs, keep, strict=True) if k]
    want = build_batch(kept, base_offset=100, delete_horizon=horizon) if kept else None
    assert out[:n].tobytes() == (_payload(want).tobytes() if kept else b"")


@settings(max_examples=40, deadline=None)
@given(records_st)
def test_walk_records_finds_the_fields_the_python_decoder_reads(items):
    recs = [Record(7 + i, ts, k, v, tuple(h)) for i, (k, v, h, ts) in enumerate(items)]
    batch = RecordBatch.from_bytes(build_batch(recs))
    src = _payload(bytes(batch.buffer))
    loc = locate_records(src, [0], [len(src)], [batch], [3], KEYS | VALUES)
    assert loc.batch.tolist() == [3] * len(recs)
    assert loc.offset.tolist() == [r.offset for r in recs]
    assert loc.timestamp.tolist() == [r.timestamp for r in recs]
    got_keys = [
        None if n < 0 else src[p : p + n].tobytes()
        for p, n in zip(loc.key_pos, loc.key_len, strict=True)
    ]
    got_values = [
        None if n < 0 else src[p : p + n].tobytes()
        for p, n in zip(loc.value_pos, loc.value_len, strict=True)
    ]
    assert got_keys == [r.key for r in recs]
    assert got_values == [r.value for r in recs]
    assert len(loc.body_pos) == 0 and len(loc.hk_pos) == 0  # fields not asked for
