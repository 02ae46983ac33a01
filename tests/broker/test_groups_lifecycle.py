"""Consumer groups: nothing a user does loses (or revives) data it was not aimed at.

Kafka's rules checked here, each named in its test:

- DeleteGroups writes tombstones for every committed offset and the group's metadata
  (``GroupCoordinatorShard.deleteGroups``), and loading replays ``__consumer_offsets`` in
  offset order (``GroupMetadataManager.doLoadGroupsAndOffsets``), so a deleted group stays
  deleted after a restart, also after the cleaner compacted the topic.
- A deleted topic's committed offsets leave every group (``GroupCoordinator
  .onPartitionsDeleted``), so a topic created again under the same name starts clean.
- OffsetCommit/Heartbeat/SyncGroup check member, then generation, then state
  (``ClassicGroup.validateOffsetCommit``, ``validateClassicGroupHeartbeat``,
  ``validateSyncGroup``).
- OffsetDelete (KIP-496, ``OffsetMetadataManager.deleteOffsets``).
- FindCoordinator answers this node for group and transaction keys.
"""

from __future__ import annotations

import asyncio
import io
import json
import socket
import struct
import threading
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer
from shared_kit import consume_until, unique, wait_for

from kompakt.broker.app import BrokerThread, start_test_broker
from kompakt.broker.coordinator import records as R
from kompakt.broker.coordinator.storage import OFFSETS_TOPIC, TOPIC_IDS_FILE
from kompakt.broker.protocol import build
from kompakt.cleaner import Cleaner
from kompakt.log.manager import LogManager
from kompakt.record.encode import build_simple_batch

TIMEOUT = 10
FAST = {"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 1}

NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
COORDINATOR_NOT_AVAILABLE = 15
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
UNKNOWN_MEMBER_ID = 25
REBALANCE_IN_PROGRESS = 27
NON_EMPTY_GROUP = 68
GROUP_ID_NOT_FOUND = 69
MEMBER_ID_REQUIRED = 79
GROUP_SUBSCRIBED_TO_TOPIC = 86


@pytest.fixture(scope="module")
def lbroker(tmp_path_factory):
    """One broker for the tests that need no restart; one ``__consumer_offsets``
    partition, so every group's records share a log (the worst case for bystanders)."""
    b = start_test_broker(tmp_path_factory.mktemp("lifecycle-data"), **FAST)
    yield b
    b.stop()


def admin(b: BrokerThread) -> AdminClient:
    return AdminClient({"bootstrap.servers": b.bootstrap})


def create(b: BrokerThread, name: str, partitions: int = 2) -> None:
    a = admin(b)  # kept alive until answered
    fs = a.create_topics([NewTopic(name, partitions, 1)], operation_timeout=TIMEOUT)
    fs[name].result(TIMEOUT)


def delete_topic(b: BrokerThread, name: str) -> None:
    a = admin(b)
    a.delete_topics([name], operation_timeout=TIMEOUT)[name].result(TIMEOUT)


def produce(b: BrokerThread, topic: str, values: list[str], partition: int = 0) -> None:
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0})
    for v in values:
        p.produce(topic, key=v.encode(), value=v.encode(), partition=partition)
    assert p.flush(TIMEOUT) == 0


def consumer(b: BrokerThread, group: str, **extra: Any) -> Consumer:
    conf = {
        "bootstrap.servers": b.bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
        "fetch.wait.max.ms": 100,
        "topic.metadata.refresh.interval.ms": 1000,
    }
    conf.update(extra)
    return Consumer(conf)


def commit(b: BrokerThread, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """A simple consumer's commit (generation -1), as ``assign()`` + ``commit()`` does."""
    c = consumer(b, group)
    try:
        c.commit(
            offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()],
            asynchronous=False,
        )
    finally:
        c.close()


def committed(b: BrokerThread, group: str, tps: list[tuple[str, int]]) -> list[int]:
    r = call(b, 9, 8, {"groups": [{"group_id": group, "topics": None}]})
    got = {
        (t.name, p.partition_index): p.committed_offset
        for t in r.groups[0].topics
        for p in t.partitions
    }
    return [got.get(tp, -1) for tp in tps]


def all_committed(b: BrokerThread, group: str) -> dict[tuple[str, int], int]:
    r = call(b, 9, 8, {"groups": [{"group_id": group, "topics": None}]})
    return {
        (t.name, p.partition_index): p.committed_offset
        for t in r.groups[0].topics
        for p in t.partitions
    }


