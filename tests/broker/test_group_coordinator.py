"""The group coordinator on a manual clock: no sockets, no event loop, no sleeps.

Kafka's rules checked (``GroupCoordinator`` / ``GroupMetadata.scala``, the classic
protocol): a JoinGroup round completes when every known member rejoined, the leader gets
the members' metadata and hands out the assignment in SyncGroup; a member whose session
timeout passes without a heartbeat is removed and the group rebalances
(``onMemberHeartbeatExpired``); a member that does not rejoin within the rebalance
timeout is dropped from the new generation (``onCompleteJoin``); an Empty group waits
``group.initial.rebalance.delay.ms`` before completing its first join
(``InitialDelayedJoin``); a state change Kafka's ``validPreviousStates`` forbids raises
(``assertValidTransition``). Time moves only through :class:`ManualScheduler`.
"""

from __future__ import annotations

from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from manual_clock import ManualScheduler

from kompakt.broker.config import BrokerConfig
from kompakt.broker.coordinator.coordinator import GroupCoordinator
from kompakt.broker.coordinator.state import (
    VALID_PREVIOUS_STATES,
    Group,
    GroupState,
    IllegalGroupStateTransition,
    Reply,
)

SESSION = 400
REBALANCE = 2000
PROTOCOLS = [("range", b"r"), ("roundrobin", b"rr")]


