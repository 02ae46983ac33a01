"""The files of a data dir outside its partitions: the names Kafka gives them, the
``.lock`` (one process at a time), what makes a folder a partition or a deletion left
behind (``TOPIC-N.<uuid>-delete``), ``meta.properties``, and the background deleter of
``.deleted`` files (Kafka's ``file.delete.delay.ms``). Used by the
:class:`~kompakt.log.manager.LogManager`.
"""

from __future__ import annotations

import errno
import fcntl
import heapq
import logging
import os
import re
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kompakt.errors import (
    InconsistentClusterIdError,
    KafkaStorageError,
    LogDirLockedError,
    UnknownTopicError,
)
from kompakt.log.clock import Clock
from kompakt.log.dir_failure import SPACE_ERRNOS, find_disk_error
from kompakt.log.durable import write_text_atomically
from kompakt.log.names import invalid_topic_reason

if TYPE_CHECKING:
    from kompakt.log.partition_log import PartitionLog

log = logging.getLogger(__name__)


CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"


LOCK_FILE = ".lock"


META_FILE = "meta.properties"


TOPICS_FILE = "kompakt-topics.json"


RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"


LOG_START_CHECKPOINT = "log-start-offset-checkpoint"


CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"


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


def new_directory_id() -> str:
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


def read_props(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip()
    return out


class LogDirs:
    """The log dirs of :class:`~kompakt.log.manager.LogManager`, which is one: opening
    and locking them, ``meta.properties``, placement of new partitions (Kafka's
    ``nextLogDirs``) and taking a failed dir offline (its state: ``dirs``,
    ``_dir_of``, ``failures``, guarded by ``lock``)."""

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
                    props = read_props(meta_path)
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
                    d.directory_id = new_directory_id()
                    write_text_atomically(
                        meta_path,
                        f"#kompakt\nversion=1\nnode.id={node_id}\ncluster.id={cluster_id}\n"
                        f"directory.id={d.directory_id}\n",
                    )
                elif d.directory_id is None:  # Kafka's broker adds it to an older file
                    text = meta_path.read_text()
                    d.directory_id = new_directory_id()
                    sep = "\n" if text and not text.endswith("\n") else ""
                    write_text_atomically(meta_path, f"{text}{sep}directory.id={d.directory_id}\n")
            except OSError as exc:
                self._fail_at_start(d, exc, f"writing {META_FILE}")
        self.cluster_id = cluster_id if cluster or wrote else "kompakt"

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
