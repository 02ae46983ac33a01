"""Which records of a clean's range are superseded: one read, one shuffle of digests.

Kafka's cleaner builds an offset map (key digest -> latest offset) over the dirty range
and then, record by record, keeps a record only if no later offset of its key is in the
map (``Cleaner.shouldRetainRecord``). The Spark engine computes the same answer for
every record of the range it rewrites, ``[start, end)``, in one Spark job:

1. **Map** (``mapInArrow`` over a small DataFrame of (segment file, byte range) tasks):
   each task scans its batches with :func:`kompakt.record.scan.scan_records`, digests
   the keys with :func:`kompakt.record.digest.key_digests` (128 bits, as Kafka's
   ``SkimpyOffsetMap`` keys by a 16-byte MD5 digest) and makes one fixed-width row per
   keyed record: ``(hi, lo, offset)``, three int64. A record that does not feed the
   map — before ``first_dirty``, in a control batch or an aborted transaction (decided
   by the cleaner's own :class:`~kompakt.cleaner.transactions.TxnTracker`) — gets
   ``~offset`` (negative): it must learn whether it is superseded but must not
   supersede anything. Unkeyed records get no row (Kafka's map skips them; the
   rewrite drops them by its own rule). The rows are bucketed by ``hi mod R`` and each
   bucket leaves the task as one ``(bucket, bytes)`` pair (:func:`split_buckets`).
2. **One shuffle** by bucket (an RDD ``partitionBy(R)`` whose partitioner is the
   bucket itself), so every record of a key lands in one partition. Packing matters:
   Spark's cost is per element it moves, so one element per bucket per task makes the
   shuffle cost per megabyte (with one row per record, 2M records took 14.0 s here,
   packed 7.3 s). Why an RDD of opaque byte strings rather than a DataFrame of binary
   columns (``mapInArrow`` + ``repartition``): the JVM then only moves the bytes, where
   the DataFrame plan converted them Arrow -> UnsafeRow -> shuffle -> UnsafeRow -> Arrow;
   measured on 10M records (local[2], load ~4.5, same bits): the DataFrame plan
   7.5-7.8 s wall and 10.2 s of CPU over the JVM and its Python workers, the RDD plan
   5.3-5.9 s and 7.1-7.3 s of CPU.
3. **Reduce** (``mapInArrow`` again): a numba hash table over each bucket's rows keeps
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

A range of at most ``SINGLE_TASK_BYTES`` of segments skips the shuffle:
:func:`superseded_here` runs the same map and reduce functions over all of its rows in
one task, and the engine rewrites the groups in that same task
(:func:`kompakt.pipeline.groups.run_groups_in_one_task`). A warm clean of a 3 KB topic
took 10-22 s with the shuffle plan and 0.6-1.9 s in one task (load average ~19 on 2
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
from kompakt.log.index import OffsetIndex
from kompakt.log.segment import INDEX_SUFFIX, segment_file
from kompakt.pipeline.layout import segment_path
from kompakt.record.digest import key_digests
from kompakt.record.header import HEADER_SIZE, read_header
from kompakt.record.scan import RecordScan, scan_batch_headers, scan_records

TASK_BYTES = 64 << 20  # segment bytes per map task (split at offset index entries)
SINGLE_TASK_BYTES = 8 << 20  # a range this small is decided in one task, no shuffle
ROWS_PER_REDUCE = 2_000_000  # shuffled rows per reduce partition: ~150 MB of worker memory
ROW_BYTES = 24  # hi, lo, offset: three int64
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
    rows: int = 0  # keyed records shuffled to compute them
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


@numba.njit(cache=True, nogil=True)
def _scatter_by_bucket(rows, n, out):
    """Counting sort of ``rows`` by ``hi mod n`` (unsigned) into ``out``, keeping their
    order within a bucket; returns the rows per bucket. O(rows): the ``argsort`` it
    replaces took 415 ms of a 62 MB segment's 1.25 s map side (load ~14)."""
    counts = np.zeros(n, np.int64)
    buckets = np.empty(rows.shape[0], np.int64)
    for i in range(rows.shape[0]):
        b = np.int64(np.uint64(rows[i, 0]) % np.uint64(n))
        buckets[i] = b
        counts[b] += 1
    at = np.zeros(n, np.int64)
    for b in range(1, n):
        at[b] = at[b - 1] + counts[b - 1]
    for i in range(rows.shape[0]):
        b = buckets[i]
        j = at[b]
        out[j, 0] = rows[i, 0]
        out[j, 1] = rows[i, 1]
        out[j, 2] = rows[i, 2]
        at[b] = j + 1
    return counts


def split_buckets(rows: np.ndarray, n: int) -> Iterator[tuple[int, bytes]]:
    """``(bucket, its rows as bytes)`` for each non-empty bucket ``hi mod n`` (unsigned)
    of ``rows``: one shuffle element per bucket, whatever its number of rows."""
    packed = np.empty((len(rows), 3), np.int64)
    counts = _scatter_by_bucket(np.ascontiguousarray(rows, np.int64), n, packed)
    at = 0
    for bucket in range(n):
        k = int(counts[bucket])
        if k:
            yield bucket, packed[at : at + k].tobytes()
        at += k


