"""The compiled record pass of Produce validation (Kafka's ``LogValidator.validateRecord``)
against the Python codec's view of the same records, and its bounded error list.

The rules are Kafka's: ``validateKey`` (a compacted topic's record needs a key) before
``validateTimestamp`` (a CreateTime record in [now - before.max.ms, now + after.max.ms],
no LogAppendTime claimed by the producer); each batch's maxTimestamp is its largest
record timestamp.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kompakt.record.checks import KEY_NULL, LOG_APPEND_CLAIMED, OUT_OF_RANGE, RecordChecks
from kompakt.record.decode import Record, iter_batches
from kompakt.record.encode import build_batch
from kompakt.record.header import HEADER_SIZE, LOG_APPEND_TIME, NO_TIMESTAMP

NOW = 1_700_000_000_000

batch_st = st.tuples(
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.binary(max_size=6)),
            st.one_of(st.just(NO_TIMESTAMP), st.integers(NOW - 2000, NOW + 2000)),
        ),
        min_size=1,
        max_size=12,
    ),
    st.booleans(),  # the producer claims LogAppendTime
)


def _walk(data: bytes, compact: bool, create_time: bool, lo: int, hi: int, capacity: int = 64):
    batches = list(iter_batches(data))
    checks = RecordChecks(batches, compact, create_time, lo, hi, capacity)
    parts, row = [], 0
    for i, b in enumerate(batches):
        parts.append(
            (b.position + HEADER_SIZE, b.position + b.header.size, b.header.record_count, i, row)
        )
        row += b.header.record_count
    checks.walk(np.frombuffer(data, np.uint8), parts)
    return batches, checks


@settings(max_examples=80, deadline=None)
@given(st.lists(batch_st, min_size=1, max_size=4), st.booleans(), st.booleans())
def test_compiled_pass_judges_each_record_as_kafkas_validate_record(spec, compact, create_time):
    """Every record's verdict and each batch's max timestamp equal what Kafka's rules give
    on the records the Python decoder reads."""
    data = b"".join(
        build_batch(
            [Record(i, ts, k, b"v", []) for i, (k, ts) in enumerate(recs)],
            timestamp_type=LOG_APPEND_TIME if claims else 0,
        )
        for recs, claims in spec
    )
    lo, hi = NOW - 1000, NOW + 1000
    batches, checks = _walk(data, compact, create_time, lo, hi)
    expected, maxima, row = [], [], 0
    for b in batches:
        claims = bool(b.header.timestamp_type)
        recs = b.records()
        for r in recs:
            if compact and r.key is None:
                expected.append((row, KEY_NULL, r.offset, r.timestamp))
            elif create_time and r.timestamp != NO_TIMESTAMP:
                if not lo <= r.timestamp <= hi:
                    expected.append((row, OUT_OF_RANGE, r.offset, r.timestamp))
            elif claims:
                expected.append((row, LOG_APPEND_CLAIMED, r.offset, r.timestamp))
            row += 1
        maxima.append(max(r.timestamp for r in recs))
    assert checks.found() == expected
    assert checks.batch_maxima() == maxima


def test_errors_beyond_capacity_are_counted_so_the_caller_can_list_them_all():
    """KIP-467 lists every RecordError; the pass keeps ``capacity`` and counts the rest."""
    data = build_batch([Record(i, NOW, None, b"v", []) for i in range(10)])
    _batches, checks = _walk(data, True, True, NOW, NOW, capacity=3)
    assert (checks.n_errors, checks.complete) == (10, False)
    assert [e[0] for e in checks.found()] == [0, 1, 2]
