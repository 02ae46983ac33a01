"""Driver side of the source: options + directory listing -> offset ranges to read.

Each topic-partition becomes one or more :class:`RangeToRead`, cut at segment
boundaries so that no range holds much more than ``maxBytesPerPartition`` of segment
files; a big partition is then read by many tasks at once. ``minPartitions`` (Spark's
Kafka option) splits the largest ranges further, by offset, until there are enough.
"""

from __future__ import annotations

from collections.abc import Mapping

from kompakt.pipeline import options as opt
from kompakt.pipeline.layout import (
    log_start_offsets,
    offset_bounds,
    partition_dir,
    read_topics,
    segments_covering,
)
from kompakt.pipeline.read import RangeToRead, count_partition_bytes

DEFAULT_MAX_BYTES = 64 << 20


def plan_ranges(options: Mapping[str, str]) -> list[RangeToRead]:
    root = opt.data_dir(options)
    topics = read_topics(root)
    tps = opt.select_partitions(options, topics)
    starting = opt.parse_offsets(options, "startingOffsets", tps)
    ending = opt.parse_offsets(options, "endingOffsets", tps)
    fail_on_loss = (opt.get_option(options, "failOnDataLoss", "true") or "").lower() != "false"
    max_bytes = int(opt.get_option(options, "maxBytesPerPartition", str(DEFAULT_MAX_BYTES)) or 0)
    starts = log_start_offsets(root)
    ranges: list[RangeToRead] = []
    for tp in tps:
        log_start, log_end, bases = offset_bounds(root, *tp, starts=starts)
        lo = starting.resolve(tp, log_start, log_end)
        hi = min(ending.resolve(tp, log_start, log_end), log_end)
        if lo < log_start:
            if fail_on_loss:
                raise opt.OptionError(
                    f"starting offset {lo} of {tp[0]}-{tp[1]} is below the log start offset "
                    f"{log_start}: the data was deleted (set failOnDataLoss=false to skip it)"
                )
            lo = log_start
        if lo > hi:
            raise opt.OptionError(
                f"Beginning offset {lo} is after the ending offset {hi} for topic "
                f"{tp[0]} partition {tp[1]}."
            )
        ranges += _split_by_segments(str(partition_dir(root, *tp)), tp, lo, hi, bases, max_bytes)
    min_parts = int(opt.get_option(options, "minPartitions", "0") or 0)
    return _split_to_min(ranges, min_parts)


def _split_by_segments(
    dir_: str, tp: tuple[str, int], lo: int, hi: int, bases: list[int], max_bytes: int
) -> list[RangeToRead]:
    covering = segments_covering(bases, lo, hi)
    if not covering:
        return []
    sizes = count_partition_bytes(dir_, covering)
    groups: list[list[int]] = [[]]
    size = 0
    for base, seg_size in zip(covering, sizes, strict=True):
        if groups[-1] and max_bytes > 0 and size + seg_size > max_bytes:
            groups.append([])
            size = 0
        groups[-1].append(base)
        size += seg_size
    out = []
    for i, group in enumerate(groups):
        start = lo if i == 0 else group[0]
        end = hi if i == len(groups) - 1 else groups[i + 1][0]
        out.append(RangeToRead(tp[0], tp[1], dir_, start, end, tuple(group)))
    return out


def _split_to_min(ranges: list[RangeToRead], min_parts: int) -> list[RangeToRead]:
    ranges = list(ranges)
    while len(ranges) < min_parts:
        widest = max(
            range(len(ranges)), key=lambda i: ranges[i].end - ranges[i].start, default=None
        )
        if widest is None:
            break
        r = ranges[widest]
        if r.end - r.start < 2:
            break
        mid = (r.start + r.end) // 2
        left = RangeToRead(r.topic, r.partition, r.dir, r.start, mid, r.bases)
        right = RangeToRead(r.topic, r.partition, r.dir, mid, r.end, r.bases)
        ranges[widest : widest + 1] = [left, right]
    return ranges