def listed(b: BrokerThread) -> set[str]:
    return {g.group_id for g in call(b, 16, 4, {"states_filter": []}).groups}


def describe(b: BrokerThread, group: str) -> Any:
    r = call(b, 15, 6, {"groups": [group], "include_authorized_operations": False})
    return r.groups[0]


def consume_all(c: Consumer, n: int, timeout: float = 30.0) -> list[str]:
    got = consume_until(c, lambda out: len(out) >= n, timeout, f"{n} records")
    return [m.value().decode() for m in got]


# -- raw protocol ----------------------------------------------------------------------------


def _encode(api_key: int, version: int, body: dict[str, Any]) -> bytes:
    req_cls = load_request_schema(api_key, version)
    hdr = req_cls.__header_schema__
    buf = io.BytesIO()
    entity_writer(hdr)(
        buf,
        build(
            hdr,
            {
                "request_api_key": api_key,
                "request_api_version": version,
                "correlation_id": 7,
                "client_id": "lifecycle",
            },
        ),
    )
    entity_writer(req_cls)(buf, build(req_cls, body))
    data = buf.getvalue()
    return struct.pack(">i", len(data)) + data


def call(b: BrokerThread, api_key: int, version: int, body: dict[str, Any]) -> Any:
    """One request on its own connection (so a parked JoinGroup blocks only its thread)."""
    with socket.create_connection(("127.0.0.1", b.port), timeout=30) as s:
        s.sendall(_encode(api_key, version, body))
        f = s.makefile("rb")
        (n,) = struct.unpack(">i", f.read(4))
        frame = f.read(n)
    resp_cls = load_response_schema(api_key, version)
    _h, used = entity_reader(resp_cls.__header_schema__)(frame, 0)
    resp, _ = entity_reader(resp_cls)(frame, used)
    return resp


def restart(b: BrokerThread, **overrides: Any) -> BrokerThread:
    data = b.broker.config.data_dir
    b.stop()
    return start_test_broker(data, **{**FAST, **overrides})


# -- 1. a deleted group stays deleted ------------------------------------------------------


def test_deleted_group_stays_deleted_after_restart(tmp_path):
    """``kompakt group delete zed`` (DeleteGroups) then a restart: Kafka's DeleteGroups
    tombstones every offset and the metadata (``GroupCoordinatorShard.deleteGroups``), and
    the load honours them (``doLoadGroupsAndOffsets``): ListGroups, DescribeGroups and
    OffsetFetch show nothing of zed, and the bystander group keeps everything."""
    b = start_test_broker(tmp_path / "d", **FAST)
    try:
        create(b, "t")
        produce(b, "t", [f"v{i}" for i in range(5)])
        c = consumer(b, "zed")
        c.subscribe(["t"])
        assert consume_all(c, 5) == [f"v{i}" for i in range(5)]
        c.commit(asynchronous=False)
        c.close()
        commit(b, "zed", {("t", 1): 1})
        commit(b, "bystander", {("t", 0): 2, ("t", 1): 3})
        wait_for(lambda: describe(b, "zed").group_state == "Empty")
        assert committed(b, "zed", [("t", 0), ("t", 1)]) == [5, 1]
        a = admin(b)
        a.delete_consumer_groups(["zed"], request_timeout=TIMEOUT)["zed"].result(TIMEOUT)
        assert "zed" not in listed(b)
        b = restart(b)
        assert "zed" not in listed(b)
        assert "bystander" in listed(b)
        d = describe(b, "zed")
        assert (d.error_code, d.group_state) == (GROUP_ID_NOT_FOUND, "Dead")
        assert all_committed(b, "zed") == {}
        assert all_committed(b, "bystander") == {("t", 0): 2, ("t", 1): 3}
        # and a second restart (the expiry pass in between must not revive it either)
        b = restart(b)
        assert "zed" not in listed(b)
        assert all_committed(b, "zed") == {}
    finally:
        b.stop()


def _offset(group: str, topic: str, part: int, value: int | None) -> tuple[bytes, bytes | None]:
    v = None if value is None else R.offset_value(R.OffsetAndMetadata(value, -1, "", 1))
    return R.offset_key(group, topic, part), v


def _meta(group: str, generation: int | None) -> tuple[bytes, bytes | None]:
    if generation is None:
        return R.group_key(group), None
    return R.group_key(group), R.group_value(
        R.GroupMetadataValue("consumer", generation, None, None, 1)
    )