def coordinator(**config: Any) -> tuple[GroupCoordinator, ManualScheduler]:
    """A coordinator with the broker's config table (``config`` overrides, ``_`` for
    ``.``), no storage, and a manual scheduler."""
    props = {"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 100}
    props.update({k.replace("_", "."): v for k, v in config.items()})
    scheduler = ManualScheduler()
    cfg = BrokerConfig.from_mapping({k: str(v) for k, v in props.items()})
    return GroupCoordinator(cfg, scheduler), scheduler


def join(
    gc: GroupCoordinator,
    member_id: str,
    protocols: list[tuple[str, bytes]] = PROTOCOLS,
    session: int = SESSION,
    rebalance: int = REBALANCE,
) -> Reply:
    return gc.join(
        "g", member_id, None, "cli", "/h", session, rebalance, "consumer", protocols, True
    )


def new_member(gc: GroupCoordinator, **kw: Any) -> str:
    """JoinGroup v4+ without a member id: MEMBER_ID_REQUIRED hands one out (KIP-394)."""
    r = join(gc, "", **kw).result()
    assert r["error_code"] == ErrorCode.member_id_required and r["member_id"]
    return r["member_id"]


def stable_pair(gc: GroupCoordinator, **kw: Any) -> tuple[str, str]:
    """Members a (leader) and b, Stable at generation 2 with assignments A and B."""
    a = new_member(gc, **kw)
    assert join(gc, a, **kw).result()["generation_id"] == 1
    assert gc.sync("g", 1, a, {a: b"all"}).result()["assignment"] == b"all"
    b = new_member(gc, **kw)
    rb = join(gc, b, **kw)
    ra = join(gc, a, **kw)
    assert ra.done() and rb.done()
    assert ra.result()["generation_id"] == rb.result()["generation_id"] == 2
    sb = gc.sync("g", 2, b, {})
    gc.sync("g", 2, a, {a: b"A", b: b"B"})
    assert sb.result()["assignment"] == b"B"
    assert gc.groups["g"].state == GroupState.STABLE
    return a, b


def test_join_sync_round_with_two_members_leader_assigns():
    """Kafka's classic protocol: the first member leads; a second member's join parks
    until the known member rejoins (``onCompleteJoin`` once all joined); the protocol is
    the one every member supports with the most first choices; only the leader gets the
    member list; followers' SyncGroup waits for the leader's assignment."""
    gc, _sched = coordinator()
    a = new_member(gc)
    r = join(gc, a).result()
    assert r["error_code"] == ErrorCode.none and r["generation_id"] == 1 and r["leader"] == a
    assert r["protocol_name"] == "range" and len(r["members"]) == 1
    assert gc.sync("g", 1, a, {a: b"all"}).result()["assignment"] == b"all"
    assert gc.heartbeat("g", 1, a) == ErrorCode.none
    assert gc.heartbeat("g", 0, a) == ErrorCode.illegal_generation
    assert gc.heartbeat("g", 1, "nobody") == ErrorCode.unknown_member_id

    other = [("roundrobin", b"x"), ("range", b"y")]  # prefers roundrobin
    b = new_member(gc, protocols=other)
    rb = join(gc, b, protocols=other)
    assert not rb.done()  # waits for the known member to rejoin
    assert gc.groups["g"].state == GroupState.PREPARING_REBALANCE
    assert gc.heartbeat("g", 1, a) == ErrorCode.rebalance_in_progress
    ra = join(gc, a)
    assert ra.done() and rb.done()
    assert ra.result()["generation_id"] == rb.result()["generation_id"] == 2
    assert ra.result()["leader"] == a and len(ra.result()["members"]) == 2
    assert rb.result()["members"] == []
    assert ra.result()["protocol_name"] == "range"  # one first choice each: the first met
    assert gc.groups["g"].state == GroupState.COMPLETING_REBALANCE

    sb = gc.sync("g", 2, b, {})
    assert not sb.done()  # followers wait for the leader's assignment
    sa = gc.sync("g", 2, a, {a: b"A", b: b"B"})
    assert sa.result()["assignment"] == b"A" and sb.result()["assignment"] == b"B"
    assert gc.groups["g"].state == GroupState.STABLE

    assert gc.leave("g", b) == ErrorCode.none  # starts a rebalance that waits for a
    assert gc.groups["g"].state == GroupState.PREPARING_REBALANCE
    assert gc.leave("g", a) == ErrorCode.none  # completes it: an empty generation
    assert (gc.groups["g"].state, gc.groups["g"].generation) == (GroupState.EMPTY, 3)
    assert gc.commit_check("g", -1, "") == ErrorCode.none  # simple (assign-mode) commits


def test_join_again_with_the_same_metadata_while_completing_gets_this_generation():
    """Kafka's ``classicGroupJoinExistingMember`` in CompletingRebalance: a member that
    joins again with the same protocols (its first answer may have been lost) gets the
    current generation's answer (the leader with the member list) and the group does not
    rebalance; changed protocols do start a new rebalance."""
    gc, _sched = coordinator()
    a, b = stable_pair(gc)
    assert gc.leave("g", b) == ErrorCode.none
    assert join(gc, a).result()["generation_id"] == 3
    assert gc.groups["g"].state == GroupState.COMPLETING_REBALANCE
    again = join(gc, a)
    assert again.done()
    r = again.result()
    assert r["error_code"] == ErrorCode.none and r["generation_id"] == 3 and r["leader"] == a
    assert [m["member_id"] for m in r["members"]] == [a]
    assert gc.groups["g"].state == GroupState.COMPLETING_REBALANCE
    assert gc.sync("g", 3, a, {a: b"all"}).result()["assignment"] == b"all"
    assert (gc.groups["g"].state, gc.groups["g"].generation) == (GroupState.STABLE, 3)

    c = new_member(gc)
    rc, ra = join(gc, c), join(gc, a)
    assert rc.result()["generation_id"] == ra.result()["generation_id"] == 4
    follower = join(gc, c)  # a follower joins again: no members, same generation
    assert follower.result()["generation_id"] == 4 and follower.result()["members"] == []
    changed = join(gc, c, protocols=[("range", b"other")])
    assert not changed.done()
    assert gc.groups["g"].state == GroupState.PREPARING_REBALANCE


def test_session_timeout_evicts_the_silent_member_and_rebalances():
    """Kafka's ``onMemberHeartbeatExpired``: a member that sends no heartbeat for
    ``session.timeout.ms`` is removed and the group goes PreparingRebalance; the others
    learn it from REBALANCE_IN_PROGRESS and rejoin into a generation without it. A member
    that heartbeats in time stays."""
    gc, sched = coordinator()
    a, b = stable_pair(gc)
    sched.advance(SESSION - 100)
    assert gc.heartbeat("g", 2, a) == ErrorCode.none
    sched.advance(99)  # b's session has 1 ms left
    assert b in gc.groups["g"].members
    assert gc.groups["g"].state == GroupState.STABLE
    sched.advance(1)
    assert b not in gc.groups["g"].members
    assert gc.groups["g"].state == GroupState.PREPARING_REBALANCE
    assert gc.heartbeat("g", 2, b) == ErrorCode.unknown_member_id
    assert gc.heartbeat("g", 2, a) == ErrorCode.rebalance_in_progress
    r = join(gc, a).result()
    assert r["generation_id"] == 3 and [m["member_id"] for m in r["members"]] == [a]


def test_rebalance_timeout_drops_members_that_do_not_rejoin():
    """Kafka's delayed join expiring (``onCompleteJoin``): once a rebalance starts, the
    join phase ends after the largest ``rebalance.timeout.ms``; members that did not
    rejoin by then are left out of the new generation, and the parked joins complete."""
    gc, sched = coordinator()
    a, b = stable_pair(gc, session=6000)
    ra = join(gc, a, protocols=[("range", b"new")], session=6000)  # a changed: rebalance
    assert not ra.done() and gc.groups["g"].state == GroupState.PREPARING_REBALANCE
    sched.advance(REBALANCE - 1)
    assert not ra.done() and b in gc.groups["g"].members
    sched.advance(1)
    r = ra.result()
    assert r["error_code"] == ErrorCode.none and r["generation_id"] == 3
    assert [m["member_id"] for m in r["members"]] == [a]
    assert b not in gc.groups["g"].members
    assert gc.groups["g"].state == GroupState.COMPLETING_REBALANCE


def test_session_timer_spares_members_waiting_in_a_join():
    """A member parked in JoinGroup is not expired by its session timer (Kafka keeps
    awaiting members alive); a member that only heartbeats (REBALANCE_IN_PROGRESS) and
    never rejoins stays until the rebalance timeout, then is dropped."""
    gc, sched = coordinator()
    a = new_member(gc)
    join(gc, a).result()
    gc.sync("g", 1, a, {a: b""}).result()
    b = new_member(gc)
    rb = join(gc, b)  # parks until a rejoins or the rebalance timeout
    for _ in range(6):  # 1800 ms: b's session (400) passes four times over
        sched.advance(300)
        assert gc.heartbeat("g", 1, a) == ErrorCode.rebalance_in_progress
    sched.advance(REBALANCE - 1800 - 1)
    assert not rb.done() and set(gc.groups["g"].members) == {a, b}
    sched.advance(1)
    r = rb.result()
    assert r["generation_id"] == 2 and r["leader"] == b
    assert a not in gc.groups["g"].members


def test_initial_rebalance_delay_holds_the_first_join():
    """Kafka's ``InitialDelayedJoin``: the first join of an Empty group completes only
    after ``group.initial.rebalance.delay.ms``, so members starting together land in one
    generation."""
    gc, sched = coordinator(group_initial_rebalance_delay_ms=300)
    a = new_member(gc)
    ra = join(gc, a)
    sched.advance(299)
    assert not ra.done()
    sched.advance(1)
    assert ra.result()["generation_id"] == 1


def test_pending_member_id_expires_after_the_session_timeout():
    """KIP-394: a member id handed out with MEMBER_ID_REQUIRED that never joins is
    forgotten after the session timeout; a join with it is then UNKNOWN_MEMBER_ID."""
    gc, sched = coordinator()
    a = new_member(gc)
    sched.advance(SESSION)
    assert join(gc, a).result()["error_code"] == ErrorCode.unknown_member_id


KAFKA_VALID_PREVIOUS_STATES = {
    "PreparingRebalance": {"Stable", "CompletingRebalance", "Empty"},
    "CompletingRebalance": {"PreparingRebalance"},
    "Stable": {"CompletingRebalance"},
    "Dead": {"Stable", "PreparingRebalance", "CompletingRebalance", "Empty", "Dead"},
    "Empty": {"PreparingRebalance"},
}
"""Copied from Kafka's ``GroupMetadata.scala`` (``validPreviousStates`` of each state)."""


@pytest.mark.parametrize("source", list(GroupState))
@pytest.mark.parametrize("target", list(GroupState))
def test_transition_allowed_exactly_from_kafkas_valid_previous_states(source, target):
    """Kafka's ``assertValidTransition``: every transition is checked; a forbidden one
    raises and leaves the group as it was, an allowed one stamps the time."""
    g = Group("g", state=source, state_timestamp=1)
    if source.value in KAFKA_VALID_PREVIOUS_STATES[target.value]:
        g.transition_to(target, 7)
        assert (g.state, g.state_timestamp) == (target, 7)
    else:
        with pytest.raises(IllegalGroupStateTransition):
            g.transition_to(target, 7)
        assert (g.state, g.state_timestamp) == (source, 1)
    assert {s.value for s in VALID_PREVIOUS_STATES[target]} == KAFKA_VALID_PREVIOUS_STATES[
        target.value
    ]


def test_coordinator_refuses_an_illegal_transition():
    """The coordinator goes through the checked transition: a Stable group cannot go
    back to Empty without a rebalance."""
    gc, _sched = coordinator()
    a = new_member(gc)
    join(gc, a).result()
    gc.sync("g", 1, a, {}).result()
    with pytest.raises(IllegalGroupStateTransition):
        gc._set_state(gc.groups["g"], GroupState.EMPTY)
    assert gc.groups["g"].state == GroupState.STABLE


def test_shutdown_answers_parked_requests_not_coordinator():
    """A broker going away answers parked joins NOT_COORDINATOR (clients look for the
    coordinator again) and stops its timers."""
    gc, sched = coordinator()
    a = new_member(gc)
    join(gc, a).result()
    gc.sync("g", 1, a, {}).result()
    rb = join(gc, new_member(gc))
    gc.shutdown()
    assert rb.result()["error_code"] == ErrorCode.not_coordinator
    assert sched.pending() == []


def test_group_metadata_record_roundtrip_keeps_nulls_and_static_ids():
    """GroupMetadataValue v3 (Kafka's schema): a null protocol and leader (an Empty
    group) stay null, a static member's group.instance.id and both byte fields survive;
    the key is version 2 and parses back to the group."""
    from kompakt.broker.coordinator import records as R

    assert R.parse_key(R.group_key("grp")) == ("group", ("grp",))
    empty = R.GroupMetadataValue("consumer", 4, None, None, 123)
    assert R.parse_group_value(R.group_value(empty)) == empty
    members = (
        ("m1", "inst", "cli", "/h", 2000, 6000, b"sub", b"asg"),
        ("m2", None, "cli", "/h", 3000, 7000, b"", b""),
    )
    full = R.GroupMetadataValue("consumer", 5, "range", "m1", 456, members)
    assert R.parse_group_value(R.group_value(full)) == full


def test_reply_wakes_its_awaiter_and_a_cancelled_wait_cancels_it():
    """The asyncio layer awaits a parked JoinGroup's Reply: completing it wakes the
    awaiter with the response; cancelling the awaiter (the connection closed) cancels
    the reply, so the coordinator no longer counts the member as waiting. The awaiting
    coroutine is stepped by hand: no loop turns, no sleeps."""
    import asyncio

    async def main() -> None:
        answered = Reply()
        steps = answered.__await__()
        parked = next(steps)  # the future the awaiting task would block on
        assert not parked.done()
        answered.complete({"error_code": ErrorCode.none})
        assert parked.done()
        with pytest.raises(StopIteration) as stop:
            steps.send(None)
        assert stop.value.value == {"error_code": ErrorCode.none}

        dropped = Reply()
        steps = dropped.__await__()
        next(steps)
        with pytest.raises(asyncio.CancelledError):
            steps.throw(asyncio.CancelledError())
        assert dropped.done()
        dropped.complete({"error_code": ErrorCode.none})  # too late: the first end wins
        with pytest.raises(asyncio.CancelledError):
            dropped.result()

    asyncio.run(main())


def test_member_whose_join_wait_was_cancelled_expires_with_its_session():
    """A member whose parked JoinGroup was abandoned (its connection closed) is no
    longer waiting, so its session timer removes it as Kafka's heartbeat expiry does,
    and the rebalance completes without it."""
    gc, sched = coordinator()
    a, b = stable_pair(gc)
    rb = join(gc, b, protocols=[("range", b"changed")])  # b starts a rebalance, parks
    assert not rb.done()
    rb.cancel()  # what a cancelled await does
    ra = join(gc, a)
    assert not ra.done()  # b is still a member until its session ends
    sched.advance(SESSION)
    r = ra.result()
    assert r["generation_id"] == 3 and [m["member_id"] for m in r["members"]] == [a]


def test_broker_hands_its_clock_to_the_log_manager_and_the_coordinator(tmp_path):
    """Kafka's ``KafkaServer(time)``: one clock, passed in, for every broker component;
    here the logs and the group coordinator read the test's clock."""
    import asyncio

    from manual_clock import ManualClock

    from kompakt.broker.app import Broker
    from kompakt.broker.coordinator.handlers import coordinator_if_started

    clock = ManualClock()
    cfg = BrokerConfig.from_mapping(
        {
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "kompakt.admin.listener": "http://127.0.0.1:0",
            "log.dirs": str(tmp_path),
            "kompakt.cleaner.engine": "local",
        }
    )

    async def main() -> None:
        broker = Broker(cfg, clock=clock)
        await broker.start()
        try:
            gc = coordinator_if_started(broker.state)
            assert gc is not None and broker.logs is not None
            assert broker.logs.clock() == gc.now() == clock.now
            clock.advance(12_345)
            assert broker.logs.clock() == gc.now() == clock.now
        finally:
            await broker.stop()

    asyncio.run(main())


def test_initial_delay_of_an_earlier_round_does_not_cut_a_later_one_short():
    """Kafka keeps one delayed join per group (``InitialDelayedJoin`` in the join
    purgatory, keyed by group): when an Empty group's round ends early (its only member
    left) and a new member starts the next round, that round waits its own full
    ``group.initial.rebalance.delay.ms``; the first round's delay timer must not end it."""
    gc, sched = coordinator(group_initial_rebalance_delay_ms=300)
    a = new_member(gc)
    ra = join(gc, a)  # round 1: delay until +300
    sched.advance(100)
    assert gc.leave("g", a) == ErrorCode.none  # round 1 ends empty at +100
    assert ra.result()["error_code"] == ErrorCode.unknown_member_id
    assert gc.groups["g"].state == GroupState.EMPTY
    sched.advance(100)
    b = new_member(gc)
    rb = join(gc, b)  # round 2 at +200: delay until +500
    sched.advance(100)  # +300: round 1's delay would have ended here
    assert not rb.done()
    sched.advance(199)
    assert not rb.done()
    sched.advance(1)
    assert rb.result()["generation_id"] == 2 and rb.result()["leader"] == b


def test_a_leader_gone_before_its_sync_leaves_the_followers_a_session_to_rejoin():
    """Kafka's ``prepareRebalance`` answers the parked SyncGroups with
    REBALANCE_IN_PROGRESS through ``propagateAssignment``, which restarts each answered
    member's session ("reset the session timeout for members after propagating the
    member's assignment"). The join had started every member's timer at once, so a
    leader that died between JoinGroup and SyncGroup took its followers with it: they
    came back as new members after a session and the initial rebalance delay."""
    gc, sched = coordinator()
    a, b = stable_pair(gc)
    ra = join(gc, a, protocols=[("range", b"new")])  # a changed: a rebalance
    rb = join(gc, b)
    assert ra.result()["generation_id"] == rb.result()["generation_id"] == 3
    sb = gc.sync("g", 3, b, {})  # b waits for the leader's assignment; a never sends it
    sched.advance(SESSION)
    assert sb.result()["error_code"] == ErrorCode.rebalance_in_progress
    assert set(gc.groups["g"].members) == {b}
    sched.advance(SESSION - 1)  # b rejoins within the session it was given
    r = join(gc, b).result()
    assert r["error_code"] == ErrorCode.none
    assert (r["generation_id"], r["leader"], r["member_id"]) == (4, b, b)
