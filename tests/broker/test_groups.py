"""Consumer groups (classic protocol) against the broker: librdkafka, kafka-python, kcat."""

import shutil
import subprocess

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from raw_kafka import call as _call
from shared_kit import poll_until as kit_poll_until
from shared_kit import unique, wait_for

from kompakt.broker.app import start_test_broker

TIMEOUT = 10
FAST = {"group.initial.rebalance.delay.ms": 0}


@pytest.fixture(scope="module")
def gbroker(tmp_path_factory):
    b = start_test_broker(tmp_path_factory.mktemp("groups-data"), **FAST)
    yield b
    b.stop()


def create(bootstrap, name, partitions=2):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fs = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1)],
        operation_timeout=TIMEOUT,
    )
    fs[name].result(TIMEOUT)


def produce(bootstrap, topic, n, partitions=2):
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(n):
        p.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=i % partitions)
    assert p.flush(TIMEOUT) == 0


def consumer(bootstrap, group, **extra):
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
        "max.poll.interval.ms": 10000,
        "fetch.wait.max.ms": 100,
        "topic.metadata.refresh.interval.ms": 1000,
    }
    conf.update(extra)
    return Consumer(conf)


def poll_until(consumers, cond, timeout=30.0, sink=None):
    """Whether ``cond()`` held within ``timeout`` while every consumer kept polling."""

    def step() -> bool:
        for c in consumers:
            m = c.poll(0.1)
            if m is not None and m.error() is None and sink is not None:
                sink.append(m)
        return cond()

    return bool(kit_poll_until(step, timeout))


def test_confluent_group_consumes_and_commits(gbroker):
    topic, group = unique("grp-topic"), unique("g")
    create(gbroker.bootstrap, topic)
    produce(gbroker.bootstrap, topic, 20)
    c = consumer(gbroker.bootstrap, group)
    c.subscribe([topic])
    got = []
    try:
        assert poll_until([c], lambda: len(got) >= 20, sink=got), len(got)
        assert sorted(m.value() for m in got) == sorted(f"v{i}".encode() for i in range(20))
        c.commit(asynchronous=False)
        committed = c.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], TIMEOUT)
        assert [tp.offset for tp in committed] == [10, 10]
    finally:
        c.close()
    # a new member of the same group resumes after the committed offsets
    produce(gbroker.bootstrap, topic, 2)
    c2 = consumer(gbroker.bootstrap, group)
    c2.subscribe([topic])
    more = []
    try:
        assert poll_until([c2], lambda: len(more) >= 2, sink=more)
        assert sorted(m.offset() for m in more) == [10, 10]
    finally:
        c2.close()


def test_confluent_rebalance_split_and_takeover(gbroker):
    topic, group = unique("grp-reb"), unique("g")
    create(gbroker.bootstrap, topic)
    c1 = consumer(gbroker.bootstrap, group)
    c2 = consumer(gbroker.bootstrap, group)
    try:
        c1.subscribe([topic])
        assert poll_until([c1], lambda: len(c1.assignment()) == 2)
        c2.subscribe([topic])
        assert poll_until(
            [c1, c2], lambda: len(c1.assignment()) == 1 and len(c2.assignment()) == 1
        ), (c1.assignment(), c2.assignment())
        parts = {tp.partition for tp in c1.assignment() + c2.assignment()}
        assert parts == {0, 1}
        admin = AdminClient({"bootstrap.servers": gbroker.bootstrap})
        listed = admin.list_consumer_groups().result(TIMEOUT)
        assert group in {g.group_id for g in listed.valid}
        desc = admin.describe_consumer_groups([group])[group].result(TIMEOUT)
        assert len(desc.members) == 2
        c2.close()
        assert poll_until([c1], lambda: len(c1.assignment()) == 2), c1.assignment()
    finally:
        c1.close()


def test_offset_records_roundtrip():
    from kompakt.broker.coordinator import records as R

    key = R.offset_key("grp", "t", 3)
    assert R.parse_key(key) == ("offset", ("grp", "t", 3))
    om = R.OffsetAndMetadata(42, 7, "meta", 1234)
    assert R.parse_offset_value(R.offset_value(om)) == om
    assert R.java_string_hash("hello") == 99162322
    assert R.java_string_hash("polygenelubricants") == -(2**31)
    assert R.partition_for("polygenelubricants", 50) == 0
    assert R.partition_for("a", 50) == 97 % 50


