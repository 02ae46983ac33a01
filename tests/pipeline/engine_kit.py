"""Shared by the engine differential test and the cluster job: write a log, clean it
twice (across a tombstone horizon), snapshot its files."""

from __future__ import annotations

from pathlib import Path

from kompakt.cleaner import Cleaner
from kompakt.log.manager import LogManager
from kompakt.record.encode import build_simple_batch

NOW = 1_700_000_000_000
TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": "600",
    "delete.retention.ms": "1000",
    "file.delete.delay.ms": "0",
}


def write_log(root: Path, batches, partitions: int = 2) -> None:
    with LogManager(root, clock=lambda: NOW) as logs:
        logs.create_topic("t", partitions, TOPIC_CONFIG)
        seq = 0
        for i, (items, codec, idempotent) in enumerate(batches):
            producer = {"producer_id": 7, "producer_epoch": 0, "base_sequence": seq}
            logs.get_log("t", i % partitions).append(
                build_simple_batch(
                    items, timestamp=NOW + i, compression=codec, **(producer if idempotent else {})
                )
            )
            seq += len(items) if idempotent else 0


def clean_twice(root: Path, engine) -> None:
    """Clean every partition, then again after the tombstone horizon with new data."""
    now = [NOW + 10_000]
    with LogManager(root, clock=lambda: now[0]) as logs:
        cleaner = Cleaner(logs, engine=engine)
        for p in range(logs.partition_count("t")):
            cleaner.clean_partition(logs.get_log("t", p))
        now[0] += 5_000
        for p in range(logs.partition_count("t")):
            plog = logs.get_log("t", p)
            plog.append(build_simple_batch([(b"z", b"1")], timestamp=now[0]))
            plog.roll()
            cleaner.clean_partition(plog)


def snapshot(root: Path) -> dict[str, bytes]:
    out = {}
    for p in sorted(root.rglob("*")):
        if (
            p.is_file()
            and p.suffix in (".log", ".index", ".timeindex", ".txnindex")
            or p.name.startswith("cleaner-offset")
        ):
            out[str(p.relative_to(root))] = p.read_bytes()
    return out
