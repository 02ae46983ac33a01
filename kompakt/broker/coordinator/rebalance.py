"""The rebalance half of the classic group coordinator (Kafka's ``GroupCoordinator``
timers and join phase): session expiry, the rebalance deadline, the initial rebalance
delay, pending member ids, and the end of a join round. The request side (JoinGroup,
SyncGroup, Heartbeat, LeaveGroup) is :class:`~.coordinator.GroupCoordinator`, which
extends this class and owns the writes to ``__consumer_offsets``.

Everything here runs on the broker's event loop (timers of the injected scheduler), the
loop that owns every :class:`~.state.Group` and :class:`~.state.Member`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from kompakt.broker.coordinator.scheduler import Scheduler
from kompakt.broker.coordinator.state import Group, GroupState, Member, subscribed_topics

log = logging.getLogger("kompakt.broker.coordinator")

StoreDone = Callable[[ErrorCode], None]
"""Told the outcome of a group metadata write, on the loop."""


class Rebalancer:
    """Session timers and join rounds of the groups in ``groups`` (owned by the event
    loop). Subclasses provide :meth:`_store_group`."""

    config: Any
    scheduler: Scheduler
    groups: dict[str, Group]

    def _store_group(
        self, g: Group, done: StoreDone | None = None, assignment: dict[str, bytes] | None = None
    ) -> None:
        raise NotImplementedError

    # -- config, time ----------------------------------------------------------------------
    def _cfg(self, key: str) -> int:
        """A ``group.*`` / ``offsets.*`` setting, read at each use (dynamic configs apply
        at once); defaults live in the broker config table, not here."""
        return int(self.config.get(key))

    def now(self) -> int:
        return self.scheduler.now()

    def _set_state(self, g: Group, state: GroupState) -> None:
        g.transition_to(state, self.now())

    def group(self, group_id: str, create: bool = False) -> Group | None:
        g = self.groups.get(group_id)
        if g is None and create:
            g = self.groups[group_id] = Group(group_id)
        return g

    # -- members' sessions -----------------------------------------------------------------
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

    def _pending_expired(self, g: Group, member_id: str) -> None:
        """A member id handed out with MEMBER_ID_REQUIRED that never joined (Kafka's
        ``removePendingMemberAndUpdateClassicGroup``)."""
        if g.pending.pop(member_id, None) is not None:
            self._maybe_complete_join(g)

    # -- the join phase --------------------------------------------------------------------
    def _prepare_rebalance(self, g: Group) -> None:
        """Kafka's ``prepareRebalance``: parked syncs are told REBALANCE_IN_PROGRESS; the
        join phase ends when every member rejoined or at the rebalance timeout (the
        largest member's), and an Empty group first waits
        ``group.initial.rebalance.delay.ms`` for more members (``InitialDelayedJoin``)."""
        if g.state == GroupState.COMPLETING_REBALANCE:
            for m in g.members.values():
                # Kafka's propagateAssignment: a member whose sync it answered gets a
                # new session to rejoin in; the timers the join started all end at once,
                # so a leader gone before its SyncGroup took every follower with it
                if m.answer_sync({"error_code": ErrorCode.rebalance_in_progress}):
                    self._arm_session(g, m)
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
        """Kafka's ``onCompleteJoin``: a new generation; an empty group goes Empty (and
        its metadata is stored; a failed write is only logged, as Kafka's callback does:
        no member is left to tell), else CompletingRebalance with every parked join
        answered (the leader gets the members' metadata)."""
        g.cancel_join_timers()
        if g.leader not in g.members:
            g.leader = next(iter(g.members), None)
        g.generation += 1
        if not g.members:
            self._set_state(g, GroupState.EMPTY)
            g.protocol = None
            g.leader = None
            g.subscribed = set() if g.protocol_type == "consumer" else None
            self._store_group(g)
            return
        g.protocol = g.select_protocol()
        self._set_state(g, GroupState.COMPLETING_REBALANCE)
        g.subscribed = subscribed_topics(g)
        log.info(
            "group %s: generation %d, protocol %s, leader %s, %d members",
            g.group_id,
            g.generation,
            g.protocol,
            g.leader,
            len(g.members),
        )
        members = join_members(g)
        for m in g.members.values():
            m.assignment = b""
            m.answer_join(joined(g, m.member_id, members if m.member_id == g.leader else []))
            self._arm_session(g, m)

    # -- SyncGroup's outcome ---------------------------------------------------------------
    def _propagate_assignment(self, g: Group, assignment: dict[str, bytes]) -> None:
        """Kafka's ``setAndPropagateAssignment`` once the group's record is written: the
        group goes Stable and every parked SyncGroup gets its member's assignment."""
        for m in g.members.values():
            m.assignment = assignment.get(m.member_id, b"")
        self._set_state(g, GroupState.STABLE)
        log.info("group %s: stable at generation %d", g.group_id, g.generation)
        ok = {
            "error_code": ErrorCode.none,
            "protocol_type": g.protocol_type,
            "protocol_name": g.protocol,
        }
        for m in g.members.values():
            m.answer_sync({**ok, "assignment": m.assignment})
            self._arm_session(g, m)

    def _reset_assignment(self, g: Group, error: ErrorCode) -> None:
        """Kafka's ``resetAndPropagateAssignmentError`` then ``maybePrepareRebalance``,
        when the record SyncGroup waited for cannot be written: every member's
        assignment is emptied, every parked SyncGroup gets ``error``, and the group
        rebalances (its members rejoin)."""
        log.warning(
            "group %s: generation %d not stored (%s); rebalancing",
            g.group_id,
            g.generation,
            error.name,
        )
        for m in g.members.values():
            m.assignment = b""
            m.answer_sync({"error_code": error})
            self._arm_session(g, m)
        self._prepare_rebalance(g)


def join_members(g: Group) -> list[dict[str, Any]]:
    """The member list a generation's leader gets in its JoinGroup answer."""
    return [
        {
            "member_id": m.member_id,
            "group_instance_id": m.group_instance_id,
            "metadata": m.metadata_for(g.protocol),
        }
        for m in g.members.values()
    ]


def joined(g: Group, member_id: str, members: list[dict[str, Any]]) -> dict[str, Any]:
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
