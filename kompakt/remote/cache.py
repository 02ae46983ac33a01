"""A bounded cache of remote ``.log`` chunks, least recently used evicted first by bytes.

Kafka's ``RemoteIndexCache`` caches indexes only and leaves segment bytes to the plugin;
here a consumer replaying a compacted topic from offset 0 reads the same chunks many
times (every consumer group that starts over does), so the chunks themselves are cached,
keyed by (object key, chunk index): objects are immutable, so an entry never goes stale.
Counters (hits, misses, evictions, bytes) are plain ints for the metrics to read.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from kompakt.errors import InvalidConfigError

ChunkKey = tuple[str, int]


@dataclass(frozen=True)
class CacheStats:
    hits: int
    misses: int
    evictions: int
    entries: int
    bytes: int
    max_bytes: int

    @property
    def hit_ratio(self) -> float:
        looked = self.hits + self.misses
        return self.hits / looked if looked else 0.0


class ChunkCache:
    """LRU by bytes. A chunk larger than the whole cache is returned but not kept.

    The loader runs outside the lock, so a slow remote read does not stall hits on
    other chunks; two threads missing the same chunk at once may both load it (the
    second insert just refreshes the entry).
    """

    def __init__(self, max_bytes: int):
        if max_bytes < 0:
            raise InvalidConfigError(f"cache size must be at least 0, not {max_bytes}")
        self.max_bytes = max_bytes
        self._entries: OrderedDict[ChunkKey, bytes] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = self.misses = self.evictions = 0

    def get_or_load(self, key: ChunkKey, load: Callable[[], bytes]) -> bytes:
        with self._lock:
            data = self._entries.get(key)
            if data is not None:
                self._entries.move_to_end(key)
                self.hits += 1
                return data
            self.misses += 1
        data = load()
        self.put(key, data)
        return data

    def put(self, key: ChunkKey, data: bytes) -> None:
        if len(data) > self.max_bytes:
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= len(old)
            self._entries[key] = data
            self._bytes += len(data)
            while self._bytes > self.max_bytes:
                _, evicted = self._entries.popitem(last=False)
                self._bytes -= len(evicted)
                self.evictions += 1

    def discard(self, object_key: str) -> None:
        """Drop every chunk of one object (its segment was deleted from the tier)."""
        with self._lock:
            for k in [k for k in self._entries if k[0] == object_key]:
                self._bytes -= len(self._entries.pop(k))

    def objects(self) -> set[str]:
        """The object keys that have chunks in the cache now."""
        with self._lock:
            return {k[0] for k in self._entries}

    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(
                self.hits,
                self.misses,
                self.evictions,
                len(self._entries),
                self._bytes,
                self.max_bytes,
            )
