"""The broker's remote log manager (Kafka's ``RemoteLogManager``): tiering rolled
segments to the remote tier, local retention of tiered partitions, and the offsets and
reads below the local log start.

Every ``remote.log.manager.task.interval.ms`` the task visits each partition of a topic
with ``remote.storage.enable=true`` (compacted topics too, unlike Kafka) and

1. **copies** each rolled segment that ends below the last stable offset and is not yet
   tiered (Kafka's ``RLMCopyTask``): its files are hard-linked into a staging folder
   under the partition lock (so a clean swapping the segment cannot mix an old ``.log``
   with a new ``.index``), uploaded by ``RemoteStorageManager.copy_segment`` and named
   by a new manifest committed compare-and-swap (a conflict reloads and retries);
2. **applies retention** (:mod:`kompakt.broker.tiered_retention`): with ``delete`` in
   the policy, ``retention.*`` expires the oldest remote segments (the manifest's log
   start moves); then local retention (``local.retention.*``, -2 = ``retention.*``)
   deletes the oldest local segments that a *durable* manifest already names. Only the
   local log start moves then (Kafka's ``localLogStartOffset``, which is the
   ``PartitionLog``'s own start here); the partition's log start stays the remote
   log's (:meth:`Tiering.log_start_offset`), read from the manifest, so it survives a
   restart with the manifest.

A crash between upload and commit leaves orphans for the sweep; a crash after the commit
and before the local deletion leaves a segment both local and remote (deleted on the
next run). Local deletion never precedes the manifest naming the segment.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

from kompakt.broker.background import PeriodicThread
from kompakt.broker.remote_rebuild import align_to_tier, rebuild_from_tier
from kompakt.broker.tier_owner import TierOwnership
from kompakt.broker.tiered_reads import RemoteSource
from kompakt.broker.tiered_retention import local_retention_offset, remote_retention_offset
from kompakt.broker.tiering_failures import FailureLog, overlaps, vanished
from kompakt.broker.tiering_stage import cut_at, stage, stage_tail
from kompakt.cleaner.remote_clean import RemoteCleaner
from kompakt.engines import remote_clean_engine
from kompakt.errors import OffsetOutOfRangeError
from kompakt.log.config import TopicConfig
from kompakt.log.manager import LogManager
from kompakt.log.partition_log import PartitionLog
from kompakt.log.segment import (
    LogSegment,
)
from kompakt.remote import RemoteTier
from kompakt.remote.config import RemoteSettings, check_topic
from kompakt.remote.layout import MANIFEST_OBJECT, manifest_key, topic_folder, topic_key
from kompakt.remote.manifest import PartitionManifest, RemoteSegment, TopicRecord
from kompakt.remote.metadata import ManifestConflictError, Versioned
from kompakt.remote.reads import RemoteSegmentReader
from kompakt.remote.storage import LocalSegmentFiles
from kompakt.remote.store import RemoteStorageError

if TYPE_CHECKING:
    from kompakt.broker.background import BackgroundTasks
    from kompakt.broker.config import BrokerConfig
    from kompakt.broker.state import BrokerState

log = logging.getLogger("kompakt.broker.tiering")

EXTRA_KEY = "tiering"  # BrokerState.extra entry of the running Tiering
STAGING = "tiering-staging"  # folder in a log dir for the hard links being uploaded
COMMIT_ATTEMPTS = 5
Key = tuple[str, int]


def check_topic_config(
    config: BrokerConfig, topic_config: TopicConfig, current: TopicConfig | None = None
) -> None:
    """Kafka's remote-storage rules for a topic being created, or altered from
    ``current`` (:func:`kompakt.remote.config.check_topic`), on this broker."""
    check_topic(
        topic_config.as_dict(),
        bool(config.get("remote.log.storage.system.enable")),
        current is not None and current.remote_storage_enable,
    )


def tiering_of(state: BrokerState) -> Tiering | None:
    """The broker's tiering, None when the remote tier is off."""
    return state.extra.get(EXTRA_KEY)


class BrokerParts(Protocol):
    """What :func:`install` needs of the broker being started."""

    config: BrokerConfig
    logs: LogManager | None
    state: BrokerState | None
    background: BackgroundTasks | None


