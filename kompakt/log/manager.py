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

import errno
import fcntl
import heapq
import json
import logging
import os
import re
import shutil
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from kompakt.errors import (
    InconsistentClusterIdError,
    InvalidConfigError,
    InvalidPartitionsError,
    KafkaStorageError,
    LogDirLockedError,
    PolicyViolationError,
    TopicExistsError,
    UnknownTopicError,
)
from kompakt.log.checkpoint import CheckpointError, OffsetCheckpointFile, fsync_dir
from kompakt.log.clock import Clock, system_clock
from kompakt.log.config import BrokerDefaults, TopicConfig
from kompakt.log.dir_failure import SPACE_ERRNOS, LogDirFailureChannel, find_disk_error
from kompakt.log.durable import write_json_atomically, write_text_atomically
from kompakt.log.names import invalid_topic_reason, validate_no_collision, validate_topic_name
from kompakt.log.open_segments import DEFAULT_MAX_OPEN_SEGMENTS, OpenSegments
from kompakt.log.partition_log import PartitionLog

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
LOCK_FILE = ".lock"
META_FILE = "meta.properties"
TOPICS_FILE = "kompakt-topics.json"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
# Kafka's QuorumController.MAX_RECORDS_PER_USER_OP: one admin operation may not create
# more than 10000 metadata records (here: partitions); POLICY_VIOLATION beyond.
MAX_PARTITIONS_PER_OP = 10_000


@dataclass
class TopicMeta:
    name: str
    partitions: int
    topic_id: str
    overrides: dict[str, str] = field(default_factory=dict)


@dataclass(eq=False)
class LogDir:
    """One of ``log.dirs``: its path, lock and state at open."""

    path: Path
    lock_fd: int = -1
    was_clean_shutdown: bool = False
    partitions: int = 0  # how many partitions it holds (placement reads it)
    directory_id: str | None = None  # from its meta.properties (KIP-858); None while unread


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """(topic, partition) of a ``TOPIC-PARTITION`` folder name; the partition must be
    written as kompakt writes it (ASCII digits, no leading zeros), since the log is
    reopened at ``f"{topic}-{partition}"``."""
    topic, sep, part = name.rpartition("-")
    if not sep or not topic or not (part.isascii() and part.isdigit()):
        return None
    if str(int(part)) != part:
        return None
    return topic, int(part)


_DELETE_DIR = re.compile(r"^(.+)-(0|[1-9][0-9]*)\.[0-9a-f]{32}-delete$")


def is_delete_dir(name: str) -> bool:
    """True for ``TOPIC-PARTITION.<uuid hex>-delete``, a folder kompakt itself renamed
    for removal (Kafka's naming); anything else is never removed."""
    m = _DELETE_DIR.match(name)
    return m is not None and invalid_topic_reason(m.group(1)) is None


def is_data_dir(path: str | os.PathLike) -> bool:
    """True for a formatted log dir: ``meta.properties`` at its root, as Kafka requires
    of every log dir ("No `meta.properties` found in DIR (have you run
    `kafka-storage.sh` to format the directory?)"; Apache Kafka and every kompakt open
    write it), or kompakt's own ``kompakt-topics.json``.

    Folders that merely look like partitions (``users-0/00000000000000000000.log``, a
    user's ``photos-2019``) do not make one: opening such a folder would take them for
    logs, truncate their files and write a data dir's files beside them.
    """
    root = Path(path)
    return (root / META_FILE).is_file() or (root / TOPICS_FILE).is_file()


@contextmanager
def shared_dir_lock(path: str | os.PathLike) -> Iterator[None]:
    """Hold the data dir's ``.lock`` shared while reading it without a ``LogManager``.

    A broker (or an offline writer) holds it exclusively, so this refuses with
    :class:`LogDirLockedError` while one runs, and keeps one from starting while the
    read goes on (Kafka's log dir lock: one owner at a time). Readers share it. The
    file is opened read-only and never created: a read leaves the dir as it found it.
    A dir without ``.lock`` has no owner and is read without one.
    """
    fd = lock_dir(path, exclusive=False)
    try:
        yield
    finally:
        if fd >= 0:
            os.close(fd)  # closing the descriptor releases the lock


