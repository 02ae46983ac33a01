"""Segments up and down: Kafka's ``RemoteStorageManager`` role.

``copy_segment`` uploads a rolled segment's files whole (``.log``, ``.index``,
``.timeindex``, ``.txnindex``, the producer snapshot), each under a fresh segment id, and
returns the :class:`~kompakt.remote.manifest.RemoteSegment` describing them, with the
SHA-256 of every file and the CRC32C of every ``chunk_bytes`` slice of the ``.log``. The
upload names nothing: the segment becomes part of the remote log only when a manifest
that names it is committed (:mod:`kompakt.remote.metadata`); a crash before that leaves
orphans for the sweep, never a manifest naming a missing object.

Reads are verified: a whole file against its SHA-256, a ``.log`` range chunk by chunk
against the chunk CRCs (through the :class:`~kompakt.remote.cache.ChunkCache` when one
is given), so a corrupted object is reported as :class:`ChecksumMismatchError` instead
of being served to a consumer.
"""

from __future__ import annotations

import hashlib
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import crc32c

from kompakt.log.producer_snapshot import SNAPSHOT_SUFFIX
from kompakt.log.segment import INDEX_SUFFIX, LOG_SUFFIX, TIMEINDEX_SUFFIX, TXNINDEX_SUFFIX
from kompakt.remote.cache import ChunkCache
from kompakt.remote.layout import segment_key
from kompakt.remote.manifest import RemoteFile, RemoteSegment
from kompakt.remote.store import ChecksumMismatchError, ObjectStore, RemoteStorageError

# what a range read fetches at least, and the unit of the chunk CRCs and the cache: big
# enough that a GET's fixed cost is small next to its transfer, small enough that a
# consumer starting mid-segment does not pull the whole segment
CHUNK_BYTES = 4 * 1024 * 1024
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIMEINDEX_SUFFIX, TXNINDEX_SUFFIX, SNAPSHOT_SUFFIX)


@dataclass(frozen=True)
class LocalSegmentFiles:
    """A rolled local segment as the log hands it over (Kafka's ``LogSegmentData``).

    ``files`` maps a suffix of :data:`SEGMENT_SUFFIXES` to its path; ``.log`` is
    required, the others are uploaded when present (a segment without aborted
    transactions may have no ``.txnindex``).
    """

    base_offset: int
    last_offset: int
    max_timestamp_ms: int
    files: Mapping[str, Path]
    delete_horizon_ms: int = -1


@dataclass
class TransferStats:
    """Bytes and requests to and from the store, for the metrics and the bench.

    Written by the tiering task and the fetches' threads, read by ``/metrics`` on an
    admin thread: every field is guarded by ``_lock``; read them through
    :meth:`snapshot`, which copies them in one consistent reading."""

    bytes_uploaded: int = 0
    bytes_fetched: int = 0
    bytes_deleted: int = 0
    objects_deleted: int = 0
    requests: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def count(self, kind: str, nbytes: int = 0) -> None:
        with self._lock:
            self.requests += 1
            self.by_kind[kind] = self.by_kind.get(kind, 0) + 1
            if kind == "put":
                self.bytes_uploaded += nbytes
            elif kind == "get":
                self.bytes_fetched += nbytes
            elif kind == "delete":
                self.objects_deleted += 1
                self.bytes_deleted += nbytes

    def snapshot(self) -> TransferStats:
        """A copy of the counters taken under the lock (the copy has its own lock)."""
        with self._lock:
            return TransferStats(
                self.bytes_uploaded,
                self.bytes_fetched,
                self.bytes_deleted,
                self.objects_deleted,
                self.requests,
                dict(self.by_kind),
            )


def _digest(path: Path, chunk_bytes: int) -> tuple[int, str, tuple[int, ...]]:
    """Size, SHA-256 and per-chunk CRC32C of a file, in one pass."""
    sha = hashlib.sha256()
    crcs = []
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(chunk_bytes):
            sha.update(chunk)
            crcs.append(crc32c.crc32c(chunk))
            size += len(chunk)
    return size, sha.hexdigest(), tuple(crcs)


