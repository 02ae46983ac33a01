"""A classic consumer group's state: its state machine, members and committed offsets.

Kafka's ``GroupMetadata.scala`` / ``ClassicGroup``: a group is in one of five
:class:`GroupState` values, and each state lists the states it may be entered from
(``validPreviousStates``). :meth:`Group.transition_to` checks every transition against
that table (``assertValidTransition``), so a coordinator bug that would move a group
where Kafka never does fails loudly instead of confusing the clients. Nothing here does
I/O or reads a clock: the coordinator passes ``now``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from kompakt.broker.coordinator import records as rec
from kompakt.broker.coordinator.records import OffsetAndMetadata
from kompakt.broker.coordinator.scheduler import TimerHandle
from kompakt.broker.transitions import check_transition

UNKNOWN_GENERATION_ID = -1
"""The generation in a JoinGroup error and in a simple consumer's commit (Kafka's
``JoinGroupRequest.UNKNOWN_GENERATION_ID``)."""


class GroupState(StrEnum):
    """Kafka's ``GroupState`` names, as DescribeGroups and ListGroups report them."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
}
"""Kafka's ``validPreviousStates`` of each state (``GroupMetadata.scala``)."""


class IllegalGroupStateTransition(RuntimeError):
    """A transition Kafka's ``assertValidTransition`` forbids: our bug, never a client's
    (Kafka throws ``IllegalStateException``)."""


class Reply:
    """The response owed to a parked JoinGroup or SyncGroup (Kafka's
    ``awaitingJoinCallback`` / ``awaitingSyncCallback``).

    The coordinator completes it from a timer or from another member's request; the
    asyncio layer awaits it. A cancelled wait (the client's connection closed) cancels
    the reply, so the member no longer counts as waiting. Completing a reply that is
    already done does nothing: the first answer wins.
    """

    __slots__ = ("_callbacks", "_cancelled", "_done", "_result")

    def __init__(self) -> None:
        self._done = False
        self._cancelled = False
        self._result: dict[str, Any] | None = None
        self._callbacks: list[Callable[[], None]] = []

    @classmethod
    def of(cls, response: dict[str, Any]) -> Reply:
        """A reply answered at once."""
        r = cls()
        r.complete(response)
        return r

    def done(self) -> bool:
        return self._done

    def complete(self, response: dict[str, Any]) -> None:
        if self._done:
            return
        self._done, self._result = True, response
        self._run_callbacks()

    def cancel(self) -> None:
        if self._done:
            return
        self._done = self._cancelled = True
        self._run_callbacks()

    def result(self) -> dict[str, Any]:
        """The response; raises if none yet, or CancelledError if the wait was cancelled."""
        if self._cancelled:
            raise asyncio.CancelledError()
        if self._result is None:
            raise asyncio.InvalidStateError("reply not ready")
        return self._result

    def _run_callbacks(self) -> None:
        callbacks, self._callbacks = self._callbacks, []
        for cb in callbacks:
            cb()

    def __await__(self) -> Generator[Any, None, dict[str, Any]]:
        if not self._done:
            fut = asyncio.get_running_loop().create_future()

            def wake() -> None:
                if not fut.done():
                    fut.set_result(None)

            self._callbacks.append(wake)
            try:
                yield from fut.__await__()
            except asyncio.CancelledError:
                self.cancel()
                raise
        return self.result()


