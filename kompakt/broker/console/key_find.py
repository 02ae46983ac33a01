"""Which partition the key inspector reads when none is given.

A Kafka producer's default partitioner puts a keyed record in
``toPositive(murmur2(key)) % partitions`` (:func:`kompakt.record.partitioner.partition_for_key`),
so that partition is read first. A key produced with an explicit partition or another
partitioner lives elsewhere, so when that partition holds none of it the others are read
in turn, sharing one scan budget, and the first that holds the key answers. The report
says which partition it came from and why.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kompakt.broker.console import browse, keys
from kompakt.errors import KompaktError
from kompakt.record.partitioner import partition_for_key

_RUNNING = threading.Lock()
"""Held by the one key inspection running: a dry run holds up to
:data:`kompakt.cleaner.explain.EXPANSION_BUDGET` decompressed a few times over, and the
console's pages run on a pool of threads, so inspections at once would multiply it."""
WAIT_S = 10.0
"""How long an inspection waits for the one running before it is refused."""


class InspectorBusyError(KompaktError):
    """Another key inspection held the inspector for :data:`WAIT_S`."""


@contextmanager
def _one_at_a_time() -> Iterator[None]:
    if not _RUNNING.acquire(timeout=WAIT_S):
        raise InspectorBusyError(
            f"another key inspection has been running for over {WAIT_S:.0f} s: try again"
        )
    try:
        yield
    finally:
        _RUNNING.release()


def find_key(
    logs: Any,
    topic: str | None,
    partition: str | None,
    key: bytes,
    now: int,
    *,
    map_entries: int | None = None,
    max_scan_bytes: int = browse.KEY_SCAN_BYTES,
) -> keys.KeyReport:
    """:func:`keys.inspect_key` in the partition asked for, else where the key is; one
    inspection at a time (:data:`_RUNNING`)."""
    with _one_at_a_time():
        if partition not in (None, ""):
            plog = browse.partition_log(logs, topic, partition)
            rep = keys.inspect_key(
                logs, plog, key, now, max_scan_bytes=max_scan_bytes, map_entries=map_entries
            )
            rep.where = f"Partition {plog.partition}, as asked."
            return rep
        browse.partition_log(logs, topic, "0")  # the topic's checks, one message each
        assert topic is not None
        count = logs.partition_count(topic)
        home = partition_for_key(key, count)
        budget = max_scan_bytes
        first: keys.KeyReport | None = None
        whole = True
        for p in [home, *(q for q in range(count) if q != home)]:
            plog = browse.partition_log(logs, topic, str(p))
            rep = keys.inspect_key(
                logs, plog, key, now, max_scan_bytes=max(budget, 0), map_entries=map_entries
            )
            budget -= rep.bytes_scanned
            first = first or rep
            if rep.records:
                rep.where = (
                    f"Partition {p}: where Kafka's default partitioner (murmur2 of the key, "
                    f"{count} partition{'' if count == 1 else 's'}) puts this key."
                    if p == home
                    else f"Partition {p}, found by reading every partition: Kafka's default "
                    f"partitioner would put this key in partition {home}, so it was produced "
                    "to an explicit partition or by another partitioner."
                )
                return rep
            if not rep.complete:
                whole = False
                break
        assert first is not None
        first.where = (
            f"No partition of {topic} holds this key ({'all' if whole else 'not all'} "
            f"{count} read; Kafka's default partitioner puts it in partition {home})."
        )
        first.complete = whole
        return first
