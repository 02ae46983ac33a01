"""The classic group protocol on one node (Kafka's ``GroupCoordinator`` /
``GroupMetadataManager``): JoinGroup, SyncGroup, Heartbeat, LeaveGroup and the
group-level check of an OffsetCommit.

Group state and its legal transitions are in :mod:`.state`, committed offsets (commit,
fetch, expiry, deletion) in :mod:`.offsets`, reading and writing ``__consumer_offsets``
in :mod:`.storage`. Time and timers come from an injected :class:`.scheduler.Scheduler`
(``now``, ``call_later``): session expiry, the rebalance deadline, the initial rebalance
delay and pending member ids are timers on it, so the broker runs them on its event loop
and tests on a manual clock. A JoinGroup or SyncGroup that must wait gets a
:class:`.state.Reply` that a later request or timer completes.

After a restart :meth:`GroupCoordinator.ensure_loaded` rebuilds committed offsets and
each group's membership from the topic (Kafka's ``GroupMetadataManager.loadGroup``): a
group saved Stable comes back Stable at the same generation with its members, whose
session timers start at the load, so members that do not come back expire and the group
rebalances.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Coroutine
from typing import Any

from kio.schema.errors import ErrorCode

from kompakt.broker.coordinator import records as rec
from kompakt.broker.coordinator.offsets import OffsetManager
from kompakt.broker.coordinator.scheduler import Scheduler
from kompakt.broker.coordinator.state import (
    UNKNOWN_GENERATION_ID,
    Group,
    GroupState,
    Member,
    Reply,
)
from kompakt.broker.coordinator.storage import OffsetsStorage, Records

log = logging.getLogger("kompakt.broker.coordinator")

MAX_METADATA = 4096
"""Kafka's ``offset.metadata.max.bytes`` default: longer commit metadata is refused."""