def _mapper(
    start: int,
    first_dirty: int,
    end: int,
    aborted: Sequence[AbortedTxn],
    reduces: int,
    throttle: Throttler | None = None,
) -> Callable[[Iterator[ReadTask]], Iterator[tuple[int, bytes]]]:
    def run(tasks: Iterator[ReadTask]) -> Iterator[tuple[int, bytes]]:
        for task in tasks:  # one task per Spark partition
            rows = digest_rows(task, start, first_dirty, end, aborted)
            if throttle is not None:  # Kafka's buildOffsetMap reports its reads
                throttle.maybe_throttle(task.hi_position - task.lo_position)
            yield from split_buckets(rows, reduces)
        if throttle is not None:
            throttle.settle()  # a map task is short: its share is settled at its end

    return run


def _bucket_partition(bucket: int) -> int:
    """The shuffle partition of a bucket: the bucket (``partitionBy`` takes it mod R)."""
    return bucket


# -- reduce side (workers) --------------------------------------------------------------


@numba.njit(cache=True, nogil=True)
def _mark_superseded(rows, start, bits):
    """Hash (hi, lo) -> highest feeding offset, then set the bit of every row below it.
    A slot's digest and offset sit side by side (one ``(cap, 3)`` table), so a probe
    costs one cache miss, not three: the table of a reduce task's ~2M rows is ~100 MB,
    every probe a miss (the reduce stage of a 10M-record clean spent most of its time
    here)."""
    n = rows.shape[0]
    cap = 16
    while cap < 2 * n:
        cap <<= 1
    mask = cap - 1
    table = np.empty((cap, 3), np.int64)  # hi, lo, highest feeding offset
    table[:, 2] = -2  # -2: empty slot, -1: key seen, nothing feeds
    slot_of = np.empty(n, np.int64)
    for i in range(n):
        hi, lo, offset = rows[i, 0], rows[i, 1], rows[i, 2]
        s = lo & mask
        while True:
            if table[s, 2] == -2:
                table[s, 0] = hi
                table[s, 1] = lo
                table[s, 2] = -1
                break
            if table[s, 0] == hi and table[s, 1] == lo:
                break
            s = (s + 1) & mask
        slot_of[i] = s
        if offset > table[s, 2]:
            table[s, 2] = offset
    marked = 0
    for i in range(n):
        o = rows[i, 2] if rows[i, 2] >= 0 else ~rows[i, 2]
        if table[slot_of[i], 2] > o:
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
    if len(rows):
        _mark_superseded(np.ascontiguousarray(rows, np.int64), start, bits)
    return bits


def _reducer(start: int, end: int) -> Callable[[Iterator[tuple[int, bytes]]], Iterator[Any]]:
    def run(pairs: Iterator[tuple[int, bytes]]) -> Iterator[tuple[bytes, int]]:
        by_bucket: dict[int, list[np.ndarray]] = {}
        for bucket, blob in pairs:
            by_bucket.setdefault(bucket, []).append(np.frombuffer(blob, np.int64))
        if not by_bucket:
            return
        bits = np.zeros((end - start + 7) // 8, np.uint8)
        rows = 0
        for parts in by_bucket.values():  # a bucket holds every row of its digests
            table = np.concatenate(parts).reshape(-1, 3)
            superseded_bits(table, start, end, bits)
            rows += len(table)
        packed = pa.compress(bits, codec=_CODEC, asbytes=True) if len(bits) else b""
        yield packed, rows

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
    (one bucket). For a range small enough to be one task's work, where a shuffle's
    fixed cost (two stages, a DataFrame plan, Arrow round trips) is all the time."""
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
    suffice). One read of the segments, one shuffle of 24-byte rows. ``throttle`` is
    one map task's share of the cleaner's I/O limit."""
    width = max(0, end - start)
    tasks = plan_reads(part_dir, [b for g in groups for b in g], task_bytes)
    if not tasks or width == 0:
        return Superseded(start, start + width, np.zeros((width + 7) // 8, np.uint8))
    aborted = [t for t in aborted if t.last_offset >= start and t.first_offset < end]
    sc = spark.sparkContext
    cores = max(1, sc.defaultParallelism)  # whole waves of reduce tasks
    reduces = cores * math.ceil(width / (rows_per_reduce * cores))
    out = (
        sc.parallelize(tasks, len(tasks))
        .mapPartitions(_mapper(start, first_dirty, end, aborted, reduces, throttle))
        .partitionBy(reduces, _bucket_partition)
        .mapPartitions(_reducer(start, end))
        .collect()
    )
    bits = np.zeros((width + 7) // 8, np.uint8)
    for blob, _rows in out:
        if len(bits):
            raw = pa.decompress(blob, decompressed_size=len(bits), codec=_CODEC, asbytes=True)
            bits |= np.frombuffer(raw, np.uint8)
    rows = sum(n for _blob, n in out)
    return Superseded(start, end, bits, rows, sum(len(blob) for blob, _n in out))
