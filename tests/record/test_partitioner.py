"""The writer places keys where Kafka's default partitioner would (Utils.murmur2)."""

from __future__ import annotations

import numpy as np

from kompakt.record.partitioner import murmur2, partition_for_keys

# Kafka's UtilsTest.testMurmur2 vectors
KAFKA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


def test_murmur2_matches_kafka_utils_test_vectors():
    for key, want in KAFKA_VECTORS.items():
        assert murmur2(key) == want


def test_partition_for_keys_is_to_positive_hash_mod_partitions():
    keys = list(KAFKA_VECTORS) + [b"", b"x"]
    data = np.frombuffer(b"".join(keys), np.uint8)
    offsets = np.cumsum([0] + [len(k) for k in keys])
    got = partition_for_keys(data, offsets, 12)
    assert got.tolist() == [(murmur2(k) & 0x7FFFFFFF) % 12 for k in keys]
