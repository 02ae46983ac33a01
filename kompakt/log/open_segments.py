"""The cap on open segment files: an LRU of the segments whose files are open.

Kafka keeps every segment's ``.log`` channel open and maps an index on first use
(``LazyIndex``), so its file descriptors grow with the number of segments and operators
raise ``ulimit -n``. kompakt opens a segment's ``.log``, ``.index`` and ``.timeindex``
lazily too, and this LRU closes the least recently used segment once more than ``cap``
segments have files open (``kompakt.log.max.open.segments``, our extension; default
1000). A segment costs at most five descriptors (the ``.log``, and each index a file plus
the duplicate its memory map holds), so a broker holds at most ``5 x cap`` segment
descriptors plus a constant, whatever its partition count. A closed segment reopens on
its next read or append; a segment in use (its lock held by a read, an append, a flush)
is never closed under it: eviction only tries the segment's lock and moves a busy
segment to the recent end instead, so the cap is exceeded at most by the segments in use
at that instant.
"""

from __future__ import annotations

import logging
import resource
import threading
from collections import OrderedDict
from typing import Protocol

DEFAULT_MAX_OPEN_SEGMENTS = 1000
FDS_PER_SEGMENT = 5  # the .log, and each index's file and the duplicate its map holds
FD_HEADROOM = 1024  # client connections, checkpoints, the admin listener, Spark's pipes

log = logging.getLogger(__name__)


def descriptors_needed(cap: int | None) -> int | None:
    """The descriptors a broker with this cap may hold (None: unbounded, no cap)."""
    return None if cap is None else FDS_PER_SEGMENT * cap + FD_HEADROOM


def raise_open_files_limit(cap: int | None) -> tuple[int, int]:
    """Raise this process's soft ``RLIMIT_NOFILE`` to what the cap needs (up to the hard
    limit), as servers do at start instead of failing with EMFILE on the first busy
    minute; (soft before, soft after). With no cap the soft limit goes to the hard one.

    Kafka leaves this to the operator (``ulimit -n``); a soft limit of 1024, the common
    default, is below the 5,000 descriptors the default cap of 1,000 segments allows.
    A hard limit below the need is logged: the cap should then be lowered.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = descriptors_needed(cap)
    want = hard if need is None else need
    if hard != resource.RLIM_INFINITY:
        want = min(want, hard)
    if want > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            log.info("open files limit raised from %d to %d", soft, want)
        except (ValueError, OSError) as exc:  # a sandbox may refuse
            log.warning("could not raise the open files limit from %d: %s", soft, exc)
            return soft, soft
    if need is not None and hard != resource.RLIM_INFINITY and hard < need:
        log.warning(
            "the open files hard limit %d is below the %d that kompakt.log.max.open.segments"
            "=%d may need (%d per segment + %d): lower the cap or raise the limit",
            hard,
            need,
            cap,
            FDS_PER_SEGMENT,
            FD_HEADROOM,
        )
    return soft, max(soft, want)


class Closable(Protocol):
    def release_files(self) -> bool:
        """Close the files if the segment is not in use; False when it is busy."""
        ...


class OpenSegments:
    """The segments with open files, least recently used first; ``cap`` None: no cap."""

    def __init__(self, cap: int | None = DEFAULT_MAX_OPEN_SEGMENTS):
        if cap is not None and cap < 1:
            raise ValueError(f"kompakt.log.max.open.segments must be at least 1, got {cap}")
        self.cap = cap
        self._lru: OrderedDict[Closable, None] = OrderedDict()
        self._lock = threading.Lock()
        self._last: Closable | None = None  # the most recent, when known: touched again
        self.evictions = 0
        """Segments closed to stay within the cap (a counter for metrics and tests)."""

    def touch(self, seg: Closable) -> None:
        """``seg`` has open files and was just used: make it the most recent, and close
        the least recent ones beyond the cap. The segment touched last (every append
        to one partition touches its active segment) is the most recent already: one
        read, no lock."""
        if self._last is seg:
            return
        with self._lock:
            lru = self._lru
            self._last = seg
            if seg in lru:
                lru.move_to_end(seg)
                return
            lru[seg] = None
            if self.cap is None or len(lru) <= self.cap:
                return
            victims = []
            while len(lru) > self.cap:
                victim, _ = lru.popitem(last=False)
                if victim is seg:  # cannot happen (seg is the most recent); keep it
                    lru[seg] = None
                    break
                victims.append(victim)
        busy = [v for v in victims if not v.release_files()]
        with self._lock:
            self.evictions += len(victims) - len(busy)
            for v in busy:
                self._lru[v] = None
            if busy:
                self._last = None  # a busy one went back behind the most recent

    def forget(self, seg: Closable) -> None:
        """``seg`` closed its files itself (close, delete)."""
        with self._lock:
            self._lru.pop(seg, None)
            if self._last is seg:
                self._last = None

    def __len__(self) -> int:
        with self._lock:
            return len(self._lru)
