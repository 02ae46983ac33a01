"""Read-only view of a data dir: topics, partitions, segments and offset bounds.

The Spark source must read while a broker owns the data dir (and its ``.lock``), so it
never opens a :class:`~kompakt.log.manager.LogManager`. Everything here works from the
directory listing, ``kompakt-topics.json``, ``log-start-offset-checkpoint`` and the
segment files themselves, opened read-only. A listing can go stale at any moment (a
clean swaps segments, retention deletes them); callers re-list when a file vanishes.
"""

from __future__ import annotations

import bisect
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from kompakt.log.checkpoint import CheckpointError, OffsetCheckpointFile
from kompakt.log.config import TopicConfig
from kompakt.log.manager import (
    CLEANER_CHECKPOINT,
    LOG_START_CHECKPOINT,
    TOPICS_FILE,
    parse_partition_dir,
)
from kompakt.log.names import is_valid_topic_name
from kompakt.log.offset_index import OffsetIndex
from kompakt.log.segment import INDEX_SUFFIX, log_file_offset, segment_file
from kompakt.record.header import HEADER_SIZE, LOG_OVERHEAD, read_header


@dataclass
class TopicInfo:
    name: str
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)

    def config(self, broker_config: dict[str, str] | None = None) -> TopicConfig:
        return TopicConfig(self.configs, broker_config)


def read_topics(data_dir: str | os.PathLike) -> dict[str, TopicInfo]:
    """Topics as ``LogManager`` would load them: the JSON file, widened by the folders."""
    root = Path(data_dir)
    out: dict[str, TopicInfo] = {}
    path = root / TOPICS_FILE
    if path.exists():
        for name, meta in json.loads(path.read_text()).items():
            if not is_valid_topic_name(name):  # a name from a file must not become a path
                continue
            out[name] = TopicInfo(name, int(meta["partitions"]), dict(meta.get("configs", {})))
    if root.is_dir():
        for p in root.iterdir():
            parsed = parse_partition_dir(p.name) if p.is_dir() else None
            if parsed is None or not is_valid_topic_name(parsed[0]):
                continue
            topic, part = parsed
            info = out.setdefault(topic, TopicInfo(topic, 0))
            info.partitions = max(info.partitions, part + 1)
    return out


def partition_dir(data_dir: str | os.PathLike, topic: str, partition: int) -> Path:
    return Path(data_dir) / f"{topic}-{partition}"


def list_segments(part_dir: str | os.PathLike) -> list[int]:
    """Base offsets of the live ``.log`` files, ascending (suffixed files are ignored)."""
    try:
        names = os.listdir(part_dir)
    except FileNotFoundError:
        return []
    return sorted(b for b in map(log_file_offset, names) if b is not None)


def segment_path(part_dir: str | os.PathLike, base: int) -> Path:
    """The live ``.log`` of segment ``base``."""
    return segment_file(part_dir, base)


def read_segment(part_dir: str | os.PathLike, base: int) -> bytes:
    """The whole ``.log`` as it is now; raises ``FileNotFoundError`` if it was swapped away.

    One ``read`` of an opened file is immune to a concurrent rename or unlink, and a
    torn tail of the active segment is dropped later by the batch iterator.
    """
    with open(segment_path(part_dir, base), "rb") as f:
        return f.read()


def log_start_offsets(data_dir: str | os.PathLike) -> dict[tuple[str, int], int]:
    try:
        return OffsetCheckpointFile(Path(data_dir) / LOG_START_CHECKPOINT).read()
    except (CheckpointError, OSError):
        return {}


def cleaned_offsets(data_dir: str | os.PathLike) -> dict[tuple[str, int], int]:
    """The cleaner checkpoint (where each partition's cleaned part ends); {} if unreadable."""
    try:
        return OffsetCheckpointFile(Path(data_dir) / CLEANER_CHECKPOINT).read()
    except (CheckpointError, OSError):
        return {}


def _last_index_position(part_dir: str | os.PathLike, base: int) -> int:
    """Byte position of the last ``.index`` entry (0 without one): a place to start walking."""
    try:
        index = OffsetIndex.read_only(segment_file(part_dir, base, INDEX_SUFFIX), base)
    except FileNotFoundError:
        return 0
    return index.last_entry[1]


def segment_next_offset(part_dir: str | os.PathLike, base: int) -> int | None:
    """One past the last offset in a segment (None if empty), walking batch headers only."""
    path = segment_path(part_dir, base)
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        pos = _last_index_position(part_dir, base)
        if pos >= size:
            pos = 0
        last = None
        while pos + HEADER_SIZE <= size:
            head = os.pread(f.fileno(), HEADER_SIZE, pos)
            h = read_header(head)
            if h.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + h.size > size:
                break
            last = h.last_offset
            pos += h.size
    return None if last is None else last + 1


def offset_bounds(
    data_dir: str | os.PathLike, topic: str, partition: int, starts: dict | None = None
) -> tuple[int, int, list[int]]:
    """(log start offset, log end offset, segment bases) of one partition, read-only."""
    pdir = partition_dir(data_dir, topic, partition)
    for _attempt in range(20):
        bases = list_segments(pdir)
        if not bases:
            return 0, 0, []
        try:
            end = bases[-1]
            for base in reversed(bases):
                nxt = segment_next_offset(pdir, base)
                if nxt is not None:
                    end = nxt
                    break
        except FileNotFoundError:
            continue  # a clean swapped segments under us: list again
        checkpoint = (starts if starts is not None else log_start_offsets(data_dir)).get(
            (topic, partition), 0
        )
        start = min(max(bases[0], checkpoint), end)
        return start, end, bases
    raise OSError(f"segments of {pdir} keep changing; cannot list them")


def segments_covering(bases: list[int], lo: int, hi: int) -> list[int]:
    """Bases of the segments that may hold offsets in [lo, hi)."""
    if not bases or hi <= lo:
        return []
    i = max(0, bisect.bisect_right(bases, lo) - 1)
    j = bisect.bisect_left(bases, hi)
    return bases[i:j]
