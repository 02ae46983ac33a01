"""A remote range too big for one task: read by many executors, rewritten group by group.

The same three answers the one-task plan computes (:func:`remote_tasks.clean_in_one_task`),
spread over the cluster as the Spark engine spreads a local clean
(:mod:`kompakt.pipeline.survivors`, :mod:`kompakt.pipeline.groups`):

1. **Read** (a task per remote segment, neighbours packed up to the Spark engine's map
   task size): the task fetches each segment's ``.log`` from the bucket and makes the
   map side's digest rows of its keyed records (:func:`survivors.digest_rows`, packed by
   bucket with :func:`exchange.by_bucket`), plus the segment's transaction events: the
   header fields of its transactional and control batches and the bytes of the control
   batches (a few bytes per transaction).
2. **Decide**: the rows go through Spark's own shuffle, one ``(bucket, bytes)`` element
   per bucket and read task (the local engine's exchange writes files beside the log,
   which executors without a shared filesystem cannot read), and each bucket is reduced
   to superseded bits by :func:`survivors.superseded_bits`; the transaction events come
   back to the driver, which feeds them to the cleaner's
   :class:`~kompakt.cleaner.transactions.TxnTracker` in offset order to get each group's
   starting state (what :func:`kompakt.cleaner.segment_io.tracker_states` computes from
   the segments).
3. **Rewrite** (one task per segment group): fetch, rewrite with the group's slice of
   the bits and its tracker state, upload (:func:`remote_tasks.rewrite_group`).

The read stage's output is persisted, so each segment is fetched once for the decision
and once for its rewrite.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from kompakt.cleaner.remote_clean import CleanedSegment
from kompakt.cleaner.segment_io import segment_buffer
from kompakt.cleaner.transactions import TxnTracker
from kompakt.pipeline import exchange, survivors
from kompakt.pipeline.remote_plan import RemotePlan
from kompakt.pipeline.remote_tasks import (
    StoreAddress,
    Transfers,
    fetch_logs,
    opened,
    private_dir,
    rewrite_group,
)
from kompakt.record.header import CONTROL_BIT, TRANSACTIONAL_BIT
from kompakt.record.scan import scan_batch_headers
from kompakt.remote.manifest import RemoteSegment

_CODEC = "lz4"  # the bitmaps' compression, as the Spark engine's reduce sends them


@dataclass(frozen=True)
class TxnEvents:
    """The transactional and control batches of one segment, as
    :meth:`TxnTracker.read_batches` reads them (``buf`` holds the control batches only,
    ``position`` points into it)."""

    producer_id: np.ndarray
    last_offset: np.ndarray
    attributes: np.ndarray
    position: np.ndarray
    size: np.ndarray
    record_count: np.ndarray
    buf: bytes

    @classmethod
    def of(cls, buf: np.ndarray) -> TxnEvents:
        h = scan_batch_headers(buf)
        pick = np.flatnonzero(h.attributes & (TRANSACTIONAL_BIT | CONTROL_BIT))
        pieces, positions, at = [], np.zeros(len(pick), np.int64), 0
        for j, i in enumerate(pick):
            if h.attributes[i] & CONTROL_BIT:
                lo = int(h.position[i])
                pieces.append(buf[lo : lo + int(h.size[i])].tobytes())
                positions[j] = at
                at += int(h.size[i])
        return cls(
            h.producer_id[pick],
            h.last_offset[pick],
            h.attributes[pick],
            positions,
            h.size[pick],
            h.record_count[pick],
            b"".join(pieces),
        )

    def feed(self, txn: TxnTracker) -> None:
        txn.read_batches(
            np.frombuffer(self.buf, np.uint8),
            self.producer_id,
            self.last_offset,
            self.attributes,
            self.position,
            self.size,
            self.record_count,
        )


def _reader(address: StoreAddress, p: RemotePlan, reduces: int, transfers: Transfers):
    """Map side: per remote segment, its digest rows by bucket and (key -1 - order) its
    transaction events."""

    def run(tasks: Iterator[list[tuple[int, int, RemoteSegment]]]) -> Iterator[tuple[int, Any]]:
        with (
            opened(address, transfers) as store,
            private_dir(f"kompakt-remote-read-{p.topic}-{p.partition}-") as d,
        ):
            for order, base, seg in (item for task in tasks for item in task):
                (f,) = fetch_logs(store, [seg], [base], d)
                for task in survivors.plan_reads(d, [base]):
                    rows = survivors.digest_rows(task, p.start, p.first_dirty, p.end, p.aborted)
                    packed, counts = exchange.by_bucket(rows, reduces)
                    at = 0
                    for bucket, k in enumerate(counts):
                        if k:
                            yield int(bucket), packed[at : at + k].tobytes()
                        at += k
                yield -1 - order, TxnEvents.of(segment_buffer(f.log_path))
                f.log_path.unlink()

    return run


def _reducer(start: int, end: int):
    """Reduce side: the superseded bits of each bucket's rows (every row of a digest is
    in its bucket), packed and lz4-compressed for the driver to OR."""

    def run(pairs: Iterator[tuple[int, bytes]]) -> Iterator[bytes]:
        by_bucket: dict[int, list[np.ndarray]] = {}
        for bucket, blob in pairs:
            by_bucket.setdefault(bucket, []).append(np.frombuffer(blob, np.int64))
        if not by_bucket:
            return
        bits = np.zeros((end - start + 7) // 8, np.uint8)
        for parts in by_bucket.values():
            survivors.superseded_bits(np.concatenate(parts).reshape(-1, 3), start, end, bits)
        yield pa.compress(bits, codec=_CODEC, asbytes=True) if len(bits) else b""

    return run


def _bucket(bucket: int) -> int:
    return bucket  # a bucket is its own shuffle partition (partitionBy takes it mod R)


def read_tasks(
    items: list[tuple[int, int, RemoteSegment]], task_bytes: int = survivors.TASK_BYTES
) -> list[list[tuple[int, int, RemoteSegment]]]:
    """Neighbouring segments packed into read tasks of about ``task_bytes`` (the Spark
    engine's map task size): a task's fixed cost is paid per task, not per segment."""
    tasks: list[list[tuple[int, int, RemoteSegment]]] = [[]]
    size = 0
    for item in items:
        if tasks[-1] and size + item[2].size > task_bytes:
            tasks.append([])
            size = 0
        tasks[-1].append(item)
        size += item[2].size
    return tasks


def clean_spread(
    spark: Any,
    address: StoreAddress,
    p: RemotePlan,
    task_bytes: int = survivors.TASK_BYTES,
    transfers: Transfers = None,
) -> list[CleanedSegment]:
    """The plan's range cleaned by many tasks (see the module doc)."""
    sc = spark.sparkContext
    items = [
        (order, base, seg)
        for order, (base, seg) in enumerate(
            (b, s) for g in p.groups for b, s in zip(g.bases, g.segments, strict=True)
        )
    ]
    width = max(0, p.end - p.start)
    cores = max(1, sc.defaultParallelism)
    reduces = cores * max(1, math.ceil(width / (survivors.ROWS_PER_REDUCE * cores)))
    tasks = read_tasks(items, task_bytes)
    read = sc.parallelize(tasks, len(tasks)).mapPartitions(_reader(address, p, reduces, transfers))
    read.persist()
    try:
        events = dict(read.filter(lambda kv: kv[0] < 0).collect())
        blobs = (
            read.filter(lambda kv: kv[0] >= 0)
            .partitionBy(reduces, _bucket)
            .mapPartitions(_reducer(p.start, p.end))
            .collect()
        )
    finally:
        read.unpersist()
    bits = np.zeros((width + 7) // 8, np.uint8)
    for blob in blobs:
        if len(bits):
            raw = pa.decompress(blob, decompressed_size=len(bits), codec=_CODEC, asbytes=True)
            bits |= np.frombuffer(raw, np.uint8)
    superseded = survivors.Superseded(p.start, p.end, bits)
    txn = TxnTracker(p.txn_aborted)  # the clean's one pass, as each group starts
    tasks, order = [], 0
    for g in p.groups:
        tasks.append((g, superseded.slice(g.bases[0], g.end), txn.copy()))
        for _ in g.segments:
            events[-1 - order].feed(txn)
            order += 1

    def rewrite(task: tuple) -> CleanedSegment:
        g, mine, state = task
        with (
            opened(address, transfers) as store,
            private_dir(f"kompakt-remote-group-{p.topic}-{p.partition}-") as d,
        ):
            fetched = fetch_logs(store, g.segments, g.bases, d)
            return rewrite_group(store, p, g, fetched, mine, state, d)

    return sc.parallelize(tasks, len(tasks)).map(rewrite).collect()
