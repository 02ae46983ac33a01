"""The bulk key digest is MurmurHash3 x64_128 bit for bit (reference: the mmh3 package)."""

from __future__ import annotations

import random

import mmh3
import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from kompakt.record.batch import build_simple_batch
from kompakt.record.digest import key_digests
from kompakt.record.scan import scan_records


def columns(keys: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.zeros(len(keys) + 1, np.int64)
    np.cumsum([len(k) for k in keys], out=offsets[1:])
    return offsets, np.frombuffer(b"".join(keys), np.uint8)


def reference(key: bytes) -> tuple[int, int]:
    """(h1, h2) of MurmurHash3_x64_128, seed 0, as signed 64-bit integers."""
    digest = mmh3.hash_bytes(key, 0, True)
    h1, h2 = np.frombuffer(digest, "<i8")
    return int(h1), int(h2)


def test_murmur3_x64_128_matches_mmh3_for_every_length_0_to_40():
    rng = random.Random(14)
    keys = [rng.randbytes(n) for n in range(41) for _ in range(25)]
    hi, lo = key_digests(*columns(keys))
    assert [(int(a), int(b)) for a, b in zip(hi, lo, strict=True)] == [reference(k) for k in keys]


@given(st.lists(st.binary(max_size=300), max_size=50))
def test_murmur3_x64_128_matches_mmh3_on_arbitrary_keys(keys):
    hi, lo = key_digests(*columns(keys))
    assert [(int(a), int(b)) for a, b in zip(hi, lo, strict=True)] == [reference(k) for k in keys]


def test_digests_of_scanned_keys_equal_digests_of_the_keys_themselves():
    """The columns of scan_records feed the kernel as they are (no per-key copy)."""
    items = [(b"k%d" % (i % 7), b"v") for i in range(30)] + [(None, b"x"), (b"", b"y")]
    scan = scan_records(build_simple_batch(items, timestamp=1))
    hi, lo = key_digests(scan.key_offsets, scan.key_data)
    want = [reference(k or b"") for k, _v in items]
    assert [(int(a), int(b)) for a, b in zip(hi, lo, strict=True)] == want


def test_no_keys_give_empty_columns():
    hi, lo = key_digests(np.zeros(1, np.int64), np.empty(0, np.uint8))
    assert hi.dtype == lo.dtype == np.int64 and len(hi) == len(lo) == 0
