"""128-bit key digests in bulk: MurmurHash3 x64_128 over Arrow-style key columns.

Kafka's ``SkimpyOffsetMap`` does not store keys: it stores a 16-byte MD5 digest of each
key and treats digest equality as key equality. The Spark engine does the same so its
shuffle moves fixed-width rows (digest hi, digest lo, offset: 24 bytes) whatever the key
size. Why 128 bits are enough: with n distinct keys the chance that any two share a
digest is at most n² / 2¹²⁹ (birthday bound); for n = 10⁹ keys that is 10¹⁸ / 6.8·10³⁸
≈ 1.5·10⁻²¹, far below the rate of undetected disk or memory errors, so a collision is
not a case the cleaner needs to handle (Kafka argues the same for MD5).

Why MurmurHash3 x64_128 rather than MD5: the cleaner needs no resistance to an adversary
choosing keys (a collision would only keep or drop a record of the partition's own
producer), only a well-mixed, well-specified 128-bit function. Murmur3 x64_128 is public
(Austin Appleby's SMHasher, ``MurmurHash3_x64_128``), passes SMHasher, is ~10× cheaper
than MD5 per byte, fits a numba kernel in a few lines, and has an independent reference
implementation (the ``mmh3`` package) to test against bit for bit. Seed 0.

It lives in ``record/`` (the lowest layer) so the in-process offset map and the Spark
engine can share it. No Python object is made per key: one numba loop walks
``key_offsets``/``key_data`` as :func:`kompakt.record.scan.scan_records` returns them.
"""

from __future__ import annotations

import numba
import numpy as np

_C1 = np.uint64(0x87C37B91114253D5)
_C2 = np.uint64(0x4CF5AD432745937F)


@numba.njit(inline="always")
def _rotl(x, r):
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


@numba.njit(inline="always")
def _fmix(k):
    k ^= k >> np.uint64(33)
    k *= np.uint64(0xFF51AFD7ED558CCD)
    k ^= k >> np.uint64(33)
    k *= np.uint64(0xC4CEB9FE1A85EC53)
    k ^= k >> np.uint64(33)
    return k


@numba.njit(inline="always")
def _le64(data, pos, n):
    """``n`` (≤ 8) bytes at ``pos`` as a little-endian unsigned integer."""
    v = np.uint64(0)
    for j in range(n):
        v |= np.uint64(data[pos + j]) << np.uint64(8 * j)
    return v


@numba.njit(inline="always")
def _scramble(k, first, r, second):
    """One lane's block mix: ``k *= first; k = ROTL64(k, r); k *= second``."""
    return _rotl(k * first, r) * second


@numba.njit(cache=True, nogil=True)
def _murmur3_x64_128(key_offsets, key_data, hi, lo):
    c1 = _C1
    c2 = _C2
    for i in range(len(hi)):
        start = key_offsets[i]
        length = key_offsets[i + 1] - start
        h1 = np.uint64(0)
        h2 = np.uint64(0)
        nblocks = length // 16
        for b in range(nblocks):
            p = start + 16 * b
            h1 ^= _scramble(_le64(key_data, p, 8), c1, 31, c2)
            h1 = _rotl(h1, 27) + h2
            h1 = h1 * np.uint64(5) + np.uint64(0x52DCE729)
            h2 ^= _scramble(_le64(key_data, p + 8, 8), c2, 33, c1)
            h2 = _rotl(h2, 31) + h1
            h2 = h2 * np.uint64(5) + np.uint64(0x38495AB5)
        tail = start + 16 * nblocks
        rest = length & 15
        if rest > 8:
            h2 ^= _scramble(_le64(key_data, tail + 8, rest - 8), c2, 33, c1)
        if rest > 0:
            h1 ^= _scramble(_le64(key_data, tail, min(rest, 8)), c1, 31, c2)
        n = np.uint64(length)
        h1 ^= n
        h2 ^= n
        h1 += h2
        h2 += h1
        h1 = _fmix(h1)
        h2 = _fmix(h2)
        h1 += h2
        h2 += h1
        hi[i] = h1
        lo[i] = h2


def key_digests(key_offsets: np.ndarray, key_data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(hi, lo) int64 columns: MurmurHash3 x64_128 (seed 0) of each key.

    Key ``i`` is ``key_data[key_offsets[i]:key_offsets[i + 1]]``. ``hi`` is the
    reference's ``h1`` (the first 8 bytes of ``mmh3.hash_bytes``, little-endian) and
    ``lo`` its ``h2``, both reinterpreted as signed so Spark can hold them as ``long``.
    A null key (an empty slice) gets the digest of the empty key; callers mask nulls.
    """
    n = len(key_offsets) - 1
    hi = np.empty(n, np.uint64)
    lo = np.empty(n, np.uint64)
    if n > 0:
        _murmur3_x64_128(
            np.ascontiguousarray(key_offsets, np.int64),
            np.ascontiguousarray(key_data, np.uint8),
            hi,
            lo,
        )
    return hi.view(np.int64), lo.view(np.int64)
