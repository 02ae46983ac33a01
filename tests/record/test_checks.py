"""The compiled record pass of Produce validation (Kafka's ``LogValidator.validateRecord``)
against the Python codec's view of the same records, and its bounded error list.

The rules are Kafka's: ``validateKey`` (a compacted topic's record needs a key) before
``validateTimestamp`` (a CreateTime record in [now - before.max.ms, now + after.max.ms],
no LogAppendTime claimed by the producer); each batch's maxTimestamp is its largest
record timestamp.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

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
    checks.close()  # the results stay readable until the thread's next check
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


def _keys_and_maxima(data: bytes, compact: bool) -> tuple[list[tuple[int, int]], list]:
    """A check's (row, kind) errors and batch maxima, read while it is open."""
    batches = list(iter_batches(data))
    with RecordChecks(batches, compact, True, NOW - 1000, NOW + 1000, 8) as checks:
        b = batches[0]
        part = (b.position + HEADER_SIZE, b.position + b.header.size, b.header.record_count, 0, 0)
        checks.walk(np.frombuffer(data, np.uint8), [part])
        return [e[:2] for e in checks.found()], checks.batch_maxima()


def test_a_check_reusing_the_threads_arrays_starts_clean_and_a_nested_one_gets_its_own():
    """The arrays a thread reuses from check to check carry nothing over: Kafka's
    validateKey judges each record set alone (a null key on a compacted topic)."""
    keyless = build_batch([Record(0, NOW + 5, None, b"v", [])])
    keyed = build_batch([Record(0, NOW + 3, b"k", b"v", [])])

    def in_a_fresh_thread() -> tuple:
        first = _keys_and_maxima(keyless, compact=True)
        second = _keys_and_maxima(keyed, compact=True)
        batches = list(iter_batches(keyed))
        with RecordChecks(batches, True, True, NOW - 1000, NOW + 1000, 8) as outer:
            h = batches[0].header
            outer.walk(
                np.frombuffer(keyed, np.uint8),
                [(HEADER_SIZE, h.size, h.record_count, 0, 0)],
            )
            nested = _keys_and_maxima(keyless, compact=True)  # while the outer one is open
            return first, second, nested, (outer.found(), outer.batch_maxima())

    with ThreadPoolExecutor(1) as pool:  # a thread whose arrays no other test touched
        first, second, nested, outer = pool.submit(in_a_fresh_thread).result()
    assert first == ([(0, KEY_NULL)], [NOW + 5])
    assert second == ([], [NOW + 3])
    assert nested == ([(0, KEY_NULL)], [NOW + 5])
    assert outer == ([], [NOW + 3])
