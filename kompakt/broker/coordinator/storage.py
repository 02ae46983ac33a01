"""The group coordinator's storage: the compacted ``__consumer_offsets`` topic.

Kafka's ``GroupMetadataManager`` storage half: loading replays the topic in offset order
(``doLoadGroupsAndOffsets``), so a tombstone always wins over the records before it;
writing appends one batch per call (a commit is atomic), flushed like an acks=all
produce. Record layouts are in :mod:`kompakt.broker.coordinator.records`. Everything
here is blocking file I/O: the coordinator calls it from a worker thread and decides,
under its own write lock, what to write.

Beside the topic, :data:`TOPIC_IDS_FILE` remembers which incarnation of each topic the
offsets were committed for.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from kompakt.broker.coordinator import records as rec
from kompakt.broker.coordinator.records import OffsetAndMetadata
from kompakt.broker.coordinator.state import Group
from kompakt.errors import KompaktError, TopicExistsError
from kompakt.log.transactions import control_type
from kompakt.record.encode import build_simple_batch
from kompakt.record.header import CONTROL_COMMIT

log = logging.getLogger("kompakt.broker.coordinator")

OFFSETS_TOPIC = "__consumer_offsets"

TOPIC_IDS_FILE = "kompakt-offsets-topic-ids.json"
"""In the data dir: the topic id (from ``partition.metadata``) of each topic that has
committed offsets, as of the commit. A topic deleted and created again while the broker
was down (``kompakt topic delete/create --data-dir``) has a new id, so the load knows the
old offsets belong to a topic that is gone, as Kafka knows from its topic-id deletion
event (``GroupCoordinator.onPartitionsDeleted``)."""

Records = list[tuple[bytes, bytes | None]]
Loaded = dict[str, tuple[rec.GroupMetadataValue | None, dict[tuple[str, int], OffsetAndMetadata]]]


STORE_GROUP_ERRORS: dict[ErrorCode, ErrorCode] = {
    ErrorCode.unknown_topic_or_partition: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas_after_append: ErrorCode.coordinator_not_available,
    ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
    ErrorCode.kafka_storage_error: ErrorCode.not_coordinator,
    ErrorCode.request_timed_out: ErrorCode.rebalance_in_progress,
    ErrorCode.message_too_large: ErrorCode.unknown_server_error,
    ErrorCode.record_list_too_large: ErrorCode.unknown_server_error,
    ErrorCode.invalid_fetch_size: ErrorCode.unknown_server_error,
}
"""How a failed group metadata write is told to the members (Kafka's
``GroupMetadataManager.storeGroup`` callback); other codes pass unchanged."""


def store_group_error(exc: BaseException) -> ErrorCode:
    """The error a member gets when its group's record cannot be written: a disk error
    is KAFKA_STORAGE_ERROR before the mapping (so NOT_COORDINATOR: the client looks
    for the coordinator again), anything else not a kompakt error is our bug."""
    if isinstance(exc, KompaktError):
        code = ErrorCode(exc.error_code)
    elif isinstance(exc, OSError):
        code = ErrorCode.kafka_storage_error
    else:
        log.error("unexpected error writing group metadata", exc_info=exc)
        code = ErrorCode.unknown_server_error
    return STORE_GROUP_ERRORS.get(code, code)


class OffsetsStorage:
    """``__consumer_offsets`` in ``logs`` (a :class:`~kompakt.log.manager.LogManager`)."""

    def __init__(self, logs: Any, num_partitions: int, segment_bytes: int):
        self.logs = logs
        self.num_partitions = num_partitions
        self.segment_bytes = segment_bytes
        self.topic_ids: dict[str, str] = {}
        """The ids last written to :data:`TOPIC_IDS_FILE`."""

    def partition_for(self, group_id: str) -> int:
        return rec.partition_for(group_id, self.num_partitions)

    def has_topic(self, topic: str) -> bool:
        return bool(self.logs.has_topic(topic))

    # -- load ----------------------------------------------------------------------------
    def load(self) -> Loaded:
        """Replay ``__consumer_offsets`` in offset order (Kafka's
        ``doLoadGroupsAndOffsets``), creating it (compacted) if absent: a record sets its
        key, a tombstone removes it, later wins. The result holds each group with a live
        metadata record or live offsets; a group whose metadata was tombstoned and whose
        offsets all were (DeleteGroups, expiry) is gone. Groups live in one partition
        each, so order within it is total."""
        logs = self.logs
        if not logs.has_topic(OFFSETS_TOPIC):
            ensure_internal_topic(logs, OFFSETS_TOPIC, self.num_partitions, self.segment_bytes)
            return {}
        self.num_partitions = logs.partition_count(OFFSETS_TOPIC)
        offsets: dict[str, dict[tuple[str, int], OffsetAndMetadata]] = {}
        metas: dict[str, rec.GroupMetadataValue] = {}
        for p in range(self.num_partitions):
            plog = logs.get_log(OFFSETS_TOPIC, p)
            # TxnOffsetCommit's records wait for their producer's marker (Kafka's
            # pendingTransactionalOffsetCommits): replayed on COMMIT, dropped on ABORT
            pending: dict[int, list] = {}
            for batch in plog.iter_batches(plog.log_start_offset):
                h = batch.header
                if h.is_control:
                    held = pending.pop(h.producer_id, [])
                    if h.is_transactional and control_type(batch) == CONTROL_COMMIT:
                        for r in held:
                            _replay_one(r, metas, offsets)
                    continue
                if h.is_transactional:
                    pending.setdefault(h.producer_id, []).extend(batch.records())
                    continue
                for r in batch.records():
                    _replay_one(r, metas, offsets)
        out = {gid: (metas.get(gid), offsets.get(gid, {})) for gid in metas.keys() | offsets}
        log.info(
            "loaded %d committed offsets of %d groups from %s",
            sum(len(o) for o in offsets.values()),
            len(out),
            OFFSETS_TOPIC,
        )
        return out

    # -- write ---------------------------------------------------------------------------
    def append_group(self, group_id: str, items: Records) -> None:
        """Append ``items`` to the partition that holds ``group_id``."""
        self.append(self.partition_for(group_id), items)

    def append(self, partition: int, items: Records, durable: bool = True) -> None:
        """One batch per call (a commit is atomic), flushed like an acks=all produce
        unless not ``durable`` (then :meth:`flush` follows, for several appends)."""
        append_batch(self._partition_log(partition), items, durable)

    def _partition_log(self, partition: int) -> Any:
        """The log of one ``__consumer_offsets`` partition, the topic made again first
        if it was deleted (a client may delete it: Kafka's DeleteTopics does not refuse
        internal topics; its FindCoordinator then creates it anew with the coordinator's
        partition count, ``getOrCreateInternalTopic``)."""
        if not self.logs.has_topic(OFFSETS_TOPIC):
            ensure_internal_topic(self.logs, OFFSETS_TOPIC, self.num_partitions, self.segment_bytes)
            log.warning("%s was deleted; created it again to store group metadata", OFFSETS_TOPIC)
        return self.logs.get_log(OFFSETS_TOPIC, partition)

    def flush(self, partition: int) -> None:
        flush_appended(self.logs.get_log(OFFSETS_TOPIC, partition))

    @staticmethod
    def group_record(
        g: Group, now: int, assignment: dict[str, bytes] | None = None
    ) -> tuple[bytes, bytes]:
        """The group's metadata record (Kafka's ``GroupCoordinatorRecordHelpers
        .newGroupMetadataRecord``): protocol, generation, leader, state time, members;
        each member's assignment from ``assignment`` when given (SyncGroup's, stored
        before the members get it), else its current one."""
        value = rec.group_value(
            rec.GroupMetadataValue(
                g.protocol_type or "",
                g.generation,
                g.protocol,
                g.leader,
                g.state_timestamp if g.state_timestamp is not None else now,
                tuple(
                    (
                        m.member_id,
                        m.group_instance_id,
                        m.client_id,
                        m.client_host,
                        m.rebalance_timeout_ms,
                        m.session_timeout_ms,
                        m.metadata_for(g.protocol),
                        m.assignment if assignment is None else assignment[m.member_id],
                    )
                    for m in g.members.values()
                ),
            )
        )
        return rec.group_key(g.group_id), value

    # -- which topic the offsets belong to (see TOPIC_IDS_FILE) ----------------------------
    def _topic_ids_path(self) -> Path:
        return Path(self.logs.dir) / TOPIC_IDS_FILE

    def incarnation(self, topic: str) -> str | None:
        """The id of the topic now called ``topic``, from its partition 0's
        ``partition.metadata`` (the file Kafka and kompakt write when a partition is
        made); None when the topic is absent or the file unreadable (then unknown)."""
        logs = self.logs
        if not logs.has_topic(topic):
            return None
        try:
            text = (logs.get_log(topic, 0).dir / "partition.metadata").read_text()
        except (OSError, KompaktError, UnicodeDecodeError):
            return None
        for line in text.splitlines():
            name, sep, value = line.partition(":")
            if sep and name.strip() == "topic_id" and value.strip():
                return value.strip()
        return None

    def _read_topic_ids(self) -> dict[str, str]:
        try:
            data = json.loads(self._topic_ids_path().read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.warning("ignoring unreadable %s: %s", TOPIC_IDS_FILE, exc)
            return {}
        if not isinstance(data, dict):
            return {}
        return {str(k): str(v) for k, v in data.items()}

    def gone_topics(self, topics: set[str]) -> set[str]:
        """Of ``topics`` (those with committed offsets), the ones that no longer exist:
        absent from the data dir, or present under a different topic id than when the
        offsets were committed. A topic whose id was never recorded (an older data dir)
        is kept: only a topic known to be gone loses its offsets."""
        known = self._read_topic_ids()
        gone = set()
        for topic in topics:
            if not self.logs.has_topic(topic):
                gone.add(topic)
                continue
            was, now = known.get(topic), self.incarnation(topic)
            if was is not None and now is not None and was != now:
                log.info("topic %s was deleted and created again (id %s, now %s)", topic, was, now)
                gone.add(topic)
        return gone

    def forget_topics(self, topics: set[str]) -> None:
        for t in topics:
            self.topic_ids.pop(t, None)

    def save_topic_ids(self, topics: set[str], *, rebuild: bool = False) -> None:
        """Record the ids of ``topics`` (``rebuild``: of exactly these, forgetting the
        rest), atomically; called before their offsets are written, so a crash can only
        leave an id without offsets, never offsets without their id."""
        changed = rebuild
        if rebuild:
            self.topic_ids = {}
        for t in topics:
            tid = self.incarnation(t)
            if tid is not None and self.topic_ids.get(t) != tid:
                self.topic_ids[t] = tid
                changed = True
        if not changed:
            return
        path = self._topic_ids_path()
        tmp = path.with_name(path.name + ".tmp")
        try:
            with open(tmp, "w") as f:
                json.dump(self.topic_ids, f, indent=1, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError as exc:  # the offsets themselves are safe; only the check weakens
            log.warning("cannot write %s: %s", path, exc)


def append_batch(plog: Any, items: Records, durable: bool) -> None:
    """A coordinator's write to its internal topic: ``items`` as one batch, fsynced if
    ``durable``, else left for :func:`flush_appended` to cover with others'.

    Kafka appends a coordinator's records with ``requiredAcks = -1`` (the transaction
    log's ``EnforcedRequiredAcks``, ``offsets.commit.required.acks``): the answer waits
    for the records to be durable, as a Produce with acks=all, and no more. So only the
    ``.log`` files are fsynced (:meth:`PartitionLog.flush_records`); the indexes and the
    recovery point are the periodic flush's, and recovery rebuilds them from the
    records. The batch is the broker's own: appended without the client checks
    (``AppendOrigin.COORDINATOR``)."""
    plog.append(build_simple_batch(items, timestamp=plog.clock()), trusted=True)
    if durable:
        plog.flush_records()


def unflushed(plog: Any) -> bool:
    """Whether ``plog`` has appends not yet fsynced. Read without the log's lock: a
    stale answer only costs a flush that finds nothing to do."""
    return plog.durable_offset < plog.log_end_offset


def flush_appended(plog: Any) -> None:
    """fsync the records appended to ``plog`` and not yet durable, if any (acks=all's
    fsync, as :func:`append_batch`)."""
    if unflushed(plog):
        plog.flush_records()


def ensure_internal_topic(logs: Any, name: str, partitions: int, segment_bytes: int) -> int:
    """Create a coordinator's compacted internal topic if absent (Kafka creates
    ``__consumer_offsets`` and ``__transaction_state`` on the first FindCoordinator);
    returns its partition count, which an existing topic keeps."""
    if not logs.has_topic(name):
        try:
            logs.create_topic(
                name,
                partitions,
                {"cleanup.policy": "compact", "segment.bytes": str(segment_bytes)},
            )
        except TopicExistsError:
            pass
    return int(logs.partition_count(name))


def _replay_one(
    r: Any,
    metas: dict[str, rec.GroupMetadataValue],
    offsets: dict[str, dict[tuple[str, int], OffsetAndMetadata]],
) -> None:
    if r.key is None:
        return
    try:
        _replay(r.key, r.value, metas, offsets)
    except Exception:
        log.warning("skipping undecodable %s record at %d", OFFSETS_TOPIC, r.offset)


def _replay(
    key: bytes,
    value: bytes | None,
    metas: dict[str, rec.GroupMetadataValue],
    offsets: dict[str, dict[tuple[str, int], OffsetAndMetadata]],
) -> None:
    """Apply one ``__consumer_offsets`` record to the state loaded so far."""
    parsed = rec.parse_key(key)
    if parsed is None:
        return
    if parsed[0] == "group":
        group_id = parsed[1][0]
        if value is None:
            metas.pop(group_id, None)
        else:
            metas[group_id] = rec.parse_group_value(value)
        return
    group_id, topic, part = parsed[1]
    if value is None:
        mine = offsets.get(group_id)
        if mine is not None:
            mine.pop((topic, part), None)
            if not mine:
                del offsets[group_id]
    else:
        offsets.setdefault(group_id, {})[(topic, part)] = rec.parse_offset_value(value)