def lock_dir(path: str | os.PathLike, *, exclusive: bool) -> int:
    """The data dir's ``.lock`` held: ``exclusive`` by its one owner (a broker, an
    offline writer; the file is made if missing), else shared by a reader (opened
    read-only and never made: -1 when there is none, as a dir without it has no owner).
    :class:`LogDirLockedError` while another process holds it against this use."""
    lock = Path(path) / LOCK_FILE
    try:
        if exclusive:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        else:
            fd = os.open(lock, os.O_RDONLY)
    except FileNotFoundError:
        if exclusive:
            raise
        return -1
    try:
        fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise LogDirLockedError(
            f"data dir {path} is locked by another process, e.g. a running broker (.lock is held)"
        ) from None
    return fd


class FileDeleter:
    """Removes ``.deleted`` files after ``file.delete.delay.ms`` on a daemon thread."""

    def __init__(self, clock: Clock):
        self._clock = clock
        self._heap: list[tuple[int, int, list[str], Callable[[], None] | None]] = []
        self._seq = 0
        self._cv = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopped = False

    def schedule(
        self, paths: list[Path], delay_ms: int, before: Callable[[], None] | None = None
    ) -> None:
        """Unlink ``paths`` after ``delay_ms``; ``before`` runs first (e.g. close the fds
        that readers of a swapped-out segment still use)."""
        if delay_ms <= 0:
            if before is not None:
                before()
            for p in paths:
                Path(p).unlink(missing_ok=True)
            return
        due = self._clock() + delay_ms
        with self._cv:
            self._seq += 1
            heapq.heappush(self._heap, (due, self._seq, [str(p) for p in paths], before))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="kompakt-deleter", daemon=True
                )
                self._thread.start()
            self._cv.notify()

    def _run(self) -> None:
        with self._cv:
            while not self._stopped:
                now = self._clock()
                while self._heap and self._heap[0][0] <= now:
                    _due, _seq, paths, before = heapq.heappop(self._heap)
                    _delete(paths, before)
                wait = (self._heap[0][0] - now) / 1000 if self._heap else None
                self._cv.wait(timeout=min(wait, 1.0) if wait is not None else 1.0)

    def stop(self) -> None:
        """Stop, deleting now what is still scheduled: the logs are closed, so no reader
        of those files is left, and a process that exits gives the disk back (Kafka's
        broker waits ``file.delete.delay.ms``; an offline ``compact`` must not leave
        its replaced segments behind as ``.deleted`` files)."""
        with self._cv:
            self._stopped = True
            pending, self._heap = self._heap, []
            self._cv.notify()
        for _due, _seq, paths, before in sorted(pending, key=lambda e: e[:2]):
            _delete(paths, before)


def _delete(paths: list[str], before: Callable[[], None] | None) -> None:
    if before is not None:
        try:
            before()
        except Exception:
            log.exception("closing a deleted segment failed")
    for p in paths:
        Path(p).unlink(missing_ok=True)


LOAD_PROGRESS_EVERY_S = 5.0  # a log line this often while partitions load at start


