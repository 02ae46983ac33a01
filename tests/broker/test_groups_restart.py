"""Consumer groups survive a broker restart, as in Kafka.

Kafka's ``GroupMetadataManager.loadGroup`` (``ClassicGroup.fromRecord`` in the KIP-848
coordinator) restores a classic group from its latest ``GroupMetadataValue``: protocol
type and name, generation, leader and every member with its subscription and assignment.
A group loaded with members is Stable at the same generation, so members that keep
heartbeating with their member id and generation get NONE and may commit; and
``GroupCoordinator.onGroupLoaded`` (``GroupMetadataManager.onLoaded``:
``rescheduleClassicGroupMemberHeartbeat``) arms each member's session timer, so a member
that does not come back is removed after its session timeout and the group rebalances.

Real broker on a fixed 127.0.0.1 port (stopped and started again on the same data dir,
so the clients reconnect to it) and real librdkafka consumers.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from shared_kit import free_port, unique, wait_for

from kompakt.broker.app import BrokerThread, start_test_broker
from kompakt.broker.coordinator.handlers import coordinator_if_started

TIMEOUT = 10
NONE = 0


def start(data_dir: Any, port: int) -> BrokerThread:
    return start_test_broker(
        data_dir,
        listeners=f"PLAINTEXT://127.0.0.1:{port}",
        **{"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 1},
    )


def restart(b: BrokerThread, port: int) -> BrokerThread:
    data = b.broker.config.data_dir
    b.stop()
    return start(data, port)


def create(b: BrokerThread, name: str, partitions: int = 2) -> None:
    a = AdminClient({"bootstrap.servers": b.bootstrap})
    a.create_topics([NewTopic(name, partitions, 1)], operation_timeout=TIMEOUT)[name].result(
        TIMEOUT
    )


def produce(b: BrokerThread, topic: str, values: list[str], partitions: int = 2) -> None:
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0})
    for i, v in enumerate(values):
        p.produce(topic, value=v.encode(), partition=i % partitions)
    assert p.flush(TIMEOUT) == 0


CONSUMER_CONF = {
    "auto.offset.reset": "earliest",
    "enable.auto.commit": False,
    "session.timeout.ms": 6000,
    "heartbeat.interval.ms": 300,
    "fetch.wait.max.ms": 100,
    "topic.metadata.refresh.interval.ms": 1000,
    "reconnect.backoff.ms": 50,
    "reconnect.backoff.max.ms": 200,
}


class Member:
    """A librdkafka consumer that records its rebalance callbacks and what it read."""

    def __init__(self, bootstrap: str, group: str, topic: str, name: str):
        self.events: list[tuple[str, list[tuple[str, int]]]] = []
        self.got: list[str] = []
        self.c = Consumer(
            {**CONSUMER_CONF, "bootstrap.servers": bootstrap, "group.id": group, "client.id": name}
        )
        self.assigned_at = 0  # len(got) at the last assignment

        def on_assign(_c: Consumer, ps: list[TopicPartition]) -> None:
            self.events.append(("assign", sorted((p.topic, p.partition) for p in ps)))
            self.assigned_at = len(self.got)

        self.c.subscribe(
            [topic],
            on_assign=on_assign,
            on_revoke=lambda _c, ps: self.events.append(
                ("revoke", sorted((p.topic, p.partition) for p in ps))
            ),
        )

    def poll(self) -> None:
        m = self.c.poll(0.05)
        if m is not None and m.error() is None:
            self.got.append(m.value().decode())


def poll_until(members: list[Member], cond: Callable[[], Any], timeout: float = 30.0) -> Any:
    """``cond()``'s first truthy value while every member keeps polling (a consumer
    that stops polling leaves its group)."""

    def step() -> Any:
        for m in members:
            m.poll()
        return cond()

    return wait_for(step, "the group condition", timeout)


def poll_for(members: list[Member], seconds: float) -> None:
    """Keep every member polling for ``seconds`` of scenario time (not a wait)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for m in members:
            m.poll()


def group_state(b: BrokerThread, group: str) -> tuple[str, int, list[str]]:
    """(state, generation, member ids) from DescribeGroups (AdminClient) and, for the
    generation (DescribeGroups has none), the coordinator."""
    a = AdminClient({"bootstrap.servers": b.bootstrap})
    d = a.describe_consumer_groups([group], request_timeout=TIMEOUT)[group].result(TIMEOUT)
    gc = coordinator_if_started(b.broker.state)
    assert gc is not None
    g = gc.group(group)
    generation = g.generation if g is not None else -1
    state = str(d.state).rsplit(".", 1)[-1]
    return state, generation, sorted(m.member_id for m in d.members)


def committed(c: Consumer, topic: str) -> list[int]:
    tps = c.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=TIMEOUT)
    return [tp.offset for tp in tps]