@pytest.mark.parametrize("segments", ["one-segment", "rolled-segments"])
def test_replay_honours_tombstones_in_offset_order_also_after_compaction(tmp_path, segments):
    """``__consumer_offsets`` written in the adversarial order: zed's offset commits come
    before its tombstones, in the same segment or in earlier ones. Kafka's
    ``doLoadGroupsAndOffsets`` replays in offset order: a tombstone removes what came
    before it, and a group whose metadata is tombstoned and whose offsets all are stays
    deleted. A group tombstoned and then used again (metadata or a simple consumer's
    commit after the tombstone) exists. The same holds once the cleaner has compacted the
    log down to the tombstones (the state that used to bring the group back)."""
    data = tmp_path / "d"
    b = start_test_broker(data, **FAST)
    try:
        create(b, "t")
        listed(b)  # creates __consumer_offsets
    finally:
        b.stop()
    roll = segments == "rolled-segments"
    with LogManager(data) as logs:
        plog = logs.get_log(OFFSETS_TOPIC, 0)

        def write(*items: tuple[bytes, bytes | None]) -> None:
            plog.append(build_simple_batch(list(items), timestamp=plog.clock()))
            if roll:
                plog.roll()

        write(_offset("zed", "t", 0, 5), _offset("zed", "t", 1, 7), _meta("zed", 3))
        write(_offset("keep", "t", 0, 4), _meta("reborn", 1), _meta("reuse", 2))
        write(_offset("zed", "t", 0, 9), _offset("reuse", "t", 1, 1))
        # DeleteGroups as Kafka writes it: offset tombstones, then the metadata tombstone
        write(_offset("zed", "t", 0, None), _offset("zed", "t", 1, None), _meta("zed", None))
        write(_meta("reborn", None), _offset("reuse", "t", 1, None), _meta("reuse", None))
        write(_meta("reborn", 4), _offset("reuse", "t", 0, 6))  # used again after deletion
        write(_offset("keep", "t", 1, 8))  # the active segment

    def check() -> None:
        b = start_test_broker(data, **FAST)
        try:
            groups = listed(b)
            assert "zed" not in groups
            assert {"keep", "reborn", "reuse"} <= groups
            assert describe(b, "zed").error_code == GROUP_ID_NOT_FOUND
            assert all_committed(b, "zed") == {}
            assert all_committed(b, "keep") == {("t", 0): 4, ("t", 1): 8}
            assert all_committed(b, "reuse") == {("t", 0): 6}
            assert all_committed(b, "reborn") == {}
        finally:
            b.stop()

    check()
    with LogManager(data) as logs:
        plog = logs.get_log(OFFSETS_TOPIC, 0)
        plog.roll()
        Cleaner(logs).clean_partition(plog)
        left = [
            (R.parse_key(r.key), r.value is None)
            for batch in plog.iter_batches(plog.log_start_offset)
            for r in batch.records()
        ]
    # compaction kept zed's tombstones (delete.retention.ms) and removed its commits
    assert (("offset", ("zed", "t", 0)), False) not in left
    assert (("offset", ("zed", "t", 0)), True) in left
    assert (("group", ("zed",)), True) in left
    check()


# -- 2. committed offsets do not outlive their topic ---------------------------------------


@pytest.mark.parametrize("new_records", [3, 15])
def test_recreated_topic_starts_without_the_old_committed_offsets(lbroker, new_records):
    """Kafka's ``GroupCoordinator.onPartitionsDeleted``: deleting a topic removes its
    committed offsets from every group (with tombstones). Produce 10, consume and commit
    in group g, delete the topic, create it again and produce a few: a consumer of g with
    auto.offset.reset=earliest reads every new record (with 15 the old commit at 10 would
    skip ten of them). Offsets of g on another topic, and another group's, stay."""
    b = lbroker
    topic, other, g, g2 = unique("re"), unique("other"), unique("g"), unique("g2")
    create(b, topic, 1)
    create(b, other, 1)
    produce(b, topic, [f"old{i}" for i in range(10)])
    c = consumer(b, g)
    c.subscribe([topic])
    assert len(consume_all(c, 10)) == 10
    c.commit(asynchronous=False)
    c.close()
    commit(b, g, {(other, 0): 4})
    commit(b, g2, {(topic, 0): 7, (other, 0): 5})
    assert committed(b, g, [(topic, 0)]) == [10]

    delete_topic(b, topic)
    assert all_committed(b, g) == {(other, 0): 4}
    assert all_committed(b, g2) == {(other, 0): 5}
    create(b, topic, 1)
    new = [f"new{i}" for i in range(new_records)]
    produce(b, topic, new)
    c = consumer(b, g)
    c.subscribe([topic])
    try:
        assert consume_all(c, new_records) == new
    finally:
        c.close()
    # the tombstones are in the log: a restart would agree (see the offline test)
    gc = b.broker.state.extra["group_coordinator"]
    assert (topic, 0) not in gc.groups[g2].offsets


