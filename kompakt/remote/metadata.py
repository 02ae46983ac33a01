"""Remote metadata in the bucket itself: Kafka's ``RemoteLogMetadataManager`` role.

Kafka keeps remote segment metadata in the ``__remote_log_metadata`` topic, so a broker
that lost its disk cannot find its remote data again. Here each partition's remote log
is one manifest object and each tiered topic one topic object, in the bucket beside the
segments (:mod:`kompakt.remote.layout`), so a broker with an empty disk lists the
topics and rebuilds every one of them from the bucket alone.

Every write is a compare-and-swap: a manifest is put with ``If-Match`` on the version
(ETag) the writer read, or ``If-None-Match: *`` for the first one, so of two writers
that read the same manifest exactly one wins and the other gets
:class:`ManifestConflictError` (and must read again and redo its change). A put is
atomic, so a reader always sees a whole manifest, old or new.

The order that keeps a crash harmless:

1. upload the segment objects (:meth:`RemoteStorageManager.copy_segment`): named by no
   manifest yet; a crash here leaves orphans;
2. commit the manifest that names them; before the put the commit checks that every
   newly named object is in the store, so no manifest ever names a missing object;
3. only after that put returned (it is durable) delete the objects the new manifest no
   longer names; a crash here leaves orphans too.

:meth:`RemoteLogMetadataManager.sweep_orphans` deletes objects below a partition's
``segments/`` folder that its manifest does not name and that are older than the grace
period. It lists before it reads the manifest, and a commit refuses segments uploaded
more than half the grace period ago, so the sweep cannot delete an upload that is about
to be committed as long as the broker's and the store's clocks differ by less than half
the grace period.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from kompakt.remote.cache import ChunkCache
from kompakt.remote.layout import (
    TOPICS,
    manifest_key,
    partition_of_key,
    segments_folder,
    topic_key,
    topic_of_topic_key,
)
from kompakt.remote.manifest import PartitionManifest, RemoteSegment, TopicRecord
from kompakt.remote.storage import TransferStats
from kompakt.remote.store import (
    ObjectInfo,
    ObjectNotFoundError,
    ObjectStore,
    PreconditionFailedError,
    RemoteStorageError,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

# objects no manifest names are deleted once this old: far longer than an upload plus
# its commit takes, so an upload in flight is never taken for an orphan
ORPHAN_GRACE_MS = 60 * 60 * 1000


class ManifestConflictError(PreconditionFailedError):
    """Another writer committed since this one read the manifest: read it again."""


@dataclass(frozen=True)
class Versioned(Generic[T]):
    """A value read from the store with the version (ETag) a conditional put needs."""

    value: T
    version: str


class RemoteLogMetadataManager:
    """Reads and commits partition manifests and topic records; sweeps orphans.

    Every store request it makes is counted in ``stats`` (the segment manager's, in a
    broker, so ``/metrics`` and a user pricing the tier see one total): manifest and
    topic-record reads and writes as ``get``/``put`` without bytes (the byte counters
    are segment bytes, Kafka's ``RemoteCopyBytesPerSec``), listings as ``list``, and
    deleted objects as ``delete`` with their size."""

    def __init__(
        self,
        store: ObjectStore,
        orphan_grace_ms: int = ORPHAN_GRACE_MS,
        clock: Callable[[], float] = time.time,
        stats: TransferStats | None = None,
        cache: ChunkCache | None = None,
    ):
        self.store = store
        self.orphan_grace_ms = orphan_grace_ms
        self.clock = clock
        self.stats = stats if stats is not None else TransferStats()
        self.cache = cache  # a deleted object's chunks leave it at once

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    def _read(self, key: str, parse: Callable[[bytes, str], T]) -> Versioned[T] | None:
        self.stats.count("get")
        try:
            data, version = self.store.get(key)
        except ObjectNotFoundError:
            return None
        return Versioned(parse(data, key), version)

    def _swap(self, key: str, data: bytes, expected: Versioned[object] | None) -> str:
        """Put ``data`` if the object is still ``expected`` (absent when None)."""
        self.stats.count("put")
        try:
            if expected is None:
                return self.store.put(key, data, create=True)
            return self.store.put(key, data, match=expected.version)
        except PreconditionFailedError as e:
            raise ManifestConflictError(
                f"{key}: another writer committed since it was read ({e})"
            ) from None

    # -- partitions -------------------------------------------------------------------

    def load_partition(self, topic: str, partition: int) -> Versioned[PartitionManifest] | None:
        """The partition's current manifest, or None if nothing of it was ever tiered."""
        return self._read(manifest_key(topic, partition), PartitionManifest.from_json)

    def commit_partition(
        self,
        manifest: PartitionManifest,
        expected: Versioned[PartitionManifest] | None,
        delete_dropped: bool = True,
    ) -> Versioned[PartitionManifest]:
        """Replace ``expected`` (None: no manifest yet) by ``manifest``, atomically.

        ``manifest`` must be ``expected``'s successor (:meth:`PartitionManifest.next`).
        Then, unless ``delete_dropped`` is False (the caller deletes them later, e.g.
        after ``file.delete.delay.ms`` so readers of the old manifest finish), the
        objects of segments the new manifest no longer names are deleted.
        """
        old = expected.value if expected is not None else None
        self._check_successor(manifest, old)
        known = {s.segment_id for s in old.segments} if old else set()
        self._check_uploads([s for s in manifest.segments if s.segment_id not in known], manifest)
        key = manifest_key(manifest.topic, manifest.partition)
        version = self._swap(key, manifest.to_json(), expected)
        if delete_dropped and old is not None:
            self.delete_segments(dropped_segments(old, manifest))
        return Versioned(manifest, version)

    def delete_segments(self, segments: list[RemoteSegment]) -> None:
        """Delete these segments' objects; a failure leaves them to the orphan sweep."""
        for s in segments:
            for f in s.files.values():
                try:
                    self.delete(f.key, f.size)
                except RemoteStorageError as e:
                    log.warning("left %s for the orphan sweep: %s", f.key, e)

    def delete(self, key: str, size: int = 0) -> None:
        """Delete one object (idempotent), counted with its ``size``; the one way this
        manager and the remote log manager delete a manifest, a topic record or an
        object no manifest names."""
        self.store.delete(key)
        self.stats.count("delete", size)
        if self.cache is not None:
            self.cache.discard(key)

    def list(self, under: str) -> list[ObjectInfo]:
        """The objects below the folder ``under``, counted as one request."""
        self.stats.count("list")
        return self.store.list(under)

    @staticmethod
    def _check_successor(new: PartitionManifest, old: PartitionManifest | None) -> None:
        new.check()
        want = 0 if old is None else old.generation + 1
        if new.generation != want:
            raise RemoteStorageError(
                f"{new.topic}-{new.partition}: manifest generation {new.generation} does not "
                f"follow the one read ({'none' if old is None else old.generation})"
            )
        if old is not None and (old.topic, old.partition, old.topic_id) != (
            new.topic,
            new.partition,
            new.topic_id,
        ):
            raise RemoteStorageError(
                f"a manifest of {new.topic}-{new.partition} ({new.topic_id}) cannot replace "
                f"{old.topic}-{old.partition} ({old.topic_id})"
            )

    def _check_uploads(self, added: list[RemoteSegment], m: PartitionManifest) -> None:
        """Every newly named object exists with its size, and is young enough that the
        orphan sweep cannot have taken it."""
        if not added:
            return
        now = self._now_ms()
        for s in added:
            if now - s.uploaded_ms > self.orphan_grace_ms // 2:
                raise RemoteStorageError(
                    f"{m.topic}-{m.partition}: segment {s.base_offset} was uploaded "
                    f"{now - s.uploaded_ms} ms ago, over half the orphan grace period "
                    f"({self.orphan_grace_ms} ms); the sweep may delete it: upload it again"
                )
        present = {o.key: o.size for o in self.list(segments_folder(m.topic, m.partition))}
        for s in added:
            for f in s.files.values():
                if present.get(f.key) != f.size:
                    raise RemoteStorageError(
                        f"{m.topic}-{m.partition}: {f.key} is not in the store with "
                        f"{f.size} bytes (found {present.get(f.key)}); not committing a "
                        "manifest that names it"
                    )

    # -- topics -----------------------------------------------------------------------

    def load_topic(self, topic: str) -> Versioned[TopicRecord] | None:
        return self._read(topic_key(topic), TopicRecord.from_json)

    def commit_topic(
        self, record: TopicRecord, expected: Versioned[TopicRecord] | None
    ) -> Versioned[TopicRecord]:
        """Create or replace the topic record, compare-and-swap like a manifest."""
        want = 0 if expected is None else expected.value.generation + 1
        if record.generation != want:
            raise RemoteStorageError(
                f"topic {record.topic}: record generation {record.generation}, expected {want}"
            )
        return Versioned(record, self._swap(topic_key(record.topic), record.to_json(), expected))

    def topics(self) -> list[str]:
        """Every topic with a topic record: what a broker with an empty disk rebuilds."""
        names = (topic_of_topic_key(o.key) for o in self.list(TOPICS))
        return sorted(n for n in names if n is not None)

    # -- orphans ----------------------------------------------------------------------

    def sweep_orphans(self, now_ms: int | None = None) -> list[str]:
        """Delete segment objects no manifest names, older than the grace period;
        return their keys. Lists first, reads each manifest after (module docstring)."""
        now = self._now_ms() if now_ms is None else now_ms
        old_enough: dict[tuple[str, int], list[ObjectInfo]] = {}
        for o in self.list(TOPICS):
            where = partition_of_key(o.key)
            if where is None or not o.key.startswith(segments_folder(*where) + "/"):
                continue
            if now - o.modified_ms > self.orphan_grace_ms:
                old_enough.setdefault(where, []).append(o)
        deleted = []
        for (topic, partition), objects in sorted(old_enough.items()):
            current = self.load_partition(topic, partition)
            named = current.value.keys() if current is not None else set()
            for o in objects:
                if o.key not in named:
                    self.delete(o.key, o.size)
                    deleted.append(o.key)
        if deleted:
            log.info("orphan sweep deleted %d objects no manifest names", len(deleted))
        return deleted


def dropped_segments(old: PartitionManifest, new: PartitionManifest) -> list[RemoteSegment]:
    """Segments ``old`` names and ``new`` does not (to delete once ``new`` is durable)."""
    kept = {s.segment_id for s in new.segments}
    return [s for s in old.segments if s.segment_id not in kept]
