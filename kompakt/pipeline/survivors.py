"""Which records of a clean's range are superseded: one read, one exchange of digests.

Kafka's cleaner builds an offset map (key digest -> latest offset) over the dirty range
and then, record by record, keeps a record only if no later offset of its key is in the
map (``Cleaner.shouldRetainRecord``). The Spark engine computes the same answer for
every record of the range it rewrites, ``[start, end)``, in two short Spark jobs:

1. **Map** (one task per (segment file, byte range), :func:`plan_reads`): each task
   scans its batches with :func:`kompakt.record.scan.scan_records`, digests the keys
   with :func:`kompakt.record.digest.key_digests` (128 bits, as Kafka's
   ``SkimpyOffsetMap`` keys by a 16-byte MD5 digest) and makes one fixed-width row per
   keyed record: ``(hi, lo, offset)``, three int64. A record that does not feed the
   map — before ``first_dirty``, in a control batch or an aborted transaction (decided
   by the cleaner's own :class:`~kompakt.cleaner.transactions.TxnTracker`) — gets
   ``~offset`` (negative): it must learn whether it is superseded but must not
   supersede anything. Unkeyed records get no row (Kafka's map skips them; the
   rewrite drops them by its own rule). The rows, bucketed by ``hi mod R``, go to a
   file of the task's own; the task returns the file's name and its rows per bucket
   (:func:`kompakt.pipeline.exchange.spill`).
2. **The exchange**: reduce task ``b`` reads bucket ``b``'s slice of every map file
   (:func:`kompakt.pipeline.exchange.read_bucket`), so every record of a key reaches
   one task. The rows never pass through the JVM: Spark's shuffle (an RDD
   ``partitionBy`` of one ``(bucket, bytes)`` element per bucket per map task, before
   that a DataFrame ``repartition``) pickled them into the JVM and back and
   compressed them on the way; measured on 10M records (local[2]), that was 2.4 s of
   the JVM's CPU and ~0.5 s of waiting per map task. See :mod:`kompakt.pipeline.exchange`.
3. **Reduce**: a numba hash table over each bucket's rows keeps
   each digest's highest feeding offset; a record is superseded iff that is above its own
   offset. The partition sets those bits in a packed bitmap over ``[start, end)`` and
   sends it to the driver lz4-compressed, which ORs them (each bitmap holds about
   1/R of the set bits, so it compresses well). R = range / ``ROWS_PER_REDUCE`` (at
   least the default parallelism), so a reduce task's memory is bounded whatever the
   range.

The rewrite of each segment group then needs only its slice of the bitmap
(:meth:`Superseded.slice`), not a per-record join. Why a bitmap rather than sorted
superseded offsets, measured at 10M records (1M keys x 10, 9M superseded): sorted int64
offsets would be 72 MB to collect; the R = 6 lz4 bitmaps were 6.8 MB together and OR
into a 1.25 MB bitmap (``benchmarks/bench_survivors.py`` prints both sizes).

A range of at most ``SINGLE_TASK_BYTES`` of segments skips the exchange:
:func:`superseded_here` runs the same map and reduce functions over all of its rows in
one task, and the engine rewrites the groups in that same task
(:func:`kompakt.pipeline.groups.run_groups_in_one_task`). A warm clean of a 3 KB topic
took 10-22 s with the shuffle plan of then and 0.6-1.9 s in one task (load average ~19 on 2
cores); the bits are the same, so the output is byte-identical (tests/pipeline/
test_engine.py runs both plans against the in-process engine).

Segment files are opened by path inside the tasks: local to the workers in local mode
and on shared storage in a cluster, as :mod:`kompakt.pipeline.source` assumes.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import numba
import numpy as np
import pyarrow as pa

from kompakt.cleaner.key_map import feeds_key_map
from kompakt.cleaner.segment_io import segment_buffer
from kompakt.cleaner.throttle import Throttler
from kompakt.cleaner.transactions import AbortedTxn, TxnTracker
from kompakt.log.offset_index import OffsetIndex
from kompakt.log.segment import INDEX_SUFFIX, segment_file
from kompakt.pipeline import exchange
from kompakt.pipeline.layout import segment_path
from kompakt.record.digest import key_digests
from kompakt.record.header import HEADER_SIZE, read_header
from kompakt.record.scan import RecordScan, scan_batch_headers, scan_records

TASK_BYTES = 64 << 20  # segment bytes per map task (split at offset index entries)
SINGLE_TASK_BYTES = 8 << 20  # a range this small is decided in one task, no exchange
ROWS_PER_REDUCE = 2_000_000  # exchanged rows per reduce task: ~150 MB of worker memory
# rows per hash table of the reduce side: its rows are split by digest into parts of
# about this many first, so each table (6 MB at most, all keys distinct) stays in the
# CPU's cache; one table over each of a 10M-record clean's six reduce tasks (1.7M
# rows, 12 MB tables) took 1.1 s in all, split 0.54 s
TABLE_ROWS = 1 << 16
NO_OFFSET = 1 << 62
_CODEC = "lz4"


@dataclass(frozen=True)
class ReadTask:
    """Batches of one segment file whose last offset is in ``[lo_offset, hi_offset)``.

    ``lo_position``/``hi_position`` are where the offset index says those batches start
    and end; a task checks them against the batch headers and walks the file from its
    start if the (derived, rebuildable) index disagrees.
    """

    path: str
    lo_position: int
    lo_offset: int
    hi_position: int
    hi_offset: int


@dataclass(frozen=True)
class Superseded:
    """Bit ``i`` set: the record at offset ``start + i`` has a later feeding record of its
    key in the dirty range. ``bits`` is ``np.packbits`` order (MSB first) over
    ``[start, end)``; offsets outside are never superseded."""

    start: int
    end: int
    bits: np.ndarray  # uint8, ceil((end - start) / 8)
    rows: int = 0  # keyed records exchanged to compute them
    collected_bytes: int = 0  # compressed bitmaps the driver received

    def mask(self, offsets: np.ndarray) -> np.ndarray:
        """Whether each offset is superseded (False outside ``[start, end)``)."""
        offsets = np.asarray(offsets, np.int64)
        inside = (offsets >= self.start) & (offsets < self.end)
        rel = np.where(inside, offsets - self.start, 0)
        if not len(self.bits):
            return np.zeros(len(offsets), bool)
        bit = (self.bits[rel >> 3] >> (7 - (rel & 7)).astype(np.uint8)) & 1
        return inside & (bit == 1)

    def slice(self, lo: int, hi: int) -> Superseded:
        """The bits of ``[lo, hi)`` alone (one segment group's share, to ship to its task)."""
        lo, hi = max(lo, self.start), min(hi, self.end)
        if hi <= lo:
            return Superseded(lo, lo, np.empty(0, np.uint8))
        first, last = lo - self.start, hi - self.start
        window = np.unpackbits(self.bits[first >> 3 : (last + 7) >> 3])  # only these bytes
        skip = first & 7
        return Superseded(lo, hi, np.packbits(window[skip : skip + last - first]))

    def latest_lookup(self) -> Callable[[RecordScan], np.ndarray]:
        """A :data:`kompakt.cleaner.rewrite.LatestLookup` answering from these bits.

        The rewrite compares ``offset >= latest`` (``Cleaner.shouldRetainRecord``); a
        superseded record gets ``offset + 1`` (some later offset), any other -1 (key
        not in the map), which decides every record as the exact latest offset would.
        """

        def lookup(scan: RecordScan) -> np.ndarray:
            return np.where(self.mask(scan.offset), scan.offset + 1, -1).astype(np.int64)

        return lookup


# -- planning (driver) ------------------------------------------------------------------


def _index_entries(part_dir: str | os.PathLike, base: int) -> tuple[np.ndarray, np.ndarray]:
    """(offset, position) of the ``.index`` entries past position 0 (Kafka's
    ``OffsetIndex``: one per ``index.interval.bytes``, each a batch start); empty
    without an index. Read-only: the partition may belong to a running broker."""
    try:
        index = OffsetIndex.read_only(segment_file(part_dir, base, INDEX_SUFFIX), base)
    except FileNotFoundError:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    pairs = np.array([index.entry(i) for i in range(index.entries)], np.int64).reshape(-1, 2)
    pairs = pairs[pairs[:, 1] > 0]
    return pairs[:, 0], pairs[:, 1]


def plan_reads(
    part_dir: str | os.PathLike, bases: Sequence[int], task_bytes: int = TASK_BYTES
) -> list[ReadTask]:
    """Map tasks of about ``task_bytes`` over the segments ``bases`` of ``part_dir``,
    split at offset index entries (batch starts)."""
    tasks = []
    for base in bases:
        path = str(segment_path(part_dir, base))
        size = os.stat(path).st_size
        if not size:
            continue
        cuts: list[tuple[int, int]] = [(0, -1)]
        if size > task_bytes:
            offsets, positions = _index_entries(part_dir, base)
            for k in range(1, math.ceil(size / task_bytes)):
                i = int(np.searchsorted(positions, k * task_bytes))
                if i < len(positions) and positions[i] > cuts[-1][0] and positions[i] < size:
                    cuts.append((int(positions[i]), int(offsets[i])))
        cuts.append((size, NO_OFFSET))
        for (lo_pos, lo_off), (hi_pos, hi_off) in pairwise(cuts):
            tasks.append(ReadTask(path, lo_pos, lo_off, hi_pos, hi_off))
    return tasks


# -- map side (workers) -----------------------------------------------------------------


def _batch_range(buf: np.ndarray, task: ReadTask) -> tuple[int, int]:
    """Byte range of the task's batches, trusting the index positions only if the batch
    headers there carry the offsets the index says."""

    def at(position: int, offset: int) -> bool:
        if position + HEADER_SIZE > len(buf):
            return False
        return read_header(memoryview(buf), position).last_offset == offset

    if (task.lo_position == 0 or at(task.lo_position, task.lo_offset)) and (
        task.hi_position == len(buf) or at(task.hi_position, task.hi_offset)
    ):
        return task.lo_position, task.hi_position
    h = scan_batch_headers(buf)  # index disagrees: walk the whole file
    own = np.flatnonzero((h.last_offset >= task.lo_offset) & (h.last_offset < task.hi_offset))
    if not len(own):
        return 0, 0
    return int(h.position[own[0]]), int(h.position[own[-1]] + h.size[own[-1]])


def digest_rows(
    task: ReadTask, start: int, first_dirty: int, end: int, aborted: Sequence[AbortedTxn]
) -> np.ndarray:
    """``(hi, lo, offset)`` rows (an ``(n, 3)`` int64 array) of the keyed records of one
    task in ``[start, end)``; a record that does not feed the map has ``~offset``."""
    buf = segment_buffer(task.path)
    lo, hi = _batch_range(buf, task)
    if hi <= lo:
        return np.empty((0, 3), np.int64)
    scan = scan_records(buf, lo, hi, verify_crc=True)
    keep = ~scan.key_null & (scan.offset >= start) & (scan.offset < end)
    first = int(scan.batch_base_offset[0])
    txn = TxnTracker([t for t in aborted if t.last_offset >= first])
    feeds = feeds_key_map(scan, buf, txn, first_dirty, end)
    d_hi, d_lo = key_digests(scan.key_offsets, scan.key_data)
    rows = np.empty((int(keep.sum()), 3), np.int64)
    rows[:, 0] = d_hi[keep]
    rows[:, 1] = d_lo[keep]
    rows[:, 2] = np.where(feeds, scan.offset, ~scan.offset)[keep]
    return rows


def _mapper(
    start: int,
    first_dirty: int,
    end: int,
    aborted: Sequence[AbortedTxn],
    reduces: int,
    folder: str,
    throttle: Throttler | None = None,
) -> Callable[[Iterator[ReadTask]], Iterator[exchange.Spill]]:
    def run(tasks: Iterator[ReadTask]) -> Iterator[exchange.Spill]:
        for task in tasks:  # one task per Spark partition
            rows = digest_rows(task, start, first_dirty, end, aborted)
            if throttle is not None:  # Kafka's buildOffsetMap reports its reads
                throttle.maybe_throttle(task.hi_position - task.lo_position)
            yield exchange.spill(rows, reduces, folder)
        if throttle is not None:
            throttle.settle()  # a map task is short: its share is settled at its end

    return run


# -- reduce side (workers) --------------------------------------------------------------


@numba.njit(cache=True, nogil=True)
def _empty_table(cap):
    table = np.empty((cap, 3), np.int64)  # hi, lo, highest feeding offset
    table[:, 2] = -2  # -2: empty slot, -1: key seen, nothing feeds
    return table


@numba.njit(cache=True, nogil=True)
def _slot(table, hi, lo):
    """The slot of digest (hi, lo): its own, or the empty one it would take."""
    mask = table.shape[0] - 1
    s = lo & mask
    while table[s, 2] != -2 and (table[s, 0] != hi or table[s, 1] != lo):
        s = (s + 1) & mask
    return s


@numba.njit(cache=True, nogil=True)
def _mark_superseded(rows, start, bits):
    """Hash (hi, lo) -> highest feeding offset, then set the bit of every row below it.
    A slot's digest and offset sit side by side (one ``(cap, 3)`` table), so a probe
    costs one cache miss, not three. The table grows with the distinct digests (at
    most half full), not with the rows: a reduce task of a 10M-record clean has ~2M
    rows of ~170k keys, and a table sized by its rows (~100 MB, every probe a miss,
    two such tasks sharing the cache) took 1.0-1.9 s of the reduce side's CPU where
    one sized by its keys (~8 MB) takes 0.6-0.8 s."""
    table = _empty_table(1 << 12)
    used = 0
    for i in range(rows.shape[0]):
        s = _slot(table, rows[i, 0], rows[i, 1])
        if table[s, 2] == -2:
            if 2 * (used + 1) > table.shape[0]:
                bigger = _empty_table(2 * table.shape[0])
                for t in range(table.shape[0]):
                    if table[t, 2] != -2:
                        bigger[_slot(bigger, table[t, 0], table[t, 1])] = table[t]
                table = bigger
                s = _slot(table, rows[i, 0], rows[i, 1])
            table[s, 0] = rows[i, 0]
            table[s, 1] = rows[i, 1]
            table[s, 2] = -1
            used += 1
        if rows[i, 2] > table[s, 2]:
            table[s, 2] = rows[i, 2]
    marked = 0
    for i in range(rows.shape[0]):
        o = rows[i, 2] if rows[i, 2] >= 0 else ~rows[i, 2]
        if table[_slot(table, rows[i, 0], rows[i, 1]), 2] > o:
            r = o - start
            bits[r >> 3] |= np.uint8(0x80 >> (r & 7))
            marked += 1
    return marked


def superseded_bits(
    rows: np.ndarray, start: int, end: int, bits: np.ndarray | None = None
) -> np.ndarray:
    """Set in ``bits`` (a new packed bitmap over ``[start, end)`` if None) the rows
    superseded by a feeding row of the same digest; every row of a digest must be in
    ``rows`` (``(n, 3)`` int64: hi, lo, offset)."""
    if bits is None:
        bits = np.zeros((end - start + 7) // 8, np.uint8)
    parts = len(rows) // TABLE_ROWS
    if parts > 1:  # digests by lo (a reduce task's rows share hi mod R), a table each
        rows, counts = exchange.by_bucket(rows, parts, column=1)
        at = 0
        for k in counts.tolist():
            if k:
                _mark_superseded(rows[at : at + k], start, bits)
            at += k
    elif len(rows):
        _mark_superseded(np.ascontiguousarray(rows, np.int64), start, bits)
    return bits


def _reducer(start: int, end: int) -> Callable[[list[exchange.BucketPart]], tuple[bytes, int]]:
    def run(parts: list[exchange.BucketPart]) -> tuple[bytes, int]:
        rows = exchange.read_bucket(parts)  # every row of the bucket's digests
        bits = superseded_bits(rows, start, end)
        packed = pa.compress(bits, codec=_CODEC, asbytes=True) if len(bits) else b""
        return packed, len(rows)

    return run


# -- the job (driver) -------------------------------------------------------------------


def task_bytes_total(tasks: Sequence[ReadTask]) -> int:
    """Segment bytes the map tasks read."""
    return sum(t.hi_position - t.lo_position for t in tasks)


def superseded_here(
    tasks: Sequence[ReadTask],
    start: int,
    first_dirty: int,
    end: int,
    aborted: Sequence[AbortedTxn] = (),
    io: Callable[[int], object] | None = None,
) -> Superseded:
    """The same answer as :func:`superseded`, computed in the calling process: the map
    side's rows of every task, then the reduce side's kernel over all of them at once
    (one bucket). For a range small enough to be one task's work, where an exchange's
    fixed cost (two jobs, their tasks and files) is all the time."""
    width = max(0, end - start)
    bits = np.zeros((width + 7) // 8, np.uint8)
    aborted = [t for t in aborted if t.last_offset >= start and t.first_offset < end]
    parts = []
    for t in tasks:
        parts.append(digest_rows(t, start, first_dirty, end, aborted))
        if io is not None:  # the I/O throttle (Kafka's buildOffsetMap reports its reads)
            io(t.hi_position - t.lo_position)
    rows = np.concatenate(parts) if parts else np.empty((0, 3), np.int64)
    if width:
        superseded_bits(rows, start, end, bits)
    return Superseded(start, start + width, bits, len(rows))


def spark_tasks(sc: Any, items: int) -> int:
    """How many Spark tasks to run ``items`` pieces of a clean's work in (segment
    ranges to read, groups to rewrite): two per core at most, each taking a run of
    them. Every Spark task costs the JVM ~40 ms of CPU and a few hundred ms of
    latency on a loaded machine whatever its size; with one task per 64 MB piece a
    10M-record clean ran 44 tasks, now 14, and two per core still balance the cores
    when one task runs late."""
    return max(1, min(items, 2 * max(1, sc.defaultParallelism)))


def superseded(
    spark,
    part_dir: str | os.PathLike,
    start: int,
    first_dirty: int,
    end: int,
    groups: Sequence[Sequence[int]],
    aborted: Sequence[AbortedTxn] = (),
    *,
    task_bytes: int = TASK_BYTES,
    rows_per_reduce: int = ROWS_PER_REDUCE,
    throttle: Throttler | None = None,
) -> Superseded:
    """For every record in ``[start, end)`` of the segments in ``groups`` (lists of base
    offsets, the cleaner's segment groups), whether a later record of its key feeds the
    map from the dirty range ``[first_dirty, end)``. ``aborted`` are the partition's
    aborted transactions (``ProducerSummary.aborted``; those overlapping the range
    suffice). One read of the segments, one exchange of 24-byte rows (two jobs). ``throttle`` is
    one map task's share of the cleaner's I/O limit."""
    width = max(0, end - start)
    tasks = plan_reads(part_dir, [b for g in groups for b in g], task_bytes)
    if not tasks or width == 0:
        return Superseded(start, start + width, np.zeros((width + 7) // 8, np.uint8))
    aborted = [t for t in aborted if t.last_offset >= start and t.first_offset < end]
    sc = spark.sparkContext
    cores = max(1, sc.defaultParallelism)  # whole waves of reduce tasks
    reduces = cores * math.ceil(width / (rows_per_reduce * cores))
    with exchange.scratch(part_dir) as folder:
        mapper = _mapper(start, first_dirty, end, aborted, reduces, str(folder), throttle)
        spills = sc.parallelize(tasks, spark_tasks(sc, len(tasks))).mapPartitions(mapper).collect()
        buckets = [p for p in exchange.bucket_parts(spills, reduces) if p]
        out = sc.parallelize(buckets, max(1, len(buckets))).map(_reducer(start, end)).collect()
    bits = np.zeros((width + 7) // 8, np.uint8)
    for blob, _rows in out:
        if len(bits):
            raw = pa.decompress(blob, decompressed_size=len(bits), codec=_CODEC, asbytes=True)
            bits |= np.frombuffer(raw, np.uint8)
    rows = sum(n for _blob, n in out)
    return Superseded(start, end, bits, rows, sum(len(blob) for blob, _n in out))