def test_deleting_the_only_topic_of_an_empty_group_removes_the_group(lbroker):
    """``cleanupGroupMetadata`` after the deletion: a group left Empty with no offsets goes
    Dead (Kafka writes its metadata tombstone); a group with offsets elsewhere stays."""
    b = lbroker
    topic, other, g_only, g_both = unique("only"), unique("keep"), unique("g"), unique("g")
    create(b, topic, 1)
    create(b, other, 1)
    commit(b, g_only, {(topic, 0): 1})
    commit(b, g_both, {(topic, 0): 1, (other, 0): 2})
    assert {g_only, g_both} <= listed(b)
    delete_topic(b, topic)
    assert g_only not in listed(b)
    assert g_both in listed(b)
    assert all_committed(b, g_both) == {(other, 0): 2}


def test_create_partitions_keeps_committed_offsets(tmp_path):
    """CreatePartitions is not a deletion: every committed offset stays, also after a
    restart (the load only drops offsets of topics that are gone)."""
    b = start_test_broker(tmp_path / "d", **FAST)
    try:
        create(b, "grow", 2)
        commit(b, "g", {("grow", 0): 3, ("grow", 1): 4})
        a = admin(b)
        a.create_partitions([NewPartitions("grow", 4)], operation_timeout=TIMEOUT)["grow"].result(
            TIMEOUT
        )
        commit(b, "g", {("grow", 3): 1})
        expected = {("grow", 0): 3, ("grow", 1): 4, ("grow", 3): 1}
        assert all_committed(b, "g") == expected
        b = restart(b)
        assert all_committed(b, "g") == expected
    finally:
        b.stop()


@pytest.mark.parametrize("recreate", [False, True])
def test_offline_topic_delete_drops_offsets_at_load(tmp_path, recreate):
    """``kompakt topic delete --data-dir`` works on the log alone, with no coordinator.
    The next load does what DeleteTopics would have done: offsets of a topic that is
    gone are removed with tombstones. Gone includes deleted and created again under the
    same name: Kafka tells topics apart by topic id, so the load compares the id the
    offsets were committed against (``partition.metadata``) with today's. Topics that
    exist are untouched."""
    data = tmp_path / "d"
    b = start_test_broker(data, **FAST)
    try:
        create(b, "gone", 1)
        create(b, "stays", 1)
        commit(b, "g", {("gone", 0): 5, ("stays", 0): 6})
        commit(b, "only-gone", {("gone", 0): 2})
    finally:
        b.stop()
    with LogManager(data) as logs:  # what `kompakt topic delete/create --data-dir` do
        logs.delete_topic("gone")
        if recreate:
            logs.create_topic("gone", 1)
    b = start_test_broker(data, **FAST)
    try:
        assert all_committed(b, "g") == {("stays", 0): 6}
        assert "only-gone" not in listed(b)
        if recreate:  # a new consumer of the new topic starts at the beginning
            produce(b, "gone", ["a", "b", "c"])
            c = consumer(b, "g")
            c.subscribe(["gone"])
            try:
                assert consume_all(c, 3) == ["a", "b", "c"]
            finally:
                c.close()
        b = restart(b)  # the tombstones were written: nothing comes back
        assert all_committed(b, "g") == {("stays", 0): 6}
    finally:
        b.stop()


def test_existing_topic_keeps_offsets_without_a_topic_id_record(tmp_path):
    """Only a topic known to be gone loses its offsets: a data dir from before the topic
    id record (or one whose record was lost) keeps every offset of existing topics."""
    data = tmp_path / "d"
    b = start_test_broker(data, **FAST)
    try:
        create(b, "t", 1)
        commit(b, "g", {("t", 0): 5})
    finally:
        b.stop()
    ids = json.loads((data / TOPIC_IDS_FILE).read_text())
    assert set(ids) == {"t"}
    (data / TOPIC_IDS_FILE).unlink()
    b = start_test_broker(data, **FAST)
    try:
        assert all_committed(b, "g") == {("t", 0): 5}
        assert (data / TOPIC_IDS_FILE).exists()
    finally:
        b.stop()


# -- 3. member, then generation, then state --------------------------------------------------