def test_kafka_python_group(gbroker):
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    topic, group = unique("grp-kp"), unique("g")
    create(gbroker.bootstrap, topic)
    produce(gbroker.bootstrap, topic, 10)
    kc = KafkaConsumer(
        topic,
        bootstrap_servers=gbroker.bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
        consumer_timeout_ms=15000,
    )
    try:
        got = []
        for m in kc:
            got.append(m)
            if len(got) >= 10:
                break
        assert len(got) == 10
        kc.commit()
        assert kc.committed(KTP(topic, 0)) == 5
        assert kc.committed(KTP(topic, 1)) == 5
    finally:
        kc.close()


def test_offsets_survive_restart(tmp_path):
    data = tmp_path / "data"
    b = start_test_broker(data, **FAST)
    topic, group = "restart-topic", "restart-group"
    try:
        create(b.bootstrap, topic)
        produce(b.bootstrap, topic, 6)
        c = consumer(b.bootstrap, group)
        c.assign([TopicPartition(topic, 0, 0), TopicPartition(topic, 1, 0)])
        c.commit(
            offsets=[TopicPartition(topic, 0, 3), TopicPartition(topic, 1, 2)],
            asynchronous=False,
        )
        c.close()
        # a subscribed group reaches generation 1 (Stable), then 2 (Empty) on leave
        c = consumer(b.bootstrap, "restart-sub")
        c.subscribe([topic])
        assert poll_until([c], lambda: len(c.assignment()) == 2)
        c.close()
    finally:
        b.stop()
    b2 = start_test_broker(data, **FAST)
    try:
        # loaded at start-up, before any client asks (so expiry runs after a restart)
        def loaded_coordinator():
            gc = b2.broker.state.extra.get("group_coordinator")
            return gc if gc is not None and group in gc.groups else None

        loaded = wait_for(loaded_coordinator, "the group loaded at start-up", 10)
        assert (topic, 0) in loaded.groups[group].offsets
        c = consumer(b2.bootstrap, group)
        committed = c.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], TIMEOUT)
        assert [tp.offset for tp in committed] == [3, 2]
        c.close()
        assert b2.logs.topic_config("__consumer_offsets").compact
        assert b2.logs.partition_count("__consumer_offsets") == 50
        r = _call(b2.port, 16, 4, {"states_filter": []})
        listed = {g.group_id: (g.protocol_type, g.group_state) for g in r.groups}
        assert listed["restart-sub"] == ("consumer", "Empty")
        gc = b2.broker.state.extra["group_coordinator"]
        assert gc.groups["restart-sub"].generation == 2
        # the next join continues the generation sequence
        c = consumer(b2.bootstrap, "restart-sub")
        c.subscribe([topic])
        assert poll_until([c], lambda: len(c.assignment()) == 2)
        assert gc.groups["restart-sub"].generation == 3
        c.close()
    finally:
        b2.stop()


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat not installed")
def test_kcat_group(gbroker):
    topic, group = unique("grp-kcat"), unique("g")
    create(gbroker.bootstrap, topic)
    produce(gbroker.bootstrap, topic, 8)
    out = subprocess.run(
        [
            "kcat",
            "-b",
            gbroker.bootstrap,
            "-G",
            group,
            "-X",
            "auto.offset.reset=earliest",
            "-X",
            "session.timeout.ms=6000",
            "-e",
            "-q",
            "-f",
            "%s\\n",
            topic,
        ],
        capture_output=True,
        text=True,
        timeout=45,
    )
    assert out.returncode == 0, out.stderr
    assert sorted(out.stdout.split()) == sorted(f"v{i}" for i in range(8))


