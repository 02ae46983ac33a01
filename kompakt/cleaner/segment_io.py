"""Segment files as a clean reads and writes them (Kafka's ``Cleaner`` I/O helpers).

Reading a segment's bytes (memory-mapped), asking the log what a clean needs of its
producers, writing one cleaned group into ``<first base>.log.cleaned`` and removing what
a failed rewrite left behind. No policy here: the engines call these, the
:class:`~kompakt.cleaner.cleaner.Cleaner` decides when.
"""

from __future__ import annotations

import bisect
import mmap
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from kompakt.cleaner.rewrite import GroupStats, IoReport, LatestLookup, RoundContext, clean_group
from kompakt.cleaner.transactions import ProducerSummary, TxnTracker
from kompakt.errors import CorruptRecordError
from kompakt.log.partition_log import PartitionLog
from kompakt.log.segment import CLEANED_SUFFIX, LogSegment, segment_files
from kompakt.log.txn_index import AbortedTxn
from kompakt.record.header import CONTROL_BIT, TRANSACTIONAL_BIT
from kompakt.record.scan import scan_batch_headers, scan_records


def segment_buffer(path: str | os.PathLike, size: int | None = None) -> np.ndarray:
    """The bytes of a segment file, memory-mapped (empty array for an empty file)."""
    with open(path, "rb") as f:
        n = os.fstat(f.fileno()).st_size if size is None else size
        if n == 0:
            return np.empty(0, np.uint8)
        m = mmap.mmap(f.fileno(), n, access=mmap.ACCESS_READ)
    return np.frombuffer(m, np.uint8)


class SegmentRecordCounts(dict):
    """Base offset -> record count of the segments a summary covers (in offset order),
    each read from its batch headers on first ask: a clean asks only for its dirty
    range's (to size the key map), so the segments before it are never read for this,
    and making it copies nothing."""

    def __init__(self, segments: Sequence[LogSegment]):
        super().__init__()
        self._segments = segments

    def _segment(self, base: object) -> LogSegment | None:
        segs = self._segments
        i = bisect.bisect_left(segs, base, key=lambda s: s.base_offset)
        return segs[i] if i < len(segs) and segs[i].base_offset == base else None

    def __missing__(self, base: int) -> int:
        seg = self._segment(base)
        if seg is None:
            raise KeyError(base)  # not a segment of the summary
        n = 0
        if seg.size:
            h = scan_batch_headers(segment_buffer(seg.log_path, seg.size))
            n = int(h.record_count.sum())
        self[base] = n
        return n

    def __contains__(self, base: object) -> bool:
        return self._segment(base) is not None

    def get(self, base: int, default: int | None = None) -> int | None:  # type: ignore[override]
        return self[base] if base in self else default

    def __reduce__(self) -> tuple:
        """Shipped to a Spark task as the counts read so far (a plain dict): the
        segments (their locks and files) stay with the driver."""
        return dict, (dict(self),)


def summarize_producers(
    plog: PartitionLog, segments: Sequence[LogSegment], now: int
) -> ProducerSummary:
    """What a clean of ``segments`` (a snapshot of ``plog``'s) needs of its producers,
    asked of the log: each active producer's last records (Kafka's
    ``lastRecordsOfActiveProducers``, from the producer state) and the aborted
    transactions (its ``.txnindex``, Kafka's ``collectAbortedTransactions``). No
    segment is read for it; record counts are read per segment when asked."""
    aborted = plog.collect_aborted_transactions(0, plog.log_end_offset)
    return ProducerSummary(
        plog.last_records_of_active_producers(now),
        sorted(aborted, key=lambda t: t.first_offset),
        SegmentRecordCounts(segments),
    )


def tracker_states(
    groups: Sequence[Sequence[LogSegment]], aborted: Sequence[AbortedTxn]
) -> list[TxnTracker]:
    """The clean's one :class:`TxnTracker` as it reaches the start of each group (Kafka's
    ``Cleaner.doClean`` carries one ``CleanedTransactionMetadata`` through every
    group): what a group rewritten on its own (a Spark task) starts from. Read from
    batch headers and markers only, of the segments that hold transactional batches
    (or are not known not to: read once, then the segment knows); the last group's
    segments are not read. A segment without any changes nothing the pass decides:
    the aborted transactions it would pass are taken from the queue, by offset, by the
    next transactional batch or marker read."""
    txn = TxnTracker(aborted)
    out = []
    for i, group in enumerate(groups):
        out.append(txn.copy())
        if i + 1 == len(groups):
            break
        for seg in group:
            if not seg.size or seg.holds_txn_batches is False:
                continue
            buf = segment_buffer(seg.log_path, seg.size)
            h = scan_batch_headers(buf)
            txn.read_batches(
                buf, h.producer_id, h.last_offset, h.attributes, h.position, h.size, h.record_count
            )
            seg.holds_txn_batches = bool((h.attributes & (TRANSACTIONAL_BIT | CONTROL_BIT)).any())
    return out


