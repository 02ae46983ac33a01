"""The classic group protocol on one node (Kafka's ``GroupCoordinator`` /
``GroupMetadataManager``): JoinGroup, SyncGroup, Heartbeat, LeaveGroup and the
group-level check of an OffsetCommit.

Group state and its legal transitions are in :mod:`.state`, session timers and join
rounds in :mod:`.rebalance`, committed offsets (commit, fetch, expiry, deletion) in
:mod:`.offsets`, reading and writing ``__consumer_offsets`` in :mod:`.storage`. Time and
timers come from an injected :class:`.scheduler.Scheduler` (``now``, ``call_later``), so
the broker runs them on its event loop and tests on a manual clock. A JoinGroup or
SyncGroup that must wait gets a :class:`.state.Reply` that a later request, timer or
write completes.

A group's metadata record is written before the answer it backs, as Kafka's
``GroupMetadataManager.storeGroup`` callback answers SyncGroup: the members are told
their assignment only once it is in the log, so after a crash the group loads as its
members were told; a failed write resets the assignment and the members get Kafka's
error (:data:`.storage.STORE_GROUP_ERRORS`).

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

from kompakt.broker.coordinator.faults import NO_FAULTS, CoordinatorFaults
from kompakt.broker.coordinator.offsets import OffsetManager
from kompakt.broker.coordinator.rebalance import Rebalancer, StoreDone, join_members, joined
from kompakt.broker.coordinator.scheduler import Scheduler
from kompakt.broker.coordinator.snapshot import CoordinatorSnapshot
from kompakt.broker.coordinator.state import (
    UNKNOWN_GENERATION_ID,
    Group,
    GroupState,
    Member,
    Reply,
    restored_group,
)
from kompakt.broker.coordinator.storage import OffsetsStorage, store_group_error

log = logging.getLogger("kompakt.broker.coordinator")

SNAPSHOT_TIMEOUT_S = 10.0
"""How long a reader on another thread waits for the loop to copy the groups."""


class GroupCoordinator(Rebalancer):
    """Kafka's ``GroupCoordinator`` for classic groups, driven by ``scheduler``.

    ``config`` answers ``get(key)`` with the broker's ``group.*`` and ``offsets.*``
    settings (a :class:`~kompakt.broker.config.BrokerConfig`); ``storage`` is None only
    in unit tests that never load or write.
    """

    def __init__(
        self,
        config: Any,
        scheduler: Scheduler,
        storage: OffsetsStorage | None = None,
        faults: CoordinatorFaults = NO_FAULTS,
        loop: asyncio.AbstractEventLoop | None = None,
    ):
        self.config = config  # set once; thread-safe (the broker config's own lock)
        self.scheduler = scheduler  # set once; owned by the event loop
        self.storage = storage  # set once; thread-safe (each write runs in a worker thread)
        self.faults = faults  # immutable
        self.loop = loop
        """The loop that owns every group (None in unit tests that run without one); set once."""
        self.groups: dict[str, Group] = {}
        """Owned by the event loop; other threads read :meth:`snapshot`."""
        self._closed = False  # owned by the event loop
        self._load_lock = asyncio.Lock()  # owned by the event loop; guards the load
        self._write_lock = asyncio.Lock()  # owned by the event loop; guards offsets writes
        self.offsets = OffsetManager(config, scheduler, storage, self.groups, self._write_lock)
        """Commits, fetches and removals of the groups' offsets; owned by the event loop."""
        self._tasks: set[asyncio.Task] = set()  # owned by the event loop
        self._group_writes: dict[str, asyncio.Task] = {}
        """The latest metadata write of each group (writes run in order); owned by the
        event loop."""

    @property
    def loaded(self) -> bool:
        """Has ``__consumer_offsets`` been read (groups and offsets restored)?"""
        return self.offsets.loaded

    @property
    def offsets_expired(self) -> int:
        """Offsets removed by retention since start (for metrics)."""
        return self.offsets.offsets_expired

    def snapshot(self) -> CoordinatorSnapshot:
        """Frozen copies of every group, built on the loop that owns them: safe from
        any thread (the console, ``/metrics``)."""
        loop = self.loop
        try:
            on_loop = loop is None or asyncio.get_running_loop() is loop
        except RuntimeError:  # no loop in this thread
            on_loop = False
        if on_loop or loop is None or not loop.is_running():  # nobody else changes them
            return CoordinatorSnapshot.of(self.groups, self.offsets_expired)

        async def copy() -> CoordinatorSnapshot:
            return CoordinatorSnapshot.of(self.groups, self.offsets_expired)

        return asyncio.run_coroutine_threadsafe(copy(), loop).result(SNAPSHOT_TIMEOUT_S)

    # -- background work -------------------------------------------------------------------
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
                g = self.groups[group_id] = restored_group(group_id, meta, now)
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
    def _store_group(
        self, g: Group, done: StoreDone | None = None, assignment: dict[str, bytes] | None = None
    ) -> None:
        """Kafka's ``GroupMetadataManager.storeGroup``: append the group's metadata
        record (members' assignments from ``assignment`` if given), then tell ``done``
        on the loop: NONE once written, else the error of :func:`store_group_error`.
        Without storage (unit tests) or before the load there is nothing to write."""
        if self._closed:
            if done is not None:
                done(ErrorCode.not_coordinator)
            return
        if self.storage is None or not self.loaded:
            if done is not None:
                done(ErrorCode.none)
            return
        record = self.storage.group_record(g, self.now(), assignment)
        task = self._spawn(self._write_group(g.group_id, g.generation, record, done))
        self._group_writes[g.group_id] = task
        task.add_done_callback(lambda t, gid=g.group_id: self._write_done(gid, t))

    def _write_done(self, group_id: str, task: asyncio.Task) -> None:
        if self._group_writes.get(group_id) is task:
            del self._group_writes[group_id]

    async def _write_group(
        self, group_id: str, generation: int, record: tuple[bytes, bytes], done: StoreDone | None
    ) -> None:
        storage, hook = self.storage, self.faults.before_group_write
        assert storage is not None

        def append() -> None:
            if hook is not None:
                hook(group_id, generation)
            storage.append_group(group_id, [record])

        error = ErrorCode.none
        try:
            async with self._write_lock:
                await asyncio.to_thread(append)
        except Exception as exc:  # told to the members below, never swallowed
            error = store_group_error(exc)
            log.warning("cannot write group %s metadata: %s (%s)", group_id, exc, error.name)
        if done is not None and not self._closed:  # shutdown answered NOT_COORDINATOR
            done(error)

    async def flushed(self, group_id: str) -> None:
        """Wait until the group's metadata writes asked so far are done (a LeaveGroup
        that emptied the group answers after its record, as Kafka's runtime does)."""
        task = self._group_writes.get(group_id)
        if task is not None:
            await asyncio.shield(task)

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
            return Reply.of(joined(g, member_id, []))
        if g.state == GroupState.COMPLETING_REBALANCE and not changed:
            # the same metadata again (its first answer may have been lost): this
            # generation's answer, no new rebalance (``classicGroupJoinExistingMember``)
            self._arm_session(g, m)
            leader = member_id == g.leader
            return Reply.of(joined(g, member_id, join_members(g) if leader else []))
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
        assignment, and the reply (sent once the group's record with the new member id
        is written) names the old leader so it does not reassign. If that write fails
        the replacement is undone and the member gets the write's error with no member
        id. In any other state the group rebalances. The old member id is fenced."""
        m = g.members.pop(old_id)
        m.answer_join({"error_code": ErrorCode.fenced_instance_id})
        m.answer_sync({"error_code": ErrorCode.fenced_instance_id})
        m.awaiting_join = m.awaiting_sync = None
        old_leader = g.leader
        before = (m.client_id, m.client_host, m.session_timeout_ms, m.rebalance_timeout_ms)
        old_protocols = m.protocols
        new_id = f"{instance_id}-{uuid.uuid4()}"
        details = (client_id, client_host, session_timeout_ms, rebalance_timeout_ms)
        self._rename_static(g, m, instance_id, new_id, details, protocols)
        log.info("group %s: static member %s replaced %s", g.group_id, new_id, old_id)
        reply = m.awaiting_join = Reply()
        if g.state == GroupState.STABLE and g.select_protocol() == g.protocol:

            def stored(error: ErrorCode) -> None:
                if m.awaiting_join is reply:
                    m.awaiting_join = None
                if error == ErrorCode.none:
                    reply.complete({**joined(g, new_id, []), "leader": old_leader})
                    return
                if g.members.get(new_id) is m:  # undo (Kafka's replaceStaticMember back)
                    self._rename_static(g, m, instance_id, old_id, before, old_protocols)
                reply.complete(
                    {
                        **joined(g, "", []),
                        "error_code": error,
                        "leader": g.leader or "",
                    }
                )

            self._store_group(g, stored)
            return reply
        if g.state != GroupState.PREPARING_REBALANCE:
            self._prepare_rebalance(g)
        self._maybe_complete_join(g)
        return reply

    def _rename_static(
        self,
        g: Group,
        m: Member,
        instance_id: str,
        new_id: str,
        details: tuple[str, str, int, int],
        protocols: list[tuple[str, bytes]],
    ) -> None:
        """Put static member ``m`` under ``new_id`` with its client id and host, session
        and rebalance timeouts from ``details`` (Kafka's ``replaceStaticMember`` and
        ``updateMember``); the leadership follows it."""
        old_id = m.member_id
        g.members.pop(old_id, None)
        m.member_id = new_id
        m.client_id, m.client_host, m.session_timeout_ms, m.rebalance_timeout_ms = details
        m.protocols = protocols
        g.members[new_id] = m
        g.static[instance_id] = new_id
        if g.leader == old_id:
            g.leader = new_id
        self._arm_session(g, m)

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
            # Kafka's doSyncGroup: store the group with the leader's assignment, and
            # answer every member only once that record is written
            assignment = {mid: assignments.get(mid, b"") for mid in g.members}
            generation = g.generation

            def stored(error: ErrorCode) -> None:
                # a member may have joined meanwhile: only the same round completes
                if (
                    self.groups.get(g.group_id) is not g
                    or g.state != GroupState.COMPLETING_REBALANCE
                    or g.generation != generation
                ):
                    return
                if error == ErrorCode.none:
                    self._propagate_assignment(g, assignment)
                else:
                    self._reset_assignment(g, error)

            self._store_group(g, stored, assignment)
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


def _inconsistent(asked: str | None, actual: str | None) -> bool:
    """Kafka's ``isProtocolInconsistent``: both known and different."""
    return asked is not None and actual is not None and asked != actual