@dataclass(eq=False)
class Member:
    """Kafka's ``MemberMetadata``: one member of a classic group."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    awaiting_join: Reply | None = None
    awaiting_sync: Reply | None = None
    timer: TimerHandle | None = None

    def metadata_for(self, protocol: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""

    def is_awaiting_join(self) -> bool:
        return self.awaiting_join is not None and not self.awaiting_join.done()

    def is_awaiting_sync(self) -> bool:
        return self.awaiting_sync is not None and not self.awaiting_sync.done()

    def answer_join(self, response: dict[str, Any]) -> None:
        """Complete a parked JoinGroup, if any (Kafka's ``maybeInvokeJoinCallback``)."""
        if self.awaiting_join is not None:
            self.awaiting_join.complete(response)

    def answer_sync(self, response: dict[str, Any]) -> bool:
        """Complete a parked SyncGroup, if any (Kafka's ``maybeInvokeSyncCallback``);
        whether there was one still waiting."""
        if self.awaiting_sync is None or self.awaiting_sync.done():
            return False
        self.awaiting_sync.complete(response)
        return True


@dataclass(eq=False)
class Group:
    """Kafka's ``GroupMetadata`` / ``ClassicGroup`` for one group id."""

    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending: dict[str, TimerHandle] = field(default_factory=dict)
    offsets: dict[tuple[str, int], OffsetAndMetadata] = field(default_factory=dict)
    join_timer: TimerHandle | None = None
    """The join phase's deadline (the rebalance timeout)."""
    delay_timer: TimerHandle | None = None
    """The end of an Empty group's ``group.initial.rebalance.delay.ms``, while it runs."""
    state_timestamp: int | None = None
    """When the group entered its current state (Kafka's ``currentStateTimestamp``);
    None for a group only known from its offsets (a simple consumer's)."""
    subscribed: set[str] | None = None
    """Topics the members subscribe to, if known (consumer protocol); Kafka's
    ``subscribedTopics``: offsets of other topics may expire while the group is Stable."""
    static: dict[str, str] = field(default_factory=dict)
    """group.instance.id -> member id of the static members (KIP-345)."""

    def transition_to(self, state: GroupState, now: int) -> None:
        """Kafka's ``transitionTo``: check ``validPreviousStates``, then enter ``state``
        and stamp the time (``currentStateTimestamp``)."""
        check_transition(
            VALID_PREVIOUS_STATES,
            self.state,
            state,
            subject=f"group {self.group_id}",
            error=IllegalGroupStateTransition,
        )
        self.state = state
        self.state_timestamp = now

    @property
    def delaying(self) -> bool:
        """Is the join phase held by the initial rebalance delay?"""
        return self.delay_timer is not None

    def cancel_join_timers(self) -> None:
        """Call off the join phase's timers; each round arms its own (Kafka keeps one
        delayed join per group)."""
        for timer in (self.join_timer, self.delay_timer):
            if timer is not None:
                timer.cancel()
        self.join_timer = self.delay_timer = None

    def is_empty(self) -> bool:
        return not self.members

    def is_subscribed(self, topic: str) -> bool:
        """Kafka's ``ClassicGroup.isSubscribedToTopic``: from the members' subscriptions
        when known, else assume a consumer-protocol group reads every topic."""
        if self.subscribed is not None:
            return topic in self.subscribed
        return self.protocol_type == "consumer"

    def all_joined(self) -> bool:
        return not self.pending and all(m.is_awaiting_join() for m in self.members.values())

    def select_protocol(self) -> str | None:
        """Kafka's ``selectProtocol``: of the protocols every member supports, the one
        most members list first (ties: the one met first)."""
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
        """Kafka's ``supportsProtocols``: a joining member must share the protocol type
        and at least one protocol with every current member."""
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

    def is_fenced(self, member_id: str, instance_id: str | None) -> bool:
        """Kafka's ``isStaticMemberFenced``: the static member ``instance_id`` now has
        another member id (a newer instance replaced this one), so the old one gets
        FENCED_INSTANCE_ID rather than UNKNOWN_MEMBER_ID and stops instead of rejoining
        (KIP-345)."""
        if instance_id is None:
            return False
        known = self.static.get(instance_id)
        return known is not None and known != member_id


def subscribed_topics(g: Group) -> set[str] | None:
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


def restored_group(group_id: str, meta: rec.GroupMetadataValue | None, now: int) -> Group:
    """Kafka's ``ClassicGroup.fromRecord`` (``GroupMetadataManager.loadGroup`` before
    KIP-848): the group comes back from its latest metadata record with its protocol
    type and name, generation, leader and members (member id, group.instance.id, client
    id and host, timeouts, subscription and assignment); Stable if it has members, else
    Empty. A group with no metadata record (a simple consumer's) has offsets only.
    Session timers are armed by the coordinator's ``_on_loaded``."""
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
    g.subscribed = subscribed_topics(g)
    return g
