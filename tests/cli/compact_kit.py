"""Data dirs for the ``kompakt compact`` tests: a few topics, one partition corrupt."""

from __future__ import annotations

import time
from pathlib import Path

from shared_kit import corrupt_first_batch, snapshot  # noqa: F401 (re-exported)

from kompakt.log.manager import LogManager
from kompakt.record.encode import build_simple_batch

SMALL = {"cleanup.policy": "compact", "segment.bytes": "1000"}


def make_data_dir(root: Path, *, records: int = 120, corrupt: bool = True) -> Path:
    """users (3 partitions: 0 corrupt, 1 dirty, 2 empty), orders (1, dirty) and a
    delete-policy topic events, every partition rolled so its data is cleanable."""
    with LogManager(root) as logs:
        logs.create_topic("users", 3, SMALL)
        logs.create_topic("orders", 1, SMALL)
        logs.create_topic("events", 1, {"cleanup.policy": "delete", "segment.bytes": "1000"})
        for topic, part in (("users", 0), ("users", 1), ("orders", 0), ("events", 0)):
            plog = logs.get_log(topic, part)
            for i in range(records):
                key, value = b"k%d" % (i % 7), b"%s-%d-%d" % (topic.encode(), part, i)
                plog.append(build_simple_batch([(key, value)], timestamp=int(time.time() * 1000)))
            plog.roll()
    if corrupt:
        corrupt_first_batch(root / "users-0")
    return root


def leftovers(root: Path) -> list[str]:
    return sorted(
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.name.endswith((".cleaned", ".swap", ".deleted"))
    )


def fold(root: Path, topic: str, partition: int) -> dict[bytes, bytes | None]:
    with LogManager(root) as logs:
        plog = logs.get_log(topic, partition)
        state: dict[bytes, bytes | None] = {}
        for b in plog.iter_batches():
            for r in b.records():
                state[r.key] = r.value
        return state