def install(broker: BrokerParts) -> None:
    """At start (the logs, the state and the background threads made, not started): open
    the remote tier and add the task thread when ``remote.log.storage.system.enable``."""
    cfg, logs = broker.config, broker.logs
    assert logs is not None and broker.state is not None and broker.background is not None
    settings = RemoteSettings.of(cfg.values, logs.dir)
    if not settings.enabled:
        tiered = [t for t in logs.topics() if logs.topic_config(t).remote_storage_enable]
        if tiered:
            log.error(
                "remote.log.storage.system.enable is false but topics %s have "
                "remote.storage.enable=true: their tiered offsets are not served",
                ", ".join(tiered),
            )
        return
    for d in logs.dirs:  # links a crash left in the middle of an upload
        shutil.rmtree(d.path / STAGING, ignore_errors=True)
    tiering = Tiering(logs, RemoteTier.open(settings), bool(cfg.get("log.cleaner.enable")))
    me = logs.dirs[0].directory_id or str(logs.dir.resolve())
    owner = TierOwnership(tiering.tier.store, me, 3 * settings.task_interval_ms)
    owner.claim()  # another broker's bucket: this one does not start
    tiering.owner = owner
    rebuild_from_tier(logs, tiering.tier)  # an empty data dir: the tiered topics back
    align_to_tier(logs, tiering.tier, tiering.manifest, tiering.overlapping)  # a lost folder
    tiering.remote_cleaner.engine = remote_clean_engine(cfg, tiering.tier.segments, settings)
    broker.state.extra[EXTRA_KEY] = tiering
    broker.background.threads.append(
        PeriodicThread(
            "kompakt-remote-log-manager",
            settings.task_interval_ms,
            tiering.run_once,
            lambda: tiering.remote_cleaner.stop("broker shutting down"),
            owner.release,  # a successor with another data dir may start at once
        )
    )
    log.info(
        "remote tier at %s, task every %d ms", tiering.tier.store.url, settings.task_interval_ms
    )


