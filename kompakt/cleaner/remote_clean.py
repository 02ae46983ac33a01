"""The in-process engine cleaning a partition's remote range (small tiered topics).

The remote segments are fetched whole (each file checked against its SHA-256) into a
private temporary log dir, with the manifest's producer snapshot, an empty active
segment at the remote end and the manifest's clean point as the cleaner checkpoint.
The cleaner's own code (:class:`~kompakt.cleaner.cleaner.Cleaner` with the
:class:`~kompakt.cleaner.local_engine.LocalEngine`) cleans that log, so Kafka's rules
hold unchanged (tombstone horizons, transactions from the tiered ``.txnindex``,
producers' last batches from the snapshot) and the output is byte for byte what the
in-process engine makes of a local copy of the same segments.

Crash safety is the remote tier's order of writes (docs/tiered-storage.md):

1. the cleaned segments go up as NEW objects (fresh segment ids): nothing names them;
2. ONE compare-and-swap of the manifest names them, with the new clean point and each
   cleaned segment's KIP-534 delete horizon; on a conflict the upload is discarded (its
   objects are orphans the sweep removes) and the next pass starts again;
3. the replaced objects are deleted only after that put returned and
   ``file.delete.delay.ms`` passed (readers of the old manifest), by
   :meth:`RemoteCleaner.delete_due`; a crash before leaves orphans for the sweep.

A failure at any step leaves the old manifest, which names only existing objects.

Two engines make the cleaned segments (steps up to 1): this module's in-process one, and
the Spark one (:mod:`kompakt.pipeline.remote_engine`, executors reading and writing the
bucket), handed in as a :class:`RemoteCleanEngine`; both upload with
:func:`upload_cleaned` and both are committed by :meth:`RemoteCleaner.commit`.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from kompakt.cleaner.cleaner import Cleaner
from kompakt.cleaner.private_log import quiet_private_log
from kompakt.log.manager import LogManager
from kompakt.log.producer_snapshot import SNAPSHOT_SUFFIX, ProducerSnapshotFile
from kompakt.log.segment import LOG_SUFFIX, LogSegment, segment_file
from kompakt.record.decode import iter_batches
from kompakt.record.header import DELETE_HORIZON_BIT
from kompakt.remote.layout import file_base_offset
from kompakt.remote.manifest import PartitionManifest, RemoteSegment
from kompakt.remote.metadata import (
    ManifestConflictError,
    RemoteLogMetadataManager,
    Versioned,
    dropped_segments,
)
from kompakt.remote.storage import LocalSegmentFiles, RemoteStorageManager

log = logging.getLogger(__name__)
Clock = Callable[[], int]
# the steps a test may fail in (RemoteCleaner.fault is called with each name)
FETCHED, CLEANED, UPLOADED, COMMITTED, DELETED = (
    "fetched",
    "cleaned",
    "uploaded",
    "committed",
    "deleted",
)
# topic configs the private copy must not carry (it is a plain local log, never tiered)
_NOT_COPIED = ("remote.storage.enable", "local.retention.ms", "local.retention.bytes")


def cleaner_configs(overrides: Mapping[str, str]) -> dict[str, str]:
    """A tiered topic's config overrides as a clean of its remote range reads them: the
    tiering keys left out (the range is cleaned as a plain compacted log)."""
    return {k: v for k, v in overrides.items() if k not in _NOT_COPIED}


def dirty_ratio(m: PartitionManifest) -> float:
    """Bytes of the remote segments at or above the clean point over all remote bytes
    (Kafka's ``cleanableRatio`` with the manifest's clean point as the checkpoint)."""
    total = m.size
    dirty = sum(s.size for s in m.segments if s.last_offset >= m.clean_point)
    return dirty / total if total else 0.0


def earliest_delete_horizon(data: bytes) -> int:
    """The earliest KIP-534 delete horizon stamped on a batch of ``data``; -1: none."""
    stamps = [
        b.header.base_timestamp
        for b in iter_batches(data)
        if b.header.attributes & DELETE_HORIZON_BIT
    ]
    return min(stamps) if stamps else -1


@dataclass
class RemoteCleanResult:
    """What one clean committed: the new manifest and the segments it replaced."""

    manifest: Versioned[PartitionManifest]
    replaced: list[RemoteSegment]
    cleaned: list[RemoteSegment]


@dataclass
class CleanedSegment:
    """A cleaned segment uploaded as new objects, and the remote segments it replaces."""

    covered: list[RemoteSegment]
    remote: RemoteSegment


@dataclass
class CleanedRange:
    """What an engine made of a remote range: its cleaned segments (none: nothing
    changed) and the clean point they reach."""

    pieces: list[CleanedSegment]
    clean_point: int


class RemoteCleanEngine(Protocol):
    """Makes the cleaned segments of a remote range and uploads them (steps up to 1 of
    the module doc); calls ``fault`` with :data:`FETCHED`, :data:`CLEANED` and
    :data:`UPLOADED` as it passes them; ``now`` is the clean's time (KIP-534 delete
    horizons, producer expiry). None: nothing to clean."""

    name: str

    def clean_range(
        self,
        m: PartitionManifest,
        overrides: Mapping[str, str],
        force: bool,
        now: int,
        fault: Callable[[str], None],
    ) -> CleanedRange | None: ...

    def cancel(self, why: str) -> None:
        """Stop the running cleans (they raise, committing nothing) and refuse new ones."""


def upload_cleaned(
    segments: RemoteStorageManager,
    topic: str,
    partition: int,
    base_offset: int,
    covered: list[RemoteSegment],
    max_timestamp_ms: int,
    files: Mapping[str, Path],
) -> CleanedSegment:
    """A cleaned segment's files up as new objects (a fresh segment id), spanning the
    offsets of the remote segments it replaces, with its earliest KIP-534 delete horizon."""
    horizon = earliest_delete_horizon(files[LOG_SUFFIX].read_bytes())
    last = max(s.last_offset for s in covered)
    remote = segments.copy_segment(
        topic,
        partition,
        LocalSegmentFiles(base_offset, last, max_timestamp_ms, files, horizon),
    )
    # the manifest's range of the first segment replaced (a log start inside it)
    return CleanedSegment(covered, replace(remote, base_offset=covered[0].base_offset))


HISTORY_PER_PARTITION = 20  # remote cleans the console lists per partition


@dataclass(frozen=True)
class RemoteCleanRecord:
    """One committed remote clean, as the console's history lists it."""

    ended_ms: int
    engine: str
    duration_ms: int
    replaced_segments: int
    replaced_bytes: int
    cleaned_segments: int
    cleaned_bytes: int
    clean_point: int