def _join(b: BrokerThread, group: str, member_id: str = "", ptype: str = "consumer") -> Any:
    return call(
        b,
        11,
        5,
        {
            "group_id": group,
            "session_timeout": 6000,
            "rebalance_timeout": 6000,
            "member_id": member_id,
            "group_instance_id": None,
            "protocol_type": ptype,
            "protocols": [{"name": "range", "metadata": b""}],
        },
    )


def _member(b: BrokerThread, group: str, ptype: str = "consumer") -> str:
    r = _join(b, group, ptype=ptype)
    assert r.error_code == MEMBER_ID_REQUIRED
    return r.member_id


def _commit_code(
    b: BrokerThread, group: str, generation: int, member: str, topic: str, version: int = 8
) -> int:
    r = call(
        b,
        8,
        version,
        {
            "group_id": group,
            "generation_id_or_member_epoch": generation,
            "member_id": member,
            "group_instance_id": None,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {
                            "partition_index": 0,
                            "committed_offset": 1,
                            "committed_leader_epoch": -1,
                            "committed_metadata": "",
                        }
                    ],
                }
            ],
        },
    )
    return r.topics[0].partitions[0].error_code


def _heartbeat(b: BrokerThread, group: str, generation: int, member: str) -> int:
    body = {
        "group_id": group,
        "generation_id": generation,
        "member_id": member,
        "group_instance_id": None,
    }
    return call(b, 12, 4, body).error_code


def _sync(
    b: BrokerThread,
    group: str,
    generation: int,
    member: str,
    ptype: str | None = "consumer",
    pname: str | None = "range",
) -> int:
    body = {
        "group_id": group,
        "generation_id": generation,
        "member_id": member,
        "group_instance_id": None,
        "protocol_type": ptype,
        "protocol_name": pname,
        "assignments": [{"member_id": member, "assignment": b""}],
    }
    return call(b, 14, 5, body).error_code


def test_commit_heartbeat_sync_check_member_then_generation_then_state(lbroker):
    """Kafka's order (``ClassicGroup.validateOffsetCommit``, ``validateClassicGroupHeartbeat``,
    ``validateSyncGroup``): unknown member, then ILLEGAL_GENERATION, and only with the
    right generation does the state answer (REBALANCE_IN_PROGRESS for an OffsetCommit in
    CompletingRebalance, as librdkafka's test 0113 ``v_commit_during_rebalance``
    expects; for a Heartbeat in PreparingRebalance). A commit to a group that does not
    exist with a generation is ILLEGAL_GENERATION (GROUP_ID_NOT_FOUND from v9,
    ``OffsetMetadataManager.validateOffsetCommit``)."""
    b, topic, group = lbroker, unique("order"), unique("g")
    create(b, topic, 1)
    m1 = _member(b, group)
    r = _join(b, group, m1)
    assert (r.error_code, r.generation_id, r.leader) == (NONE, 1, m1)
    assert describe(b, group).group_state == "CompletingRebalance"
    assert _commit_code(b, group, 0, m1, topic) == ILLEGAL_GENERATION
    assert _commit_code(b, group, 1, "nobody", topic) == UNKNOWN_MEMBER_ID
    assert _commit_code(b, group, -1, "", topic) == UNKNOWN_MEMBER_ID  # group not Empty
    assert _commit_code(b, group, 1, m1, topic) == REBALANCE_IN_PROGRESS
    assert _heartbeat(b, group, 0, m1) == ILLEGAL_GENERATION
    assert _heartbeat(b, group, 1, m1) == NONE  # heartbeats in CompletingRebalance are fine
    assert _sync(b, group, 0, m1) == ILLEGAL_GENERATION
    assert _sync(b, group, 1, m1, ptype="connect") == INCONSISTENT_GROUP_PROTOCOL
    assert _sync(b, group, 1, m1, pname="roundrobin") == INCONSISTENT_GROUP_PROTOCOL
    assert _sync(b, group, 1, m1, ptype=None, pname=None) == NONE  # v0-4 send neither
    assert describe(b, group).group_state == "Stable"
    assert _commit_code(b, group, 1, m1, topic) == NONE

    # a second member joins: PreparingRebalance while m1 has not rejoined
    m2 = _member(b, group)
    second: list[Any] = []
    t = threading.Thread(target=lambda: second.append(_join(b, group, m2)))
    t.start()
    wait_for(lambda: describe(b, group).group_state == "PreparingRebalance")
    assert _heartbeat(b, group, 0, m1) == ILLEGAL_GENERATION
    assert _heartbeat(b, group, 1, m1) == REBALANCE_IN_PROGRESS
    assert _commit_code(b, group, 1, m1, topic) == NONE  # Kafka commits in PreparingRebalance
    r = _join(b, group, m1)
    t.join(TIMEOUT)
    assert r.generation_id == 2 and second[0].generation_id == 2

    ghost = unique("ghost")
    assert _commit_code(b, ghost, 5, "m", topic) == ILLEGAL_GENERATION
    assert _commit_code(b, ghost, 5, "m", topic, version=9) == GROUP_ID_NOT_FOUND
    assert ghost not in listed(b)


