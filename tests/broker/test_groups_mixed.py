"""One consumer group, three client libraries; static membership; KIP-848 clients.

* librdkafka (confluent-kafka), kafka-python and aiokafka members share a group: the
  group rebalances when one joins and when one leaves, every record is processed at
  least once, and a new member resumes from the committed offsets (Kafka's classic
  protocol: the leader runs the ``roundrobin`` assignor all three implement).
* Static membership (KIP-345, ``group.instance.id``): a restarted member takes its old
  place with no rebalance (Kafka's ``updateStaticMemberAndRebalance``).
* KIP-848: ApiVersions does not advertise ConsumerGroupHeartbeat (68), so a consumer
  configured with ``group.protocol=consumer`` is told by its own client that the broker
  lacks the API; kompakt implements the classic protocol only.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
import threading
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from shared_kit import unique, wait_for

from kompakt.broker.app import start_test_broker

TIMEOUT = 10


@pytest.fixture(scope="module")
def mbroker(tmp_path_factory):
    b = start_test_broker(
        tmp_path_factory.mktemp("mixed-groups"), **{"group.initial.rebalance.delay.ms": 0}
    )
    yield b
    b.stop()


def create(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(TIMEOUT)


def produce(bootstrap: str, topic: str, values: list[str], partitions: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i, v in enumerate(values):
        p.produce(topic, key=v.encode(), value=v.encode(), partition=i % partitions)
    assert p.flush(TIMEOUT) == 0


class Member(threading.Thread):
    """A group member on its own thread: polls, records what it processed, then commits
    (at-least-once: a commit refused during a rebalance means redelivery, not loss)."""

    name_: str = ""

    def __init__(self, bootstrap: str, group: str, topic: str):
        super().__init__(daemon=True, name=self.name_)
        self.bootstrap, self.group, self.topic = bootstrap, group, topic
        self.seen: list[tuple[int, int, str]] = []
        self.assignment: frozenset[int] = frozenset()
        self.stop_ev = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.consume()
        except BaseException as exc:  # surfaced by stop()
            self.error = exc

    def consume(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        self.stop_ev.set()
        self.join(30)
        assert not self.is_alive(), f"{self.name_} did not stop"
        if self.error is not None:
            raise self.error


class ConfluentMember(Member):
    name_ = "confluent-kafka"

    def consume(self) -> None:
        c = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": self.group,
                "client.id": self.name_,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "partition.assignment.strategy": "roundrobin",
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 500,
                "fetch.wait.max.ms": 100,
                "topic.metadata.refresh.interval.ms": 1000,
            }
        )
        c.subscribe([self.topic])
        try:
            while not self.stop_ev.is_set():
                msgs = [m for m in c.consume(100, 0.1) if m.error() is None]
                for m in msgs:
                    self.seen.append((m.partition(), m.offset(), m.value().decode()))
                if msgs:
                    try:
                        c.commit(asynchronous=False)
                    except KafkaException:
                        pass
                self.assignment = frozenset(tp.partition for tp in c.assignment())
        finally:
            c.close()


class KafkaPythonMember(Member):
    name_ = "kafka-python"

    def consume(self) -> None:
        from kafka import KafkaConsumer
        from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

        kc = KafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=self.group,
            client_id=self.name_,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            partition_assignment_strategy=[RoundRobinPartitionAssignor],
            session_timeout_ms=6000,
            heartbeat_interval_ms=500,
            fetch_max_wait_ms=100,
            # a leader whose metadata lacks the new topic assigns nothing, and rejoins
            # only once a refresh shows the partitions (client-side race)
            metadata_max_age_ms=1000,
        )
        kc.subscribe([self.topic])
        try:
            while not self.stop_ev.is_set():
                # kafka-python 3.0.12: with a short poll timeout, a leader's SyncGroup reply
                # that lands after poll() gave up is dropped and the member stays without
                # an assignment until its session expires (seen 4 in 40 joins at 100 ms,
                # 0 in 40 at 1000 ms); a client race, the broker answered in 1 ms
                batch = kc.poll(timeout_ms=1000)
                for msgs in batch.values():
                    for m in msgs:
                        self.seen.append((m.partition, m.offset, m.value.decode()))
                if batch:
                    try:
                        kc.commit()
                    except Exception:  # CommitFailedError during a rebalance
                        pass
                self.assignment = frozenset(tp.partition for tp in kc.assignment())
        finally:
            kc.close()  # sends LeaveGroup


class AioKafkaMember(Member):
    name_ = "aiokafka"

    def consume(self) -> None:
        asyncio.run(self._consume())

    async def _consume(self) -> None:
        from aiokafka import AIOKafkaConsumer

        c = AIOKafkaConsumer(
            self.topic,
            bootstrap_servers=self.bootstrap,
            group_id=self.group,
            client_id=self.name_,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=6000,
            heartbeat_interval_ms=500,
            fetch_max_wait_ms=100,
            metadata_max_age_ms=1000,
        )  # its default assignor is roundrobin
        await c.start()
        try:
            while not self.stop_ev.is_set():
                batch = await c.getmany(timeout_ms=100)
                for msgs in batch.values():
                    for m in msgs:
                        self.seen.append((m.partition, m.offset, m.value.decode()))
                if batch:
                    try:
                        await c.commit()
                    except Exception:  # CommitFailedError during a rebalance
                        pass
                self.assignment = frozenset(tp.partition for tp in c.assignment())
        finally:
            await c.stop()


def split_evenly(members: list[Member], partitions: int) -> bool:
    """Every partition owned by exactly one member, and every member owns some."""
    parts = [m.assignment for m in members]
    return (
        all(parts)
        and sum(len(p) for p in parts) == partitions
        and frozenset().union(*parts) == frozenset(range(partitions))
    )


def group_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(partitions)], TIMEOUT)
        return [tp.offset for tp in got]
    finally:
        c.close()


def high_watermarks(bootstrap: str, topic: str, partitions: int) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "hwm-probe"})
    try:
        return [
            c.get_watermark_offsets(TopicPartition(topic, p), TIMEOUT)[1] for p in range(partitions)
        ]
    finally:
        c.close()


def test_three_client_libraries_rebalance_on_join_and_leave_at_least_once(mbroker):
    """Kafka's classic protocol across clients: librdkafka + kafka-python split the
    partitions; aiokafka joins (rebalance to three); kafka-python leaves with LeaveGroup
    (rebalance to two). Every record produced before, during and after the rebalances is
    processed at least once, the final commits reach the end of every partition, and a
    new member resumes from them: it gets only what was produced afterwards."""
    bs, nparts = mbroker.bootstrap, 6
    topic, group = unique("mixed"), unique("mixed-g")
    create(bs, topic, nparts)
    gc = None
    a, b = ConfluentMember(bs, group, topic), KafkaPythonMember(bs, group, topic)
    c = AioKafkaMember(bs, group, topic)
    started: list[Member] = []
    try:
        for m in (a, b):
            m.start()
            started.append(m)
        wait_for(lambda: split_evenly([a, b], nparts), what="confluent + kafka-python split")
        gc = mbroker.broker.state.extra["group_coordinator"]
        gen_two = gc.groups[group].generation
        phase1 = [f"p1-{i}" for i in range(60)]
        produce(bs, topic, phase1, nparts)

        c.start()
        started.append(c)
        wait_for(lambda: split_evenly([a, b, c], nparts), what="three members split")
        assert gc.groups[group].generation > gen_two  # a rebalance, not a side channel
        admin = AdminClient({"bootstrap.servers": bs})

        def described() -> Any:
            d = admin.describe_consumer_groups([group])[group].result(TIMEOUT)
            return d if d.partition_assignor else None  # the protocol is shown when Stable

        desc = wait_for(described, what="group described as Stable")
        assert sorted(m.client_id for m in desc.members) == [
            "aiokafka",
            "confluent-kafka",
            "kafka-python",
        ]
        assert desc.partition_assignor == "roundrobin"
        phase2 = [f"p2-{i}" for i in range(60)]
        produce(bs, topic, phase2, nparts)
        # phase 2 is processed, and every member has done some work, before one leaves
        wait_for(
            lambda: (
                all(m.seen for m in (a, b, c))
                and {v for m in (a, b, c) for _p, _o, v in m.seen} >= set(phase2)
            ),
            what="phase 2 processed, every member did some work",
        )

        gen_three = gc.groups[group].generation
        b.stop()
        started.remove(b)
        wait_for(lambda: split_evenly([a, c], nparts), what="rebalance after kafka-python left")
        assert gc.groups[group].generation > gen_three
        phase3 = [f"p3-{i}" for i in range(60)]
        produce(bs, topic, phase3, nparts)

        produced = set(phase1 + phase2 + phase3)
        hwm = high_watermarks(bs, topic, nparts)
        wait_for(
            lambda: (
                {v for m in (a, b, c) for _p, _o, v in m.seen} >= produced
                and group_offsets(bs, group, topic, nparts) == hwm
            ),
            what="everything processed and committed",
        )
        for m in list(started):
            m.stop()
            started.remove(m)
        seen = [v for m in (a, b, c) for _p, _o, v in m.seen]
        assert set(seen) == produced  # nothing lost (duplicates allowed: at least once)
        assert all(m.seen for m in (a, b, c))  # every library did part of the work

        # resume: a new member starts at the committed offsets
        phase4 = [f"p4-{i}" for i in range(12)]
        produce(bs, topic, phase4, nparts)
        d = KafkaPythonMember(bs, group, topic)
        d.start()
        started.append(d)
        # every phase-4 value seen: a resume before the committed offsets would have
        # delivered older values first (per-partition order), which the equality catches
        wait_for(
            lambda: set(phase4) <= {v for _p, _o, v in d.seen},
            what="resumed member consumed phase 4",
        )
        d.stop()
        started.remove(d)
        assert sorted(v for _p, _o, v in d.seen) == sorted(phase4)
    finally:
        for m in started:
            m.stop_ev.set()
        for m in started:
            m.join(30)


def test_static_member_rejoins_without_rebalance(mbroker):
    """KIP-345: a member with ``group.instance.id`` that restarts within the session
    timeout takes its old place: same generation, same partitions, and the other member
    sees no revocation (Kafka's ``updateStaticMemberAndRebalance``, Stable case)."""
    bs, nparts = mbroker.bootstrap, 4
    topic, group = unique("static"), unique("static-g")
    create(bs, topic, nparts)
    events: dict[str, list[str]] = {"s1": [], "s2": []}

    def static_consumer(instance: str) -> Consumer:
        c = Consumer(
            {
                "bootstrap.servers": bs,
                "group.id": group,
                "group.instance.id": instance,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "partition.assignment.strategy": "roundrobin",
                "session.timeout.ms": 10000,
                "heartbeat.interval.ms": 500,
            }
        )
        c.subscribe(
            [topic],
            on_assign=lambda _c, _p: events[instance].append("assign"),
            on_revoke=lambda _c, _p: events[instance].append("revoke"),
        )
        return c

    s1, s2 = static_consumer("s1"), static_consumer("s2")
    s1b = None
    try:
        wait_for(
            lambda: (
                [s.poll(0.05) for s in (s1, s2)]
                and len(s1.assignment()) == 2
                and len(s2.assignment()) == 2
            ),
            what="two static members split",
        )
        gc = mbroker.broker.state.extra["group_coordinator"]
        g = gc.groups[group]
        generation, old_id = g.generation, g.static["s1"]
        s1_parts = sorted(tp.partition for tp in s1.assignment())
        s2_parts = sorted(tp.partition for tp in s2.assignment())
        events["s2"].clear()
        s1.close()  # a static member sends no LeaveGroup: its place is kept
        assert old_id in g.members
        s1b = static_consumer("s1")
        wait_for(
            lambda: [s.poll(0.05) for s in (s1b, s2)] and len(s1b.assignment()) == 2,
            what="restarted static member assigned",
        )
        for _ in range(10):  # give a (wrong) rebalance the chance to show
            s1b.poll(0.05)
            s2.poll(0.05)
        assert g.generation == generation
        assert sorted(tp.partition for tp in s1b.assignment()) == s1_parts
        assert sorted(tp.partition for tp in s2.assignment()) == s2_parts
        assert events["s2"] == []  # the other member was not disturbed
        assert g.static["s1"] != old_id and old_id not in g.members and len(g.members) == 2
    finally:
        for c in (s1b, s2):
            if c is not None:
                c.close()


def test_static_member_old_id_is_fenced():
    """KIP-345: after a static member is replaced, a JoinGroup, Heartbeat, SyncGroup or
    OffsetCommit with the old member id and the same instance id gets FENCED_INSTANCE_ID
    (82), as Kafka's isStaticMemberFenced decides; LeaveGroup can name a static member
    by its instance id."""
    from kio.schema.errors import ErrorCode
    from manual_clock import ManualScheduler

    from kompakt.broker.config import BrokerConfig
    from kompakt.broker.coordinator.coordinator import GroupCoordinator

    cfg = BrokerConfig.from_mapping({"group.initial.rebalance.delay.ms": "0"})
    gc = GroupCoordinator(cfg, ManualScheduler())
    protos = [("range", b"m")]
    fenced = ErrorCode.fenced_instance_id

    def join(mid: str) -> dict[str, Any]:
        return gc.join("g", mid, "inst", "cli", "/h", 6000, 6000, "consumer", protos, True).result()

    r1 = join("")
    assert r1["error_code"] == 0 and r1["member_id"].startswith("inst-")
    gc.sync("g", 1, r1["member_id"], {r1["member_id"]: b"A"}).result()
    r2 = join("")  # the restarted instance
    assert r2["error_code"] == 0 and r2["generation_id"] == 1
    assert r2["leader"] == r1["member_id"]  # the old leader id: no reassignment
    assert gc.sync("g", 1, r2["member_id"], {}).result()["assignment"] == b"A"
    assert join(r1["member_id"])["error_code"] == fenced
    assert gc.heartbeat("g", 1, r2["member_id"], "inst") == 0
    # the replaced instance's heartbeats, syncs and commits are fenced, not unknown
    assert gc.heartbeat("g", 1, r1["member_id"], "inst") == fenced
    assert gc.sync("g", 1, r1["member_id"], {}, "inst").result()["error_code"] == fenced
    assert gc.commit_check("g", 1, r1["member_id"], "inst") == fenced
    assert gc.heartbeat("g", 1, r1["member_id"]) == ErrorCode.unknown_member_id  # no instance id
    # LeaveGroup v3+ by instance id alone (admin tools); a wrong member id is fenced
    assert gc.leave("g", r1["member_id"], "inst") == fenced
    assert gc.leave("g", "", "inst") == 0
    assert gc.groups["g"].members == {} and gc.groups["g"].static == {}
    assert gc.leave("g", "", "inst") == ErrorCode.unknown_member_id
    gc.shutdown()


def _api_versions(port: int) -> dict[int, tuple[int, int]]:
    """ApiVersions v0 by hand: {api_key: (min, max)} as the broker advertises them."""
    body = struct.pack(">hhih", 18, 0, 1, 3) + b"raw"
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as s:
        s.sendall(struct.pack(">i", len(body)) + body)
        f = s.makefile("rb")
        (n,) = struct.unpack(">i", f.read(4))
        frame = f.read(n)
    _corr, err, count = struct.unpack_from(">ihi", frame, 0)
    assert err == 0
    out = {}
    for i in range(count):
        key, lo, hi = struct.unpack_from(">hhh", frame, 10 + 6 * i)
        out[key] = (lo, hi)
    return out


def test_kip848_consumer_protocol_not_advertised_client_reports_unsupported(mbroker):
    """KIP-848 is not implemented: ApiVersions advertises the classic group APIs and not
    ConsumerGroupHeartbeat (68) / ConsumerGroupDescribe (69), as a Kafka broker with the
    new protocol disabled does. What a librdkafka consumer with ``group.protocol=consumer``
    then does (librdkafka 2.x): it never sends the API, logs "ConsumerGroupHeartbeatRequest
    not supported by broker" (cgrp debug), gets no assignment and joins no group, and
    closes promptly. (Java clients >= 4.0 fail with an UnsupportedVersionException that
    says to set ``group.protocol=classic``.) Use ``group.protocol=classic``."""
    apis = _api_versions(mbroker.port)
    assert {10, 11, 12, 13, 14, 8, 9} <= set(apis)
    assert 68 not in apis and 69 not in apis

    topic, group = unique("kip848"), unique("kip848-g")
    create(mbroker.bootstrap, topic, 1)
    lines: list[str] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    logger = logging.getLogger(f"rdkafka.{group}")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    logger.addHandler(Capture())
    c = Consumer(
        {
            "bootstrap.servers": mbroker.bootstrap,
            "group.id": group,
            "group.protocol": "consumer",
            "debug": "cgrp",
            "logger": logger,
        }
    )
    try:
        c.subscribe([topic])
        wait_for(
            lambda: (
                c.poll(0.1) is None
                and any("ConsumerGroupHeartbeatRequest not supported by broker" in x for x in lines)
            ),
            timeout=15,
            what="librdkafka reports the missing API",
        )
        assert c.assignment() == []
        gc = mbroker.broker.state.extra["group_coordinator"]
        assert group not in gc.groups
    finally:
        c.close()