class RemoteStorageManager:
    """Copies segments to an :class:`~kompakt.remote.store.ObjectStore` and reads them back."""

    def __init__(
        self,
        store: ObjectStore,
        cache: ChunkCache | None = None,
        chunk_bytes: int = CHUNK_BYTES,
        clock: Callable[[], float] = time.time,
    ):
        if chunk_bytes <= 0:
            raise ValueError("chunk_bytes must be positive")
        self.store = store
        self.cache = cache
        self.chunk_bytes = chunk_bytes
        self.clock = clock
        self.stats = TransferStats()

    def copy_segment(self, topic: str, partition: int, segment: LocalSegmentFiles) -> RemoteSegment:
        """Upload every file of ``segment``; the result is named by no manifest yet."""
        unknown = set(segment.files) - set(SEGMENT_SUFFIXES)
        if LOG_SUFFIX not in segment.files or unknown:
            raise RemoteStorageError(
                f"{topic}-{partition} segment {segment.base_offset}: need a .log and only "
                f"{', '.join(SEGMENT_SUFFIXES)} files (got {sorted(segment.files)})"
            )
        segment_id = uuid.uuid4().hex
        files: dict[str, RemoteFile] = {}
        crcs: tuple[int, ...] = ()
        for suffix in SEGMENT_SUFFIXES:
            path = segment.files.get(suffix)
            if path is None:
                continue
            size, sha, chunk_crcs = _digest(path, self.chunk_bytes)
            if suffix == LOG_SUFFIX:
                crcs = chunk_crcs
            key = segment_key(topic, partition, segment.base_offset, segment_id, suffix)
            # a fresh segment id: each key is written once, so no precondition is
            # needed, and a large file may go up as a multipart upload
            self.store.put(key, path)
            self.stats.count("put", size)
            files[suffix] = RemoteFile(key, size, sha)
        return RemoteSegment(
            segment_id=segment_id,
            base_offset=segment.base_offset,
            last_offset=segment.last_offset,
            max_timestamp_ms=segment.max_timestamp_ms,
            uploaded_ms=int(self.clock() * 1000),
            files=files,
            chunk_bytes=self.chunk_bytes,
            chunk_crcs=crcs,
            delete_horizon_ms=segment.delete_horizon_ms,
        )

    def fetch_file(self, segment: RemoteSegment, suffix: str) -> bytes:
        """One whole file of the segment (an index, the ``.txnindex``, the snapshot,
        or the ``.log`` for a clean), checked against its SHA-256."""
        f = segment.files.get(suffix)
        if f is None:
            raise RemoteStorageError(f"segment {segment.segment_id} has no {suffix} object")
        data, _version = self.store.get(f.key)
        self.stats.count("get", len(data))
        if len(data) != f.size or hashlib.sha256(data).hexdigest() != f.sha256:
            raise ChecksumMismatchError(
                f"{f.key}: {len(data)} bytes with SHA-256 {hashlib.sha256(data).hexdigest()}, "
                f"the manifest recorded {f.size} bytes with {f.sha256}"
            )
        return data

    def fetch_chunk(self, segment: RemoteSegment, index: int) -> bytes:
        """Chunk ``index`` of the ``.log``, CRC-checked, through the cache if any."""
        if not 0 <= index < len(segment.chunk_crcs):
            raise RemoteStorageError(f"segment {segment.segment_id} has no chunk {index}")
        key = segment.files[LOG_SUFFIX].key

        def load() -> bytes:
            start = index * segment.chunk_bytes
            data = self.store.get_range(key, start, start + segment.chunk_bytes)
            self.stats.count("get", len(data))
            if crc32c.crc32c(data) != segment.chunk_crcs[index]:
                raise ChecksumMismatchError(
                    f"{key}: chunk {index} (bytes {start}..{start + len(data)}) fails its "
                    "CRC32C recorded at upload"
                )
            return data

        return self.cache.get_or_load((key, index), load) if self.cache else load()

    def fetch_log_range(self, segment: RemoteSegment, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the segment's ``.log`` (clipped to its size),
        read as whole verified chunks (Kafka's ``fetchLogSegment(metadata, start, end)``,
        end exclusive here)."""
        end = min(end, segment.size)
        if start < 0 or start >= end:
            return b""
        first, last = start // segment.chunk_bytes, (end - 1) // segment.chunk_bytes
        data = b"".join(self.fetch_chunk(segment, i) for i in range(first, last + 1))
        offset = first * segment.chunk_bytes
        return data[start - offset : end - offset]

    def delete_segment(self, segment: RemoteSegment) -> None:
        """Delete every object of the segment (idempotent). Call it only once a durable
        manifest no longer names the segment."""
        for f in segment.files.values():
            self.store.delete(f.key)
            self.stats.count("delete", f.size)
            if self.cache is not None:
                self.cache.discard(f.key)
