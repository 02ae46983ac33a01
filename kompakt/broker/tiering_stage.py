"""What the tiering copy uploads of a rolled local segment: its files staged as one
consistent set, and, for a segment reaching below the remote log's end, only its part
from that end on.

KIP-405's copy task uploads each offset once, from ``highestOffsetInRemoteStorage + 1``
on. A local segment holds offsets on both sides of the remote end when the local cleaner
merged an already tiered segment with one that was not (Kafka's
``groupSegmentsBySize`` knows nothing of the tier, and the two run on their own
threads). Uploading that file whole under a range starting at the remote end would make
two remote objects hold the same offsets (remote cleans fail on such a manifest); so the
copy cuts the file at the first batch reaching the end and uploads that tail, with its
own indexes and the ``.txnindex`` entries it still needs, as a segment of its own.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from kompakt.log.producer_snapshot import SNAPSHOT_SUFFIX, ProducerSnapshotFile
from kompakt.log.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIMEINDEX_SUFFIX,
    TXNINDEX_SUFFIX,
    LogSegment,
    segment_file,
)
from kompakt.log.txn_index import AbortedTxn

TAIL = "tail"  # the staging subfolder a cut segment's files are written to


@dataclass
class Cut:
    """Where a segment reaching below ``start`` is cut: the first batch whose last
    offset reaches ``start`` (its position and base offset), the ``.txnindex`` entries
    the tail still needs, and the index interval to rebuild its indexes with."""

    start: int
    position: int
    base_offset: int
    aborted: list[AbortedTxn]
    index_interval_bytes: int


def stage(seg: LogSegment, staging: Path) -> dict[str, Path]:
    """Hard links (copies across file systems) of the segment's files and the producer
    snapshot at its end, as one consistent set: call under the partition lock."""
    staging.mkdir(parents=True)
    out: dict[str, Path] = {}
    wanted: list[tuple[str, Path]] = [
        (kind, segment_file(seg.dir, seg.base_offset, kind))
        for kind in (LOG_SUFFIX, INDEX_SUFFIX, TIMEINDEX_SUFFIX, TXNINDEX_SUFFIX)
    ]
    wanted.append((SNAPSHOT_SUFFIX, ProducerSnapshotFile(seg.dir, seg.next_offset).path))
    for kind, path in wanted:
        target = staging / path.name
        try:
            os.link(path, target)
        except FileNotFoundError:
            if kind == LOG_SUFFIX:
                raise
            continue
        except OSError:  # another file system: copy instead
            shutil.copyfile(path, target)
        out[kind] = target
    return out


def cut_at(seg: LogSegment, start: int) -> Cut | None:
    """Where to cut ``seg`` so that its upload starts at ``start`` (None: it starts
    there already, or holds nothing from there on). Call under the partition lock, with
    the segment live, as :func:`stage`."""
    if seg.base_offset >= start:
        return None
    found = seg.translate_offset(start)
    if found is None:
        return None
    position, header = found
    aborted, _complete = seg.collect_aborted(start, seg.next_offset)
    return Cut(start, position, header.base_offset, aborted, seg.index_interval_bytes)


def stage_tail(files: dict[str, Path], cut: Cut) -> tuple[int, int, dict[str, Path]]:
    """The staged segment's batches from ``cut`` on, written as a segment of their own
    (its ``.log`` a byte-for-byte tail of the local one, its indexes rebuilt from it);
    returns its base offset, max timestamp and files (the producer snapshot at the
    segment's end unchanged)."""
    folder = files[LOG_SUFFIX].parent / TAIL
    folder.mkdir()
    with (
        open(files[LOG_SUFFIX], "rb") as src,
        open(segment_file(folder, cut.base_offset, LOG_SUFFIX), "wb") as dst,
    ):
        src.seek(cut.position)
        shutil.copyfileobj(src, dst)
    tail = LogSegment(folder, cut.base_offset, index_interval_bytes=cut.index_interval_bytes)
    try:
        tail.recover()
        for txn in cut.aborted:
            tail.update_txn_index(txn)
        tail.on_become_inactive()
        tail.flush()
        max_ts = tail.max_timestamp
    finally:
        tail.close()
    kinds = (LOG_SUFFIX, INDEX_SUFFIX, TIMEINDEX_SUFFIX, TXNINDEX_SUFFIX)
    out = {k: segment_file(folder, cut.base_offset, k) for k in kinds[: 3 + bool(cut.aborted)]}
    if SNAPSHOT_SUFFIX in files:
        out[SNAPSHOT_SUFFIX] = files[SNAPSHOT_SUFFIX]
    return cut.base_offset, max_ts, out
