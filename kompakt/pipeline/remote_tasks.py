"""The executor side of a Spark remote clean: segments from the bucket, cleaned segments
back to it, nothing through the driver but small metadata.

A task opens the remote store itself from its URL (``file://`` or ``s3://`` with the
endpoint; S3 credentials from the AWS environment variables, which the driver's job
carries to the task: :class:`StoreAddress`), fetches the ``.log`` files it needs into a
private temporary folder (each checked against its SHA-256), runs the cleaner's own
code on them (:func:`kompakt.pipeline.survivors.superseded_here` over
:func:`kompakt.cleaner.key_map.feeds_key_map` for the key map,
:func:`kompakt.cleaner.segment_io.tracker_states` for the transaction pass carried
across groups, :func:`kompakt.cleaner.segment_io.write_cleaned_group` for each group's
rewrite with its indexes), and uploads each cleaned segment as new objects
(:func:`kompakt.cleaner.remote_clean.upload_cleaned`). Only the
:class:`~kompakt.cleaner.remote_clean.CleanedSegment` values go back to the driver. No
path of a broker's data dir is known to a task.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kompakt.cleaner.remote_clean import CleanedSegment, upload_cleaned
from kompakt.cleaner.segment_io import tracker_states, write_cleaned_group
from kompakt.log.producer_snapshot import SNAPSHOT_SUFFIX
from kompakt.log.segment_files import (
    CLEANED_SUFFIX,
    LOG_SUFFIX,
    SEGMENT_FILE_TYPES,
    segment_file,
)
from kompakt.pipeline import survivors
from kompakt.pipeline.remote_plan import GroupPlan, HeaderReader, RemotePlan, driver_headers
from kompakt.remote.manifest import RemoteSegment
from kompakt.remote.storage import RemoteStorageManager

AWS_PREFIX = "AWS_"


@dataclass(frozen=True)
class StoreAddress:
    """Where the remote tier is, as a task opens it: the storage URL, the S3 endpoint,
    and the driver's AWS credential variables (those the task's own environment lacks
    are set from them: a cluster's executors need not be given them separately)."""

    url: str
    s3_endpoint_url: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def here(cls, url: str, s3_endpoint_url: str | None = None) -> StoreAddress:
        """The address with this process's AWS variables (none for a folder URL)."""
        env = {}
        if url.startswith("s3://"):
            env = {k: v for k, v in os.environ.items() if k.startswith(AWS_PREFIX)}
        return cls(url, s3_endpoint_url, env)

    def open(self) -> RemoteStorageManager:
        from kompakt.remote import open_store

        for k, v in self.env.items():
            os.environ.setdefault(k, v)
        return RemoteStorageManager(open_store(self.url, self.s3_endpoint_url))


Transfers = Any  # a Spark accumulator of :func:`transfer_counts` dicts (or None)


def transfer_counts(store: RemoteStorageManager) -> dict[str, list[int]]:
    """A task's requests and bytes by kind (``get``/``put``), to add on the driver to the
    broker's own counters (the ``kompakt_remote_*`` metrics)."""
    snap = store.stats.snapshot()
    nbytes = {"get": snap.bytes_fetched, "put": snap.bytes_uploaded}
    return {k: [n, nbytes.get(k, 0)] for k, n in snap.by_kind.items()}


@contextmanager
def opened(address: StoreAddress, transfers: Transfers) -> Iterator[RemoteStorageManager]:
    """The task's store client; its transfers go to ``transfers`` when the task is done."""
    store = address.open()
    try:
        yield store
    finally:
        if transfers is not None:
            transfers.add(transfer_counts(store))


@dataclass
class _Fetched:
    """A fetched ``.log`` as :func:`tracker_states` reads a segment."""

    base_offset: int
    log_path: Path
    size: int
    holds_txn_batches: bool | None = None


@contextmanager
def private_dir(prefix: str) -> Iterator[Path]:
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def fetch_logs(
    store: RemoteStorageManager, segments: Sequence[RemoteSegment], bases: Sequence[int], d: Path
) -> list[_Fetched]:
    out = []
    for s, base in zip(segments, bases, strict=True):
        path = segment_file(d, base, LOG_SUFFIX)
        data = store.fetch_file(s, LOG_SUFFIX)
        path.write_bytes(data)
        out.append(_Fetched(base, path, len(data)))
    return out


def clean_in_one_task(
    address: StoreAddress, p: RemotePlan, transfers: Transfers = None
) -> list[CleanedSegment]:
    """A whole remote range in one task: fetch every ``.log`` of the plan's groups,
    decide which records are superseded, carry the transaction pass through the
    groups, rewrite and upload each group (the in-process engine's steps, in order)."""
    with (
        opened(address, transfers) as store,
        private_dir(f"kompakt-remote-{p.topic}-{p.partition}-") as d,
    ):
        fetched = [fetch_logs(store, g.segments, g.bases, d) for g in p.groups]
        bases = [f.base_offset for g in fetched for f in g]
        reads = survivors.plan_reads(d, bases)
        bits = survivors.superseded_here(reads, p.start, p.first_dirty, p.end, p.aborted)
        states = tracker_states(fetched, p.txn_aborted)  # type: ignore[arg-type]
        return [
            rewrite_group(store, p, g, f, bits.slice(f[0].base_offset, g.end), txn, d)
            for g, f, txn in zip(p.groups, fetched, states, strict=True)
        ]


def rewrite_group(
    store: RemoteStorageManager,
    p: RemotePlan,
    g: GroupPlan,
    fetched: list[_Fetched],
    bits: survivors.Superseded,
    txn,
    d: Path,
) -> CleanedSegment:
    """Kafka ``cleanSegments`` of one group into ``<first base>.log.cleaned`` with its
    indexes, then up as new objects with the producer snapshot at the group's end."""
    sources = [(f.base_offset, f.log_path, f.size) for f in fetched]
    _stats, dest = write_cleaned_group(
        d, sources, bits.latest_lookup(), p.ctx, p.seg_kwargs, False, txn
    )
    assert dest is not None  # not a dry run
    base, max_ts = dest.base_offset, dest.max_timestamp
    dest.close()  # the indexes trimmed to their entries, as the swap leaves them
    files = {
        kind: path
        for kind in SEGMENT_FILE_TYPES
        if (path := segment_file(d, base, kind, CLEANED_SUFFIX)).exists()
    }
    last = g.segments[-1]
    if SNAPSHOT_SUFFIX in last.files:
        snap = d / f"{base}-{g.index}{SNAPSHOT_SUFFIX}"
        snap.write_bytes(store.fetch_file(last, SNAPSHOT_SUFFIX))
        files[SNAPSHOT_SUFFIX] = snap
    try:
        return upload_cleaned(store, p.topic, p.partition, base, g.segments, max_ts, files)
    finally:
        for path in files.values():
            path.unlink(missing_ok=True)
        for f in fetched:
            f.log_path.unlink(missing_ok=True)


def executor_headers(sc: Any, address: StoreAddress, transfers: Transfers) -> HeaderReader:
    """The plan's producer batch headers of segments no producer snapshot covers, read
    by a task per segment: the driver fetches no ``.log``."""

    def read(remote: list[RemoteSegment]) -> list:
        def task(s: RemoteSegment) -> list:
            with opened(address, transfers) as store:
                return list(driver_headers(store)([s]))

        return sc.parallelize(remote, len(remote)).flatMap(task).collect()

    return read