class LogManager:
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
        self.read_only = read_only
        paths = [data_dir] if isinstance(data_dir, (str, os.PathLike)) else list(data_dir)
        if not paths:
            raise ValueError("at least one log dir")
        self.dirs = [LogDir(Path(p)) for p in paths]
        resolved = [d.path.resolve() for d in self.dirs]
        if len(set(resolved)) != len(resolved):
            raise InvalidConfigError(
                f"Invalid value {paths} for configuration log.dirs: a directory is listed twice"
            )
        self.dir = self.dirs[0].path  # the broker's own files live in the first dir
        self.open_segments = OpenSegments(max_open_segments)
        """The cap on segments with open files, shared by every partition of every dir."""
        self.broker_config = BrokerDefaults.of(broker_config)
        self.clock = clock or system_clock
        self.failures = LogDirFailureChannel()
        self.batch_removal_listeners: list[Callable[[PartitionLog], object]] = []
        """Told before batches leave a log (retention, DeleteRecords, a clean's swap),
        while they can still be read (the broker builds its producer state from them)."""
        self.lock = threading.RLock()
        self.deleter = FileDeleter(self.clock)
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        self._dir_of: dict[tuple[str, int], LogDir] = {}
        self._assigned: dict[tuple[str, int], str | None] = {}
        """Each partition's ``directory.id`` as ``kompakt-topics.json`` records it (KIP-858's
        replica directory assignment): where it is, or, for one whose dir was offline at
        start, where it was last seen."""
        self._topics: dict[str, TopicMeta] = {}
        self.defaults = TopicConfig({}, self.broker_config)
        try:
            self._open_dirs()
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
        self._closed = False

    # -- dir lock ------------------------------------------------------------------------
    def _release_lock(self, d: LogDir | None = None) -> None:
        """Release one dir's lock, or every dir's (a test's simulated crash)."""
        for one in [d] if d is not None else self.dirs:
            if one.lock_fd < 0:
                continue
            try:
                fcntl.flock(one.lock_fd, fcntl.LOCK_UN)
                os.close(one.lock_fd)
            except OSError:
                pass
            one.lock_fd = -1

    # -- opening the dirs -----------------------------------------------------------------
    def _open_dirs(self) -> None:
        """Kafka's ``createAndValidateLogDirs`` and ``lockLogDirs``: each dir is made if
        missing, must be a readable directory and is locked. One that is not (a file in
        its place, permission denied, an I/O error) goes offline and the others start
        (:meth:`_fail_at_start`); a lock held by another process stays fatal."""
        for d in self.dirs:
            try:
                if d.path.exists() and not d.path.is_dir():  # mkdir would say EEXIST
                    raise NotADirectoryError(errno.ENOTDIR, "a file is where the dir should be")
                if not self.read_only:
                    d.path.mkdir(parents=True, exist_ok=True)
                if not d.path.is_dir():
                    raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
                os.listdir(d.path)  # readable (Kafka: Files.isReadable)
                d.lock_fd = lock_dir(d.path, exclusive=not self.read_only)
                d.was_clean_shutdown = (d.path / CLEAN_SHUTDOWN_FILE).exists()
            except OSError as exc:
                self._release_lock(d)
                self._fail_at_start(d, exc, "opening the log dir")

    def _fail_at_start(self, d: LogDir, exc: OSError, what: str) -> None:
        """A dir unusable at start goes offline, as Kafka's ``LogManager`` hands it to
        the ``LogDirFailureChannel`` and starts with the others. The first dir is fatal:
        it holds ``kompakt-topics.json`` and the broker's own files (Kafka's
        ``metadata.log.dir``), and so is having no usable dir ("None of the specified
        log dirs ... can be created or validated"). Nothing is written or removed in
        the other dirs before that refusal."""
        if d is self.dirs[0]:
            raise first_dir_error([o.path for o in self.dirs], f"{what}: {exc.strerror or exc}")
        # offline stand-ins for any of its partitions already loaded: attribute writes
        self.fail_dir(d.path, exc, what)

    # -- loading -------------------------------------------------------------------------
    def _load_meta(self) -> None:
        """Every dir's ``meta.properties`` agrees on ``cluster.id`` and ``node.id``
        (Kafka's ``MetaPropertiesEnsemble.verify``); dirs without one get it written, and
        one without a ``directory.id`` gets one added (KIP-858). A dir whose file cannot
        be read or written goes offline (:meth:`_fail_at_start`)."""
        found: list[tuple[Path, dict[str, str]]] = []
        for d in self._online_dirs():
            meta_path = d.path / META_FILE
            try:
                if meta_path.exists():
                    props = _read_props(meta_path)
                    found.append((meta_path, props))
                    d.directory_id = props.get("directory.id")
            except OSError as exc:
                self._fail_at_start(d, exc, f"reading {META_FILE}")
        cluster = node = None
        for path, props in found:
            c = props.get("cluster.id")
            if c is not None:
                if cluster is not None and c != cluster[0]:
                    raise InconsistentClusterIdError(
                        f"Invalid cluster.id in: {path}. Expected {cluster[0]} (from "
                        f"{cluster[1]}), but read {c}: that log dir belongs to another cluster"
                    )
                cluster = cluster or (c, path)
            n = props.get("node.id")
            if n is not None:
                if node is not None and n != node[0]:
                    raise InconsistentClusterIdError(
                        f"Stored node id {n} in {path} doesn't match node id {node[0]} "
                        f"in {node[1]}: that log dir belongs to another node"
                    )
                node = node or (n, path)
        cluster_id = cluster[0] if cluster else uuid.uuid4().hex[:22]
        node_id = node[0] if node else str(self.broker_config.get("node.id", "1"))
        wrote = False
        for d in [] if self.read_only else self._online_dirs():
            meta_path = d.path / META_FILE
            try:
                if not meta_path.exists():
                    wrote = True
                    d.directory_id = _new_directory_id()
                    write_text_atomically(
                        meta_path,
                        f"#kompakt\nversion=1\nnode.id={node_id}\ncluster.id={cluster_id}\n"
                        f"directory.id={d.directory_id}\n",
                    )
                elif d.directory_id is None:  # Kafka's broker adds it to an older file
                    text = meta_path.read_text()
                    d.directory_id = _new_directory_id()
                    sep = "\n" if text and not text.endswith("\n") else ""
                    write_text_atomically(meta_path, f"{text}{sep}directory.id={d.directory_id}\n")
            except OSError as exc:
                self._fail_at_start(d, exc, f"writing {META_FILE}")
        self.cluster_id = cluster_id if cluster or wrote else "kompakt"

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
                self._topics[topic] = TopicMeta(topic, n, _new_topic_id())
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

    def _home_of(self, tp: tuple[str, int]) -> LogDir:
        """The dir of a partition found in no online dir: its recorded dir when that is
        online (the folder is made there); else, while a dir is offline, that dir (it
        may hold the data: the partition stays offline, as KIP-858 keeps a replica on an
        offline or unknown directory offline); else a new placement (``nextLogDirs``)."""
        dir_id = self._assigned.get(tp)
        online = {d.directory_id: d for d in self._online_dirs() if d.directory_id}
        if dir_id in online:
            return online[dir_id]
        offline = [d for d in self.dirs if self.failures.is_offline(d.path)]
        if offline:
            return offline[0]
        if dir_id is not None:
            log.warning(
                "%s-%d was in log dir %s, which none of %s is: creating it empty",
                *tp,
                dir_id,
                ", ".join(str(d.path) for d in self.dirs),
            )
        return self._next_dir()

    # -- log dirs: placement and failure ---------------------------------------------------
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

    def _next_dir(self) -> LogDir:
        """Kafka's ``LogManager.nextLogDirs``: the online dir with the fewest
        partitions, the first listed on a tie."""
        online = [d for d in self.dirs if not self.failures.is_offline(d.path)]
        if not online:
            raise KafkaStorageError(
                "no log dir is online: " + ", ".join(str(d.path) for d in self.dirs)
            )
        return min(online, key=lambda d: d.partitions)

    def log_dir_of(self, topic: str, partition: int) -> Path:
        """The log dir holding a partition."""
        try:
            return self._dir_of[(topic, partition)].path
        except KeyError:
            raise UnknownTopicError(f"unknown topic partition {topic}-{partition}") from None

    def is_offline(self, topic: str, partition: int) -> bool:
        d = self._dir_of.get((topic, partition))
        return d is not None and self.failures.is_offline(d.path)

    def offline_dirs(self) -> dict[Path, str]:
        """Each offline log dir and the error that took it offline."""
        return self.failures.offline()

    def _on_log_io_error(self, plog: PartitionLog, exc: OSError, what: str) -> None:
        d = self._dir_of.get((plog.topic, plog.partition))
        if d is not None:
            self.fail_dir(d.path, exc, what)

    def report_io_error(self, topic: str, partition: int, exc: BaseException, what: str) -> bool:
        """A failure met outside the log's own methods (a clean, in either engine):
        True when it was a disk error and took the partition's dir offline."""
        d = self._dir_of.get((topic, partition))
        err = find_disk_error(exc)
        if d is None or err is None:
            return False
        return self.fail_dir(d.path, err, what)

    def fail_dir(self, path: Path, exc: OSError, what: str) -> bool:
        """Take ``path`` offline (once). A full disk on the last online dir does not:
        there it is a write that does not fit, answered KAFKA_STORAGE_ERROR, and the
        dir goes on when space is back (where Kafka would halt the broker)."""
        d = next((d for d in self.dirs if d.path == path), None)
        if d is None or self.failures.is_offline(path):
            return False
        others = [o for o in self.dirs if o is not d and not self.failures.is_offline(o.path)]
        if not others and exc.errno in SPACE_ERRNOS:
            return False
        # no lock taken: a failing append holds its log's lock, and delete_topic takes
        # the manager's lock before a log's; a dict copy is atomic under the GIL
        tps = [tp for tp, o in dict(self._dir_of).items() if o is d]
        for tp in tps:  # attribute writes only
            plog = self._logs.get(tp)
            if plog is not None:
                plog.offline = f"{what}: {exc.strerror or exc}"
        return self.failures.add_offline(path, exc, what)

    def _online_dirs(self) -> list[LogDir]:
        return [d for d in self.dirs if not self.failures.is_offline(d.path)]

    def _save_topics(self) -> None:
        """``kompakt-topics.json``: each topic's partition count, id, configs and, per
        partition, the ``directory.id`` of the log dir holding it (KIP-858's
        ``PartitionRecord.Directories``; null where not known). Older files without
        ``directories`` load as before."""
        body = {
            t.name: {
                "partitions": t.partitions,
                "topic_id": t.topic_id,
                "configs": t.overrides,
                "directories": [self._assigned.get((t.name, p)) for p in range(t.partitions)],
            }
            for t in self._topics.values()
        }
        write_json_atomically(self.dir / TOPICS_FILE, body)

    # -- topics --------------------------------------------------------------------------
    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        configs: Mapping[str, str] | None = None,
        validate_only: bool = False,
    ) -> TopicMeta:
        validate_topic_name(name)
        if partitions < 1:
            raise InvalidPartitionsError(
                f"number of partitions must be at least 1, got {partitions}"
            )
        check_batch_size(partitions)
        config = TopicConfig(dict(configs or {}), self.broker_config)
        with self.lock:
            if name in self._topics:
                raise TopicExistsError(f"Topic '{name}' already exists.")
            # Kafka's ReplicationControlManager.validateNewTopicNames: 'a.b' and 'a_b'
            # would share metric names; every creation path (CreateTopics, Metadata
            # auto-create, the offline CLI, the coordinator) comes through here
            validate_no_collision(name, self._topics)
            meta = TopicMeta(name, partitions, _new_topic_id(), dict(config.overrides))
            if validate_only:
                return meta
            try:
                for part in range(partitions):
                    self._open_new(meta, part, config)
                self._topics[name] = meta
                self._save_topics()
            except OSError as exc:  # e.g. a full disk: leave no half-made topic behind
                self._undo_create(meta)
                raise KafkaStorageError(f"cannot create topic '{name}': {exc}") from exc
        log.info("created topic %s with %d partitions %s", name, partitions, meta.overrides)
        return meta

    def _undo_create(self, meta: TopicMeta) -> None:
        """Forget a topic whose creation failed part-way and remove its partitions."""
        self._topics.pop(meta.name, None)
        self._drop_new_partitions(meta.name, range(meta.partitions))

    def _drop_new_partitions(self, name: str, parts: range) -> None:
        """Close and remove partitions just made by a create that failed part-way; left
        on disk they would come back at the next start (as a topic of their own with
        default configs, or as partitions the topic's metadata does not count)."""
        for part in parts:
            plog = self._forget((name, part))
            if plog is not None:
                plog.close()
            for d in self._online_dirs():  # an offline dir is never touched
                shutil.rmtree(d.path / f"{name}-{part}", ignore_errors=True)

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

    def delete_topic(self, name: str) -> None:
        """Kafka ``LogManager.asyncDelete``: a running clean of each partition is aborted
        and waited for first (``cleaner.abortCleaning``), and no clean starts on it until
        the partition is gone; only then are its files closed and its folder renamed
        ``TOPIC-N.<uuid>-delete`` under the lock, and removed after it.

        A topic with a partition on an offline log dir is refused with
        KAFKA_STORAGE_ERROR and left whole: its files there cannot be removed, and
        would come back at the next start as a topic of their own. Kafka's
        ``TopicDeletionManager`` likewise leaves a deletion pending while a replica is
        offline (``markTopicIneligibleForDeletion``).
        """
        self._check_deletable(name)
        tps = [(name, part) for part in range(self._require(name).partitions)]
        paused = self._pause_cleaning(tps, "was deleted during the clean")
        renamed: list[Path] = []
        try:
            with self.lock:
                meta = self._require(name)
                self._check_deletable(name)  # a dir may have failed meanwhile
                for part in range(meta.partitions):
                    plog = self._forget((name, part))
                    if plog is None:
                        continue
                    with plog.lock:
                        plog.close()
                        target = plog.dir.parent / delete_dir_name(name, part)
                        os.replace(plog.dir, target)
                        renamed.append(target)
                del self._topics[name]
                self._save_topics()
        finally:
            for states, tp in paused:
                states.resume(tp)
        # the rename was the deletion (a restart removes what is left, _scan_dir); the
        # files go outside the lock, so no reader of the log list waits for them
        for target in renamed:
            shutil.rmtree(target, ignore_errors=True)
        log.info("deleted topic %s", name)

    def _check_deletable(self, name: str) -> None:
        offline = sorted(
            {
                str(self._dir_of[(name, part)].path)
                for part in range(self._require(name).partitions)
                if self.is_offline(name, part)
            }
        )
        if offline:
            raise KafkaStorageError(
                f"cannot delete topic '{name}': some of its partitions are in offline log "
                f"dirs ({', '.join(offline)}); delete it after a restart with the disk fixed"
            )

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

    def alter_topic_config(
        self, name: str, set: Mapping[str, str] | None = None, delete: Iterable[str] = ()
    ) -> TopicConfig:
        with self.lock:
            meta = self._require(name)
            current = TopicConfig(meta.overrides, self.broker_config)
            new = current.with_changes(dict(set or {}), list(delete))
            meta.overrides = dict(new.overrides)
            for part in range(meta.partitions):
                self._logs[(name, part)].config = new
            self._save_topics()
        return new

    def reconfigure_defaults(self, broker_config: Mapping[str, str]) -> None:
        """New broker-level defaults (a dynamic broker config change): every topic without
        its own override takes the new value at once, like Kafka's
        ``DynamicLogConfig.updateLogsConfig``. Validated as a whole before anything changes."""
        new = BrokerDefaults.of(broker_config)
        with self.lock:
            configs = {t: TopicConfig(m.overrides, new) for t, m in self._topics.items()}
            self.broker_config = new
            self.defaults = TopicConfig({}, new)
            for (topic, _part), plog in self._logs.items():
                plog.config = configs[topic]

    def create_partitions(self, name: str, total: int, validate_only: bool = False) -> None:
        with self.lock:
            meta = self._require(name)
            if total <= meta.partitions:
                raise InvalidPartitionsError(
                    f"Topic currently has {meta.partitions} partitions, which is higher than "
                    f"or equal to the requested {total}."
                )
            check_batch_size(total - meta.partitions)
            if validate_only:
                return
            config = self.topic_config(name)
            part = meta.partitions
            try:
                for part in range(meta.partitions, total):
                    self._open_new(meta, part, config)
            except OSError as exc:  # no fds or disk left: drop the ones just made
                self._drop_new_partitions(name, range(meta.partitions, part + 1))
                raise KafkaStorageError(f"cannot add partitions to '{name}': {exc}") from exc
            meta.partitions = total
            self._save_topics()

    def _require(self, name: str) -> TopicMeta:
        try:
            return self._topics[name]
        except KeyError:
            raise UnknownTopicError(f"unknown topic {name!r}") from None

    def topics(self) -> list[str]:
        return sorted(self._topics)

    def has_topic(self, name: str) -> bool:
        return name in self._topics

    def topic_meta(self, name: str) -> TopicMeta:
        return self._require(name)

    def topic_config(self, name: str) -> TopicConfig:
        return TopicConfig(self._require(name).overrides, self.broker_config)

    def partition_count(self, name: str) -> int:
        return self._require(name).partitions

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


