"""The partition logs of one broker across its log dirs (Kafka's ``LogManager``).

``log.dirs`` may name several dirs, as in Kafka. Each has its own ``.lock``,
``meta.properties`` (the same ``cluster.id`` and ``node.id`` in all: a dir of another
cluster is refused), offset checkpoints and clean-shutdown marker, and holds the
partitions placed in it. A new partition goes to the online dir holding the fewest
partitions (Kafka's ``LogManager.nextLogDirs``); an existing one is found wherever it is
at start. The first dir also holds the broker's own files (``kompakt-topics.json``,
ACLs, SCRAM users, dynamic configs), as Kafka keeps its metadata log in the first
log dir.

An I/O error on a dir (see :mod:`kompakt.log.dir_failure`) takes that dir offline:
its partitions drop out of :meth:`LogManager.logs` (so no flush, retention, checkpoint
or clean touches them) and :meth:`LogManager.get_log` answers KAFKA_STORAGE_ERROR for
them, while the other dirs keep serving. A full disk (ENOSPC, EDQUOT, EFBIG) on the last
online dir does not take it offline: Kafka would halt the broker there; kompakt answers
KAFKA_STORAGE_ERROR for the writes that do not fit and goes on when space is back.

Each data dir holds ``TOPIC-PARTITION/`` folders in Kafka's layout plus, at the root,
``.lock`` (one process at a time), ``meta.properties``, the offset checkpoint files and
``.kafka_cleanshutdown`` (present only after a clean close, so the next open can skip
recovery). Topic configs and partition counts live in ``kompakt-topics.json``, since
kompakt has no KRaft metadata log; a Kafka data dir without it opens with default configs.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from kompakt.errors import (
    InvalidConfigError,
    KafkaStorageError,
    UnknownTopicError,
)
from kompakt.log.checkpoint import CheckpointError, OffsetCheckpointFile, fsync_dir
from kompakt.log.clock import Clock, system_clock
from kompakt.log.config import BrokerDefaults, TopicConfig
from kompakt.log.dir_failure import LogDirFailureChannel
from kompakt.log.dirs import (
    CLEAN_SHUTDOWN_FILE,
    CLEANER_CHECKPOINT,
    LOCK_FILE,
    LOG_START_CHECKPOINT,
    META_FILE,
    RECOVERY_POINT_CHECKPOINT,
    TOPICS_FILE,
    FileDeleter,
    LogDir,
    LogDirs,
    check_first_log_dir,
    delete_dir_name,
    is_data_dir,
    is_delete_dir,
    parse_partition_dir,
    shared_dir_lock,
)
from kompakt.log.names import invalid_topic_reason
from kompakt.log.open_segments import DEFAULT_MAX_OPEN_SEGMENTS, OpenSegments
from kompakt.log.partition_log import PartitionLog
from kompakt.log.topic_store import (
    MAX_PARTITIONS_PER_OP,
    TopicMeta,
    TopicStore,
    check_batch_size,
    new_topic_id,
)

log = logging.getLogger(__name__)

__all__ = [  # the names other packages import from here
    "CLEAN_SHUTDOWN_FILE",
    "LOCK_FILE",
    "MAX_PARTITIONS_PER_OP",
    "META_FILE",
    "RECOVERY_POINT_CHECKPOINT",
    "TOPICS_FILE",
    "LogManager",
    "TopicMeta",
    "check_batch_size",
    "check_first_log_dir",
    "delete_dir_name",
    "is_data_dir",
    "parse_partition_dir",
    "shared_dir_lock",
]

LOAD_PROGRESS_EVERY_S = 5.0  # a log line this often while partitions load at start


class LogManager(LogDirs, TopicStore):
    def __init__(
        self,
        data_dir: str | os.PathLike | Sequence[str | os.PathLike],
        broker_config: Mapping[str, str] | None = None,
        clock: Clock | None = None,
        max_open_segments: int | None = DEFAULT_MAX_OPEN_SEGMENTS,
        read_only: bool = False,
    ):
        """``read_only`` (a dry run; Kafka's read-only tools never write to a log dir):
        the dirs must exist and are opened as they are: no ``.lock`` is made (an
        existing one is held shared, so a broker's dir is still refused),
        ``meta.properties``, ``kompakt-topics.json``, checkpoints and the clean-shutdown
        marker are read, never written; recovery and index rebuilds happen in memory
        (:class:`PartitionLog` ``read_only``) and :meth:`close` writes nothing."""
        self.read_only = read_only  # immutable
        paths = [data_dir] if isinstance(data_dir, (str, os.PathLike)) else list(data_dir)
        if not paths:
            raise ValueError("at least one log dir")
        self.dirs = [LogDir(Path(p)) for p in paths]  # immutable list; each dir guards itself
        resolved = [d.path.resolve() for d in self.dirs]
        if len(set(resolved)) != len(resolved):
            raise InvalidConfigError(
                f"Invalid value {paths} for configuration log.dirs: a directory is listed twice"
            )
        self.dir = self.dirs[0].path  # immutable: the broker's own files live in the first dir
        self.open_segments = OpenSegments(max_open_segments)
        """The cap on segments with open files, shared by every partition of every dir;
        immutable and thread-safe (its own lock)."""
        # guarded by lock: replaced whole by reconfigure_defaults, read as one value
        self.broker_config = BrokerDefaults.of(broker_config)
        self.clock = clock or system_clock  # immutable
        self.failures = LogDirFailureChannel()  # immutable; thread-safe (its own lock)
        self.batch_removal_listeners: list[Callable[[PartitionLog], object]] = []
        """Told before batches leave a log (retention, DeleteRecords, a clean's swap),
        while they can still be read (the broker builds its producer state from them);
        set once: filled by the broker before it serves."""
        self.lock = threading.RLock()  # guards the maps below and the topics file
        self.deleter = FileDeleter(self.clock)  # immutable; thread-safe (its own lock)
        self._logs: dict[tuple[str, int], PartitionLog] = {}  # guarded by lock
        self._dir_of: dict[tuple[str, int], LogDir] = {}  # guarded by lock
        # guarded by lock
        self._assigned: dict[tuple[str, int], str | None] = {}
        """Each partition's ``directory.id`` as ``kompakt-topics.json`` records it (KIP-858's
        replica directory assignment): where it is, or, for one whose dir was offline at
        start, where it was last seen."""
        self._topics: dict[str, TopicMeta] = {}  # guarded by lock
        self.defaults = TopicConfig({}, self.broker_config)  # guarded by lock, replaced whole
        try:
            self._open_dirs()
            # set once at open
            self.was_clean_shutdown = all(d.was_clean_shutdown for d in self._online_dirs())
            self._load()
            for d in [] if read_only else self._online_dirs():
                try:
                    (d.path / CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)
                except OSError as exc:
                    self._fail_at_start(d, exc, "removing the clean-shutdown marker")
        except BaseException:
            for d in self.dirs:
                self._release_lock(d)
            raise
        self._closed = False  # owned by the thread that closes the manager (close runs once)

    # -- dir lock ------------------------------------------------------------------------
    # -- opening the dirs -----------------------------------------------------------------
    # -- loading -------------------------------------------------------------------------
    def _load(self) -> None:
        """Kafka's ``loadLogs``: every partition of every online dir is opened; a dir
        with an I/O error goes offline (its partitions answer KAFKA_STORAGE_ERROR) and
        the others load. A partition listed in ``kompakt-topics.json`` but found in no
        online dir is made empty only where it cannot have data: in its recorded dir
        when that one is online, or anywhere when no dir is offline. Otherwise it may be
        on an offline dir and stays an offline stand-in, so that no empty copy is made
        elsewhere (clients would see its records gone, and the next start would find it
        twice): KIP-858 keeps each replica's directory id in the metadata for this."""
        self._load_meta()
        topics_file = self.dir / TOPICS_FILE
        try:
            body = json.loads(topics_file.read_text()) if topics_file.exists() else {}
        except OSError as exc:
            self._fail_at_start(self.dirs[0], exc, f"reading {TOPICS_FILE}")
        for name, m in body.items():
            reason = invalid_topic_reason(name)
            if reason is not None:  # never let a name from a file become a path
                log.warning("%s: skipping topic %r: %s", topics_file, name, reason)
                continue
            self._topics[name] = TopicMeta(name, m["partitions"], m["topic_id"], m["configs"])
            dir_ids = m.get("directories")
            for part, dir_id in enumerate(dir_ids if isinstance(dir_ids, list) else ()):
                if isinstance(dir_id, str):
                    self._assigned[(name, part)] = dir_id
        recovery: dict[tuple[str, int], int] = {}
        starts: dict[tuple[str, int], int] = {}
        cleaned: dict[tuple[str, int], int] = {}
        found: dict[str, int] = {}
        located: dict[tuple[str, int], LogDir] = {}
        for d in self._online_dirs():
            try:
                dir_tps = self._scan_dir(d, located)
                cps = [
                    OffsetCheckpointFile(d.path / RECOVERY_POINT_CHECKPOINT).read(),
                    OffsetCheckpointFile(d.path / LOG_START_CHECKPOINT).read(),
                    self._cleaned_offsets(d),
                ]
            except OSError as exc:
                self._fail_at_start(d, exc, "reading the log dir")
                continue
            for tp in dir_tps:
                located[tp] = d
                found[tp[0]] = max(found.get(tp[0], 0), tp[1] + 1)
            for into, entries in zip((recovery, starts, cleaned), cps, strict=True):
                into.update({tp: v for tp, v in entries.items() if tp in dir_tps})
        for topic, n in found.items():
            if topic not in self._topics:  # e.g. a log dir written by Apache Kafka
                self._topics[topic] = TopicMeta(topic, n, new_topic_id())
            else:
                self._topics[topic].partitions = max(self._topics[topic].partitions, n)
        t0 = next_report = time.monotonic()
        total = sum(m.partitions for m in self._topics.values())
        for meta in self._topics.values():
            config = TopicConfig(meta.overrides, self.broker_config)
            for part in range(meta.partitions):
                tp = (meta.name, part)
                if time.monotonic() >= next_report + LOAD_PROGRESS_EVERY_S:
                    # Kafka logs each log's load with "(n/N completed in dir)"; a line
                    # every few seconds says the same without 10,000 lines
                    next_report = time.monotonic()
                    log.info(
                        "loading partitions: %d of %d done in %.0f s (%s shutdown)",
                        len(self._logs),
                        total,
                        next_report - t0,
                        "clean" if self.was_clean_shutdown else "unclean: recovering",
                    )
                d = located.get(tp) or self._home_of(tp)
                where = (d.path / f"{meta.name}-{part}", meta.name, part, config)
                plog = None
                if not self.failures.is_offline(d.path):
                    try:
                        plog = PartitionLog(
                            *where,
                            clock=self.clock,
                            needs_recovery=not d.was_clean_shutdown,
                            recovery_point=recovery.get(tp),
                            log_start_offset=starts.get(tp, 0),
                            schedule_delete=self.deleter.schedule,
                            cleaned_offset=cleaned.get(tp, 0),
                            handles=self.open_segments,
                            read_only=self.read_only,
                        )
                    except OSError as exc:
                        self._fail_at_start(d, exc, f"loading {meta.name}-{part}")
                if plog is None:  # its dir is offline: touch nothing there
                    plog = PartitionLog(
                        *where,
                        clock=self.clock,
                        offline=self.failures.error_of(d.path) or "log dir offline",
                    )
                self._adopt(tp, plog, d)
        if self._logs:
            log.info(
                "loaded %d partitions of %d topics from %s in %.0f ms (%s shutdown)",
                len(self._logs),
                len(self._topics),
                ", ".join(str(d.path) for d in self.dirs),
                (time.monotonic() - t0) * 1000,
                "clean" if self.was_clean_shutdown else "unclean",
            )
        try:
            if not self.read_only:
                self._save_topics()
        except OSError as exc:
            self._fail_at_start(self.dirs[0], exc, f"writing {TOPICS_FILE}")

    def _scan_dir(self, d: LogDir, located: Mapping[tuple[str, int], LogDir]) -> set:
        """The partitions in one dir (``TOPIC-PARTITION`` folders), after removing the
        ``-delete`` folders a topic deletion left behind."""
        for p in [] if self.read_only else d.path.iterdir():
            if p.is_dir() and is_delete_dir(p.name):
                shutil.rmtree(p, ignore_errors=True)
        dir_tps: set[tuple[str, int]] = set()
        # one scandir per dir (its d_type says which entries are folders)
        for p in sorted(os.scandir(d.path), key=lambda e: e.name):
            parsed = parse_partition_dir(p.name) if p.is_dir() else None
            if parsed is None:
                continue
            topic, part = parsed
            reason = invalid_topic_reason(topic)
            if reason is not None:
                # Kafka stops on a folder it cannot parse (e.g. lost+found); kompakt
                # leaves it alone and says so.
                log.warning("ignoring folder %s in the data dir: %s", p.path, reason)
                continue
            if parsed in located:
                raise KafkaStorageError(
                    f"Duplicate log directories for {topic}-{part} are found in both "
                    f"{located[parsed].path} and {d.path}: remove the one in the log "
                    "dir that failed most recently"
                )
            dir_tps.add(parsed)
        return dir_tps

    # -- log dirs: placement and failure ---------------------------------------------------
    def _open_new(self, meta: TopicMeta, part: int, config: TopicConfig) -> None:
        d = self._next_dir()
        path = d.path / f"{meta.name}-{part}"
        path.mkdir(exist_ok=True)
        (path / "partition.metadata").write_text(f"version: 0\ntopic_id: {meta.topic_id}\n")
        plog = PartitionLog(
            path,
            meta.name,
            part,
            config,
            clock=self.clock,
            schedule_delete=self.deleter.schedule,
            handles=self.open_segments,
        )
        self._adopt((meta.name, part), plog, d)

    def _adopt(self, tp: tuple[str, int], plog: PartitionLog, d: LogDir) -> None:
        plog.on_io_error = self._on_log_io_error
        plog.before_batch_removal = self._before_batch_removal
        self._logs[tp] = plog
        self._dir_of[tp] = d
        if d.directory_id is not None and plog.offline is None:
            self._assigned[tp] = d.directory_id  # an offline one keeps its recorded dir
        d.partitions += 1

    def _before_batch_removal(self, plog: PartitionLog) -> None:
        for listener in list(self.batch_removal_listeners):
            listener(plog)

    def _forget(self, tp: tuple[str, int]) -> PartitionLog | None:
        self._assigned.pop(tp, None)
        d = self._dir_of.pop(tp, None)
        if d is not None:
            d.partitions -= 1
        return self._logs.pop(tp, None)

    # -- topics --------------------------------------------------------------------------

    def register_cleaning(self, states) -> None:
        """A cleaner's in-progress state (``kompakt.cleaner.manager.CleaningStates``),
        told to abort and wait before a partition is removed (the cleaner registers)."""
        with self.lock:
            known = self.__dict__.setdefault("_cleaning", weakref.WeakSet())
            known.add(states)

    def _pause_cleaning(self, tps: list[tuple[str, int]], why: str) -> list:
        """``abortAndPauseCleaning`` of ``tps`` in every registered cleaner; called
        without :attr:`lock` (a clean being aborted may need it to finish)."""
        with self.lock:
            known = list(self.__dict__.get("_cleaning", ()))
        paused = []
        for states in known:
            for tp in tps:
                if not states.abort_and_pause(tp, why):
                    log.warning("the clean of %s-%d did not stop in time", *tp)
                paused.append((states, tp))
        return paused

    def get_log(self, topic: str, partition: int) -> PartitionLog:
        """The partition's log; KAFKA_STORAGE_ERROR when its log dir is offline."""
        try:
            plog = self._logs[(topic, partition)]
        except KeyError:
            raise UnknownTopicError(f"unknown topic partition {topic}-{partition}") from None
        plog.check_online()
        _ = plog.transactions  # rebuilt (and .txnindex files repaired) on first use
        return plog

    def logs(self) -> Iterator[PartitionLog]:
        """The logs of the online dirs (an offline dir's logs are left alone)."""
        with self.lock:
            items = [p for p in self._logs.values() if p.offline is None]
        return iter(items)

    def all_logs(self) -> list[PartitionLog]:
        """Every log, those of offline dirs too (for reports: check ``plog.offline``)."""
        with self.lock:
            return list(self._logs.values())

    # -- checkpoints and shutdown ----------------------------------------------------------
    def cleaner_checkpoint(self) -> SplitCheckpoint:
        """The ``cleaner-offset-checkpoint`` of every online dir, read and written as one."""
        return SplitCheckpoint(self, CLEANER_CHECKPOINT)

    def _cleaned_offsets(self, d: LogDir) -> dict[tuple[str, int], int]:
        """Where each partition's cleaned part ends, for rebuilding its open
        transactions (every transaction with data below it was complete when cleaned);
        an unreadable checkpoint only costs that shortcut."""
        try:
            return OffsetCheckpointFile(d.path / CLEANER_CHECKPOINT).read()
        except (CheckpointError, OSError) as exc:
            log.warning(
                "%s: %s; reading transactions from the log start",
                d.path / CLEANER_CHECKPOINT,
                exc,
            )
            return {}

    def logs_by_dir(self, online_only: bool = True) -> list[tuple[LogDir, list[PartitionLog]]]:
        with self.lock:
            groups: dict[int, list[PartitionLog]] = {id(d): [] for d in self.dirs}
            for tp, p in self._logs.items():
                d = self._dir_of.get(tp)
                if d is not None:
                    groups[id(d)].append(p)
        return [(d, groups[id(d)]) for d in (self._online_dirs() if online_only else self.dirs)]

    def _write_checkpoints(self, d: LogDir, logs: list[PartitionLog]) -> None:
        OffsetCheckpointFile(d.path / RECOVERY_POINT_CHECKPOINT).write(
            {(p.topic, p.partition): p.recovery_point for p in logs}
        )
        OffsetCheckpointFile(d.path / LOG_START_CHECKPOINT).write(
            {(p.topic, p.partition): p.log_start_offset for p in logs}
        )

    def checkpoint(self) -> None:
        """Persist recovery points and log start offsets (Kafka's periodic checkpoints),
        in each online dir; a dir that cannot be written goes offline (the last one,
        full, raises instead)."""
        for d, logs in self.logs_by_dir():
            try:
                self._write_checkpoints(d, logs)
            except OSError as exc:
                if not self.fail_dir(d.path, exc, "writing the offset checkpoints"):
                    raise

    def flush_all(self) -> None:
        for plog in self.logs():
            plog.flush()
        self.checkpoint()

    def apply_retention(self, now_ms: int | None = None) -> int:
        deleted = 0
        for plog in self.logs():
            try:
                deleted += plog.apply_retention(now_ms)
            except OSError as exc:
                d = self._dir_of.get((plog.topic, plog.partition))
                if d is None or not self.fail_dir(
                    d.path, exc, f"deleting old segments of {plog.name}"
                ):
                    raise
        if deleted:
            self.checkpoint()
        return deleted

    def close(self) -> None:
        """Flush everything and leave the clean-shutdown marker in each dir.

        An I/O error (a full disk) does not stop the close half-way: every log is still
        closed and the dir locks released, so the process can exit; but a dir with an
        error gets no clean-shutdown marker, so the next start recovers its logs. An
        offline dir is neither flushed nor marked (Kafka's next start recovers it as
        after a crash). The first error of an online dir is raised at the end.
        """
        if self._closed:
            return
        self._closed = True
        errors: list[OSError] = []
        for d, logs in self.logs_by_dir(online_only=False):
            offline = self.failures.is_offline(d.path) or self.read_only
            dir_errors: list[OSError] = []
            if not offline:
                for plog in logs:
                    try:
                        plog.flush()
                    except OSError as exc:
                        dir_errors.append(exc)
                try:
                    self._write_checkpoints(d, logs)
                except OSError as exc:
                    dir_errors.append(exc)
            for plog in logs:
                try:
                    plog.close()
                except OSError as exc:
                    dir_errors.append(exc)
            if not offline and not dir_errors:
                try:
                    (d.path / CLEAN_SHUTDOWN_FILE).write_text("")
                    fsync_dir(d.path)
                except OSError as exc:
                    dir_errors.append(exc)
            if not offline:
                errors += dir_errors
        self.deleter.stop()
        for d in self.dirs:
            self._release_lock(d)
        if errors:
            log.error(
                "closing %s: %d I/O errors, first: %s",
                ", ".join(str(d.path) for d in self.dirs),
                len(errors),
                errors[0],
            )
            raise errors[0]

    def __enter__(self) -> LogManager:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class SplitCheckpoint:
    """One checkpoint name (``cleaner-offset-checkpoint``) kept in every log dir, each
    file holding the partitions of its dir, read and written as one mapping (the
    cleaner's view). An offline dir is neither read nor written; a dir whose file
    cannot be written goes offline (the last one, full, raises instead)."""

    def __init__(self, manager: LogManager, name: str):
        self.manager = manager
        self.name = name

    def read(self) -> dict[tuple[str, int], int]:
        out: dict[tuple[str, int], int] = {}
        for d, logs in self.manager.logs_by_dir():
            mine = {(p.topic, p.partition) for p in logs}
            entries = OffsetCheckpointFile(d.path / self.name).read()
            out.update({tp: v for tp, v in entries.items() if tp in mine})
        return out

    def write(self, entries: Mapping[tuple[str, int], int]) -> None:
        for d, logs in self.manager.logs_by_dir():
            mine = {(p.topic, p.partition) for p in logs}
            try:
                OffsetCheckpointFile(d.path / self.name).write(
                    {tp: v for tp, v in entries.items() if tp in mine}
                )
            except OSError as exc:
                if not self.manager.fail_dir(d.path, exc, f"writing {self.name}"):
                    raise
