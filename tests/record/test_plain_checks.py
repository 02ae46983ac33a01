"""Produce validation's quick pass (:mod:`kompakt.record.plain_checks`) accepts a record
set only when the full pass (Kafka's ``LogValidator.validateRecord`` over records read
as ``DefaultRecord.readFrom`` reads them) finds nothing wrong in it, with the same
maxTimestamp per batch; everything else it leaves to the full pass."""

from __future__ import annotations

import struct

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kompakt.errors import CorruptRecordError
from kompakt.record import codecs
from kompakt.record.checks import RecordChecks
from kompakt.record.decode import Record, iter_batches
from kompakt.record.encode import assemble_batch, build_batch
from kompakt.record.header import (
    ATTRIBUTES_POS,
    CRC_POS,
    HEADER_SIZE,
    LOG_APPEND_TIME,
    MAGIC_POS,
    NO_TIMESTAMP,
    crc32c,
)
from kompakt.record.plain_checks import UNSURE, check_plain, check_served

NOW = 1_700_000_000_000
LO, HI = NOW - 2000, NOW + 2000  # deltas within a batch fit two varint bytes


def _full_pass(data: bytes, compact: bool, create_time: bool) -> tuple[list, list] | None:
    """The full pass's errors and batch maxima; None when it finds a malformed record."""
    batches = list(iter_batches(data))
    parts, row = [], 0
    for i, b in enumerate(batches):
        h = b.header
        parts.append((b.position + HEADER_SIZE, b.position + h.size, h.record_count, i, row))
        row += h.record_count
    with RecordChecks(batches, compact, create_time, LO, HI, 4096) as checks:
        try:
            checks.walk(np.frombuffer(data, np.uint8), parts)
        except Exception:
            return None
        return checks.found(), checks.batch_maxima()


def _quick(data: bytes | bytearray, compact: bool, create_time: bool) -> tuple[int, list]:
    maxima = np.zeros(64, np.int64)
    n = check_plain(np.frombuffer(data, np.uint8), compact, create_time, LO, HI, maxima)
    return n, maxima[: max(n, 0)].tolist()


record_st = st.tuples(
    st.one_of(st.none(), st.binary(max_size=300)),  # key: 300 B needs a 2-byte length
    st.one_of(st.none(), st.binary(max_size=9000)),  # value: beyond 2 bytes too
    st.one_of(  # timestamp: in and out of bounds, -1, and deltas beyond two bytes
        st.just(NO_TIMESTAMP),
        st.integers(LO - 10, LO + 10),
        st.integers(HI - 10, HI + 10),
        st.integers(NOW - 9000, NOW + 9000),
    ),
    st.booleans(),  # with a header
)


def _batch(records: list, codec: int = codecs.NONE, log_append: bool = False) -> bytes:
    return build_batch(
        [
            Record(i, ts, k, v, [("h", b"x")] if hdr else [])
            for i, (k, v, ts, hdr) in enumerate(records)
        ],
        compression=codec,
        timestamp_type=LOG_APPEND_TIME if log_append else 0,
    )


def _record_sets(records: st.SearchStrategy) -> st.SearchStrategy:
    return st.lists(st.lists(records, min_size=1, max_size=8), min_size=1, max_size=3)


def _both_passes(spec: list, compact: bool, create_time: bool) -> tuple[int, list, tuple | None]:
    """The quick pass's answer and maxima, and the full pass's, on the batches of ``spec``."""
    data = b"".join(_batch(recs) for recs in spec)
    return *_quick(data, compact, create_time), _full_pass(data, compact, create_time)


@settings(max_examples=150, deadline=None)
@given(_record_sets(record_st), st.booleans(), st.booleans())
def test_the_quick_pass_accepts_only_what_the_full_pass_accepts(spec, compact, create_time):
    n, maxima, full = _both_passes(spec, compact, create_time)
    if n != UNSURE:
        assert n == len(spec)
        assert full == ([], maxima)


plain_record_st = st.tuples(  # short varints: what the quick pass decides
    st.one_of(st.none(), st.binary(max_size=40)),
    st.one_of(st.none(), st.binary(max_size=40)),
    st.one_of(st.integers(LO - 10, LO + 10), st.integers(HI - 10, HI + 10)),
    st.booleans(),
)