def check_batch_size(partitions: int) -> None:
    """POLICY_VIOLATION when one operation would make more than Kafka's
    MAX_RECORDS_PER_USER_OP records (partitions, or a request's results)."""
    if partitions > MAX_PARTITIONS_PER_OP:
        raise PolicyViolationError("Unable to perform excessively large batch operation.")


def delete_dir_name(topic: str, partition: int) -> str:
    """``TOPIC-N.<uuid>-delete`` within 255 bytes: like Kafka's
    ``UnifiedLog.logDeleteDirName`` the topic is cut short when the suffix would not fit
    (a 249-character topic plus 40 characters of suffix is too long for a file name)."""
    suffix = f"-{partition}.{uuid.uuid4().hex}-delete"
    return topic[: 255 - len(suffix)] + suffix


def first_dir_error(paths: Sequence[Path], why: str) -> KafkaStorageError:
    """The one-line refusal when the first log dir cannot be used: Kafka's "None of the
    specified log dirs from ... can be created or validated" when no other is usable
    either, else a message naming the first dir and why it is needed."""
    listed = ", ".join(str(p) for p in paths)
    if not any(_looks_usable(Path(p)) for p in paths[1:]):
        return KafkaStorageError(
            f"None of the specified log dirs from {listed} can be created or validated "
            f"({paths[0]}: {why}); fix the disk or log.dirs and start again"
        )
    return KafkaStorageError(
        f"the first log dir {paths[0]} cannot be used ({why}); it holds {TOPICS_FILE} and "
        "the broker's own files, so the broker cannot start without it: fix that disk, "
        "then start again"
    )


def check_first_log_dir(paths: Sequence[str | os.PathLike]) -> None:
    """Refuse, before anything reads or writes a log dir, a first dir that cannot be
    used (the broker reads its dynamic configs there before the log manager opens);
    the log manager makes the same refusal for what only opening finds."""
    dirs = [Path(p) for p in paths]
    if dirs and not _looks_usable(dirs[0]):
        why = "not a directory" if dirs[0].exists() and not dirs[0].is_dir() else "unreadable"
        raise first_dir_error(dirs, why)


def _new_directory_id() -> str:
    return uuid.uuid4().hex[:22]


def _looks_usable(path: Path) -> bool:
    """Whether a log dir could be opened, found without writing anything: a readable
    directory, or a missing one whose nearest existing parent is a directory."""
    try:
        if path.exists():
            os.listdir(path)
            return True
        parent = path.parent
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
        return parent.is_dir()
    except OSError:
        return False


def _new_topic_id() -> str:
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def _read_props(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip()
    return out