class GroupCoordinator:
    """Kafka's ``GroupCoordinator`` for classic groups, driven by ``scheduler``.

    ``config`` answers ``get(key)`` with the broker's ``group.*`` and ``offsets.*``
    settings (a :class:`~kompakt.broker.config.BrokerConfig`); ``storage`` is None only
    in unit tests that never load or write.
    """

    def __init__(self, config: Any, scheduler: Scheduler, storage: OffsetsStorage | None = None):
        self.config = config
        self.scheduler = scheduler
        self.storage = storage
        self.groups: dict[str, Group] = {}
        self._closed = False
        self._load_lock = asyncio.Lock()
        self._write_lock = asyncio.Lock()
        self.offsets = OffsetManager(config, scheduler, storage, self.groups, self._write_lock)
        """Commits, fetches and removals of the groups' offsets."""
        self._tasks: set[asyncio.Task] = set()

    @property
    def loaded(self) -> bool:
        """Has ``__consumer_offsets`` been read (groups and offsets restored)?"""
        return self.offsets.loaded

    @property
    def offsets_expired(self) -> int:
        """Offsets removed by retention since start (for metrics)."""
        return self.offsets.offsets_expired

    # -- config, time, background work ----------------------------------------------------
    def _cfg(self, key: str) -> int:
        """A ``group.*`` / ``offsets.*`` setting, read at each use (dynamic configs apply
        at once); defaults live in the broker config table, not here."""
        return int(self.config.get(key))

    def now(self) -> int:
        return self.scheduler.now()

    def _set_state(self, g: Group, state: GroupState) -> None:
        g.transition_to(state, self.now())

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def shutdown(self) -> None:
        """Stop every timer and answer every parked request NOT_COORDINATOR (the broker
        is going away; clients look for the coordinator again)."""
        self._closed = True
        self.offsets.shutdown()
        for g in self.groups.values():
            g.cancel_join_timers()
            for h in g.pending.values():
                h.cancel()
            for m in g.members.values():
                if m.timer is not None:
                    m.timer.cancel()
                m.answer_join({"error_code": ErrorCode.not_coordinator})
                m.answer_sync({"error_code": ErrorCode.not_coordinator})

    # -- loading ---------------------------------------------------------------------------
    async def ensure_loaded(self) -> None:
        """Load groups and offsets from ``__consumer_offsets`` once (Kafka loads a
        coordinator partition on election), drop offsets of topics deleted meanwhile,
        arm the restored members' session timers and start offset expiry."""
        if self.loaded:
            return
        async with self._load_lock:
            if self.loaded:
                return
            storage = self.storage
            assert storage is not None, "a coordinator without storage cannot load"
            loaded = await asyncio.to_thread(storage.load)
            now = self.now()
            for group_id, (meta, offsets) in loaded.items():
                g = self.groups[group_id] = _restored_group(group_id, meta, now)
                g.offsets.update(offsets)
            await self.offsets.drop_gone_topics()
            self.offsets.loaded = True
            self._on_loaded()
            if not self._closed:
                self.offsets.start_expiry()

    def _on_loaded(self) -> None:
        """Kafka's ``GroupMetadataManager.onLoaded``: every restored member gets a session
        timer (``rescheduleClassicGroupMemberHeartbeat``), so a member that does not come
        back is removed after its session timeout and the group rebalances; a group over
        ``group.max.size`` (lowered while the broker was down) rebalances at once."""
        if self._closed:  # shutdown already cancelled every timer
            return
        max_size = self._cfg("group.max.size")
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

    # -- writing ---------------------------------------------------------------------------
    def _persist_group(self, g: Group) -> None:
        """Write the group's metadata record (in the background, in order)."""
        if not self.loaded or self._closed:
            return
        assert self.storage is not None
        self._spawn(self._write(g.group_id, [self.storage.group_record(g, self.now())]))

    async def _write(self, group_id: str, items: Records) -> None:
        assert self.storage is not None
        try:
            async with self._write_lock:
                await asyncio.to_thread(self.storage.append_group, group_id, items)
        except Exception:
            log.exception("cannot write group %s metadata", group_id)

    # -- groups and members ----------------------------------------------------------------
    def group(self, group_id: str, create: bool = False) -> Group | None:
        g = self.groups.get(group_id)
        if g is None and create:
            g = self.groups[group_id] = Group(group_id)
        return g

    def _arm_session(self, g: Group, m: Member) -> None:
        """(Re)start ``m``'s session timer (Kafka's ``completeAndScheduleNextHeartbeatExpiration``)."""
        if m.timer is not None:
            m.timer.cancel()
        m.timer = self.scheduler.call_later(m.session_timeout_ms, self._session_expired, g, m)

    def _session_expired(self, g: Group, m: Member) -> None:
        """Kafka's ``onMemberHeartbeatExpired``: a member with no heartbeat for its session
        timeout leaves the group, unless it waits in a join or sync."""
        if g.members.get(m.member_id) is not m:
            return
        if m.is_awaiting_join() or m.is_awaiting_sync():
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
        """Kafka's ``removeMemberAndUpdateClassicGroup``: answer its parked requests
        UNKNOWN_MEMBER_ID, pass on the leadership, and rebalance."""
        self._forget(g, m)
        m.answer_join({"error_code": ErrorCode.unknown_member_id})
        m.answer_sync({"error_code": ErrorCode.unknown_member_id})
        if g.leader == m.member_id:
            g.leader = next(iter(g.members), None)
        if g.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(g)
        if g.state == GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(g)

    def _prepare_rebalance(self, g: Group) -> None:
        """Kafka's ``prepareRebalance``: parked syncs are told REBALANCE_IN_PROGRESS; the
        join phase ends when every member rejoined or at the rebalance timeout (the
        largest member's), and an Empty group first waits
        ``group.initial.rebalance.delay.ms`` for more members (``InitialDelayedJoin``)."""
        if g.state == GroupState.COMPLETING_REBALANCE:
            for m in g.members.values():
                m.answer_sync({"error_code": ErrorCode.rebalance_in_progress})
        was_empty = g.state == GroupState.EMPTY
        self._set_state(g, GroupState.PREPARING_REBALANCE)
        delay = self._cfg("group.initial.rebalance.delay.ms") if was_empty else 0
        timeout = max((m.rebalance_timeout_ms for m in g.members.values()), default=0)
        g.cancel_join_timers()
        g.join_timer = self.scheduler.call_later(timeout, self._join_deadline, g)
        if was_empty and delay > 0:
            g.delay_timer = self.scheduler.call_later(
                min(delay, timeout), self._end_initial_delay, g
            )
        log.info("group %s: preparing rebalance (generation %d)", g.group_id, g.generation)

    def _end_initial_delay(self, g: Group) -> None:
        g.delay_timer = None
        self._maybe_complete_join(g)

    def _join_deadline(self, g: Group) -> None:
        """The rebalance timeout passed (Kafka's ``onCompleteJoin`` from the delayed join
        expiring): members that did not rejoin are removed, then the round completes."""
        g.join_timer = None
        if g.state != GroupState.PREPARING_REBALANCE:
            return
        for m in list(g.members.values()):
            if not m.is_awaiting_join():
                log.info("group %s: member %s did not rejoin in time", g.group_id, m.member_id)
                self._forget(g, m)
        for h in g.pending.values():
            h.cancel()
        g.pending.clear()
        self._complete_join(g)

    def _maybe_complete_join(self, g: Group) -> None:
        if g.state != GroupState.PREPARING_REBALANCE:
            return
        if g.members and g.all_joined() and not g.delaying:
            self._complete_join(g)
        elif not g.members and not g.pending:
            self._complete_join(g)

    def _complete_join(self, g: Group) -> None:
        """Kafka's ``onCompleteJoin``: a new generation; an empty group goes Empty, else
        CompletingRebalance with every parked join answered (the leader gets the members'
        metadata)."""
        g.cancel_join_timers()
        if g.leader not in g.members:
            g.leader = next(iter(g.members), None)
        g.generation += 1
        if not g.members:
            self._set_state(g, GroupState.EMPTY)
            g.protocol = None
            g.leader = None
            g.subscribed = set() if g.protocol_type == "consumer" else None
            self._persist_group(g)
            return
        g.protocol = g.select_protocol()
        self._set_state(g, GroupState.COMPLETING_REBALANCE)
        g.subscribed = _subscribed_topics(g)
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
            m.answer_join(_joined(g, m.member_id, members if m.member_id == g.leader else []))
            self._arm_session(g, m)

    # -- JoinGroup -------------------------------------------------------------------------
    def join(
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
    ) -> Reply:
        """JoinGroup, checked in Kafka's order (``classicGroupJoin``). The reply is
        answered at once for an error or a Stable group's unchanged follower; otherwise
        when the join phase completes."""

        def err(code: ErrorCode, mid: str = member_id) -> Reply:
            return Reply.of(
                {
                    "error_code": code,
                    "member_id": mid,
                    "generation_id": UNKNOWN_GENERATION_ID,
                    "leader": "",
                }
            )

        if self._closed:
            return err(ErrorCode.not_coordinator)
        if not group_id:
            return err(ErrorCode.invalid_group_id)
        if not (
            self._cfg("group.min.session.timeout.ms")
            <= session_timeout_ms
            <= self._cfg("group.max.session.timeout.ms")
        ):
            return err(ErrorCode.invalid_session_timeout)
        g = self.group(group_id, create=not member_id)
        if g is None:
            return err(ErrorCode.unknown_member_id)
        if not g.supports(protocol_type, protocols):
            return err(ErrorCode.inconsistent_group_protocol)
        if group_instance_id is not None:
            known = g.static.get(group_instance_id)
            if known is not None and known in g.members:
                if not member_id:
                    return self._replace_static(
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
                    return err(ErrorCode.fenced_instance_id)
        if member_id and member_id not in g.members and member_id not in g.pending:
            return err(ErrorCode.unknown_member_id)
        if not member_id:
            if len(g.members) + len(g.pending) >= self._cfg("group.max.size"):
                return err(ErrorCode.group_max_size_reached)
            prefix = group_instance_id if group_instance_id is not None else client_id
            member_id = f"{prefix or 'member'}-{uuid.uuid4()}"
            if require_known_member_id and group_instance_id is None:
                g.pending[member_id] = self.scheduler.call_later(
                    session_timeout_ms, self._pending_expired, g, member_id
                )
                return err(ErrorCode.member_id_required, member_id)
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
        m.answer_join({"error_code": ErrorCode.unknown_member_id})  # superseded
        if g.state == GroupState.STABLE and not changed and member_id != g.leader:
            self._arm_session(g, m)
            return Reply.of(_joined(g, member_id, []))
        reply = m.awaiting_join = Reply()
        self._arm_session(g, m)
        if g.state != GroupState.PREPARING_REBALANCE:
            self._prepare_rebalance(g)
        self._maybe_complete_join(g)
        return reply

    def _replace_static(
        self,
        g: Group,
        old_id: str,
        instance_id: str,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocols: list[tuple[str, bytes]],
    ) -> Reply:
        """A restarted static member (KIP-345) takes its old member's place under a new
        member id. As Kafka's ``updateStaticMemberAndRebalance``: in a Stable group whose
        selected protocol stays the same there is no rebalance; the member keeps its
        assignment, and the reply names the old leader so it does not reassign. In any
        other state the group rebalances. The old member id is fenced."""
        m = g.members.pop(old_id)
        m.answer_join({"error_code": ErrorCode.fenced_instance_id})
        m.answer_sync({"error_code": ErrorCode.fenced_instance_id})
        m.awaiting_join = m.awaiting_sync = None
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
        if g.state == GroupState.STABLE and g.select_protocol() == g.protocol:
            self._persist_group(g)
            return Reply.of({**_joined(g, new_id, []), "leader": old_leader})
        reply = m.awaiting_join = Reply()
        if g.state != GroupState.PREPARING_REBALANCE:
            self._prepare_rebalance(g)
        self._maybe_complete_join(g)
        return reply

    def _pending_expired(self, g: Group, member_id: str) -> None:
        """A member id handed out with MEMBER_ID_REQUIRED that never joined (Kafka's
        ``removePendingMemberAndUpdateClassicGroup``)."""
        if g.pending.pop(member_id, None) is not None:
            self._maybe_complete_join(g)

    # -- SyncGroup -------------------------------------------------------------------------
    def sync(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        assignments: dict[str, bytes],
        instance_id: str | None = None,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> Reply:
        """SyncGroup, checked in Kafka's order (``validateSyncGroup``): member, generation,
        then protocol type and name (v5+, INCONSISTENT_GROUP_PROTOCOL), then the state.
        A follower's reply waits for the leader's assignment."""
        if self._closed:
            return Reply.of({"error_code": ErrorCode.not_coordinator})
        g = self.group(group_id)
        if g is not None and g.is_fenced(member_id, instance_id):
            return Reply.of({"error_code": ErrorCode.fenced_instance_id})
        if g is None or member_id not in g.members:
            return Reply.of({"error_code": ErrorCode.unknown_member_id})
        if generation != g.generation:
            return Reply.of({"error_code": ErrorCode.illegal_generation})
        if _inconsistent(protocol_type, g.protocol_type) or _inconsistent(
            protocol_name, g.protocol
        ):
            return Reply.of({"error_code": ErrorCode.inconsistent_group_protocol})
        m = g.members[member_id]
        ok = {
            "error_code": ErrorCode.none,
            "protocol_type": g.protocol_type,
            "protocol_name": g.protocol,
        }
        if g.state == GroupState.PREPARING_REBALANCE:
            return Reply.of({"error_code": ErrorCode.rebalance_in_progress})
        if g.state == GroupState.STABLE:
            self._arm_session(g, m)
            return Reply.of({**ok, "assignment": m.assignment})
        if g.state != GroupState.COMPLETING_REBALANCE:
            return Reply.of({"error_code": ErrorCode.unknown_member_id})
        m.answer_sync({"error_code": ErrorCode.rebalance_in_progress})
        reply = m.awaiting_sync = Reply()
        self._arm_session(g, m)
        if member_id == g.leader:
            for mm in g.members.values():
                mm.assignment = assignments.get(mm.member_id, b"")
            self._set_state(g, GroupState.STABLE)
            log.info("group %s: stable at generation %d", g.group_id, g.generation)
            self._persist_group(g)
            for mm in g.members.values():
                mm.answer_sync({**ok, "assignment": mm.assignment})
                self._arm_session(g, mm)
        return reply

    # -- Heartbeat / LeaveGroup ------------------------------------------------------------
    def heartbeat(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None = None
    ) -> ErrorCode:
        """Kafka's ``validateClassicGroupHeartbeat``: member, then generation, then the
        state; a heartbeat during a rebalance tells the member to rejoin."""
        g = self.group(group_id)
        if g is not None and g.is_fenced(member_id, instance_id):
            return ErrorCode.fenced_instance_id
        if g is None or member_id not in g.members:
            return ErrorCode.unknown_member_id
        if generation != g.generation:
            return ErrorCode.illegal_generation
        m = g.members[member_id]
        if g.state == GroupState.EMPTY:
            return ErrorCode.unknown_member_id
        self._arm_session(g, m)
        if g.state == GroupState.PREPARING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave(self, group_id: str, member_id: str, instance_id: str | None = None) -> ErrorCode:
        """LeaveGroup; v3+ may name a static member by ``group.instance.id`` alone (KIP-345,
        how admin tools remove static members); a mismatching member id is fenced."""
        g = self.group(group_id)
        if g is None:
            return ErrorCode.unknown_member_id
        if instance_id is not None:
            known = g.static.get(instance_id)
            if known is None:
                return ErrorCode.unknown_member_id
            if member_id and member_id != known:
                return ErrorCode.fenced_instance_id
            member_id = known
        handle = g.pending.pop(member_id, None)
        if handle is not None:
            handle.cancel()
            self._maybe_complete_join(g)
            return ErrorCode.none
        m = g.members.get(member_id)
        if m is None:
            return ErrorCode.unknown_member_id
        log.info("group %s: member %s left", group_id, member_id)
        self._remove_member(g, m)
        return ErrorCode.none

    # -- offsets ---------------------------------------------------------------------------
    def commit_check(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        instance_id: str | None = None,
        api_version: int = 8,
    ) -> ErrorCode:
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
                return ErrorCode.none
            if api_version >= 9:
                return ErrorCode.group_id_not_found
            return ErrorCode.illegal_generation
        if generation < 0 and g.state == GroupState.EMPTY:
            return ErrorCode.none
        if generation >= 0 or member_id or instance_id is not None:
            if g.is_fenced(member_id, instance_id):
                return ErrorCode.fenced_instance_id
            if member_id not in g.members:
                return ErrorCode.unknown_member_id
            if generation != g.generation:
                return ErrorCode.illegal_generation
        elif g.state != GroupState.EMPTY:
            return ErrorCode.unknown_member_id
        if g.state == GroupState.COMPLETING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        m = g.members.get(member_id)
        if m is not None:
            self._arm_session(g, m)
        return ErrorCode.none


def _restored_group(group_id: str, meta: rec.GroupMetadataValue | None, now: int) -> Group:
    """Kafka's ``ClassicGroup.fromRecord`` (``GroupMetadataManager.loadGroup`` before
    KIP-848): the group comes back from its latest metadata record with its protocol
    type and name, generation, leader and members (member id, group.instance.id, client
    id and host, timeouts, subscription and assignment); Stable if it has members, else
    Empty. A group with no metadata record (a simple consumer's) has offsets only.
    Session timers are armed by ``_on_loaded``."""
    if meta is None:
        return Group(group_id)
    g = Group(group_id, generation=meta.generation, protocol_type=meta.protocol_type or None)
    g.state_timestamp = meta.state_timestamp if meta.state_timestamp >= 0 else now
    if not meta.members:
        g.subscribed = set() if g.protocol_type == "consumer" else None
        return g
    g.protocol = meta.protocol
    for mid, iid, cid, host, rb, sess, sub, asg in meta.members:
        g.members[mid] = Member(
            mid, iid, cid, host, sess, rb, meta.protocol_type, [(meta.protocol or "", sub)], asg
        )
        if iid is not None:
            g.static[iid] = mid
    g.leader = meta.leader if meta.leader in g.members else next(iter(g.members))
    g.state = GroupState.STABLE  # loaded in its saved state, not a transition (loadGroup)
    g.subscribed = _subscribed_topics(g)
    return g


def _joined(g: Group, member_id: str, members: list[dict[str, Any]]) -> dict[str, Any]:
    """A successful JoinGroup response for ``member_id`` at the group's generation."""
    return {
        "error_code": ErrorCode.none,
        "generation_id": g.generation,
        "protocol_type": g.protocol_type,
        "protocol_name": g.protocol,
        "leader": g.leader,
        "member_id": member_id,
        "members": members,
    }


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


def _inconsistent(asked: str | None, actual: str | None) -> bool:
    """Kafka's ``isProtocolInconsistent``: both known and different."""
    return asked is not None and actual is not None and asked != actual
