"""The classic group protocol's state machine, one node (Kafka's GroupCoordinator).

All state lives on the broker's event loop: joins and syncs park on futures, session
expiry and rebalance deadlines are ``loop.call_later`` timers (no polling). Committed
offsets are kept in memory and written to the compacted ``__consumer_offsets`` topic;
:meth:`GroupCoordinator.ensure_loaded` rebuilds them from it after a restart, together
with each group's membership (Kafka's ``GroupMetadataManager.loadGroup``): a group saved
Stable comes back Stable at the same generation with its members, whose session timers
start at the load, so members that do not come back expire and the group rebalances.

Offsets expire as in Kafka (KIP-211, ``ClassicGroup.offsetExpirationCondition`` and
``OffsetMetadataManager.cleanupExpiredOffsets``): every
``offsets.retention.check.interval.ms`` a task on the loop removes offsets older than
``offsets.retention.minutes`` and writes tombstones for them; a group left Empty with no
offsets goes Dead and its metadata record is tombstoned too. The compacted topic then
stays bounded: the cleaner keeps one record per key and drops the tombstones after
``delete.retention.ms``. Time comes from an injectable clock (``clock=``), the log
manager's by default, so tests can move it.

Removing offsets for any reason (expiry, DeleteGroups, OffsetDelete, a deleted topic)
goes through one path, Kafka's ``GroupMetadataManager.cleanupGroupMetadata``: tombstones
for the removed offsets, and a group left Empty with no offsets goes Dead with a metadata
tombstone. Loading replays ``__consumer_offsets`` in offset order, so a tombstone always
wins over the records before it (``doLoadGroupsAndOffsets``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kompakt.broker.coordinator import records as rec
from kompakt.broker.coordinator.records import OffsetAndMetadata
from kompakt.errors import KompaktError, TopicExistsError
from kompakt.record.encode import build_simple_batch

log = logging.getLogger("kompakt.broker.coordinator")

OFFSETS_TOPIC = "__consumer_offsets"

NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
OFFSET_METADATA_TOO_LARGE = 12
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
INVALID_GROUP_ID = 24
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
GROUP_ID_NOT_FOUND = 69
NON_EMPTY_GROUP = 68
MEMBER_ID_REQUIRED = 79
GROUP_MAX_SIZE_REACHED = 81
FENCED_INSTANCE_ID = 82
GROUP_SUBSCRIBED_TO_TOPIC = 86

EMPTY = "Empty"
PREPARING = "PreparingRebalance"
COMPLETING = "CompletingRebalance"
STABLE = "Stable"
DEAD = "Dead"

MAX_METADATA = 4096

TOPIC_IDS_FILE = "kompakt-offsets-topic-ids.json"
"""In the data dir: the topic id (from ``partition.metadata``) of each topic that has
committed offsets, as of the commit. A topic deleted and created again while the broker
was down (``kompakt topic delete/create --data-dir``) has a new id, so the load knows the
old offsets belong to a topic that is gone, as Kafka knows from its topic-id deletion
event (``GroupCoordinator.onPartitionsDeleted``)."""


@dataclass(eq=False)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_future: asyncio.Future | None = None
    sync_future: asyncio.Future | None = None
    timer: asyncio.TimerHandle | None = None

    def metadata_for(self, protocol: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""


@dataclass(eq=False)
class Group:
    group_id: str
    state: str = EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending: dict[str, asyncio.TimerHandle] = field(default_factory=dict)
    offsets: dict[tuple[str, int], OffsetAndMetadata] = field(default_factory=dict)
    join_timer: asyncio.TimerHandle | None = None
    delaying: bool = False
    state_timestamp: int | None = None
    """When the group entered its current state (Kafka's ``currentStateTimestamp``);
    None for a group only known from its offsets (a simple consumer's)."""
    subscribed: set[str] | None = None
    """Topics the members subscribe to, if known (consumer protocol); Kafka's
    ``subscribedTopics``: offsets of other topics may expire while the group is Stable."""
    static: dict[str, str] = field(default_factory=dict)
    """group.instance.id -> member id of the static members (KIP-345)."""

    def is_empty(self) -> bool:
        return not self.members

    def is_subscribed(self, topic: str) -> bool:
        """Kafka's ``ClassicGroup.isSubscribedToTopic``: from the members' subscriptions
        when known, else assume a consumer-protocol group reads every topic."""
        if self.subscribed is not None:
            return topic in self.subscribed
        return self.protocol_type == "consumer"

    def all_joined(self) -> bool:
        return not self.pending and all(
            m.join_future is not None and not m.join_future.done() for m in self.members.values()
        )

    def select_protocol(self) -> str | None:
        common: set[str] | None = None
        for m in self.members.values():
            names = {n for n, _ in m.protocols}
            common = names if common is None else common & names
        if not common:
            return None
        votes: dict[str, int] = {}
        order: list[str] = []
        for m in self.members.values():
            for n, _ in m.protocols:
                if n in common:
                    votes[n] = votes.get(n, 0) + 1
                    if n not in order:
                        order.append(n)
                    break
        return max(order, key=lambda n: (votes[n], -order.index(n)))

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        names = {n for n, _ in protocols}
        if not protocol_type or not names:
            return False
        if not self.members:
            return True
        if protocol_type != self.protocol_type:
            return False
        return bool(
            names.intersection(*({n for n, _ in m.protocols} for m in self.members.values()))
        )


def _system_ms() -> int:
    return int(time.time() * 1000)


class GroupCoordinator:
    def __init__(self, state: Any, clock: Callable[[], int] | None = None):
        self.state = state
        self.groups: dict[str, Group] = {}
        self.loop = asyncio.get_running_loop()
        logs_clock = getattr(getattr(state, "logs", None), "clock", None)
        self.clock: Callable[[], int] = clock or logs_clock or _system_ms
        self._expiry_task: asyncio.Task | None = None
        self.offsets_expired = 0  # offsets removed by retention since start (for metrics)
        self._loaded = False
        self._load_lock = asyncio.Lock()
        self._write_lock = asyncio.Lock()
        self._num_partitions = int(state.config.get("offsets.topic.num.partitions"))
        self._closed = False
        self._tasks: set[asyncio.Task] = set()
        self._topic_ids: dict[str, str] = {}  # see TOPIC_IDS_FILE
        notifier = getattr(state, "notifier", None)
        if notifier is not None:
            ev = notifier.register([])
            self._watch = self.loop.create_task(self._watch_shutdown(notifier, ev))

    # -- config ----------------------------------------------------------------------------
    def _cfg(self, key: str, default: int) -> int:
        try:
            return int(self.state.config.get(key))
        except Exception:
            return default

    def now(self) -> int:
        return int(self.clock())

    def _set_state(self, g: Group, state: str) -> None:
        """Every transition stamps the time (Kafka's ``currentStateTimestamp``)."""
        g.state = state
        g.state_timestamp = self.now()

    async def _watch_shutdown(self, notifier: Any, ev: asyncio.Event) -> None:
        while True:
            await ev.wait()
            ev.clear()
            if self.state.closing:
                break
        notifier.unregister(ev, [])
        self.shutdown()

    def shutdown(self) -> None:
        self._closed = True
        if self._expiry_task is not None:
            self._expiry_task.cancel()
        for g in self.groups.values():
            if g.join_timer is not None:
                g.join_timer.cancel()
            for h in g.pending.values():
                h.cancel()
            for m in g.members.values():
                if m.timer is not None:
                    m.timer.cancel()
                for fut in (m.join_future, m.sync_future):
                    if fut is not None and not fut.done():
                        fut.set_result({"error_code": NOT_COORDINATOR})

    # -- loading and persistence -----------------------------------------------------------
    async def ensure_loaded(self) -> None:
        if self._loaded:
            return
        async with self._load_lock:
            if self._loaded:
                return
            loaded = await asyncio.to_thread(self._load)
            now = self.now()
            for group_id, (meta, offsets) in loaded.items():
                g = self.groups[group_id] = Group(group_id)
                g.offsets.update(offsets)
                if meta is None:  # a simple consumer's group: offsets only
                    continue
                self._restore_group(g, meta, now)
            # Offsets of topics deleted (or deleted and created again) while the broker
            # was down go now, with tombstones, as DeleteTopics would have done.
            gone = await asyncio.to_thread(self._gone_topics)
            if gone:
                removed = await self._cleanup(
                    lambda g: {tp: om for tp, om in g.offsets.items() if tp[0] in gone},
                    force=True,
                )
                log.info("removed %d committed offsets of deleted topics %s", removed, sorted(gone))
            await asyncio.to_thread(self._save_topic_ids, None)
            self._loaded = True
            self._on_loaded()
            if self._expiry_task is None and not self._closed:
                self._expiry_task = self.loop.create_task(self._expiry_loop())

    @staticmethod
    def _restore_group(g: Group, meta: rec.GroupMetadataValue, now: int) -> None:
        """Kafka's ``ClassicGroup.fromRecord`` (``GroupMetadataManager.loadGroup`` before
        KIP-848): the group comes back from its latest metadata record with its protocol
        type and name, generation, leader and members (member id, group.instance.id,
        client id and host, timeouts, subscription and assignment); Stable if it has
        members, else Empty. Session timers are armed by :meth:`_on_loaded`."""
        g.generation = meta.generation
        g.protocol_type = meta.protocol_type or None
        g.state_timestamp = meta.state_timestamp if meta.state_timestamp >= 0 else now
        if not meta.members:
            g.subscribed = set() if g.protocol_type == "consumer" else None
            return
        g.protocol = meta.protocol
        for mid, iid, cid, host, rb, sess, sub, asg in meta.members:
            g.members[mid] = Member(
                mid,
                iid,
                cid,
                host,
                sess,
                rb,
                meta.protocol_type,
                [(meta.protocol or "", sub)],
                asg,
            )
            if iid is not None:
                g.static[iid] = mid
        g.leader = meta.leader if meta.leader in g.members else next(iter(g.members))
        g.state = STABLE
        g.subscribed = GroupCoordinator._subscribed_topics(g)

    def _on_loaded(self) -> None:
        """Kafka's ``GroupMetadataManager.onLoaded``: every restored member gets a session
        timer (``rescheduleClassicGroupMemberHeartbeat``), so a member that does not come
        back is removed after its session timeout and the group rebalances; a group over
        ``group.max.size`` (lowered while the broker was down) rebalances at once."""
        if self._closed:  # shutdown already cancelled every timer
            return
        max_size = self._cfg("group.max.size", 2**31 - 1)
        for g in self.groups.values():
            if not g.members:
                continue
            log.info(
                "group %s: loaded %s at generation %d with %d members",
                g.group_id,
                g.state,
                g.generation,
                len(g.members),
            )
            for m in g.members.values():
                self._arm_session(g, m)
            if len(g.members) > max_size:
                self._prepare_rebalance(g)

    def _load(self) -> dict[str, tuple[rec.GroupMetadataValue | None, dict]]:
        """Replay ``__consumer_offsets`` in offset order (Kafka's
        ``doLoadGroupsAndOffsets``): a record sets its key, a tombstone removes it, later
        wins. The result holds each group with a live metadata record or live offsets;
        a group whose metadata was tombstoned and whose offsets all were (DeleteGroups,
        expiry) is gone. Groups live in one partition each, so order within it is total."""
        logs = self.state.logs
        if not logs.has_topic(OFFSETS_TOPIC):
            try:
                logs.create_topic(
                    OFFSETS_TOPIC,
                    self._num_partitions,
                    {
                        "cleanup.policy": "compact",
                        "segment.bytes": str(self._cfg("offsets.topic.segment.bytes", 104857600)),
                    },
                )
            except TopicExistsError:
                pass
            return {}
        self._num_partitions = logs.partition_count(OFFSETS_TOPIC)
        offsets: dict[str, dict[tuple[str, int], OffsetAndMetadata]] = {}
        metas: dict[str, rec.GroupMetadataValue] = {}
        for p in range(self._num_partitions):
            plog = logs.get_log(OFFSETS_TOPIC, p)
            for batch in plog.iter_batches(plog.log_start_offset):
                if batch.header.is_control:
                    continue
                for r in batch.records():
                    if r.key is None:
                        continue
                    try:
                        parsed = rec.parse_key(r.key)
                        if parsed is None:
                            continue
                        if parsed[0] == "group":
                            group_id = parsed[1][0]
                            if r.value is None:
                                metas.pop(group_id, None)
                            else:
                                metas[group_id] = rec.parse_group_value(r.value)
                            continue
                        group_id, topic, part = parsed[1]
                        if r.value is None:
                            mine = offsets.get(group_id)
                            if mine is not None:
                                mine.pop((topic, part), None)
                                if not mine:
                                    del offsets[group_id]
                        else:
                            om = rec.parse_offset_value(r.value)
                            offsets.setdefault(group_id, {})[(topic, part)] = om
                    except Exception:
                        log.warning("skipping undecodable %s record at %d", OFFSETS_TOPIC, r.offset)
        out = {gid: (metas.get(gid), offsets.get(gid, {})) for gid in metas.keys() | offsets}
        log.info(
            "loaded %d committed offsets of %d groups from %s",
            sum(len(o) for o in offsets.values()),
            len(out),
            OFFSETS_TOPIC,
        )
        return out

    # -- which topic the offsets belong to (see TOPIC_IDS_FILE) ------------------------------
    def _topic_ids_path(self) -> Any:
        return self.state.logs.dir / TOPIC_IDS_FILE

    def _incarnation(self, topic: str) -> str | None:
        """The id of the topic now called ``topic``, from its partition 0's
        ``partition.metadata`` (the file Kafka and kompakt write when a partition is
        made); None when the topic is absent or the file unreadable (then unknown)."""
        logs = self.state.logs
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

    def _gone_topics(self) -> set[str]:
        """Topics with committed offsets that no longer exist: absent from the data dir,
        or present under a different topic id than when the offsets were committed. A
        topic whose id was never recorded (an older data dir) is kept: only a topic
        known to be gone loses its offsets."""
        logs = self.state.logs
        known = self._read_topic_ids()
        gone = set()
        for topic in {t for g in self.groups.values() for t, _p in g.offsets}:
            if not logs.has_topic(topic):
                gone.add(topic)
                continue
            was, now = known.get(topic), self._incarnation(topic)
            if was is not None and now is not None and was != now:
                log.info("topic %s was deleted and created again (id %s, now %s)", topic, was, now)
                gone.add(topic)
        return gone

    def _save_topic_ids(self, new_topics: set[str] | None) -> None:
        """Record the ids of ``new_topics`` (None: rebuild from every group's offsets),
        atomically; called before their offsets are written, so a crash can only leave an
        id without offsets, never offsets without their id."""
        changed = new_topics is None
        if new_topics is None:
            self._topic_ids = {}
            new_topics = {t for g in self.groups.values() for t, _p in g.offsets}
        for t in new_topics:
            tid = self._incarnation(t)
            if tid is not None and self._topic_ids.get(t) != tid:
                self._topic_ids[t] = tid
                changed = True
        if not changed:
            return
        path = self._topic_ids_path()
        tmp = path.with_name(path.name + ".tmp")
        try:
            with open(tmp, "w") as f:
                json.dump(self._topic_ids, f, indent=1, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError as exc:  # the offsets themselves are safe; only the check weakens
            log.warning("cannot write %s: %s", path, exc)

    def _persist_group(self, g: Group) -> None:
        """Write the group's metadata record (in the background, in order)."""
        if not self._loaded or self._closed:
            return
        value = rec.group_value(
            rec.GroupMetadataValue(
                g.protocol_type or "",
                g.generation,
                g.protocol,
                g.leader,
                g.state_timestamp if g.state_timestamp is not None else self.now(),
                tuple(
                    (
                        m.member_id,
                        m.group_instance_id,
                        m.client_id,
                        m.client_host,
                        m.rebalance_timeout_ms,
                        m.session_timeout_ms,
                        m.metadata_for(g.protocol),
                        m.assignment,
                    )
                    for m in g.members.values()
                ),
            )
        )
        task = self.loop.create_task(self._write(g.group_id, [(rec.group_key(g.group_id), value)]))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _write(self, group_id: str, items: list[tuple[bytes, bytes | None]]) -> None:
        try:
            async with self._write_lock:
                await asyncio.to_thread(self._append, group_id, items)
        except Exception:
            log.exception("cannot write group %s metadata", group_id)

    def _append(self, group_id: str, items: list[tuple[bytes, bytes | None]]) -> None:
        self._append_partition(rec.partition_for(group_id, self._num_partitions), items)

    def _append_partition(self, partition: int, items: list[tuple[bytes, bytes | None]]) -> None:
        """One batch per call (a commit is atomic), flushed like an acks=all produce."""
        plog = self.state.logs.get_log(OFFSETS_TOPIC, partition)
        plog.append(build_simple_batch(items, timestamp=plog.clock()))
        plog.flush()

    # -- groups ----------------------------------------------------------------------------
    def group(self, group_id: str, create: bool = False) -> Group | None:
        g = self.groups.get(group_id)
        if g is None and create:
            g = self.groups[group_id] = Group(group_id)
        return g

    def _arm_session(self, g: Group, m: Member) -> None:
        if m.timer is not None:
            m.timer.cancel()
        m.timer = self.loop.call_later(m.session_timeout_ms / 1000, self._session_expired, g, m)

    def _session_expired(self, g: Group, m: Member) -> None:
        if g.members.get(m.member_id) is not m:
            return
        if (m.join_future is not None and not m.join_future.done()) or (
            m.sync_future is not None and not m.sync_future.done()
        ):
            self._arm_session(g, m)  # waiting members are kept alive
            return
        log.info("group %s: member %s session expired", g.group_id, m.member_id)
        self._remove_member(g, m)

    @staticmethod
    def _forget(g: Group, m: Member) -> None:
        g.members.pop(m.member_id, None)
        if m.group_instance_id is not None and g.static.get(m.group_instance_id) == m.member_id:
            del g.static[m.group_instance_id]
        if m.timer is not None:
            m.timer.cancel()

    def _remove_member(self, g: Group, m: Member) -> None:
        self._forget(g, m)
        for fut in (m.join_future, m.sync_future):
            if fut is not None and not fut.done():
                fut.set_result({"error_code": UNKNOWN_MEMBER_ID})
        if g.leader == m.member_id:
            g.leader = next(iter(g.members), None)
        if g.state in (STABLE, COMPLETING):
            self._prepare_rebalance(g)
        if g.state == PREPARING:
            self._maybe_complete_join(g)

    def _prepare_rebalance(self, g: Group) -> None:
        if g.state == COMPLETING:
            for m in g.members.values():
                if m.sync_future is not None and not m.sync_future.done():
                    m.sync_future.set_result({"error_code": REBALANCE_IN_PROGRESS})
        was_empty = g.state == EMPTY
        self._set_state(g, PREPARING)
        delay = self._cfg("group.initial.rebalance.delay.ms", 3000) / 1000 if was_empty else 0
        timeout = max((m.rebalance_timeout_ms for m in g.members.values()), default=0) / 1000
        g.delaying = was_empty and delay > 0
        if g.join_timer is not None:
            g.join_timer.cancel()
        g.join_timer = self.loop.call_later(timeout, self._join_deadline, g)
        if was_empty and delay > 0:
            self.loop.call_later(min(delay, timeout), self._end_initial_delay, g)
        log.info("group %s: preparing rebalance (generation %d)", g.group_id, g.generation)

    def _end_initial_delay(self, g: Group) -> None:
        g.delaying = False
        self._maybe_complete_join(g)

    def _join_deadline(self, g: Group) -> None:
        g.join_timer = None
        if g.state != PREPARING:
            return
        for m in list(g.members.values()):
            if m.join_future is None or m.join_future.done():
                log.info("group %s: member %s did not rejoin in time", g.group_id, m.member_id)
                self._forget(g, m)
        for h in g.pending.values():
            h.cancel()
        g.pending.clear()
        self._complete_join(g)

    def _maybe_complete_join(self, g: Group) -> None:
        if g.state != PREPARING:
            return
        if g.members and g.all_joined() and not g.delaying:
            self._complete_join(g)
        elif not g.members and not g.pending:
            self._complete_join(g)

    def _complete_join(self, g: Group) -> None:
        if g.join_timer is not None:
            g.join_timer.cancel()
            g.join_timer = None
        if g.leader not in g.members:
            g.leader = next(iter(g.members), None)
        g.generation += 1
        if not g.members:
            self._set_state(g, EMPTY)
            g.protocol = None
            g.leader = None
            g.subscribed = set() if g.protocol_type == "consumer" else None
            self._persist_group(g)
            return
        g.protocol = g.select_protocol()
        self._set_state(g, COMPLETING)
        g.subscribed = self._subscribed_topics(g)
        log.info(
            "group %s: generation %d, protocol %s, leader %s, %d members",
            g.group_id,
            g.generation,
            g.protocol,
            g.leader,
            len(g.members),
        )
        members = [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "metadata": m.metadata_for(g.protocol),
            }
            for m in g.members.values()
        ]
        for m in g.members.values():
            m.assignment = b""
            resp = {
                "error_code": NONE,
                "generation_id": g.generation,
                "protocol_type": g.protocol_type,
                "protocol_name": g.protocol,
                "leader": g.leader,
                "member_id": m.member_id,
                "members": members if m.member_id == g.leader else [],
            }
            if m.join_future is not None and not m.join_future.done():
                m.join_future.set_result(resp)
            self._arm_session(g, m)

    @staticmethod
    def _subscribed_topics(g: Group) -> set[str] | None:
        """Union of the members' subscriptions (Kafka's ``computeSubscribedTopics``);
        None (no expiry while members exist) unless every member's metadata parses."""
        if g.protocol_type != "consumer" or g.protocol is None:
            return None
        topics: set[str] = set()
        try:
            for m in g.members.values():
                topics |= rec.subscription_topics(m.metadata_for(g.protocol))
        except Exception:
            return None
        return topics

    # -- JoinGroup -------------------------------------------------------------------------
    async def join(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        require_known_member_id: bool,
    ) -> dict[str, Any]:
        def err(code: int, mid: str = member_id) -> dict[str, Any]:
            return {"error_code": code, "member_id": mid, "generation_id": -1, "leader": ""}

        if self._closed:
            return err(NOT_COORDINATOR)
        if not group_id:
            return err(INVALID_GROUP_ID)
        if not (
            self._cfg("group.min.session.timeout.ms", 6000)
            <= session_timeout_ms
            <= self._cfg("group.max.session.timeout.ms", 1800000)
        ):
            return err(INVALID_SESSION_TIMEOUT)
        g = self.group(group_id, create=not member_id)
        if g is None:
            return err(UNKNOWN_MEMBER_ID)
        if not g.supports(protocol_type, protocols):
            return err(INCONSISTENT_GROUP_PROTOCOL)
        if group_instance_id is not None:
            known = g.static.get(group_instance_id)
            if known is not None and known in g.members:
                if not member_id:
                    return await self._replace_static(
                        g,
                        known,
                        group_instance_id,
                        client_id,
                        client_host,
                        session_timeout_ms,
                        rebalance_timeout_ms,
                        protocols,
                    )
                if member_id != known:
                    return err(FENCED_INSTANCE_ID)
        if member_id and member_id not in g.members and member_id not in g.pending:
            return err(UNKNOWN_MEMBER_ID)
        if not member_id:
            if len(g.members) + len(g.pending) >= self._cfg("group.max.size", 2**31 - 1):
                return err(GROUP_MAX_SIZE_REACHED)
            prefix = group_instance_id if group_instance_id is not None else client_id
            member_id = f"{prefix or 'member'}-{uuid.uuid4()}"
            if require_known_member_id and group_instance_id is None:
                g.pending[member_id] = self.loop.call_later(
                    session_timeout_ms / 1000, self._pending_expired, g, member_id
                )
                return err(MEMBER_ID_REQUIRED, member_id)
        handle = g.pending.pop(member_id, None)
        if handle is not None:
            handle.cancel()
        m = g.members.get(member_id)
        if m is None:
            m = Member(
                member_id,
                group_instance_id,
                client_id,
                client_host,
                session_timeout_ms,
                rebalance_timeout_ms,
                protocol_type,
                protocols,
            )
            if not g.members:
                g.protocol_type = protocol_type
            g.members[member_id] = m
            if group_instance_id is not None:
                g.static[group_instance_id] = member_id
            if g.leader is None:
                g.leader = member_id
            changed = True
        else:
            changed = m.protocols != protocols
            m.protocols = protocols
            m.session_timeout_ms = session_timeout_ms
            m.rebalance_timeout_ms = rebalance_timeout_ms
        if m.join_future is not None and not m.join_future.done():
            m.join_future.set_result({"error_code": UNKNOWN_MEMBER_ID})  # superseded
        if g.state == STABLE and not changed and member_id != g.leader:
            self._arm_session(g, m)
            return {
                "error_code": NONE,
                "generation_id": g.generation,
                "protocol_type": g.protocol_type,
                "protocol_name": g.protocol,
                "leader": g.leader,
                "member_id": member_id,
                "members": [],
            }
        fut: asyncio.Future = self.loop.create_future()
        m.join_future = fut
        self._arm_session(g, m)
        if g.state != PREPARING:
            self._prepare_rebalance(g)
        self._maybe_complete_join(g)
        return await fut

    async def _replace_static(
        self,
        g: Group,
        old_id: str,
        instance_id: str,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocols: list[tuple[str, bytes]],
    ) -> dict[str, Any]:
        """A restarted static member (KIP-345) takes its old member's place under a new
        member id. As Kafka's ``updateStaticMemberAndRebalance``: in a Stable group whose
        selected protocol stays the same there is no rebalance; the member keeps its
        assignment, and the reply names the old leader so it does not reassign. In any
        other state the group rebalances. The old member id is fenced."""
        m = g.members.pop(old_id)
        for fut in (m.join_future, m.sync_future):
            if fut is not None and not fut.done():
                fut.set_result({"error_code": FENCED_INSTANCE_ID})
        m.join_future = m.sync_future = None
        old_leader = g.leader
        new_id = f"{instance_id}-{uuid.uuid4()}"
        m.member_id = new_id
        m.client_id, m.client_host = client_id, client_host
        m.session_timeout_ms, m.rebalance_timeout_ms = session_timeout_ms, rebalance_timeout_ms
        m.protocols = protocols
        g.members[new_id] = m
        g.static[instance_id] = new_id
        if g.leader == old_id:
            g.leader = new_id
        self._arm_session(g, m)
        log.info("group %s: static member %s replaced %s", g.group_id, new_id, old_id)
        if g.state == STABLE and g.select_protocol() == g.protocol:
            self._persist_group(g)
            return {
                "error_code": NONE,
                "generation_id": g.generation,
                "protocol_type": g.protocol_type,
                "protocol_name": g.protocol,
                "leader": old_leader,
                "member_id": new_id,
                "members": [],
            }
        fut: asyncio.Future = self.loop.create_future()
        m.join_future = fut
        if g.state != PREPARING:
            self._prepare_rebalance(g)
        self._maybe_complete_join(g)
        return await fut

    def _pending_expired(self, g: Group, member_id: str) -> None:
        if g.pending.pop(member_id, None) is not None and g.state == PREPARING:
            self._maybe_complete_join(g)

    # -- SyncGroup -------------------------------------------------------------------------
    async def sync(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        assignments: dict[str, bytes],
        instance_id: str | None = None,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> dict[str, Any]:
        """SyncGroup, checked in Kafka's order (``validateSyncGroup``): member, generation,
        then protocol type and name (v5+, INCONSISTENT_GROUP_PROTOCOL), then the state."""
        if self._closed:
            return {"error_code": NOT_COORDINATOR}
        g = self.group(group_id)
        if _fenced(g, member_id, instance_id):
            return {"error_code": FENCED_INSTANCE_ID}
        if g is None or member_id not in g.members:
            return {"error_code": UNKNOWN_MEMBER_ID}
        if generation != g.generation:
            return {"error_code": ILLEGAL_GENERATION}
        if _inconsistent(protocol_type, g.protocol_type) or _inconsistent(
            protocol_name, g.protocol
        ):
            return {"error_code": INCONSISTENT_GROUP_PROTOCOL}
        m = g.members[member_id]
        ok = {"error_code": NONE, "protocol_type": g.protocol_type, "protocol_name": g.protocol}
        if g.state == PREPARING:
            return {"error_code": REBALANCE_IN_PROGRESS}
        if g.state == STABLE:
            self._arm_session(g, m)
            return {**ok, "assignment": m.assignment}
        if g.state != COMPLETING:
            return {"error_code": UNKNOWN_MEMBER_ID}
        fut: asyncio.Future = self.loop.create_future()
        if m.sync_future is not None and not m.sync_future.done():
            m.sync_future.set_result({"error_code": REBALANCE_IN_PROGRESS})
        m.sync_future = fut
        self._arm_session(g, m)
        if member_id == g.leader:
            for mm in g.members.values():
                mm.assignment = assignments.get(mm.member_id, b"")
            self._set_state(g, STABLE)
            log.info("group %s: stable at generation %d", g.group_id, g.generation)
            self._persist_group(g)
            for mm in g.members.values():
                if mm.sync_future is not None and not mm.sync_future.done():
                    mm.sync_future.set_result({**ok, "assignment": mm.assignment})
                self._arm_session(g, mm)
        return await fut

    # -- Heartbeat / LeaveGroup ------------------------------------------------------------
    def heartbeat(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None = None
    ) -> int:
        g = self.group(group_id)
        if _fenced(g, member_id, instance_id):
            return FENCED_INSTANCE_ID
        if g is None or member_id not in g.members:
            return UNKNOWN_MEMBER_ID
        # Kafka's validateClassicGroupHeartbeat: member, then generation, then the state
        if generation != g.generation:
            return ILLEGAL_GENERATION
        m = g.members[member_id]
        if g.state == EMPTY:
            return UNKNOWN_MEMBER_ID
        self._arm_session(g, m)
        if g.state == PREPARING:
            return REBALANCE_IN_PROGRESS
        return NONE

    def leave(self, group_id: str, member_id: str, instance_id: str | None = None) -> int:
        """LeaveGroup; v3+ may name a static member by ``group.instance.id`` alone (KIP-345,
        how admin tools remove static members); a mismatching member id is fenced."""
        g = self.group(group_id)
        if g is None:
            return UNKNOWN_MEMBER_ID
        if instance_id is not None:
            known = g.static.get(instance_id)
            if known is None:
                return UNKNOWN_MEMBER_ID
            if member_id and member_id != known:
                return FENCED_INSTANCE_ID
            member_id = known
        handle = g.pending.pop(member_id, None)
        if handle is not None:
            handle.cancel()
            self._maybe_complete_join(g)
            return NONE
        m = g.members.get(member_id)
        if m is None:
            return UNKNOWN_MEMBER_ID
        log.info("group %s: member %s left", group_id, member_id)
        self._remove_member(g, m)
        return NONE

    # -- offsets ---------------------------------------------------------------------------
    def commit_check(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        instance_id: str | None = None,
        api_version: int = 8,
    ) -> int:
        """The group-level answer to an OffsetCommit, in Kafka's order
        (``OffsetMetadataManager.validateOffsetCommit`` and
        ``ClassicGroup.validateOffsetCommit``): an unknown group takes only simple commits
        (generation < 0), else ILLEGAL_GENERATION (GROUP_ID_NOT_FOUND from v9); an Empty
        group takes simple commits; otherwise the member must be known (fenced static
        members first), then the generation must match, and only then does
        CompletingRebalance answer REBALANCE_IN_PROGRESS (librdkafka's test 0113
        ``v_commit_during_rebalance`` relies on this order)."""
        g = self.group(group_id)
        if g is None:
            if generation < 0:
                return NONE
            return GROUP_ID_NOT_FOUND if api_version >= 9 else ILLEGAL_GENERATION
        if generation < 0 and g.state == EMPTY:
            return NONE
        if generation >= 0 or member_id or instance_id is not None:
            if _fenced(g, member_id, instance_id):
                return FENCED_INSTANCE_ID
            if member_id not in g.members:
                return UNKNOWN_MEMBER_ID
            if generation != g.generation:
                return ILLEGAL_GENERATION
        elif g.state != EMPTY:
            return UNKNOWN_MEMBER_ID
        if g.state == COMPLETING:
            return REBALANCE_IN_PROGRESS
        m = g.members.get(member_id)
        if m is not None:
            self._arm_session(g, m)
        return NONE

    async def commit(
        self, group_id: str, offsets: dict[tuple[str, int], OffsetAndMetadata]
    ) -> set[tuple[str, int]]:
        """Write ``offsets``; returns those refused because their topic was deleted
        after the request was checked (a DeleteTopics racing the commit), which would
        otherwise outlive the topic's tombstones."""
        if not offsets:
            return set()
        async with self._write_lock:  # expiry and topic deletion decide under this lock too
            logs = self.state.logs
            refused = {tp for tp in offsets if not logs.has_topic(tp[0])}
            accepted = {tp: om for tp, om in offsets.items() if tp not in refused}
            if accepted:
                items = [
                    (rec.offset_key(group_id, t, p), rec.offset_value(om))
                    for (t, p), om in accepted.items()
                ]
                new_topics = {t for t, _p in accepted if t not in self._topic_ids}
                await asyncio.to_thread(self._commit_sync, group_id, items, new_topics)
                g = self.group(group_id, create=True)
                assert g is not None
                g.offsets.update(accepted)
            return refused

    def _commit_sync(
        self, group_id: str, items: list[tuple[bytes, bytes | None]], new_topics: set[str]
    ) -> None:
        if new_topics:
            self._save_topic_ids(new_topics)
        self._append(group_id, items)

    def fetch_offsets(
        self, group_id: str, wanted: list[tuple[str, list[int]]] | None
    ) -> dict[str, list[tuple[int, OffsetAndMetadata | None]]]:
        g = self.group(group_id)
        offsets = g.offsets if g is not None else {}
        out: dict[str, list[tuple[int, OffsetAndMetadata | None]]] = {}
        if wanted is None:
            for (t, p), om in sorted(offsets.items()):
                out.setdefault(t, []).append((p, om))
            return out
        for t, parts in wanted:
            lst = out.setdefault(t, [])
            for p in parts:
                lst.append((p, offsets.get((t, p))))
        return out

    async def delete_group(self, group_id: str) -> int:
        """DeleteGroups for an Empty group: tombstones for every committed offset and for
        the metadata, offsets first (Kafka's ``GroupCoordinatorShard.deleteGroups``:
        ``deleteAllOffsets`` then ``createGroupTombstoneRecords``), so replaying the log
        after a restart cannot bring the group back. Decided under the write lock, so an
        offset committed concurrently is tombstoned too."""
        async with self._write_lock:
            g = self.groups.get(group_id)
            if g is None or g.state == DEAD:
                return GROUP_ID_NOT_FOUND
            if g.state != EMPTY:  # Kafka's ClassicGroup.validateDeleteGroup
                return NON_EMPTY_GROUP
            items: list[tuple[bytes, bytes | None]] = [
                (rec.offset_key(group_id, t, p), None) for (t, p) in g.offsets
            ]
            items.append((rec.group_key(group_id), None))
            await self._append_chunked(rec.partition_for(group_id, self._num_partitions), items)
            if self.groups.get(group_id) is g:
                self._set_state(g, DEAD)
                del self.groups[group_id]
                for h in g.pending.values():
                    h.cancel()
            log.info("group %s deleted with %d committed offsets", group_id, len(items) - 1)
            return NONE

    async def delete_offsets(
        self, group_id: str, wanted: list[tuple[str, int]]
    ) -> tuple[int, dict[tuple[str, int], int]]:
        """OffsetDelete (KIP-496), as Kafka's ``OffsetMetadataManager.deleteOffsets``: the
        group must exist (GROUP_ID_NOT_FOUND) and be Empty or use the consumer protocol
        (NON_EMPTY_GROUP); offsets of topics its members subscribe to are kept
        (GROUP_SUBSCRIBED_TO_TOPIC per partition); the others get tombstones, and the
        group goes Dead if it is Empty with no offsets left (``cleanupGroupMetadata``).
        Returns the group error and each partition's error."""
        g = self.group(group_id)
        if g is None or g.state == DEAD:
            return GROUP_ID_NOT_FOUND, {}
        if g.state != EMPTY and g.protocol_type != "consumer":
            return NON_EMPTY_GROUP, {}
        errors = {
            tp: GROUP_SUBSCRIBED_TO_TOPIC if g.is_subscribed(tp[0]) else NONE for tp in wanted
        }
        targets = {tp for tp, code in errors.items() if code == NONE}
        await self._cleanup(
            lambda x: {tp: om for tp, om in x.offsets.items() if tp in targets}, groups=[g]
        )
        return NONE, errors

    async def on_topics_deleted(self, topics: set[str]) -> int:
        """Kafka's ``GroupCoordinator.onPartitionsDeleted``: a deleted topic's committed
        offsets leave every group, with tombstones, so a topic created again under the
        same name starts with no committed offsets. Returns the number removed."""
        if not topics or self._closed:
            return 0
        for t in topics:
            self._topic_ids.pop(t, None)
        removed = await self._cleanup(
            lambda g: {tp: om for tp, om in g.offsets.items() if tp[0] in topics}
        )
        if removed:
            log.info("removed %d committed offsets of deleted topics %s", removed, sorted(topics))
        await asyncio.to_thread(self._save_topic_ids, None)
        return removed

    # -- removing offsets: expiry (KIP-211), deleted topics, OffsetDelete --------------------
    async def _expiry_loop(self) -> None:
        """Kafka's ``delete-expired-group-metadata`` task, every
        ``offsets.retention.check.interval.ms``; it sleeps between runs (never spins)."""
        interval = max(1, self._cfg("offsets.retention.check.interval.ms", 600000)) / 1000
        while not self._closed:
            await asyncio.sleep(interval)
            try:
                await self.expire_offsets()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("offset expiry failed")

    @staticmethod
    def expired_offsets(
        g: Group, now: int, retention_ms: int
    ) -> dict[tuple[str, int], OffsetAndMetadata]:
        """The offsets of ``g`` that have expired at ``now``.

        Kafka's ``ClassicGroup.offsetExpirationCondition``: a simple consumer's group (no
        protocol type) expires an offset ``offsets.retention.minutes`` after its commit; an
        Empty group counts from the time it became Empty (we take the later of that and
        the commit, so an offset committed to an already-empty group, e.g. by an admin
        reset, also gets the full retention); a Stable consumer-protocol group expires only
        offsets of topics none of its members subscribes to, counted from the commit; any
        other state expires nothing. An offset committed with an explicit expire timestamp
        (OffsetCommit v2-v4 ``retention_time``) expires at that time instead.
        """
        subscribed: set[str] = set()
        if g.protocol_type is None or g.state == EMPTY:
            empty_since = g.state_timestamp if g.state_timestamp is not None else -1
        elif g.protocol_type == "consumer" and g.state == STABLE and g.subscribed is not None:
            empty_since, subscribed = -1, g.subscribed
        else:
            return {}
        out = {}
        for tp, om in g.offsets.items():
            if tp[0] in subscribed:
                continue
            if om.expire_timestamp is not None:
                if now >= om.expire_timestamp:
                    out[tp] = om
            elif now - max(om.commit_timestamp, empty_since) >= retention_ms:
                out[tp] = om
        return out

    async def expire_offsets(self) -> int:
        """One pass of Kafka's ``cleanupGroupMetadata`` with the expiry rule above.
        Returns the number of offsets expired."""
        if not self._loaded or self._closed:
            return 0
        retention_ms = self._cfg("offsets.retention.minutes", 10080) * 60_000
        now = self.now()
        count = await self._cleanup(lambda g: self.expired_offsets(g, now, retention_ms))
        self.offsets_expired += count
        return count

    async def _cleanup(
        self,
        selector: Callable[[Group], dict[tuple[str, int], OffsetAndMetadata]],
        groups: list[Group] | None = None,
        force: bool = False,
    ) -> int:
        """Kafka's ``GroupMetadataManager.cleanupGroupMetadata(groups, selector)``: remove
        the offsets ``selector`` picks from each group and write their tombstones; a group
        then Empty with no offsets goes Dead and, if it ever had a generation (so a
        metadata record exists), gets a metadata tombstone too. Only the selected
        offsets and groups are touched. Decided and written under the write lock, so a
        concurrent commit cannot be tombstoned. ``force`` runs it during the load.
        Returns the number of offsets removed."""
        if (not self._loaded and not force) or self._closed:
            return 0
        async with self._write_lock:
            plan: list[tuple[Group, dict[tuple[str, int], OffsetAndMetadata], bool]] = []
            writes: dict[int, list[tuple[bytes, bytes | None]]] = {}
            for g in list(self.groups.values() if groups is None else groups):
                if self.groups.get(g.group_id) is not g:
                    continue
                removed = selector(g)
                dead = (
                    g.state == EMPTY
                    and not g.members
                    and not g.pending
                    and len(removed) == len(g.offsets)
                )
                if not removed and not dead:
                    continue
                plan.append((g, removed, dead))
                items = writes.setdefault(rec.partition_for(g.group_id, self._num_partitions), [])
                items.extend((rec.offset_key(g.group_id, t, p), None) for t, p in removed)
                if dead and g.generation > 0:  # generation 0: no metadata record to delete
                    items.append((rec.group_key(g.group_id), None))
            for partition, items in writes.items():
                await self._append_chunked(partition, items)
            count = 0
            for g, removed, dead in plan:
                for tp, om in removed.items():
                    if g.offsets.get(tp) is om:
                        del g.offsets[tp]
                        count += 1
                # a join may have arrived while the tombstones were written
                if dead and not g.offsets and not g.members and not g.pending:
                    if g.state == EMPTY and self.groups.get(g.group_id) is g:
                        self._set_state(g, DEAD)
                        del self.groups[g.group_id]
                        log.info("group %s: Empty with no offsets, now Dead", g.group_id)
            return count

    async def _append_chunked(
        self, partition: int, items: list[tuple[bytes, bytes | None]]
    ) -> None:
        """Append in batches of 1000 records, well under ``max.message.bytes``."""
        for i in range(0, len(items), 1000):
            chunk = items[i : i + 1000]
            if chunk:
                await asyncio.to_thread(self._append_partition, partition, chunk)


def _inconsistent(asked: str | None, actual: str | None) -> bool:
    """Kafka's ``isProtocolInconsistent``: both known and different."""
    return asked is not None and actual is not None and asked != actual


def _fenced(g: Group | None, member_id: str, instance_id: str | None) -> bool:
    """Kafka's ``isStaticMemberFenced``: the static member ``instance_id`` now has another
    member id (a newer instance replaced this one), so the old one gets FENCED_INSTANCE_ID
    rather than UNKNOWN_MEMBER_ID and stops instead of rejoining (KIP-345)."""
    if g is None or instance_id is None:
        return False
    known = g.static.get(instance_id)
    return known is not None and known != member_id