@dataclass
class _Pending:
    due_ms: int
    segments: list[RemoteSegment]


@dataclass
class _Planned:
    """A cleaned local segment and the remote segments it replaces."""

    local: LogSegment
    covered: list[RemoteSegment]
    max_timestamp_ms: int
    files: dict[str, Path] = field(default_factory=dict)


class RemoteCleaner:
    """Cleans remote ranges with the in-process engine and commits them by one manifest
    swap; keeps the replaced segments until ``file.delete.delay.ms`` has passed."""

    def __init__(
        self,
        segments: RemoteStorageManager,
        metadata: RemoteLogMetadataManager,
        clock: Clock,
        broker_config: Mapping[str, str] | None = None,
        work_dir: Path | None = None,
        engine: RemoteCleanEngine | None = None,
    ):
        self.segments = segments
        self.engine = engine  # None: the in-process engine (this class's own steps)
        self.metadata = metadata
        self.clock = clock
        self.broker_config = dict(broker_config or {})
        self.work_dir = work_dir  # None: the system's temporary folder
        self.fault: Callable[[str], None] = lambda step: None  # tests fail a step here
        self._lock = threading.Lock()  # guards _pending and _history
        self._pending: list[_Pending] = []
        self._history: dict[tuple[str, int], deque[RemoteCleanRecord]] = {}

    def history(self, topic: str, partition: int) -> list[RemoteCleanRecord]:
        """The partition's last committed remote cleans, newest first (kept in memory
        since the broker started, :data:`HISTORY_PER_PARTITION` at most)."""
        with self._lock:
            return list(reversed(self._history.get((topic, partition), ())))

    def _remember(self, started: float, result: RemoteCleanResult) -> None:
        m = result.manifest.value
        record = RemoteCleanRecord(
            ended_ms=self.clock(),
            engine=self.engine.name if self.engine is not None else "local",
            duration_ms=int((time.monotonic() - started) * 1000),
            replaced_segments=len(result.replaced),
            replaced_bytes=sum(s.size for s in result.replaced),
            cleaned_segments=len(result.cleaned),
            cleaned_bytes=sum(s.size for s in result.cleaned),
            clean_point=m.clean_point,
        )
        with self._lock:
            kept = self._history.setdefault(
                (m.topic, m.partition), deque(maxlen=HISTORY_PER_PARTITION)
            )
            kept.append(record)

    def stop(self, why: str) -> None:
        """At broker shutdown: a running clean of the engine is cancelled and raises
        (the manifest stays the old one) rather than holding the shutdown up; the
        in-process engine's clean is short and runs to its end."""
        if self.engine is not None:
            self.engine.cancel(why)

    def due(self, m: PartitionManifest, min_cleanable_dirty_ratio: float) -> bool:
        """Kafka's rule for a compacted log: clean when the dirty ratio passes
        ``min.cleanable.dirty.ratio`` (here measured from the manifest's clean point)."""
        return bool(m.segments) and dirty_ratio(m) > min_cleanable_dirty_ratio

    def clean(
        self,
        current: Versioned[PartitionManifest],
        overrides: Mapping[str, str],
        delete_delay_ms: int,
        force: bool = True,
    ) -> RemoteCleanResult | None:
        """Clean the remote range of ``current`` (the topic's config ``overrides``) and
        commit it; None when nothing changed or another writer's commit won (the upload
        is then left to the orphan sweep). Not ``force``: only when the cleaner's own
        rule finds the range eligible (``min.cleanable.dirty.ratio``)."""
        m = current.value
        if not m.segments:
            return None
        started = time.monotonic()
        if self.engine is not None:
            made = self.engine.clean_range(m, overrides, force, self.clock(), self.fault)
        else:
            made = self._clean_in_process(m, overrides, force)
        if made is None or not made.pieces:
            return None
        result = self.commit(current, made, delete_delay_ms)
        if result is not None:
            self._remember(started, result)
        return result

    def commit(
        self, current: Versioned[PartitionManifest], made: CleanedRange, delete_delay_ms: int
    ) -> RemoteCleanResult | None:
        """Steps 2 and 3 for either engine: ONE compare-and-swap of the manifest naming
        the cleaned segments, then the replaced ones queued for deletion after
        ``delete_delay_ms``; None when another writer's commit won (the upload is left
        to the orphan sweep)."""
        m = current.value
        new = self._successor(m, made.pieces, made.clean_point, self.clock())
        try:
            committed = self.metadata.commit_partition(new, current, delete_dropped=False)
        except ManifestConflictError:
            log.info(
                "%s-%d: the manifest changed during the remote clean; its upload is left "
                "to the orphan sweep",
                m.topic,
                m.partition,
            )
            return None
        replaced = dropped_segments(m, new)
        with self._lock:
            self._pending.append(_Pending(self.clock() + delete_delay_ms, replaced))
        self.fault(COMMITTED)
        cleaned = [p.remote for p in made.pieces]
        log.info(
            "%s-%d: cleaned %d remote segments into %d, clean point %d",
            m.topic,
            m.partition,
            len(replaced),
            len(cleaned),
            made.clean_point,
        )
        return RemoteCleanResult(committed, replaced, cleaned)

    def _clean_in_process(
        self, m: PartitionManifest, overrides: Mapping[str, str], force: bool
    ) -> CleanedRange | None:
        """Steps up to 1 with the in-process engine, in a private temporary log dir."""
        if self.work_dir is not None:
            self.work_dir.mkdir(parents=True, exist_ok=True)
        tmp = Path(
            tempfile.mkdtemp(prefix=f"remote-clean-{m.topic}-{m.partition}-", dir=self.work_dir)
        )
        try:
            with quiet_private_log():  # its loads are no recovery of the broker's logs
                planned, clean_point = self._clean_copy(m, overrides, tmp, force)
            self.fault(CLEANED)
            if not planned:
                return None
            pieces = [
                upload_cleaned(
                    self.segments,
                    m.topic,
                    m.partition,
                    p.local.base_offset,
                    p.covered,
                    p.max_timestamp_ms,
                    p.files,
                )
                for p in planned
            ]
            self.fault(UPLOADED)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return CleanedRange(pieces, clean_point)

    def delete_due(self, now_ms: int | None = None) -> int:
        """Delete the replaced segments whose ``file.delete.delay.ms`` has passed (their
        manifest is durable); returns how many segments went."""
        now = self.clock() if now_ms is None else now_ms
        with self._lock:
            due = [p for p in self._pending if p.due_ms <= now]
            self._pending = [p for p in self._pending if p.due_ms > now]
        gone = [s for p in due for s in p.segments]
        for s in gone:
            self.segments.delete_segment(s)
        if gone:
            self.fault(DELETED)
        return len(gone)

    # -- the steps ------------------------------------------------------------------------
    def _clean_copy(
        self, m: PartitionManifest, overrides: Mapping[str, str], tmp: Path, force: bool
    ) -> tuple[list[_Planned], int]:
        """Fetch the remote log into a private log dir, clean it there with the cleaner,
        and return the cleaned segments (files closed) with the new clean point."""
        configs = cleaner_configs(overrides)
        data = tmp / "data"
        logs = LogManager(data, broker_config=self.broker_config, clock=self.clock)
        try:
            logs.create_topic(m.topic, m.partition + 1, configs)
            pdir = logs.get_log(m.topic, m.partition).dir
        finally:
            logs.close()
        for p in pdir.iterdir():  # the empty first segment creation made
            p.unlink()
        by_base: dict[int, RemoteSegment] = {}
        for s in m.segments:
            base = file_base_offset(s.files[LOG_SUFFIX].key)
            by_base[base] = s
            for suffix in s.files:
                path = (
                    ProducerSnapshotFile(pdir, s.last_offset + 1).path
                    if suffix == SNAPSHOT_SUFFIX
                    else segment_file(pdir, base, suffix)
                )
                path.write_bytes(self.segments.fetch_file(s, suffix))
        segment_file(pdir, m.end_offset, LOG_SUFFIX).touch()  # the active segment
        self.fault(FETCHED)
        logs = LogManager(data, broker_config=self.broker_config, clock=self.clock)
        try:
            plog = logs.get_log(m.topic, m.partition)
            if m.log_start_offset > plog.log_start_offset:
                plog.delete_records_before(m.log_start_offset)
            cleaner = Cleaner(logs)
            tp = (m.topic, m.partition)
            if m.clean_point > plog.log_start_offset:
                cleaner.manager.update_checkpoint(tp, m.clean_point)
            before = {id(s) for s in plog.segments_snapshot()}
            stats = cleaner.clean_partition(plog, force=force)
            after = plog.segments_snapshot()[:-1]
            clean_point = cleaner.checkpoints().get(tp, m.clean_point)
            planned = []
            if stats is not None:
                bases = sorted(by_base)
                for i, seg in enumerate(after):
                    if id(seg) in before:
                        continue
                    end = after[i + 1].base_offset if i + 1 < len(after) else m.end_offset
                    covered = [by_base[b] for b in bases if seg.base_offset <= b < end]
                    planned.append(_Planned(seg, covered, seg.max_timestamp))
            for p in planned:
                p.files = {
                    suffix: path
                    for suffix in (".log", ".index", ".timeindex", ".txnindex")
                    if (path := segment_file(pdir, p.local.base_offset, suffix)).exists()
                }
                snap = ProducerSnapshotFile(pdir, p.covered[-1].last_offset + 1).path
                if SNAPSHOT_SUFFIX in p.covered[-1].files and snap.exists():
                    p.files[SNAPSHOT_SUFFIX] = snap
        finally:
            logs.close()  # trims the indexes of the cleaned segments
        return planned, max(clean_point, m.clean_point)

    @staticmethod
    def _successor(
        m: PartitionManifest, pieces: list[CleanedSegment], clean_point: int, now_ms: int
    ) -> PartitionManifest:
        """``m`` with each cleaned segment in place of the segments it covers."""
        gone = {s.segment_id: p.remote for p in pieces for s in p.covered}
        out: list[RemoteSegment] = []
        for s in m.segments:
            c = gone.get(s.segment_id)
            if c is None:
                out.append(s)
            elif not out or out[-1] is not c:
                out.append(c)
        return m.next(tuple(out), clean_point=clean_point, updated_ms=now_ms)
