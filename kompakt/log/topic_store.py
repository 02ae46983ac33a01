"""Topics of a data dir (what Kafka keeps in its metadata log): their partition counts,
ids and config overrides in ``kompakt-topics.json``, and the topic operations of the
:class:`~kompakt.log.manager.LogManager` (create, delete, alter, add partitions), kept
here as :class:`TopicStore`, which the manager is."""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kompakt.errors import (
    InvalidPartitionsError,
    KafkaStorageError,
    PolicyViolationError,
    TopicExistsError,
    UnknownTopicError,
)
from kompakt.log.config import BrokerDefaults, TopicConfig
from kompakt.log.dirs import TOPICS_FILE, delete_dir_name
from kompakt.log.durable import write_json_atomically
from kompakt.log.names import validate_no_collision, validate_topic_name

log = logging.getLogger(__name__)


# Kafka's QuorumController.MAX_RECORDS_PER_USER_OP: one admin operation may not create
# more than 10000 metadata records (here: partitions); POLICY_VIOLATION beyond.
MAX_PARTITIONS_PER_OP = 10_000


@dataclass
class TopicMeta:
    name: str
    partitions: int
    topic_id: str
    overrides: dict[str, str] = field(default_factory=dict)


def check_batch_size(partitions: int) -> None:
    """POLICY_VIOLATION when one operation would make more than Kafka's
    MAX_RECORDS_PER_USER_OP records (partitions, or a request's results)."""
    if partitions > MAX_PARTITIONS_PER_OP:
        raise PolicyViolationError("Unable to perform excessively large batch operation.")


def new_topic_id() -> str:
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def check_new_topic(
    name: str,
    partitions: int,
    configs: Mapping[str, str] | None,
    broker_config: BrokerDefaults | Mapping[str, str] | None,
    existing: Iterable[str],
) -> TopicConfig:
    """Whether a topic may be created beside ``existing`` (the error if not), and its
    config: every creation path (CreateTopics, Metadata auto-create, the offline CLI,
    the coordinator) and the offline CLI's check before it opens a data dir."""
    validate_topic_name(name)
    if partitions < 1:
        raise InvalidPartitionsError(f"number of partitions must be at least 1, got {partitions}")
    check_batch_size(partitions)
    config = TopicConfig(dict(configs or {}), broker_config)
    names = set(existing)
    if name in names:
        raise TopicExistsError(f"Topic '{name}' already exists.")
    # Kafka's ReplicationControlManager.validateNewTopicNames: 'a.b' and 'a_b' would
    # share metric names
    validate_no_collision(name, names)
    return config


class TopicStore:
    """The topic operations of :class:`~kompakt.log.manager.LogManager` (its state:
    ``_topics`` and the logs, guarded by ``lock``)."""

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

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        configs: Mapping[str, str] | None = None,
        validate_only: bool = False,
        topic_id: str | None = None,
    ) -> TopicMeta:
        """``topic_id``: keep this id (a topic recreated from the remote tier's record),
        else a new one."""
        with self.lock:
            config = check_new_topic(name, partitions, configs, self.broker_config, self._topics)
            meta = TopicMeta(name, partitions, topic_id or new_topic_id(), dict(config.overrides))
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