def test_stable_group_keeps_members_and_generation_across_restart(tmp_path):
    """``GroupMetadataManager.loadGroup``: a Stable 2-member group comes back Stable with
    the same generation and member ids; the members' heartbeats and commits with that
    generation are accepted, no rebalance callback fires, and what they read but did
    not commit before the restart is not read again."""
    port = free_port()
    b = start(tmp_path / "d", port)
    members: list[Member] = []
    try:
        topic, group = unique("rt"), unique("rg")
        create(b, topic)
        members = [Member(b.bootstrap, group, topic, f"m{i}") for i in range(2)]
        poll_until(
            members,
            lambda: (
                all(m.events and m.events[-1][0] == "assign" for m in members)
                and sum(len(m.events[-1][1]) for m in members) == 2
                and group_state(b, group)[0] == "STABLE"
                and len(group_state(b, group)[2]) == 2
            ),
        )
        produce(b, topic, [f"a{i}" for i in range(10)])  # once settled: each read once
        poll_until(members, lambda: sum(len(m.got) for m in members) == 10)
        before = group_state(b, group)
        events_before = [list(m.events) for m in members]
        assert before[0] == "STABLE" and before[1] >= 1
        assert sorted(x for m in members for x in m.got) == sorted(f"a{i}" for i in range(10))
        # nothing committed: after a rebalance the members would read a0..a9 again

        b = restart(b, port)
        state_after = group_state(b, group)
        assert state_after == before
        # the members carry on: heartbeats accepted, no rebalance, no re-reads
        poll_for(members, 3.0)
        produce(b, topic, [f"b{i}" for i in range(6)])
        poll_until(members, lambda: sum(len(m.got) for m in members) == 16)
        poll_for(members, 1.0)
        assert group_state(b, group) == before
        assert [m.events for m in members] == events_before
        all_got = sorted(x for m in members for x in m.got)
        assert all_got == sorted([f"a{i}" for i in range(10)] + [f"b{i}" for i in range(6)])
        # a commit with the restored generation is accepted (ClassicGroup.validateOffsetCommit)
        for m in members:
            m.c.commit(asynchronous=False)
        assert committed(members[0].c, topic) == [8, 8]
    finally:
        for m in members:
            m.c.close()
        b.stop()


_GONE_MEMBER = """
import sys, time
from confluent_kafka import Consumer
conf = dict(eval(sys.argv[1]))
c = Consumer(conf)
c.subscribe([sys.argv[2]], on_assign=lambda c, ps: print("assigned", flush=True))
while True:
    c.poll(0.1)
"""


def test_member_that_does_not_come_back_expires_and_group_rebalances(tmp_path):
    """``GroupMetadataManager.onLoaded`` arms every restored member's session timer
    (``rescheduleClassicGroupMemberHeartbeat``): a member killed while the broker was
    down is removed after its session timeout, the group rebalances, and the member
    that stayed gets every partition (new generation, same member id)."""
    port = free_port()
    b = start(tmp_path / "d", port)
    stay: Member | None = None
    gone = None
    try:
        topic, group = unique("rt"), unique("rg")
        create(b, topic)
        produce(b, topic, [f"a{i}" for i in range(4)])
        stay = Member(b.bootstrap, group, topic, "stay")
        conf = {**CONSUMER_CONF, "bootstrap.servers": b.bootstrap, "group.id": group}
        conf["client.id"] = "gone"
        gone = subprocess.Popen(
            [sys.executable, "-c", _GONE_MEMBER, repr(conf), topic],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        poll_until(
            [stay],
            lambda: (
                group_state(b, group)[0] == "STABLE"
                and len(group_state(b, group)[2]) == 2
                and stay.events
                and stay.events[-1][0] == "assign"
                and len(stay.events[-1][1]) == 1
            ),
        )
        before = group_state(b, group)
        stay_id = stay.c.memberid()
        assert stay_id in before[2]

        b.stop()
        os.kill(gone.pid, signal.SIGKILL)  # no LeaveGroup: the broker is down
        gone.wait(TIMEOUT)
        b = start(b.broker.config.data_dir, port)
        assert group_state(b, group) == before  # restored, the dead member too
        # ... and removed by its session timeout (6 s) later, not at load
        poll_until(
            [stay],
            lambda: (s := group_state(b, group))[0] == "STABLE" and s[2] == [stay_id],
            timeout=30,
        )
        state, generation, _ = group_state(b, group)
        # a new generation without the dead member. Not necessarily exactly one more:
        # a client that joins again with changed protocols before its SyncGroup starts
        # another (an unchanged one does not: test_group_coordinator pins that rule)
        assert generation > before[1]
        poll_until([stay], lambda: stay.events[-1] == ("assign", [(topic, 0), (topic, 1)]))
        # it read its first partition uncommitted: both from the start now
        poll_until([stay], lambda: set(stay.got[stay.assigned_at :]) >= {f"a{i}" for i in range(4)})
        stay.c.commit(asynchronous=False)
        assert committed(stay.c, topic) == [2, 2]
    finally:
        if gone is not None and gone.poll() is None:
            gone.kill()
            gone.wait()
        if stay is not None:
            stay.c.close()
        b.stop()