def test_raw_group_apis(gbroker):
    port = gbroker.port
    topic, g1, g2 = unique("grp-raw"), unique("g"), unique("g")
    create(gbroker.bootstrap, topic)
    r = _call(port, 10, 6, {"key_type": 0, "coordinator_keys": [g1, g2]})
    assert [c.key for c in r.coordinators] == [g1, g2]
    assert all(c.error_code == 0 and c.port == port for c in r.coordinators)
    r = _call(port, 10, 0, {"key": g1})
    assert r.error_code == 0 and r.port == port
    # JoinGroup v4+: the first join only hands out a member id
    r = _call(
        port,
        11,
        5,
        {
            "group_id": g1,
            "session_timeout": 6000,
            "rebalance_timeout": 6000,
            "member_id": "",
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}],
        },
    )
    assert r.error_code == 79 and r.member_id
    # simple commits (generation -1) for two groups, then a multi-group fetch (v8)
    for g, off in ((g1, 11), (g2, 22)):
        r = _call(
            port,
            8,
            8,
            {
                "group_id": g,
                "generation_id_or_member_epoch": -1,
                "member_id": "",
                "topics": [
                    {
                        "name": topic,
                        "partitions": [
                            {
                                "partition_index": 1,
                                "committed_offset": off,
                                "committed_leader_epoch": -1,
                                "committed_metadata": "m",
                            },
                            {
                                "partition_index": 9,
                                "committed_offset": 1,
                                "committed_leader_epoch": -1,
                                "committed_metadata": "",
                            },
                        ],
                    }
                ],
            },
        )
        codes = [p.error_code for p in r.topics[0].partitions]
        assert codes == [0, 3], codes
    r = _call(
        port,
        9,
        8,
        {
            "groups": [
                {"group_id": g1, "topics": [{"name": topic, "partition_indexes": [0, 1]}]},
                {"group_id": g2, "topics": None},
            ]
        },
    )
    got = {
        (grp.group_id, p.partition_index): p.committed_offset
        for grp in r.groups
        for t in grp.topics
        for p in t.partitions
    }
    assert got == {(g1, 0): -1, (g1, 1): 11, (g2, 1): 22}
    r = _call(port, 9, 1, {"group_id": g2, "topics": [{"name": topic, "partition_indexes": [1]}]})
    assert r.topics[0].partitions[0].committed_offset == 22
    r = _call(port, 16, 5, {"states_filter": [], "types_filter": []})
    assert {g1, g2} <= {g.group_id for g in r.groups}
    r = _call(
        port, 15, 6, {"groups": [g2, "no-such-group"], "include_authorized_operations": False}
    )
    assert r.groups[0].group_state == "Empty" and r.groups[1].error_code == 69
    r = _call(port, 42, 2, {"groups_names": [g2]})
    assert r.results[0].error_code == 0
    r = _call(port, 9, 8, {"groups": [{"group_id": g2, "topics": None}]})
    assert r.groups[0].topics == ()


def test_raw_old_and_new_versions(gbroker):
    """JoinGroup/SyncGroup/Heartbeat/LeaveGroup v0 and v3+ batched leave; topic ids (v10)."""
    port = gbroker.port
    topic, g = unique("grp-rawv"), unique("g")
    create(gbroker.bootstrap, topic)
    join = {
        "group_id": g,
        "session_timeout": 6000,
        "rebalance_timeout": 6000,
        "member_id": "",
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"m"}],
    }
    r = _call(port, 11, 0, join)  # v0-3 assign the member id without a second round
    assert r.error_code == 0 and r.generation_id == 1 and r.leader == r.member_id
    mid = r.member_id
    r = _call(
        port,
        14,
        0,
        {
            "group_id": g,
            "generation_id": 1,
            "member_id": mid,
            "assignments": [{"member_id": mid, "assignment": b"A"}],
        },
    )
    assert r.error_code == 0 and r.assignment == b"A"
    assert _call(port, 12, 0, {"group_id": g, "generation_id": 1, "member_id": mid}).error_code == 0
    assert (
        _call(port, 12, 4, {"group_id": g, "generation_id": 9, "member_id": mid}).error_code == 22
    )
    assert (
        _call(port, 12, 4, {"group_id": g, "generation_id": 1, "member_id": "x"}).error_code == 25
    )
    # commit with the member's generation, by topic id (v10), fetch by topic id (v10)
    tid = gbroker.broker.state.topic_id(topic)
    r = _call(
        port,
        8,
        10,
        {
            "group_id": g,
            "generation_id_or_member_epoch": 1,
            "member_id": mid,
            "topics": [
                {
                    "topic_id": tid,
                    "partitions": [
                        {
                            "partition_index": 0,
                            "committed_offset": 5,
                            "committed_leader_epoch": 0,
                            "committed_metadata": None,
                        }
                    ],
                }
            ],
        },
    )
    assert r.topics[0].topic_id == tid and r.topics[0].partitions[0].error_code == 0
    r = _call(
        port,
        9,
        10,
        {"groups": [{"group_id": g, "topics": [{"topic_id": tid, "partition_indexes": [0]}]}]},
    )
    p = r.groups[0].topics[0].partitions[0]
    assert r.groups[0].topics[0].topic_id == tid and p.committed_offset == 5
    assert p.committed_leader_epoch == 0
    # a stale generation cannot commit; a simple commit is refused while the group is live
    bad = {
        "group_id": g,
        "generation_id_or_member_epoch": 7,
        "member_id": mid,
        "topics": [
            {
                "name": topic,
                "partitions": [
                    {"partition_index": 0, "committed_offset": 1, "committed_metadata": ""}
                ],
            }
        ],
    }
    assert _call(port, 8, 2, bad).topics[0].partitions[0].error_code == 22
    bad.update(generation_id_or_member_epoch=-1, member_id="")
    assert _call(port, 8, 2, bad).topics[0].partitions[0].error_code == 25
    r = _call(port, 15, 5, {"groups": [g], "include_authorized_operations": False})
    d = r.groups[0]
    assert d.group_state == "Stable" and d.protocol_data == "range"
    assert d.members[0].member_id == mid and d.members[0].member_assignment == b"A"
    r = _call(
        port,
        13,
        5,
        {"group_id": g, "members": [{"member_id": mid}, {"member_id": "ghost"}]},
    )
    assert [m.error_code for m in r.members] == [0, 25]
    r = _call(port, 15, 5, {"groups": [g], "include_authorized_operations": False})
    assert r.groups[0].group_state == "Empty" and r.groups[0].members == ()
    assert _call(port, 13, 0, {"group_id": g, "member_id": mid}).error_code == 25