# -- 4. OffsetDelete (KIP-496) ---------------------------------------------------------------


def test_offset_delete_kip496(tmp_path):
    """OffsetDelete as Kafka's ``OffsetMetadataManager.deleteOffsets`` and
    ``KafkaApis.handleOffsetDeleteRequest``, driven by kafka-python's admin
    (``delete_group_offsets``): per-partition results, unknown topics and partitions
    answer UNKNOWN_TOPIC_OR_PARTITION, a Stable group keeps the offsets of topics it
    subscribes to (GROUP_SUBSCRIBED_TO_TOPIC), an unknown group is GROUP_ID_NOT_FOUND, a
    non-consumer group with members is NON_EMPTY_GROUP; tombstones are written (the
    deletion survives a restart) and a group left with no offsets goes Dead. Another
    group's offsets of the same partitions are untouched."""
    from kafka import TopicPartition as KTP
    from kafka.admin import KafkaAdminClient
    from kafka.errors import GroupIdNotFoundError, NonEmptyGroupError

    b = start_test_broker(tmp_path / "d", **FAST)
    ka = None
    live = None
    try:
        versions = call(b, 18, 3, {"client_software_name": "t", "client_software_version": "1"})
        assert {(k.api_key, k.min_version, k.max_version) for k in versions.api_keys} >= {
            (47, 0, 0)
        }
        create(b, "t0", 2)
        create(b, "t1", 1)
        commit(b, "od", {("t0", 0): 1, ("t0", 1): 2, ("t1", 0): 3})
        commit(b, "bystander", {("t0", 0): 4, ("t1", 0): 5})
        ka = KafkaAdminClient(bootstrap_servers=b.bootstrap, request_timeout_ms=10000)
        res = ka.delete_group_offsets(
            "od", [KTP("t0", 0), KTP("t1", 0), KTP("nosuch", 0), KTP("t0", 9)]
        )
        codes = {(tp.topic, tp.partition): err.errno for tp, err in res.items()}
        assert codes == {
            ("t0", 0): NONE,
            ("t1", 0): NONE,
            ("nosuch", 0): UNKNOWN_TOPIC_OR_PARTITION,
            ("t0", 9): UNKNOWN_TOPIC_OR_PARTITION,
        }
        assert all_committed(b, "od") == {("t0", 1): 2}
        assert all_committed(b, "bystander") == {("t0", 0): 4, ("t1", 0): 5}
        with pytest.raises(GroupIdNotFoundError):
            ka.delete_group_offsets(unique("nosuch"), [KTP("t0", 0)])

        # a Stable consumer group subscribed to t0 that also committed t1
        live = consumer(b, "live")
        live.subscribe(["t0"])
        wait_for(lambda: live.poll(0.05) is None and len(live.assignment()) == 2)
        live.commit(
            offsets=[TopicPartition("t0", 0, 6), TopicPartition("t1", 0, 7)], asynchronous=False
        )
        res = ka.delete_group_offsets("live", [KTP("t0", 0), KTP("t1", 0)])
        codes = {(tp.topic, tp.partition): err.errno for tp, err in res.items()}
        assert codes == {("t0", 0): GROUP_SUBSCRIBED_TO_TOPIC, ("t1", 0): NONE}
        assert all_committed(b, "live") == {("t0", 0): 6}

        # a group of another protocol with members: NON_EMPTY_GROUP
        connect = unique("connect")
        m = _member(b, connect, ptype="connect")
        assert _join(b, connect, m, ptype="connect").error_code == NONE
        with pytest.raises(NonEmptyGroupError):
            ka.delete_group_offsets(connect, [KTP("t0", 0)])

        ka.close()
        ka = None
        live.close()
        live = None
        b = restart(b)
        assert all_committed(b, "od") == {("t0", 1): 2}
        assert all_committed(b, "bystander") == {("t0", 0): 4, ("t1", 0): 5}
        # the last offset of an Empty group: the group goes Dead (cleanupGroupMetadata)
        ka = KafkaAdminClient(bootstrap_servers=b.bootstrap, request_timeout_ms=10000)
        ka.delete_group_offsets("od", [KTP("t0", 1)])
        assert "od" not in listed(b)
        b = restart(b)
        assert "od" not in listed(b)
        assert "bystander" in listed(b)
    finally:
        if ka is not None:
            ka.close()
        if live is not None:
            live.close()
        b.stop()


