"""The remote chunk cache: bounded by bytes, least recently used evicted first, with
the counters the metrics will export."""

from __future__ import annotations

import pytest

from kompakt.errors import InvalidConfigError
from kompakt.remote.cache import ChunkCache


def loads(log: list[tuple[str, int]], size: int = 100):
    def loader_for(key: tuple[str, int]):
        def load() -> bytes:
            log.append(key)
            return bytes(size)

        return load

    return loader_for


def test_lru_by_bytes_evicts_the_least_recently_used() -> None:
    cache = ChunkCache(300)
    loaded: list[tuple[str, int]] = []
    loader = loads(loaded)
    for key in [("a", 0), ("a", 1), ("b", 0)]:
        cache.get_or_load(key, loader(key))
    cache.get_or_load(("a", 0), loader(("a", 0)))  # a/0 becomes the most recent
    cache.get_or_load(("c", 0), loader(("c", 0)))  # evicts a/1, the least recent
    assert cache.stats().bytes == 300 and cache.stats().evictions == 1
    loaded.clear()
    for key in [("a", 0), ("b", 0), ("c", 0)]:
        cache.get_or_load(key, loader(key))
    assert loaded == []
    cache.get_or_load(("a", 1), loader(("a", 1)))
    assert loaded == [("a", 1)]
    s = cache.stats()
    assert (s.hits, s.misses, s.entries) == (4, 5, 3)
    assert s.hit_ratio == pytest.approx(4 / 9)


def test_a_chunk_larger_than_the_cache_is_served_but_not_kept() -> None:
    cache = ChunkCache(50)
    loaded: list[tuple[str, int]] = []
    assert cache.get_or_load(("big", 0), loads(loaded)(("big", 0))) == bytes(100)
    assert cache.stats().entries == 0 and cache.stats().bytes == 0


def test_a_zero_sized_cache_keeps_nothing_and_a_negative_one_is_refused() -> None:
    cache = ChunkCache(0)
    loaded: list[tuple[str, int]] = []
    for _ in range(2):
        cache.get_or_load(("x", 0), loads(loaded)(("x", 0)))
    assert len(loaded) == 2 and cache.stats().hit_ratio == 0.0
    with pytest.raises(InvalidConfigError):
        ChunkCache(-1)


def test_discard_drops_one_objects_chunks_and_a_failed_load_caches_nothing() -> None:
    cache = ChunkCache(1000)
    loaded: list[tuple[str, int]] = []
    loader = loads(loaded)
    for key in [("a", 0), ("a", 1), ("b", 0)]:
        cache.get_or_load(key, loader(key))
    cache.discard("a")
    assert cache.stats().entries == 1 and cache.stats().bytes == 100

    def fail() -> bytes:
        raise OSError("remote read failed")

    with pytest.raises(OSError):
        cache.get_or_load(("c", 0), fail)
    assert cache.stats().entries == 1