class Tiering:
    """The copy and local-retention task over one log manager and one remote tier, and
    the manifests it committed (read by fetches and ListOffsets without a remote call)."""

    def __init__(self, logs: LogManager, tier: RemoteTier, clean_remote: bool = False):
        # the task thread and the request threads (fetches, ListOffsets, DeleteRecords,
        # DeleteTopics) share this object
        self.logs = logs  # immutable
        self.tier = tier  # immutable (its store, managers and cache are thread-safe)
        self.reader = RemoteSegmentReader(tier.segments)  # thread-safe
        self._lock = threading.Lock()  # guards the four dicts below
        self._manifests: dict[Key, Versioned[PartitionManifest] | None] = {}  # guarded by _lock
        self._topics: dict[str, Versioned[TopicRecord] | None] = {}  # guarded by _lock
        # guarded by _lock: partitions whose manifest vanished, with what it last held
        self._lost: dict[Key, PartitionManifest] = {}
        # guarded by _lock: one lock a partition, held by whoever writes its manifest
        self._writers: dict[Key, threading.Lock] = {}
        self.last_sweep_s = 0.0  # owned by the task thread: time.time() of the last sweep
        self.failures = FailureLog()  # thread-safe
        self.owner: TierOwnership | None = None  # set once at install; None in tests
        # set once at install: local logs whose offsets overlap their remote log's
        self.overlapping: set[Key] = set()
        self.clean_remote = clean_remote  # immutable: the task cleans remote ranges
        self.remote_cleaner = RemoteCleaner(  # thread-safe (its own lock)
            tier.segments, tier.metadata, logs.clock, logs.broker_config, logs.dir / STAGING
        )

    def _writer(self, key: Key) -> threading.Lock:
        with self._lock:
            return self._writers.setdefault(key, threading.Lock())

    # -- manifests ------------------------------------------------------------------------
    def _versioned(self, topic: str, partition: int) -> Versioned[PartitionManifest] | None:
        key = (topic, partition)
        with self._lock:
            if key in self._manifests:
                return self._manifests[key]
        loaded = self.tier.metadata.load_partition(topic, partition)
        with self._lock:  # a commit since the load wins
            return self._manifests.setdefault(key, loaded)

    def forget(self, topic: str, partition: int) -> None:
        """Drop the cached manifest: the next use reads the store's."""
        with self._lock:
            self._manifests.pop((topic, partition), None)

    def _remember(self, key: Key, v: Versioned[PartitionManifest] | None) -> None:
        with self._lock:
            self._manifests[key] = v

    def manifest(self, plog: PartitionLog) -> PartitionManifest | None:
        """The remote log of a tiered partition of this topic (None: nothing tiered, the
        topic is not tiered, or the manifest belongs to an older topic of that name)."""
        if not plog.config.remote_storage_enable:
            return None
        v = self._versioned(plog.topic, plog.partition)
        if v is None or v.value.topic_id != self.logs.topic_meta(plog.topic).topic_id:
            return None
        return v.value

    def log_start_offset(self, plog: PartitionLog, strict: bool = True) -> int:
        """Kafka's ``logStartOffset``: the remote log's start when it holds segments.
        Not ``strict`` (a field of a local fetch's answer): the local start when the
        manifest cannot be read now, instead of failing a fetch the tier plays no
        part in."""
        local = plog.log_start_offset
        try:
            m = self.manifest(plog)
        except RemoteStorageError:
            if strict:
                raise
            return local
        return min(local, m.log_start_offset) if m is not None and m.segments else local

    def known_manifests(self) -> dict[Key, PartitionManifest | None]:
        """The manifests this broker last read or committed, by partition, without a
        remote call (None: read, and nothing tiered); a partition not read yet is
        absent. What ``/metrics`` reports the remote log and the copy lag from."""
        with self._lock:
            return {k: (v.value if v is not None else None) for k, v in self._manifests.items()}

    @staticmethod
    def first_untiered_offset(plog: PartitionLog, m: PartitionManifest | None) -> int:
        """Where the next copy starts: the remote log's end (its start when it holds
        no segment yet), the local log start when nothing was ever tiered."""
        if m is None:
            return plog.log_start_offset
        return m.end_offset if m.segments else m.log_start_offset

    def copy_lag(self, plog: PartitionLog, m: PartitionManifest | None) -> tuple[int, int]:
        """KIP-963's ``RemoteCopyLagSegments`` and ``RemoteCopyLagBytes``: the rolled
        segments (the active one never goes up) that ``m`` does not hold yet."""
        start = self.first_untiered_offset(plog, m)
        waiting = [
            s
            for s in plog.segments_snapshot()[:-1]
            if s.last_offset is not None and s.last_offset >= start
        ]
        return len(waiting), sum(s.size for s in waiting)

    def highest_tiered_offset(self, plog: PartitionLog) -> int:
        """Kafka's ``highestOffsetInRemoteStorage``: -1 when nothing is tiered."""
        m = self.manifest(plog)
        return m.end_offset - 1 if m is not None and m.segments else -1

    # -- the task -------------------------------------------------------------------------
    def run_once(self) -> bool:
        """One pass over every tiered partition; a failing partition is logged and
        retried next time, the others go on. Never asks to run again at once. Every half
        orphan grace period the pass also sweeps the objects no manifest names. A
        broker whose bucket another broker took over does nothing (:mod:`.tier_owner`)."""
        if self.owner is not None and not self.owner.renew():
            return False
        self._maybe_sweep()
        for topic in self.logs.topics():
            try:
                meta = self.logs.topic_meta(topic)
                config = self.logs.topic_config(topic)
                if not config.remote_storage_enable:
                    if config.remote_log_delete_on_disable:
                        self._delete_disabled(topic, meta.topic_id)
                    continue
                self._sync_topic(topic)
            except Exception as exc:  # e.g. the store unreachable: next pass retries
                log.warning("tiering %s: %s", topic, exc)
                continue
            for partition in range(meta.partitions):
                try:
                    plog = self.logs.get_log(topic, partition)
                    with self._writer((topic, partition)):
                        self.copy(plog)
                        self.apply_retention(plog)
                        if self.clean_remote and not plog.config.remote_log_copy_disable:
                            self.clean_remote_range(plog)
                except Exception as exc:
                    self.failures.failed((topic, partition), f"tiering {topic}-{partition}: {exc}")
                else:
                    self.failures.ok((topic, partition))
        self.remote_cleaner.delete_due()
        return False

    def _delete_disabled(self, topic: str, topic_id: str) -> None:
        """KIP-950's ``remote.log.delete.on.disable``: a topic whose remote storage was
        turned off loses its remote data (as a deleted topic does) and its log starts at
        the local log start; looked up once a topic, then remembered as gone."""
        with self._lock:
            if topic in self._topics and self._topics[topic] is None:
                return
        self.topic_deleted(topic, topic_id)
        with self._lock:
            self._topics[topic] = None

    def _maybe_sweep(self) -> None:
        """The orphan sweep (uploads a crash or a lost commit race left unnamed)."""
        now = time.time()
        if (now - self.last_sweep_s) * 1000 < self.tier.metadata.orphan_grace_ms / 2:
            return
        self.last_sweep_s = now
        try:
            self.tier.metadata.sweep_orphans()
        except RemoteStorageError as exc:
            log.warning("orphan sweep of %s: %s", self.tier.store.url, exc)

    def _sync_topic(self, topic: str) -> None:
        """The topic record a broker with an empty disk recreates the topic from."""
        meta = self.logs.topic_meta(topic)
        with self._lock:
            known = meta.name in self._topics
            current = self._topics.get(meta.name)
        if not known:
            current = self.tier.metadata.load_topic(meta.name)
        want = TopicRecord(meta.name, meta.topic_id, meta.partitions, dict(meta.overrides))
        if current is not None:
            have = current.value
            if have.topic_id != meta.topic_id:
                raise RemoteStorageError(
                    f"the remote tier holds another topic named {meta.name} "
                    f"(id {have.topic_id}, this one {meta.topic_id}); not tiering it"
                )
            if (have.partitions, dict(have.configs)) == (want.partitions, want.configs):
                with self._lock:
                    self._topics[meta.name] = current
                return
            want = replace(want, generation=have.generation + 1)
        try:
            committed = self.tier.metadata.commit_topic(want, current)
        except ManifestConflictError:
            committed = None  # reread next pass
        with self._lock:
            if committed is None:
                self._topics.pop(meta.name, None)
            else:
                self._topics[meta.name] = committed

    def copy(self, plog: PartitionLog) -> int:
        """Upload and commit each rolled segment below the last stable offset that the
        remote log does not hold yet, oldest first; returns how many. None with
        ``remote.log.copy.disable`` (KIP-950: the remote data turns read-only)."""
        if plog.config.remote_log_copy_disable:
            return 0
        key = (plog.topic, plog.partition)
        if key in self.overlapping:  # its retention would delete records as tiered
            raise overlaps(plog.name)
        topic_id = self.logs.topic_meta(plog.topic).topic_id
        with self._lock:
            lost = self._lost.get(key)
        if lost is not None:  # uploads no manifest can name: not until it is back
            if self.tier.metadata.load_partition(*key) is None:
                raise vanished(plog.name, lost)
            with self._lock:
                del self._lost[key]
            self.forget(*key)
            log.info("%s: its manifest is back in the remote tier: tiering goes on", plog.name)
        current = self._versioned(*key)
        if current is not None and current.value.topic_id != topic_id:
            # the topic record is this topic's (_sync_topic): a manifest left by a
            # deleted topic of the same name, whose deletion was cut short
            log.warning(
                "%s: removing the remote log of an earlier topic of this name (id %s)",
                plog.name,
                current.value.topic_id,
            )
            self.tier.metadata.delete(manifest_key(*key))
            self.tier.metadata.delete_segments(list(current.value.segments))
            self._remember(key, None)
            current = None
        lso = plog.last_stable_offset
        copied = 0
        for seg in plog.segments_snapshot()[:-1]:  # the active segment is never copied
            last = seg.last_offset
            if last is None:
                continue
            if last >= lso:
                break  # an open transaction's records stay local until decided
            start = self.first_untiered_offset(plog, current.value if current else None)
            if last < start:
                continue  # tiered already
            remote = self._upload(plog, seg, last, start)
            if remote is None:
                break  # the segment left the log meanwhile: the next pass sees the new list
            if remote.base_offset < start:  # its first batch reaches below the end
                remote = replace(remote, base_offset=start)
            current = self._commit(plog, current, remote, topic_id, start)
            copied += 1
            log.info(
                "%s: tiered segment %d..%d (%d bytes) to %s",
                plog.name,
                remote.base_offset,
                remote.last_offset,
                remote.size,
                self.tier.store.url,
            )
        return copied

    def _upload(
        self, plog: PartitionLog, seg: LogSegment, last: int, start: int
    ) -> RemoteSegment | None:
        """Hard-link the segment's files (under the partition lock, while it is live) and
        upload the links, only from ``start`` (the remote end) on when the segment
        reaches below it (:mod:`.tiering_stage`); None if the segment is no longer in
        the log."""
        staging = plog.dir.parent / STAGING / f"{plog.name}-{seg.base_offset}-{time.time_ns()}"
        with plog.lock:
            if all(s is not seg for s in plog.segments):
                return None
            files = stage(seg, staging)
            max_ts = seg.max_timestamp
            cut = cut_at(seg, start)
        base = seg.base_offset
        try:
            if cut is not None:
                base, max_ts, files = stage_tail(files, cut)
            return self.tier.segments.copy_segment(
                plog.topic, plog.partition, LocalSegmentFiles(base, last, max_ts, files)
            )
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _commit(
        self,
        plog: PartitionLog,
        current: Versioned[PartitionManifest] | None,
        remote: RemoteSegment,
        topic_id: str,
        start: int,
    ) -> Versioned[PartitionManifest]:
        """Name ``remote`` in the partition's manifest; on a conflict read it again and
        redo the change (another writer tiering the same range leaves ours an orphan)."""
        key = (plog.topic, plog.partition)
        now = int(time.time() * 1000)
        for _ in range(COMMIT_ATTEMPTS):
            if current is None:
                new = PartitionManifest(
                    plog.topic,
                    plog.partition,
                    topic_id,
                    segments=(remote,),
                    log_start_offset=start,
                    updated_ms=now,
                )
            else:
                m = current.value
                if m.segments and m.end_offset > remote.base_offset:
                    return current  # someone else tiered it: ours is left to the sweep
                new = m.next((*m.segments, remote), updated_ms=now)
            try:
                committed = self.tier.metadata.commit_partition(new, current)
            except ManifestConflictError:
                had = current
                current = self.tier.metadata.load_partition(*key)
                if current is None and had is not None and had.value.segments:
                    with self._lock:
                        self._lost[key] = had.value
                    raise vanished(plog.name, had.value) from None
                self._remember(key, current)
                continue
            self._remember(key, committed)
            return committed
        raise RemoteStorageError(f"{plog.name}: the manifest kept changing under the commit")

    def clean_remote_range(self, plog: PartitionLog, force: bool = False) -> bool:
        """Clean a compacted partition's remote range with the in-process engine when
        its dirty ratio (from the manifest's clean point) passes
        ``min.cleanable.dirty.ratio`` (:mod:`kompakt.cleaner.remote_clean`); the replaced
        objects go ``file.delete.delay.ms`` later. Call under the partition's writer."""
        key = (plog.topic, plog.partition)
        m = self.manifest(plog) if plog.config.compact else None
        v = self._versioned(*key)
        if m is None or v is None or v.value is not m:
            return False
        if not (force or self.remote_cleaner.due(m, plog.config.min_cleanable_dirty_ratio)):
            return False
        overrides = self.logs.topic_meta(plog.topic).overrides
        result = self.remote_cleaner.clean(v, overrides, plog.config.file_delete_delay_ms)
        if result is None:
            self.forget(*key)  # another writer's manifest won: read it next time
            return False
        self._remember(key, result.manifest)
        return True

    def compact_remote_now(self, plog: PartitionLog) -> bool:
        """Clean the partition's remote range now, whatever its dirty ratio ("compact
        now" for the tier, as the cleaner's ``compact_now`` for a local log); False when
        there was nothing to clean or another writer's manifest won."""
        with self._writer((plog.topic, plog.partition)):
            return self.clean_remote_range(plog, force=True)

    def move_remote_start(self, plog: PartitionLog, offset: int) -> None:
        """Commit the partition's manifest with its log start at ``offset`` and without
        the segments wholly below it (their objects go once it is durable): DeleteRecords
        and remote retention. A segment reaching below ``offset`` stays, from it on."""
        key = (plog.topic, plog.partition)
        v = self._versioned(*key)
        if v is None or offset <= v.value.log_start_offset:
            return
        m = v.value
        kept = tuple(
            replace(s, base_offset=max(s.base_offset, offset))
            for s in m.segments
            if s.last_offset >= offset
        )
        new = m.next(kept, log_start_offset=offset, updated_ms=int(time.time() * 1000))
        self._remember(key, self.tier.metadata.commit_partition(new, v))
        log.info(
            "%s: remote log start moved to %d (%d segments dropped)",
            plog.name,
            offset,
            len(m.segments) - len(kept),
        )

    def apply_retention(self, plog: PartitionLog, now_ms: int | None = None) -> None:
        """Remote retention, then local retention (:mod:`.tiered_retention`): each moves
        a log start only after the manifest it follows is durable."""
        now = self.logs.clock() if now_ms is None else now_ms
        m = self.manifest(plog)
        if m is not None and m.segments:
            start = remote_retention_offset(plog, m, now)
            if start is not None:
                self.move_remote_start(plog, start)
                if start > plog.log_start_offset:
                    plog.delete_records_before(min(start, plog.high_watermark))
                m = self.manifest(plog)
        if m is None or not m.segments:
            if not plog.config.remote_log_copy_disable:
                return  # local retention deletes only what the tier holds
        local = local_retention_offset(plog, m, now)
        if local is not None:
            plog.delete_records_before(local)  # only the local log start moves
            log.info(
                "%s: local retention deleted segments, local log start now %d (log start %d)",
                plog.name,
                plog.log_start_offset,
                self.log_start_offset(plog),
            )

    def delete_records_before(self, plog: PartitionLog, offset: int) -> int:
        """DeleteRecords on a tiered partition (Kafka moves ``logStartOffset`` and the
        remote log manager drops the remote segments below it): the manifest's log
        start moves first, then the local log's; returns the new log start."""
        with self._writer((plog.topic, plog.partition)):
            m = self.manifest(plog)
            if m is None or not 0 <= offset <= plog.high_watermark:
                return plog.delete_records_before(offset)  # untiered, or OUT_OF_RANGE
            if m.segments:
                self.move_remote_start(plog, offset)
            if offset > plog.log_start_offset:
                plog.delete_records_before(offset)
            return self.log_start_offset(plog)

    def topic_deleted(self, topic: str, topic_id: str) -> None:
        """Kafka deletes a deleted topic's remote data. The topic record goes first (a
        broker rebuilding from the bucket no longer sees the topic), then the manifests,
        then the segment objects: a crash in between leaves only objects no manifest
        names, for the orphan sweep. Another topic's data of that name is left alone."""
        with self._lock:
            self._topics.pop(topic, None)
            for key in [k for k in self._manifests if k[0] == topic]:
                del self._manifests[key]
        try:
            record = self.tier.metadata.load_topic(topic)
            if record is None or record.value.topic_id != topic_id:
                return
            meta = self.tier.metadata
            meta.delete(topic_key(topic))
            objects = meta.list(topic_folder(topic))
            for o in sorted(objects, key=lambda o: not o.key.endswith(MANIFEST_OBJECT)):
                meta.delete(o.key, o.size)
            log.info("%s: deleted its %d objects from the remote tier", topic, len(objects) + 1)
        except RemoteStorageError as exc:
            log.warning("%s: remote data left for the orphan sweep: %s", topic, exc)

    # -- reads ----------------------------------------------------------------------------
    def offset_for_timestamp(self, plog: PartitionLog, timestamp: int) -> tuple[int, int] | None:
        """ListOffsets by time over the whole log: the remote segments (in offset order,
        those whose newest record is recent enough), then the local log (Kafka's
        ``fetchOffsetByTimestamp`` asking ``RemoteLogManager.findOffsetByTimestamp``
        first)."""
        m = self.manifest(plog)
        for seg in m.segments if m is not None else ():
            if seg.max_timestamp_ms >= timestamp:
                found = self.reader.offset_for_timestamp(seg, timestamp)
                if found is not None:
                    return max(found[0], m.log_start_offset), found[1]
        return plog.offset_for_timestamp(timestamp)

    def source_for(self, plog: PartitionLog, offset: int) -> PartitionLog | RemoteSource:
        """What serves a fetch at ``offset``: the local log, or the remote tier below the
        local log start (Kafka's ``ReplicaManager`` remote fetch); OFFSET_OUT_OF_RANGE
        below the log start."""
        if offset >= plog.log_start_offset:
            return plog
        m = self.manifest(plog)
        start = self.log_start_offset(plog)
        if m is None or offset < start:
            raise OffsetOutOfRangeError(
                f"offset {offset} is out of range [{start}, {plog.log_end_offset}] for {plog.name}"
            )
        return RemoteSource(self, plog, m)
