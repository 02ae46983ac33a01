"""The set of partition logs in one data dir (Kafka's ``LogManager`` for one log dir).

A data dir holds ``TOPIC-PARTITION/`` folders in Kafka's layout plus, at the root,
``.lock`` (one process at a time), ``meta.properties``, the offset checkpoint files and
``.kafka_cleanshutdown`` (present only after a clean close, so the next open can skip
recovery). Topic configs and partition counts live in ``kompakt-topics.json``, since
kompakt has no KRaft metadata log; a Kafka data dir without it opens with default configs.
"""

from __future__ import annotations

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
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from kompakt.errors import (
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
from kompakt.log.durable import write_json_atomically
from kompakt.log.names import invalid_topic_reason, validate_no_collision, validate_topic_name
from kompakt.log.open_segments import DEFAULT_MAX_OPEN_SEGMENTS, OpenSegments
from kompakt.log.partition_log import PartitionLog
from kompakt.log.segment import log_file_offset

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
    """True for a folder kompakt or Apache Kafka made a log dir: ``meta.properties`` or
    ``kompakt-topics.json`` at its root, or a ``TOPIC-PARTITION`` folder holding
    ``partition.metadata`` or a segment (``.log``) file.

    Read-only tools use it to refuse a folder that was never a data dir instead of
    turning it into one (a user's ``photos-2019`` folder is not partition 2019).
    """
    root = Path(path)
    if (root / META_FILE).is_file() or (root / TOPICS_FILE).is_file():
        return True
    try:
        entries = list(root.iterdir())
    except OSError:
        return False
    for p in entries:
        parsed = parse_partition_dir(p.name)
        if parsed is None or invalid_topic_reason(parsed[0]) is not None or not p.is_dir():
            continue
        try:
            names = os.listdir(p)
        except OSError:
            continue
        if "partition.metadata" in names or any(log_file_offset(n) is not None for n in names):
            return True
    return False


@contextmanager
def shared_dir_lock(path: str | os.PathLike) -> Iterator[None]:
    """Hold the data dir's ``.lock`` shared while reading it without a ``LogManager``.

    A broker (or an offline writer) holds it exclusively, so this refuses with
    :class:`LogDirLockedError` while one runs, and keeps one from starting while the
    read goes on (Kafka's log dir lock: one owner at a time). Readers share it. The
    file is opened read-only and never created: a read leaves the dir as it found it.
    A dir without ``.lock`` has no owner and is read without one.
    """
    try:
        fd = os.open(Path(path) / LOCK_FILE, os.O_RDONLY)
    except FileNotFoundError:
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            raise LogDirLockedError(
                f"data dir {path} is locked by another process, e.g. a running broker "
                "(.lock is held)"
            ) from None
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


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
                    if before is not None:
                        try:
                            before()
                        except Exception:
                            log.exception("closing a deleted segment failed")
                    for p in paths:
                        Path(p).unlink(missing_ok=True)
                wait = (self._heap[0][0] - now) / 1000 if self._heap else None
                self._cv.wait(timeout=min(wait, 1.0) if wait is not None else 1.0)

    def stop(self) -> None:
        with self._cv:
            self._stopped = True
            self._cv.notify()


class LogManager:
    def __init__(
        self,
        data_dir: str | os.PathLike,
        broker_config: Mapping[str, str] | None = None,
        clock: Clock | None = None,
        max_open_segments: int | None = DEFAULT_MAX_OPEN_SEGMENTS,
    ):
        self.dir = Path(data_dir)
        self.open_segments = OpenSegments(max_open_segments)
        """The cap on segments with open files, shared by every partition of the dir."""
        self.dir.mkdir(parents=True, exist_ok=True)
        self.broker_config = BrokerDefaults.of(broker_config)
        self.clock = clock or system_clock
        self._lock_fd = self._acquire_lock()
        self.lock = threading.RLock()
        self.deleter = FileDeleter(self.clock)
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        self._topics: dict[str, TopicMeta] = {}
        self.defaults = TopicConfig({}, self.broker_config)
        marker = self.dir / CLEAN_SHUTDOWN_FILE
        self.was_clean_shutdown = marker.exists()
        try:
            self._load()
        except BaseException:
            self._release_lock()
            raise
        marker.unlink(missing_ok=True)
        self._closed = False

    # -- dir lock ------------------------------------------------------------------------
    def _acquire_lock(self) -> int:
        fd = os.open(self.dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LogDirLockedError(
                f"data dir {self.dir} is locked by another process (.lock is held)"
            ) from None
        return fd

    def _release_lock(self) -> None:
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
        except OSError:
            pass

    # -- loading -------------------------------------------------------------------------
    def _load(self) -> None:
        meta_path = self.dir / META_FILE
        if not meta_path.exists():
            node = self.broker_config.get("node.id", "1")
            cluster = uuid.uuid4().hex[:22]
            meta_path.write_text(
                f"#kompakt\nversion=1\nnode.id={node}\ncluster.id={cluster}\n"
                f"directory.id={uuid.uuid4().hex[:22]}\n"
            )
        self.cluster_id = _read_props(meta_path).get("cluster.id", "kompakt")
        topics_file = self.dir / TOPICS_FILE
        if topics_file.exists():
            for name, m in json.loads(topics_file.read_text()).items():
                reason = invalid_topic_reason(name)
                if reason is not None:  # never let a name from a file become a path
                    log.warning("%s: skipping topic %r: %s", topics_file, name, reason)
                    continue
                self._topics[name] = TopicMeta(name, m["partitions"], m["topic_id"], m["configs"])
        for p in self.dir.iterdir():
            if is_delete_dir(p.name) and p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
        recovery = OffsetCheckpointFile(self.dir / RECOVERY_POINT_CHECKPOINT).read()
        starts = OffsetCheckpointFile(self.dir / LOG_START_CHECKPOINT).read()
        cleaned = self._cleaned_offsets()
        found: dict[str, int] = {}
        # one scandir (its d_type says which entries are folders): no stat per partition
        for p in sorted(os.scandir(self.dir), key=lambda e: e.name):
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
            found[topic] = max(found.get(topic, 0), part + 1)
        for topic, n in found.items():
            if topic not in self._topics:  # e.g. a log dir written by Apache Kafka
                self._topics[topic] = TopicMeta(topic, n, _new_topic_id())
            else:
                self._topics[topic].partitions = max(self._topics[topic].partitions, n)
        t0 = time.monotonic()
        for meta in self._topics.values():
            config = TopicConfig(meta.overrides, self.broker_config)
            for part in range(meta.partitions):
                tp = (meta.name, part)
                self._logs[tp] = PartitionLog(
                    self.dir / f"{meta.name}-{part}",
                    meta.name,
                    part,
                    config,
                    clock=self.clock,
                    needs_recovery=not self.was_clean_shutdown,
                    recovery_point=recovery.get(tp),
                    log_start_offset=starts.get(tp, 0),
                    schedule_delete=self.deleter.schedule,
                    cleaned_offset=cleaned.get(tp, 0),
                    handles=self.open_segments,
                )
        if self._logs:
            log.info(
                "loaded %d partitions of %d topics from %s in %.0f ms (%s shutdown)",
                len(self._logs),
                len(self._topics),
                self.dir,
                (time.monotonic() - t0) * 1000,
                "clean" if self.was_clean_shutdown else "unclean",
            )
        self._save_topics()

    def _save_topics(self) -> None:
        body = {
            t.name: {"partitions": t.partitions, "topic_id": t.topic_id, "configs": t.overrides}
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
        _check_batch_size(partitions)
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
            plog = self._logs.pop((name, part), None)
            if plog is not None:
                plog.close()
            shutil.rmtree(self.dir / f"{name}-{part}", ignore_errors=True)

    def _open_new(self, meta: TopicMeta, part: int, config: TopicConfig) -> None:
        path = self.dir / f"{meta.name}-{part}"
        path.mkdir(exist_ok=True)
        (path / "partition.metadata").write_text(f"version: 0\ntopic_id: {meta.topic_id}\n")
        self._logs[(meta.name, part)] = PartitionLog(
            path,
            meta.name,
            part,
            config,
            clock=self.clock,
            schedule_delete=self.deleter.schedule,
            handles=self.open_segments,
        )

    def delete_topic(self, name: str) -> None:
        """Kafka ``LogManager.asyncDelete``: a running clean of each partition is aborted
        and waited for first (``cleaner.abortCleaning``), and no clean starts on it until
        the partition is gone; only then are its files closed and removed."""
        tps = [(name, part) for part in range(self._require(name).partitions)]
        paused = self._pause_cleaning(tps, "was deleted during the clean")
        try:
            with self.lock:
                meta = self._require(name)
                for part in range(meta.partitions):
                    plog = self._logs.pop((name, part))
                    with plog.lock:
                        plog.close()
                        target = self.dir / delete_dir_name(name, part)
                        os.replace(plog.dir, target)
                        shutil.rmtree(target, ignore_errors=True)
                del self._topics[name]
                self._save_topics()
        finally:
            for states, tp in paused:
                states.resume(tp)
        log.info("deleted topic %s", name)

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
            _check_batch_size(total - meta.partitions)
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
        try:
            plog = self._logs[(topic, partition)]
        except KeyError:
            raise UnknownTopicError(f"unknown topic partition {topic}-{partition}") from None
        _ = plog.transactions  # rebuilt (and .txnindex files repaired) on first use
        return plog

    def logs(self) -> Iterator[PartitionLog]:
        with self.lock:
            items = list(self._logs.values())
        return iter(items)

    # -- checkpoints and shutdown ----------------------------------------------------------
    def cleaner_checkpoint(self) -> OffsetCheckpointFile:
        return OffsetCheckpointFile(self.dir / CLEANER_CHECKPOINT)

    def _cleaned_offsets(self) -> dict[tuple[str, int], int]:
        """Where each partition's cleaned part ends, for rebuilding its open
        transactions (every transaction with data below it was complete when cleaned);
        an unreadable checkpoint only costs that shortcut."""
        try:
            return self.cleaner_checkpoint().read()
        except (CheckpointError, OSError) as exc:
            log.warning("%s: %s; reading transactions from the log start", CLEANER_CHECKPOINT, exc)
            return {}

    def checkpoint(self) -> None:
        """Persist recovery points and log start offsets (Kafka's periodic checkpoints)."""
        logs = list(self.logs())
        OffsetCheckpointFile(self.dir / RECOVERY_POINT_CHECKPOINT).write(
            {(p.topic, p.partition): p.recovery_point for p in logs}
        )
        OffsetCheckpointFile(self.dir / LOG_START_CHECKPOINT).write(
            {(p.topic, p.partition): p.log_start_offset for p in logs}
        )

    def flush_all(self) -> None:
        for plog in self.logs():
            plog.flush()
        self.checkpoint()

    def apply_retention(self, now_ms: int | None = None) -> int:
        deleted = sum(p.apply_retention(now_ms) for p in self.logs())
        if deleted:
            self.checkpoint()
        return deleted

    def close(self) -> None:
        """Flush everything and leave the clean-shutdown marker.

        An I/O error (a full disk) does not stop the close half-way: every log is still
        closed and the dir lock released, so the process can exit; but no clean-shutdown
        marker is written, so the next start recovers the logs. The first error is raised
        at the end.
        """
        if self._closed:
            return
        self._closed = True
        errors: list[OSError] = []
        for plog in self.logs():
            try:
                plog.flush()
            except OSError as exc:
                errors.append(exc)
        try:
            self.checkpoint()
        except OSError as exc:
            errors.append(exc)
        for plog in self.logs():
            try:
                plog.close()
            except OSError as exc:
                errors.append(exc)
        self.deleter.stop()
        try:
            if not errors:
                marker = self.dir / CLEAN_SHUTDOWN_FILE
                marker.write_text("")
                fsync_dir(self.dir)
        except OSError as exc:
            errors.append(exc)
        finally:
            self._release_lock()
        if errors:
            log.error("closing %s: %d I/O errors, first: %s", self.dir, len(errors), errors[0])
            raise errors[0]

    def __enter__(self) -> LogManager:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _check_batch_size(partitions: int) -> None:
    if partitions > MAX_PARTITIONS_PER_OP:
        raise PolicyViolationError("Unable to perform excessively large batch operation.")


def delete_dir_name(topic: str, partition: int) -> str:
    """``TOPIC-N.<uuid>-delete`` within 255 bytes: like Kafka's
    ``UnifiedLog.logDeleteDirName`` the topic is cut short when the suffix would not fit
    (a 249-character topic plus 40 characters of suffix is too long for a file name)."""
    suffix = f"-{partition}.{uuid.uuid4().hex}-delete"
    return topic[: 255 - len(suffix)] + suffix


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
