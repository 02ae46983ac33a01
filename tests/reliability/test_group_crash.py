"""A broker killed (SIGKILL, a real process) while a SyncGroup's record is being
written restarts with the group its members were told.

Kafka's ``GroupCoordinator.doSyncGroup`` answers SyncGroup from the
``GroupMetadataManager.storeGroup`` callback: a member learns its assignment only once
the group's record (generation, members, assignments) is in ``__consumer_offsets``, so
the group a restart loads (``loadGroup``) is never behind what a member was told.

The broker here stalls the first record of generation 2 for a second and dies before
appending it (``crash_faults.kill_at_second_generation``). A broker that answered
before writing would have handed both librdkafka consumers their generation-2
assignment in that second, then lost it: the restart would bring back generation 1
with one member owning both partitions, while the two consumers each read one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from reliability.crash_faults import start
from shared_kit import free_port, unique, wait_for

from kompakt.broker.console.browse import decode_assignment
from kompakt.broker.coordinator.storage import OffsetsStorage
from kompakt.log.manager import LogManager

TIMEOUT = 30
SETTINGS = {"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 1}


class Member:
    """A librdkafka consumer that records the assignments it is given."""

    def __init__(self, bootstrap: str, group: str, topic: str, name: str):
        self.assigned: list[list[tuple[str, int]]] = []
        self.c = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "client.id": name,
                "session.timeout.ms": 10000,
                "heartbeat.interval.ms": 300,
                "reconnect.backoff.ms": 50,
                "reconnect.backoff.max.ms": 200,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )

        def on_assign(_c: Any, ps: list[TopicPartition]) -> None:
            self.assigned.append(sorted((p.topic, p.partition) for p in ps))

        self.c.subscribe([topic], on_assign=on_assign)

    def poll(self) -> None:
        self.c.poll(0.05)


def polled(members: list[Member], cond: Any) -> Any:
    """A wait_for predicate that lets every consumer work before each look."""

    def look() -> Any:
        for m in members:
            m.poll()
        return cond()

    return look


def stored_group(data_dir: Path, group: str) -> tuple[int, dict[str, list[tuple[str, int]]]]:
    """(generation, member id -> partitions) of the group as a restart loads it."""
    with LogManager(data_dir) as logs:
        meta, _offsets = OffsetsStorage(logs, 1, 1 << 20).load()[group]
    assert meta is not None
    return meta.generation, {m[0]: sorted(decode_assignment(m[7])) for m in meta.members}


def described(admin: AdminClient, group: str) -> dict[str, list[tuple[str, int]]]:
    """member id -> partitions of a Stable group, from DescribeGroups (empty otherwise)."""
    d = admin.describe_consumer_groups([group])[group].result(TIMEOUT)
    if str(d.state).rsplit(".", 1)[-1] != "STABLE":
        return {}
    return {
        m.member_id: sorted((tp.topic, tp.partition) for tp in m.assignment.topic_partitions)
        for m in d.members
    }


def test_kill_before_sync_groups_record_restarts_with_what_the_members_were_told(
    tmp_path: Path,
) -> None:
    port = free_port()
    bootstrap = f"127.0.0.1:{port}"
    topic, group = unique("gc"), unique("gcg")
    proc = start(tmp_path, port, "kill_at_second_generation", SETTINGS)
    members: list[Member] = []
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(TIMEOUT)
        a = Member(bootstrap, group, topic, "a")
        members.append(a)
        wait_for(polled(members, lambda: a.assigned), "generation 1's assignment", TIMEOUT)
        a_id = a.c.memberid()
        b = Member(bootstrap, group, topic, "b")  # its join starts generation 2
        members.append(b)
        wait_for(polled(members, lambda: proc.poll() is not None), "the crash", TIMEOUT)
        assert proc.returncode == -9
        # what each member was told last: a got generation 1's, b nothing
        told = {m.c.memberid(): m.assigned[-1] for m in members if m.assigned}
        assert told == {a_id: [(topic, 0), (topic, 1)]}, told
        assert stored_group(tmp_path, group) == (1, told)

        # restarted, the two consumers rebalance from that group and share the topic
        proc = start(tmp_path, port, "none", SETTINGS)
        wait_for(
            polled(
                members,
                lambda: (
                    len(a.assigned) >= 2
                    and b.assigned
                    and sorted(a.assigned[-1] + b.assigned[-1]) == [(topic, 0), (topic, 1)]
                    and len(a.assigned[-1]) == 1
                ),
            ),
            "generation 2 shared by both consumers",
            TIMEOUT,
        )
        # and DescribeGroups answers what each of them was told
        told = {m.c.memberid(): m.assigned[-1] for m in members}
        wait_for(polled(members, lambda: described(admin, group) == told), "the group", TIMEOUT)
    finally:
        for m in members:
            m.c.close()
        if proc.poll() is None:
            proc.terminate()
            proc.wait(TIMEOUT)
