"""When the tombstones of a partition go (KIP-534 delete horizons), for the partition page.

Kafka keeps a tombstone for ``delete.retention.ms`` after the clean that first reaches it:
that clean writes the batch with the delete-horizon bit and the horizon (clean time +
``delete.retention.ms``) as its base timestamp, and the first clean after the horizon
drops the tombstone (:func:`kompakt.cleaner.rule.survives`). A tombstone is thus in one of
three states, counted here per segment and cached by (path, inode, size) as
:class:`~kompakt.cleaner.status.TombstoneCounter` does (a sealed segment never changes):
no horizon yet (the next clean sets one), a horizon still ahead, a horizon passed (the
next clean removes it).
"""

from __future__ import annotations

import os
import struct
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from kompakt.record.header import BASE_TIMESTAMP_POS, DELETE_HORIZON_BIT
from kompakt.record.scan import scan_records

SegmentKey = tuple[str, int, int]
# (tombstones without a horizon, {horizon ms: tombstones})
SegmentCounts = tuple[int, dict[int, int]]


@dataclass
class Horizons:
    no_horizon: int = 0
    waiting: int = 0  # horizon ahead
    passed: int = 0  # horizon passed: the next clean removes them
    next_ms: int | None = None  # the earliest horizon still ahead
    last_ms: int | None = None  # the latest horizon

    @property
    def total(self) -> int:
        return self.no_horizon + self.waiting + self.passed


def _segment_counts(data: Any) -> SegmentCounts:
    scan = scan_records(data, verify_crc=False)
    tomb = np.nonzero(scan.value_null)[0]
    if not len(tomb):
        return 0, {}
    batches = scan.batch_index[tomb]
    attrs = scan.batch_attributes[batches]
    with_horizon = (attrs & DELETE_HORIZON_BIT) != 0
    out: dict[int, int] = {}
    view = memoryview(data)
    for b in batches[with_horizon]:
        (ms,) = struct.unpack_from(">q", view, int(scan.batch_position[b]) + BASE_TIMESTAMP_POS)
        out[ms] = out.get(ms, 0) + 1
    return int((~with_horizon).sum()), out


class HorizonCounter:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cache: dict[str, dict[SegmentKey, SegmentCounts]] = {}

    def of(self, plog: Any, now: int) -> Horizons:
        out = Horizons()
        with self._lock:
            cache = self._cache.setdefault(str(plog.dir), {})
        live = set()
        for seg in plog.segments_snapshot():
            if not seg.size:
                continue
            try:
                key = (str(seg.log_path), os.stat(seg.log_path).st_ino, seg.size)
                counts = cache.get(key)
                if counts is None:
                    counts = cache[key] = _segment_counts(seg.read_all())
            except Exception:  # deleted or damaged meanwhile: not counted
                continue
            live.add(key)
            out.no_horizon += counts[0]
            for ms, n in counts[1].items():
                if ms <= now:
                    out.passed += n
                else:
                    out.waiting += n
                    out.next_ms = ms if out.next_ms is None else min(out.next_ms, ms)
                out.last_ms = ms if out.last_ms is None else max(out.last_ms, ms)
        for key in [k for k in cache if k not in live]:
            cache.pop(key, None)
        return out
