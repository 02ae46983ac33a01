"""Kafka's offset checkpoint files (``cleaner-offset-checkpoint`` and friends).

Format: line 1 the version ``0``, line 2 the entry count, then ``topic partition offset``
per line. Written to ``<name>.tmp``, fsynced, renamed over the old file and the
directory fsynced, so a crash leaves the old or the new file, never a torn one.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from pathlib import Path

from kompakt.errors import KompaktError

TopicPartition = tuple[str, int]

# one lock per checkpoint path: Kafka's ``CheckpointFile.write`` is ``synchronized``, and
# here several threads (the checkpoint timer, retention, a clean) write the same file
# through fresh objects. Unserialized, two writers share ``<name>.tmp``: one renames the
# other's half-written file into place, the other's rename fails with ENOENT.
_write_locks: dict[Path, threading.Lock] = {}
_write_locks_guard = threading.Lock()


def _write_lock(path: Path) -> threading.Lock:
    with _write_locks_guard:
        return _write_locks.setdefault(path.resolve(), threading.Lock())


class CheckpointError(KompaktError):
    pass


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class OffsetCheckpointFile:
    """Kafka's ``OffsetCheckpointFile`` (``CheckpointFile`` with version 0)."""

    VERSION = 0
    HEADER_LINES = 2  # version, entry count

    def __init__(self, path: Path):
        self.path = Path(path)

    def read(self) -> dict[TopicPartition, int]:
        if not self.path.exists():
            return {}
        lines = self.path.read_text().splitlines()
        try:
            if int(lines[0]) != self.VERSION:
                raise CheckpointError(f"unknown checkpoint version {lines[0]} in {self.path}")
            count = int(lines[1])
            out: dict[TopicPartition, int] = {}
            for line in lines[self.HEADER_LINES : self.HEADER_LINES + count]:
                topic, partition, offset = line.split()
                out[(topic, int(partition))] = int(offset)
            if len(out) != count:
                raise CheckpointError(f"expected {count} entries in {self.path}, got {len(out)}")
            return out
        except (IndexError, ValueError) as exc:
            raise CheckpointError(f"malformed checkpoint file {self.path}: {exc}") from exc

    def write(self, entries: Mapping[TopicPartition, int]) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        body = [str(self.VERSION), str(len(entries))]
        body += [f"{t} {p} {o}" for (t, p), o in sorted(entries.items())]
        with _write_lock(self.path):
            with open(tmp, "w") as f:
                f.write("\n".join(body) + "\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
            fsync_dir(self.path.parent)
