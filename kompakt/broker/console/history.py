"""The console's per-partition history: size and dirty ratio samples, and cleans.

Bounded per partition, in memory: the last :data:`MAX_SAMPLES` samples (one each
``kompakt.admin.console.history.interval.ms``, 30 s by default, so about two hours, plus
one before and one after each clean) and the last :data:`MAX_CLEANS` cleans, each in a
ring (``collections.deque(maxlen=...)``); a partition that no longer exists is dropped at
the next sample. 1,000 partitions cost about 1,000 x (256 x 3 + 64 x 24) numbers. A
restart starts the history afresh: the log itself and the cleaner checkpoint are the
durable state, and the last clean of each partition is in ``/v1/partitions`` again after
the next one.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kompakt.cleaner.cleaner import Cleaner

MAX_SAMPLES = 256
MAX_CLEANS = 64
TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class Sample:
    ms: int
    size_bytes: int
    dirty_ratio: float | None


class History:
    """Thread-safe rings of :class:`Sample` and clean stats (``CleanStats.to_json()``)
    per partition."""

    def __init__(self, max_samples: int = MAX_SAMPLES, max_cleans: int = MAX_CLEANS):
        self.max_samples = max_samples
        self.max_cleans = max_cleans
        self._lock = threading.Lock()
        self._samples: dict[TopicPartition, deque[Sample]] = {}
        self._cleans: dict[TopicPartition, deque[dict[str, Any]]] = {}

    def add_sample(self, tp: TopicPartition, sample: Sample) -> None:
        with self._lock:
            ring = self._samples.get(tp)
            if ring is None:
                ring = self._samples[tp] = deque(maxlen=self.max_samples)
            if ring and ring[-1].ms > sample.ms:  # keep time order (a clock step back)
                return
            ring.append(sample)

    def add_clean(self, tp: TopicPartition, clean: dict[str, Any]) -> None:
        with self._lock:
            ring = self._cleans.get(tp)
            if ring is None:
                ring = self._cleans[tp] = deque(maxlen=self.max_cleans)
            ring.append(clean)

    def samples(self, tp: TopicPartition) -> list[Sample]:
        with self._lock:
            return list(self._samples.get(tp, ()))

    def cleans(self, tp: TopicPartition) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._cleans.get(tp, ()))

    def keep_only(self, live: Iterable[TopicPartition]) -> None:
        """Drop the history of partitions that are gone (deleted topics)."""
        keep = set(live)
        with self._lock:
            for ring in (self._samples, self._cleans):
                for tp in [tp for tp in ring if tp not in keep]:
                    del ring[tp]


class HistoryRecorder:
    """Feeds a :class:`History` from a broker: :meth:`sample_all` on a timer, and
    :meth:`on_clean` as a listener of the cleaner (``Cleaner.listeners``)."""

    def __init__(self, history: History, status: Any, logs: Any):
        self.history = history
        self.status = status  # () -> CleaningStatus | None
        self.logs = logs  # () -> LogManager | None
        self._subscribed: set[int] = set()

    def subscribe(self, cleaner: Cleaner) -> None:
        if id(cleaner) not in self._subscribed:
            self._subscribed.add(id(cleaner))
            cleaner.listeners.append(self.on_clean)

    def sample_all(self) -> bool:
        status, logs = self.status(), self.logs()
        if status is None or logs is None:
            return False
        now = logs.clock()
        live = []
        for plog, st in status.partitions(tombstones=False):
            tp = (plog.topic, plog.partition)
            live.append(tp)
            self.history.add_sample(tp, Sample(now, plog.size_bytes(), st.dirty_ratio))
        self.history.keep_only(live)
        return False

    def on_clean(self, stats: Any) -> None:
        """A finished clean: its row, and a sample before and after it."""
        tp = (stats.topic, stats.partition)
        self.history.add_clean(tp, stats.to_json())
        logs, status = self.logs(), self.status()
        if logs is None or status is None:
            return
        try:
            plog = logs.get_log(*tp)
            after = status.of_log(plog)
        except Exception:  # deleted meanwhile
            return
        size = plog.size_bytes()
        before = size + stats.bytes_read - stats.bytes_written
        end_ms = stats.started_ms + int(stats.duration_s * 1000)
        self.history.add_sample(tp, Sample(stats.started_ms, before, stats.dirty_ratio))
        self.history.add_sample(
            tp, Sample(max(end_ms, stats.started_ms + 1), size, after.dirty_ratio)
        )
