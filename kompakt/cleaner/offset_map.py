"""The in-process engine's key -> latest offset map (Kafka's ``SkimpyOffsetMap``).

Like Kafka's, it has a fixed memory budget (``log.cleaner.dedupe.buffer.size``) and
24 bytes per slot: a 128-bit key hash (two 64-bit halves) and the offset. Kafka uses
MD5; here two independent 64-bit hashes computed in a numba kernel straight from the
scan's key columns, so no Python object is made per key. Open addressing with linear
probing; the map counts as full at ``io.buffer.load.factor`` (0.9) of its slots, and
the caller then cleans only the part of the dirty range it covered (a partial pass).
"""

from __future__ import annotations

import numba
import numpy as np

BYTES_PER_ENTRY = 24
EMPTY = np.int64(-1)


@numba.njit(cache=True, nogil=True)
def _hash_keys(key_offsets, key_data, h1, h2):
    for i in range(len(h1)):
        a = np.uint64(0xCBF29CE484222325)  # FNV-1a 64
        b = np.uint64(0x9E3779B97F4A7C15)  # multiply-xorshift, other seed
        for j in range(key_offsets[i], key_offsets[i + 1]):
            c = np.uint64(key_data[j])
            a = (a ^ c) * np.uint64(0x100000001B3)
            b = (b ^ c) * np.uint64(0xFF51AFD7ED558CCD)
            b ^= b >> np.uint64(29)
        n = np.uint64(key_offsets[i + 1] - key_offsets[i])
        a ^= n
        a ^= a >> np.uint64(33)
        a *= np.uint64(0xC4CEB9FE1A85EC53)
        a ^= a >> np.uint64(33)
        b ^= n * np.uint64(0x94D049BB133111EB)
        b ^= b >> np.uint64(31)
        b *= np.uint64(0xBF58476D1CE4E5B9)
        b ^= b >> np.uint64(27)
        h1[i] = a
        h2[i] = b


def hash_keys(key_offsets: np.ndarray, key_data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """128-bit hashes (two uint64 columns) of Arrow-style keys."""
    n = len(key_offsets) - 1
    h1 = np.empty(n, np.uint64)
    h2 = np.empty(n, np.uint64)
    _hash_keys(key_offsets, key_data, h1, h2)
    return h1, h2


@numba.njit(cache=True, nogil=True)
def _put(t1, t2, toff, h1, h2, offsets, mask, size, max_size):
    """Insert rows in order; stop before the first masked row once the map is full.

    Returns (rows consumed, new size). Kafka checks ``size < maxDesired`` before every
    put, even one that would only update an existing key; so does this.
    """
    slots = np.uint64(len(toff))
    for i in range(len(offsets)):
        if not mask[i]:
            continue
        if size >= max_size:
            return i, size
        s = h1[i] % slots
        while True:
            if toff[s] == -1:
                t1[s] = h1[i]
                t2[s] = h2[i]
                toff[s] = offsets[i]
                size += 1
                break
            if t1[s] == h1[i] and t2[s] == h2[i]:
                toff[s] = offsets[i]
                break
            s += np.uint64(1)
            if s == slots:
                s = np.uint64(0)
    return len(offsets), size


@numba.njit(cache=True, nogil=True)
def _get(t1, t2, toff, h1, h2, out):
    slots = np.uint64(len(toff))
    for i in range(len(h1)):
        s = h1[i] % slots
        out[i] = -1
        while toff[s] != -1:
            if t1[s] == h1[i] and t2[s] == h2[i]:
                out[i] = toff[s]
                break
            s += np.uint64(1)
            if s == slots:
                s = np.uint64(0)


class OffsetMap:
    """Memory-bounded map of key hash -> latest offset, reused across cleans.

    ``memory_bytes`` bounds the table (and decides when a pass is partial, as in Kafka);
    :meth:`clear` may be told how many records the pass can put at most, so a small
    dirty range uses a small, cache-friendly slice of the table.
    """

    def __init__(self, memory_bytes: int, load_factor: float = 0.9):
        self.load_factor = load_factor
        self.capacity = max(2, int(memory_bytes) // BYTES_PER_ENTRY)
        # one slot always stays empty so that a probe for an absent key terminates
        self.max_entries = max(1, min(int(self.capacity * load_factor), self.capacity - 1))
        self._h1 = np.empty(0, np.uint64)
        self._h2 = np.empty(0, np.uint64)
        self._off = np.empty(0, np.int64)
        self.slots = 0
        self.size = 0
        self.latest_offset = -1
        self.clear()

    @property
    def memory_bytes(self) -> int:
        return self.capacity * BYTES_PER_ENTRY

    @property
    def utilization(self) -> float:
        """Entries over the configured capacity (Kafka's buffer utilisation)."""
        return self.size / self.capacity

    @property
    def is_full(self) -> bool:
        return self.size >= self.max_entries

    def clear(self, max_records: int | None = None) -> None:
        want = self.capacity
        if max_records is not None:
            want = min(self.capacity, max(16, int(max_records / self.load_factor) + 2))
        if len(self._off) < want:
            self._h1 = np.empty(want, np.uint64)
            self._h2 = np.empty(want, np.uint64)
            self._off = np.empty(want, np.int64)
        self.slots = want
        self._off[:want].fill(EMPTY)
        self.size = 0
        self.latest_offset = -1

    def put(self, h1: np.ndarray, h2: np.ndarray, offsets: np.ndarray, mask: np.ndarray) -> int:
        """Insert the masked rows in order; returns how many rows were consumed."""
        n = self.slots
        consumed, self.size = _put(
            self._h1[:n],
            self._h2[:n],
            self._off[:n],
            h1,
            h2,
            offsets,
            mask,
            self.size,
            self.max_entries,
        )
        return consumed

    def get(self, h1: np.ndarray, h2: np.ndarray) -> np.ndarray:
        """Latest offset per row's key; -1 when absent (Kafka's ``OffsetMap.get``)."""
        n = self.slots
        out = np.empty(len(h1), np.int64)
        _get(self._h1[:n], self._h2[:n], self._off[:n], h1, h2, out)
        return out
