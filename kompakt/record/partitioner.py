"""Kafka's default partitioner (``Utils.murmur2``): one key, or a whole key column.

The CLI's ``produce`` and the Spark writer must put a key in the partition a Kafka
producer would choose, ``toPositive(murmur2(key)) % numPartitions``. Arithmetic is on
32-bit words, as Java's; one numba kernel serves both the scalar and the column form.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def _murmur2_one(data, start, length):
    m = np.uint32(0x5BD1E995)
    h = np.uint32(0x9747B28C) ^ np.uint32(length)
    n4 = length // 4
    for i in range(n4):
        p = start + i * 4
        k = (
            np.uint32(data[p])
            | (np.uint32(data[p + 1]) << np.uint32(8))
            | (np.uint32(data[p + 2]) << np.uint32(16))
            | (np.uint32(data[p + 3]) << np.uint32(24))
        )
        k = np.uint32(k * m)
        k ^= k >> np.uint32(24)
        k = np.uint32(k * m)
        h = np.uint32(h * m)
        h ^= k
    rem = length % 4
    tail = start + (length & ~3)
    if rem == 3:
        h ^= np.uint32(data[tail + 2]) << np.uint32(16)
    if rem >= 2:
        h ^= np.uint32(data[tail + 1]) << np.uint32(8)
    if rem >= 1:
        h ^= np.uint32(data[tail])
        h = np.uint32(h * m)
    h ^= h >> np.uint32(13)
    h = np.uint32(h * m)
    h ^= h >> np.uint32(15)
    return h


@numba.njit(cache=True, nogil=True)
def _murmur2_column(data, offsets):
    n = len(offsets) - 1
    out = np.empty(n, np.uint32)
    for i in range(n):
        out[i] = _murmur2_one(data, offsets[i], offsets[i + 1] - offsets[i])
    return out


def murmur2(key: bytes) -> int:
    """Java's signed 32-bit ``Utils.murmur2(key)``."""
    h = int(_murmur2_one(np.frombuffer(key, np.uint8), 0, len(key)))
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for_key(key: bytes, partitions: int) -> int:
    """The partition a Kafka producer's default partitioner picks for ``key``."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def murmur2_column(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Unsigned hashes of keys given Arrow-style (``data[offsets[i]:offsets[i+1]]``)."""
    return _murmur2_column(np.asarray(data, np.uint8), np.asarray(offsets, np.int64))


def partition_for_keys(data: np.ndarray, offsets: np.ndarray, partitions: int) -> np.ndarray:
    """Kafka's ``toPositive(murmur2(key)) % partitions`` for every key, as int32."""
    h = murmur2_column(data, offsets)
    return ((h & np.uint32(0x7FFFFFFF)) % np.uint32(partitions)).astype(np.int32)