def new_cleaned_segment(directory: Path, base: int, **seg_kwargs: Any) -> LogSegment:
    """An empty ``<base>.log.cleaned`` (and its indexes), replacing a stale one."""
    for path in segment_files(directory, base, CLEANED_SUFFIX):
        path.unlink(missing_ok=True)
    return LogSegment(directory, base, suffix=CLEANED_SUFFIX, **seg_kwargs)


def write_cleaned_group(
    directory: Path,
    sources: Sequence[tuple[int, str | os.PathLike, int]],
    lookup: LatestLookup,
    ctx: RoundContext,
    seg_kwargs: dict[str, Any],
    dry_run: bool,
    txn: TxnTracker,
    check_done: Callable[[], None] | None = None,
    io: IoReport | None = None,
    faults: CleanFaults | None = None,
) -> tuple[GroupStats, LogSegment | None]:
    """Clean ``sources`` ((base, path, size), in order) into ``<first base>.log.cleaned``.

    Flushed and with the last source's mtime, as Kafka leaves it before the swap. The
    half-written file is removed if anything fails (an abort raised by ``check_done``
    too). ``txn`` is the clean's transaction pass as it reaches this group, carried on
    by the rewrite. ``io`` is the I/O throttle's report (bytes read and written).
    ``faults``: what a test injects (:class:`CleanFaults`).
    """
    bufs = (segment_buffer(path, size) for _base, path, size in sources)
    first = sources[0][0]
    if dry_run:
        if faults is not None:
            faults.before_rewrite(first, check_done)
        return clean_group(list(bufs), lookup, ctx, None, txn, check_done, io), None
    dest = new_cleaned_segment(directory, first, **seg_kwargs)
    try:
        if faults is not None:
            faults.before_rewrite(first, check_done)
        stats = clean_group(list(bufs), lookup, ctx, dest, txn, check_done, io)
        dest.on_become_inactive()
        dest.flush()
        mtime = int(os.stat(sources[-1][1]).st_mtime * 1000)
        dest.set_last_modified_ms(mtime)
    except BaseException:
        dest.delete_files()
        raise
    return stats, dest


HOLD_ENV = "KOMPAKT_TEST_HOLD_CLEAN"
"""Read once by :meth:`CleanFaults.from_env` where a process builds its engine by name."""


class CleanFaults:
    """Faults injected into a clean's group rewrites: handed to the engine, which hands
    it to each rewrite (shipped with a Spark task), instead of the rewrite looking one
    up. The one fault, ``hold_dir``: the rewrite of the group starting at ``base``, once
    begun (its ``.cleaned`` file exists), touches ``DIR/held-<base>`` and waits, polling
    ``check_done``, until ``DIR/release`` or ``DIR/release-<base>`` exists (at most
    120 s). Tests use it to stop or race a clean at a known point in a real engine.

    An instance without its own ``hold_dir`` follows the class's (None), which a test
    may set for every engine of its process."""

    hold_dir: str | None = None

    def __init__(self, hold_dir: str | os.PathLike[str] | None = None) -> None:
        if hold_dir is not None:
            self.hold_dir = str(hold_dir)

    @classmethod
    def from_env(cls) -> CleanFaults:
        """The faults a test put in the environment of a process it started (the CLI,
        a broker, a Spark job), read when that process builds its engine."""
        return cls(os.environ.get(HOLD_ENV) or None)

    def __getstate__(self) -> dict[str, str | None]:
        return {"hold_dir": self.hold_dir}  # a Spark task holds as its driver says

    def __setstate__(self, state: dict[str, str | None]) -> None:
        if state.get("hold_dir") is not None:
            self.hold_dir = state["hold_dir"]

    def before_rewrite(self, base: int, check_done: Callable[[], None] | None) -> None:
        """Hold the rewrite of the group at ``base`` if told to (see the class)."""
        if not self.hold_dir:
            return
        d = Path(self.hold_dir)
        (d / f"held-{base}").touch()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if (d / "release").exists() or (d / f"release-{base}").exists():
                return
            if check_done is not None:
                check_done()
            time.sleep(0.02)


def remove_cleaned_files(directory: Path, groups: Sequence[Sequence[LogSegment]]) -> None:
    """Drop the ``.cleaned`` files of a rewrite that failed part-way (Spark tasks that
    finished before another one failed leave theirs): on a full disk they hold the
    space a retry needs, and only a swap may turn them into segments."""
    for group in groups:
        if group:
            for path in segment_files(directory, group[0].base_offset, CLEANED_SUFFIX):
                path.unlink(missing_ok=True)


def locate_corruption(segments: Sequence[LogSegment]) -> tuple[str, int, str] | None:
    """(file, byte position, message) of the first batch that fails its CRC or framing:
    names the damage for an uncleanable mark when the engine's error lost it (a Spark
    task's error is text)."""
    for seg in segments:
        if not seg.size:
            continue
        try:
            buf = segment_buffer(seg.log_path, seg.size)
            scan_records(buf, 0, len(buf), verify_crc=True)
        except CorruptRecordError as exc:
            return str(seg.log_path), int(exc.position or 0), str(exc)
        except (OSError, ValueError):
            continue
    return None