def test_stop_releases_parked_joins(tmp_path):
    """A JoinGroup parked in the (long) initial rebalance delay does not hold up shutdown."""
    import threading

    b = start_test_broker(tmp_path / "d", **{"group.initial.rebalance.delay.ms": 60000})
    out = {}

    def join():
        out["r"] = _call(
            b.port,
            11,
            3,
            {
                "group_id": "parked",
                "session_timeout": 6000,
                "rebalance_timeout": 60000,
                "member_id": "",
                "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": b""}],
            },
        )

    t = threading.Thread(target=join, daemon=True)
    t.start()

    def parked() -> bool:
        gc = b.broker.state.extra.get("group_coordinator")
        return gc is not None and "parked" in gc.groups and bool(gc.groups["parked"].members)

    wait_for(parked, "the join to be parked in the coordinator")
    assert t.is_alive()
    b.stop()
    t.join(10)
    # an answer, not a dropped connection: a join left parked would hold the server's
    # stop for its 10 s in-flight grace, then be cancelled without a response
    assert out["r"].error_code == 16  # NOT_COORDINATOR


def test_aiokafka_group(gbroker):
    import asyncio

    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as ATP

    topic, group = unique("grp-aio"), unique("g")
    create(gbroker.bootstrap, topic)
    produce(gbroker.bootstrap, topic, 6)

    async def main():
        c = AIOKafkaConsumer(
            topic,
            bootstrap_servers=gbroker.bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=6000,
            heartbeat_interval_ms=500,
        )
        await c.start()
        try:
            got = []
            while len(got) < 6:
                batch = await asyncio.wait_for(c.getmany(timeout_ms=500), 15)
                for msgs in batch.values():
                    got.extend(msgs)
            await c.commit()
            return [await c.committed(ATP(topic, p)) for p in (0, 1)]
        finally:
            await c.stop()

    assert asyncio.run(main()) == [3, 3]


def test_find_coordinator_when_offsets_topic_cannot_be_created(tmp_path):
    """A storage failure creating ``__consumer_offsets`` (full disk, here a file in the
    way) answers COORDINATOR_NOT_AVAILABLE (15), as Kafka does while the offsets topic
    is unavailable, instead of dropping the connection; it works once the cause is gone."""
    data = tmp_path / "data"
    b = start_test_broker(data, **FAST)
    try:
        blocker = data / "__consumer_offsets-0"
        blocker.write_bytes(b"in the way")
        r = _call(b.port, 10, 3, {"key": "g", "key_type": 0})
        assert r.error_code == 15 and "not available" in r.error_message
        blocker.unlink()
        for p in data.glob("__consumer_offsets-*"):
            shutil.rmtree(p)
        r = _call(b.port, 10, 3, {"key": "g", "key_type": 0})
        assert r.error_code == 0 and r.port == b.port
    finally:
        b.stop()