# -- 5. FindCoordinator by key type ------------------------------------------------------------


def test_find_coordinator_answers_this_node_for_groups_and_transactions(lbroker):
    """FindCoordinator for a transactional id names this node once the transaction
    coordinator is loaded (it answered TRANSACTIONAL_ID_AUTHORIZATION_FAILED while
    transactions were not implemented; tests/broker/test_transactions.py runs a real
    transactional producer); group keys are unaffected and an unknown key type has no
    coordinator (Kafka's ``CoordinatorType``)."""
    r = call(lbroker, 10, 6, {"key_type": 1, "coordinator_keys": ["tx"]})
    c = r.coordinators[0]
    assert (c.error_code, c.node_id, c.port) == (NONE, 1, lbroker.port)
    r = call(lbroker, 10, 6, {"key_type": 0, "coordinator_keys": ["g"]})
    assert r.coordinators[0].error_code == NONE
    r = call(lbroker, 10, 6, {"key_type": 2, "coordinator_keys": ["x"]})
    assert (r.coordinators[0].error_code, r.coordinators[0].node_id) == (
        COORDINATOR_NOT_AVAILABLE,
        -1,
    )


# -- what each group API does to data it was not aimed at --------------------------------------


def test_requests_about_an_unknown_group_create_nothing(lbroker):
    """OffsetFetch, DescribeGroups, Heartbeat, SyncGroup, LeaveGroup, OffsetDelete,
    DeleteGroups and a commit with a generation for a group that does not exist answer
    an error (or nothing) and leave no group behind (Kafka looks such groups up without
    creating them)."""
    b, topic, ghost = lbroker, unique("ghost-t"), unique("ghost")
    create(b, topic, 1)
    assert all_committed(b, ghost) == {}
    assert describe(b, ghost).error_code == GROUP_ID_NOT_FOUND
    assert _heartbeat(b, ghost, 1, "m") == UNKNOWN_MEMBER_ID
    assert _sync(b, ghost, 1, "m") == UNKNOWN_MEMBER_ID
    assert call(b, 13, 0, {"group_id": ghost, "member_id": "m"}).error_code == UNKNOWN_MEMBER_ID
    leave = {"group_id": ghost, "members": [{"member_id": "m", "group_instance_id": None}]}
    assert call(b, 13, 4, leave).error_code == UNKNOWN_MEMBER_ID
    od = {"group_id": ghost, "topics": [{"name": topic, "partitions": [{"partition_index": 0}]}]}
    assert call(b, 47, 0, od).error_code == GROUP_ID_NOT_FOUND
    assert call(b, 42, 2, {"groups_names": [ghost]}).results[0].error_code == GROUP_ID_NOT_FOUND
    assert _commit_code(b, ghost, 3, "m", topic) == ILLEGAL_GENERATION
    assert _join(b, ghost, "not-a-member").error_code == UNKNOWN_MEMBER_ID
    assert ghost not in listed(b)
    assert ghost not in b.broker.state.extra["group_coordinator"].groups


def test_delete_groups_touches_only_the_named_empty_group(lbroker):
    """DeleteGroups removes the named group's offsets and metadata only: groups whose
    names share a prefix, and groups committing to the same partitions in the same
    ``__consumer_offsets`` partition, keep theirs; a group with members answers
    NON_EMPTY_GROUP and loses nothing (``ClassicGroup.validateDeleteGroup``)."""
    b, topic = lbroker, unique("dg")
    create(b, topic, 2)
    zed = unique("zed")
    names = [zed, zed + "2", zed[:-1], zed + "-x"]
    for i, name in enumerate(names):
        commit(b, name, {(topic, 0): 10 + i, (topic, 1): 20 + i})
    busy = unique("busy")
    c = consumer(b, busy)
    c.subscribe([topic])
    try:
        wait_for(lambda: c.poll(0.05) is None and len(c.assignment()) == 2)
        c.commit(offsets=[TopicPartition(topic, 0, 99)], asynchronous=False)
        r = call(b, 42, 2, {"groups_names": [zed, busy]})
        assert [x.error_code for x in r.results] == [NONE, NON_EMPTY_GROUP]
        assert all_committed(b, busy) == {(topic, 0): 99}
        assert describe(b, busy).group_state == "Stable"
    finally:
        c.close()
    assert all_committed(b, zed) == {}
    for i, name in enumerate(names[1:], start=1):
        assert all_committed(b, name) == {(topic, 0): 10 + i, (topic, 1): 20 + i}
    assert zed not in listed(b)
    assert set(names[1:]) | {busy} <= listed(b)