@settings(max_examples=150, deadline=None)
@given(_record_sets(plain_record_st), st.booleans(), st.booleans())
def test_a_plain_record_set_is_decided_by_the_quick_pass_exactly(spec, compact, create_time):
    """Records the quick pass can read: it accepts them exactly when no rule of
    Kafka's validateRecord rejects one (a null key on a compacted topic, a CreateTime
    timestamp outside the bounds), with the full pass's maxima."""
    n, maxima, (errors, full_maxima) = _both_passes(spec, compact, create_time)
    assert (n != UNSURE) == (not errors)
    if n != UNSURE:
        assert (n, maxima) == (len(spec), full_maxima)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_a_changed_byte_is_never_accepted_where_the_full_pass_refuses(data):
    """Any byte of the records changed, the CRC made to match: the quick pass either
    agrees with the full pass or leaves the set to it (a record's structure, Kafka's
    readFrom)."""
    recs = [(b"key-%d" % i, b"v" * 20, NOW + i, False) for i in range(4)]
    buf = bytearray(_batch(recs))
    pos = data.draw(st.integers(HEADER_SIZE, len(buf) - 1))
    buf[pos] = data.draw(st.integers(0, 255))
    struct.pack_into(">I", buf, CRC_POS, crc32c(buf[ATTRIBUTES_POS:]))
    n, maxima = _quick(buf, True, True)
    if n != UNSURE:
        assert _full_pass(bytes(buf), True, True) == ([], maxima)


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_a_batch_whose_crc_does_not_match_is_left_to_the_full_pass(data):
    """Kafka's ensureValid: any byte from ``attributes`` on changed, or the stored CRC,
    and the quick pass is unsure (the full pass raises the CRC mismatch), in whichever
    batch of the set it is."""
    first = _batch([(b"k%d" % i, b"v" * 30, NOW + i, False) for i in range(20)])
    second = _batch([(b"j%d" % i, b"w" * 30, NOW - i, False) for i in range(20)])
    buf = bytearray(first + second)
    assert _quick(buf, True, True)[0] == 2
    start = data.draw(st.sampled_from([0, len(first)]))
    pos = start + data.draw(st.integers(CRC_POS, min(len(first), len(second)) - 1))
    buf[pos] ^= 1 << data.draw(st.integers(0, 7))
    assert _quick(buf, True, True)[0] == UNSURE


def test_a_plain_record_set_is_decided_by_the_quick_pass():
    """The common case (uncompressed data batches, short varints, no headers) does not
    fall back: several batches, each with its largest timestamp."""
    first = _batch([(b"k%d" % i, b"v" * 100, NOW + i, False) for i in range(500)])
    second = _batch([(b"k", b"v", NOW - 7, False), (b"j", None, NOW - 9, False)])
    assert _quick(first + second, True, True) == (2, [NOW + 499, NOW - 7])


def test_what_only_the_full_pass_words_is_left_to_it():
    """A rule broken (a null key on a compacted topic, a timestamp out of bounds), a
    negative header count or header key size (readFrom's errors), a compressed batch and a LogAppendTime
    claim: unsure."""
    keyless = _batch([(None, b"v", NOW, False)])
    assert _quick(keyless, True, True)[0] == UNSURE
    assert _quick(keyless, False, True) == (1, [NOW])
    late = _batch([(b"k", b"v", HI + 1, False)])
    assert _quick(late, False, True)[0] == UNSURE
    assert _quick(late, False, False) == (1, [HI + 1])
    assert _quick(_batch([(b"k", b"v", NOW, True)]), False, True) == (1, [NOW])
    record = bytes([16, 0, 0, 0, 2]) + b"k" + bytes([2]) + b"v" + bytes([1])  # count -1
    negative = assemble_batch(0, -1, 0, 0, NOW, NOW, -1, -1, -1, 1, record)
    assert _quick(negative, False, True)[0] == UNSURE
    record = bytes([18, 0, 0, 0, 2]) + b"k" + bytes([2]) + b"v" + bytes([2, 1])  # key size -1
    negative = assemble_batch(0, -1, 0, 0, NOW, NOW, -1, -1, -1, 1, record)
    assert _quick(negative, False, True)[0] == UNSURE
    zstd = _batch([(b"k", b"v", NOW, False)], codec=codecs.ZSTD)
    assert _quick(zstd, False, True)[0] == UNSURE
    claimed = _batch([(b"k", b"v", NOW, False)], log_append=True)
    assert _quick(claimed, False, True)[0] == UNSURE


def _served_by_python(data: bytes) -> int | None:
    """The fetch's Python walk (``iter_batches`` and ``ensure_valid``): where the whole
    valid batches end, or None when it raises at the first batch."""
    last = 0
    try:
        for b in iter_batches(data):
            b.ensure_valid()
            last = b.position + b.header.size
    except CorruptRecordError:
        return None if last == 0 else last
    return last


_SERVED = b"".join(
    _batch([(b"k%d" % i, b"v" * n, NOW + i, False) for i in range(3)]) for n in (5, 70, 300)
)


def _agree(data: bytes) -> int:
    """The compiled walk's answer, checked against the Python walk's where it decides."""
    found = check_served(np.frombuffer(data, np.uint8))
    if found != UNSURE:
        assert found == _served_by_python(data), data
    return found


def test_served_batches_are_decided_as_the_python_walk_decides():
    """Every bit of the served bytes flipped in turn, and the bytes read up to every
    point (a fetch's max.bytes) intact or with that batch's magic changed: the compiled
    walk names the same valid prefix as the Python walk, or leaves it to it; the intact
    bytes, whole or cut, it always decides."""
    for pos in range(len(_SERVED)):
        for bit in range(8):
            buf = bytearray(_SERVED)
            buf[pos] ^= 1 << bit
            _agree(bytes(buf))
    starts = [b.position for b in iter_batches(_SERVED)]
    for cut in range(len(_SERVED) + 1):
        assert _agree(_SERVED[:cut]) == _served_by_python(_SERVED[:cut])
        buf = bytearray(_SERVED[:cut])
        start = max(s for s in starts if s <= cut)
        if start + MAGIC_POS < cut:
            buf[start + MAGIC_POS] = 1
            _agree(bytes(buf))
