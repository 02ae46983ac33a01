"""Driver side of the source: options + directory listing -> offset ranges to read.

Each topic-partition becomes one or more :class:`RangeToRead`, cut at segment
boundaries so that no range holds much more than ``maxBytesPerPartition`` of segment
files; a big partition is then read by many tasks at once. ``minPartitions`` (Spark's
Kafka option) splits the largest ranges further, by offset, until there are enough.

With ``kafka.isolation.level=read_committed`` (the default) a partition is read up to
its last stable offset, and each range carries the aborted transactions overlapping it
(:func:`committed_view`), so the source returns what a READ_COMMITTED fetch returns.
"""

from __future__ import annotations

import bisect
import dataclasses
import os
from collections.abc import Mapping

from kompakt.log.producer_state import ProducerStateManager
from kompakt.log.segment import TXNINDEX_SUFFIX, segment_file
from kompakt.log.transactions import replay_files
from kompakt.log.txn_index import AbortedTxn, TxnIndexCorruptError, read_entries
from kompakt.pipeline import options as opt
from kompakt.pipeline.layout import (
    cleaned_offsets,
    list_segments,
    log_start_offsets,
    offset_bounds,
    partition_dir,
    read_topics,
    segment_path,
    segments_covering,
)
from kompakt.pipeline.read import RangeToRead, count_partition_bytes

DEFAULT_MAX_BYTES = 64 << 20


def read_committed(options: Mapping[str, str]) -> bool:
    """``kafka.isolation.level``: ``read_committed`` (default) or ``read_uncommitted``."""
    level = (opt.get_option(options, "kafka.isolation.level", "read_committed") or "").lower()
    if level not in ("read_committed", "read_uncommitted"):
        raise opt.OptionError(f"Invalid value {level} for configuration isolation.level")
    return level == "read_committed"


def committed_view(
    part_dir: str | os.PathLike, cleaned: int = 0
) -> tuple[int | None, list[AbortedTxn]]:
    """(first unstable offset or None, aborted transactions) of one partition, read-only:
    the producer state replayed from the batch headers, as the log rebuilds it at open,
    and the entries of the ``.txnindex`` files (with any abort the batches show that a
    lost or torn file lacks). ``cleaned`` is the cleaner checkpoint (transactions with
    data below it are complete, as the log assumes at open, so the walk starts at the
    segment holding it). Segments swapped away meanwhile: the folder is listed again."""
    for _attempt in range(20):
        bases = list_segments(part_dir)
        tracker = ProducerStateManager()
        try:
            dirty = bases[max(0, bisect.bisect_right(bases, cleaned) - 1) :]
            files = [(b, segment_path(part_dir, b), None) for b in dirty]
            walked = replay_files(files, tracker, cleaned)
        except FileNotFoundError:
            continue
        found: dict[tuple[int, int], AbortedTxn] = {}
        for base in bases:
            try:
                entries = read_entries(segment_file(part_dir, base, TXNINDEX_SUFFIX))
            except TxnIndexCorruptError:
                entries = []
            for a in entries + walked.get(base, []):
                found.setdefault((a.producer_id, a.last_offset), a)
        return tracker.first_unstable_offset(), sorted(found.values(), key=lambda a: a.last_offset)
    raise OSError(f"segments of {part_dir} keep changing; cannot list them")


def plan_ranges(options: Mapping[str, str]) -> list[RangeToRead]:
    root = opt.data_dir(options)
    committed = read_committed(options)
    topics = read_topics(root)
    tps = opt.select_partitions(options, topics)
    starting = opt.parse_offsets(options, "startingOffsets", tps)
    ending = opt.parse_offsets(options, "endingOffsets", tps)
    fail_on_loss = (opt.get_option(options, "failOnDataLoss", "true") or "").lower() != "false"
    max_bytes = int(opt.get_option(options, "maxBytesPerPartition", str(DEFAULT_MAX_BYTES)) or 0)
    starts = log_start_offsets(root)
    cleaned = cleaned_offsets(root) if committed else {}
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
        pdir = str(partition_dir(root, *tp))
        aborted: list[AbortedTxn] = []
        if committed:
            unstable, aborted = committed_view(pdir, cleaned.get(tp, 0))
            if unstable is not None:  # Kafka: READ_COMMITTED stops at the LSO
                hi = max(lo, min(hi, max(unstable, log_start)))
        found = _split_by_segments(pdir, tp, lo, hi, bases, max_bytes)
        ranges += [_with_aborted(r, aborted) for r in found]
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


def _with_aborted(r: RangeToRead, aborted: list[AbortedTxn]) -> RangeToRead:
    """``r`` with the aborted transactions overlapping it (Kafka's
    ``collectAbortedTransactions``: ``lastOffset >= start`` and ``firstOffset < end``)."""
    picked = tuple(
        (a.producer_id, a.first_offset, a.last_offset)
        for a in aborted
        if a.last_offset >= r.start and a.first_offset < r.end
    )
    return dataclasses.replace(r, aborted=picked)


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
        left = dataclasses.replace(r, end=mid)
        right = dataclasses.replace(r, start=mid)
        ranges[widest : widest + 1] = [left, right]
    return ranges