def test_commit_and_leave_touch_only_their_own_group(lbroker):
    """An OffsetCommit writes the named group's named partitions only; a member leaving
    rebalances its own group only: another group on the same topic keeps its members,
    generation and offsets."""
    b, topic = lbroker, unique("cl")
    create(b, topic, 2)
    ga, gb = unique("ga"), unique("gb")
    commit(b, ga, {(topic, 0): 1, (topic, 1): 2})
    commit(b, gb, {(topic, 0): 3, (topic, 1): 4})
    commit(b, ga, {(topic, 1): 5})
    assert all_committed(b, ga) == {(topic, 0): 1, (topic, 1): 5}
    assert all_committed(b, gb) == {(topic, 0): 3, (topic, 1): 4}
    ca, cb = consumer(b, ga), consumer(b, gb)
    try:
        for c in (ca, cb):
            c.subscribe([topic])
        wait_for(
            lambda: (
                ca.poll(0.05) is None
                and cb.poll(0.05) is None
                and len(ca.assignment()) == 2
                and len(cb.assignment()) == 2
            )
        )
        gc = b.broker.state.extra["group_coordinator"]
        wait_for(lambda: gc.groups[ga].state == gc.groups[gb].state == "Stable")
        generation_b = gc.groups[gb].generation
        ca.close()  # LeaveGroup for ga
        wait_for(lambda: describe(b, ga).group_state == "Empty")
        cb.poll(0.5)
        assert describe(b, gb).group_state == "Stable"
        assert gc.groups[gb].generation == generation_b
        assert len(gc.groups[gb].members) == 1
    finally:
        cb.close()
    assert all_committed(b, ga) == {(topic, 0): 1, (topic, 1): 5}
    assert all_committed(b, gb) == {(topic, 0): 3, (topic, 1): 4}


def test_offset_expiry_touches_only_expired_offsets(tmp_path):
    """KIP-211 expiry of one simple consumer's offsets (``offsets.retention.minutes``
    after its commit) leaves another group's offsets of the same partition, committed
    later, in memory and after a restart."""
    from manual_clock import ManualClock

    b = start_test_broker(
        tmp_path / "d",
        **FAST,
        **{"offsets.retention.minutes": 1, "offsets.retention.check.interval.ms": 100},
    )
    try:
        create(b, "t", 1)
        listed(b)
        gc = b.broker.state.extra["group_coordinator"]
        clock = ManualClock()
        gc.scheduler.clock = clock  # the coordinator's time only
        commit(b, "old", {("t", 0): 1})
        clock.advance(59_000)
        commit(b, "recent", {("t", 0): 2})
        clock.advance(1_000)
        wait_for(lambda: "old" not in gc.groups)
        # one more expiry pass, run here so it surely ran: it keeps the recent offset
        assert asyncio.run_coroutine_threadsafe(gc.offsets.expire_offsets(), b.loop).result(10) == 0
        assert all_committed(b, "recent") == {("t", 0): 2}
        b = restart(b)
        assert all_committed(b, "old") == {}
        assert all_committed(b, "recent") == {("t", 0): 2}
    finally:
        b.stop()


def test_a_commit_racing_delete_topics_is_refused(lbroker):
    """An OffsetCommit checked before a DeleteTopics but written after its tombstones
    would bring the deleted topic's offset back; the coordinator re-checks the topic
    under its write lock and refuses it (UNKNOWN_TOPIC_OR_PARTITION in the handler)."""
    import asyncio

    b, topic, g = lbroker, unique("race"), unique("g")
    create(b, topic, 1)
    commit(b, g, {(topic, 0): 1})
    delete_topic(b, topic)
    gc = b.broker.state.extra["group_coordinator"]
    late = {(topic, 0): R.OffsetAndMetadata(5, -1, "", 1)}
    refused = asyncio.run_coroutine_threadsafe(gc.offsets.commit(g, late), b.loop).result(TIMEOUT)
    assert refused == {(topic, 0)}
    assert all_committed(b, g) == {}
