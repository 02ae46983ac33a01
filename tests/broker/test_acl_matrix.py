"""The ACL matrix (issue 16): for every API the broker serves, a principal without the
ACL Kafka's ``KafkaApis`` asks for is refused with Kafka's error code and nothing changes
in the data dir; with the ACL the call gets past authorization.

One broker with ``authorizer.class.name`` on and no SASL, so every client is
``User:ANONYMOUS`` (Kafka's principal for PLAINTEXT): the test grants and revokes that
principal's ACLs between calls. The table is checked against the registry, so a new API
without a case (and a policy in ``kompakt.broker.authz``) fails here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from raw_kafka import call
from shared_kit import poll_until, snapshot, unique, wait_for

from kompakt.broker import authz
from kompakt.broker.acls import AclBinding, AclFilter, Op, PatternType, Permission, ResourceType
from kompakt.broker.app import start_test_broker
from kompakt.broker.handlers.acls import AUTHORIZER_KEY
from kompakt.record.encode import build_simple_batch

ANON = "User:ANONYMOUS"
T, G, C, X = (
    ResourceType.TOPIC,
    ResourceType.GROUP,
    ResourceType.CLUSTER,
    ResourceType.TRANSACTIONAL_ID,
)
AUTH_ERRORS = {
    ErrorCode.topic_authorization_failed,
    ErrorCode.group_authorization_failed,
    ErrorCode.cluster_authorization_failed,
    ErrorCode.transactional_id_authorization_failed,
}
STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    data = tmp_path_factory.mktemp("acl-matrix")
    b = start_test_broker(
        data,
        **{
            "authorizer.class.name": STANDARD,
            "log.cleaner.enable": "false",
            # no background file writes while the test compares snapshots
            "log.flush.offset.checkpoint.interval.ms": "3600000",
            "log.retention.check.interval.ms": "3600000",
            "log.index.size.max.bytes": "4096",  # small files: cheap snapshots
        },
    )
    # the background checkpoint's first write, before any snapshot is taken
    wait_for(lambda: (data / "log-start-offset-checkpoint").exists(), "the first checkpoint")
    yield b, data
    b.stop()


@dataclass
class Names:
    topic: str = field(default_factory=lambda: unique("acl-t"))
    group: str = field(default_factory=lambda: unique("acl-g"))
    txn: str = field(default_factory=lambda: unique("acl-x"))
    new_topic: str = field(default_factory=lambda: unique("acl-new"))


@dataclass
class Case:
    version: int
    body: Callable[[Names], dict[str, Any]]
    grants: Callable[[Names], list[tuple[ResourceType, str, Op]]]
    refused: ErrorCode


def _batch() -> bytes:
    return build_simple_batch([(b"k", b"v")], timestamp=int(time.time() * 1000))


def _parts(n: Names, key: str = "partition_index", **extra: Any) -> list[dict[str, Any]]:
    return [{"name": n.topic, "partitions": [{key: 0, **extra}]}]


CL = "kafka-cluster"
CASES: dict[int, Case] = {
    0: Case(
        9,
        lambda n: {
            "acks": -1,
            "timeout": 5000,
            "topic_data": [
                {"name": n.topic, "partition_data": [{"index": 0, "records": _batch()}]}
            ],
        },
        lambda n: [(T, n.topic, Op.WRITE)],
        ErrorCode.topic_authorization_failed,
    ),
    1: Case(
        12,
        lambda n: {
            "max_wait": 0,
            "max_bytes": 1 << 20,
            "topics": [
                {
                    "topic": n.topic,
                    "partitions": [
                        {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
                    ],
                }
            ],
        },
        lambda n: [(T, n.topic, Op.READ)],
        ErrorCode.topic_authorization_failed,
    ),
    2: Case(
        7,
        lambda n: {"replica_id": -1, "topics": _parts(n, timestamp=-1)},
        lambda n: [(T, n.topic, Op.DESCRIBE)],
        ErrorCode.topic_authorization_failed,
    ),
    3: Case(
        12,
        lambda n: {"topics": [{"name": n.topic}], "allow_auto_topic_creation": False},
        lambda n: [(T, n.topic, Op.DESCRIBE)],
        ErrorCode.topic_authorization_failed,
    ),
    8: Case(
        8,
        lambda n: {
            "group_id": n.group,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "topics": _parts(n, committed_offset=0),
        },
        lambda n: [(G, n.group, Op.READ), (T, n.topic, Op.READ)],
        ErrorCode.group_authorization_failed,
    ),
    9: Case(
        7,
        lambda n: {"group_id": n.group, "topics": [{"name": n.topic, "partition_indexes": [0]}]},
        lambda n: [(G, n.group, Op.DESCRIBE), (T, n.topic, Op.DESCRIBE)],
        ErrorCode.group_authorization_failed,
    ),
    10: Case(
        3,
        lambda n: {"key": n.group, "key_type": 0},
        lambda n: [(G, n.group, Op.DESCRIBE)],
        ErrorCode.group_authorization_failed,
    ),
    11: Case(
        5,
        lambda n: {
            "group_id": n.group,
            "session_timeout": 10000,
            "rebalance_timeout": 10000,
            "member_id": "",
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}],
        },
        lambda n: [(G, n.group, Op.READ)],
        ErrorCode.group_authorization_failed,
    ),
    12: Case(
        3,
        lambda n: {"group_id": n.group, "generation_id": 1, "member_id": "m"},
        lambda n: [(G, n.group, Op.READ)],
        ErrorCode.group_authorization_failed,
    ),
    13: Case(
        3,
        lambda n: {"group_id": n.group, "members": [{"member_id": "m"}]},
        lambda n: [(G, n.group, Op.READ)],
        ErrorCode.group_authorization_failed,
    ),
    14: Case(
        3,
        lambda n: {"group_id": n.group, "generation_id": 1, "member_id": "m", "assignments": []},
        lambda n: [(G, n.group, Op.READ)],
        ErrorCode.group_authorization_failed,
    ),
    15: Case(
        5,
        lambda n: {"groups": [n.group], "include_authorized_operations": True},
        lambda n: [(G, n.group, Op.DESCRIBE)],
        ErrorCode.group_authorization_failed,
    ),
    19: Case(
        5,
        lambda n: {
            "topics": [{"name": n.new_topic, "num_partitions": 1, "replication_factor": 1}],
            "timeout": 5000,
        },
        lambda n: [(T, n.new_topic, Op.CREATE), (T, n.new_topic, Op.DESCRIBE_CONFIGS)],
        ErrorCode.topic_authorization_failed,
    ),
    20: Case(
        5,
        lambda n: {"topic_names": [n.topic], "timeout": 5000},
        lambda n: [(T, n.topic, Op.DELETE)],
        ErrorCode.topic_authorization_failed,
    ),
    21: Case(
        1,
        lambda n: {"topics": _parts(n, offset=0), "timeout": 5000},
        lambda n: [(T, n.topic, Op.DELETE)],
        ErrorCode.topic_authorization_failed,
    ),
    22: Case(
        4,
        lambda n: {"transactional_id": None, "transaction_timeout": 60000},
        lambda n: [(C, CL, Op.IDEMPOTENT_WRITE)],
        ErrorCode.cluster_authorization_failed,
    ),
    24: Case(
        3,
        lambda n: {
            "v3_and_below_transactional_id": n.txn,
            "v3_and_below_producer_id": 1,
            "v3_and_below_producer_epoch": 0,
            "v3_and_below_topics": [{"name": n.topic, "partitions": [0]}],
        },
        lambda n: [(X, n.txn, Op.WRITE), (T, n.topic, Op.WRITE)],
        ErrorCode.transactional_id_authorization_failed,
    ),
    25: Case(
        3,
        lambda n: {
            "transactional_id": n.txn,
            "producer_id": 1,
            "producer_epoch": 0,
            "group_id": n.group,
        },
        lambda n: [(X, n.txn, Op.WRITE), (G, n.group, Op.READ)],
        ErrorCode.transactional_id_authorization_failed,
    ),
    26: Case(
        3,
        lambda n: {
            "transactional_id": n.txn,
            "producer_id": 1,
            "producer_epoch": 0,
            "committed": True,
        },
        lambda n: [(X, n.txn, Op.WRITE)],
        ErrorCode.transactional_id_authorization_failed,
    ),
    28: Case(
        3,
        lambda n: {
            "transactional_id": n.txn,
            "group_id": n.group,
            "producer_id": 1,
            "producer_epoch": 0,
            "generation_id": -1,
            "member_id": "",
            "topics": _parts(n, committed_offset=0),
        },
        lambda n: [(X, n.txn, Op.WRITE), (G, n.group, Op.READ), (T, n.topic, Op.READ)],
        ErrorCode.transactional_id_authorization_failed,
    ),
    29: Case(
        2,
        lambda n: {
            "resource_type_filter": 2,
            "resource_name_filter": n.topic,
            "pattern_type_filter": 1,
            "operation": 1,
            "permission_type": 1,
        },
        lambda n: [(C, CL, Op.DESCRIBE)],
        ErrorCode.cluster_authorization_failed,
    ),
    30: Case(
        2,
        lambda n: {
            "creations": [
                {
                    "resource_type": 2,
                    "resource_name": n.new_topic,
                    "resource_pattern_type": 3,
                    "principal": "User:nobody",
                    "host": "*",
                    "operation": 3,
                    "permission_type": 3,
                }
            ]
        },
        lambda n: [(C, CL, Op.ALTER)],
        ErrorCode.cluster_authorization_failed,
    ),
    31: Case(
        2,
        lambda n: {
            "filters": [
                {
                    "resource_type_filter": 2,
                    "resource_name_filter": n.new_topic,
                    "pattern_type_filter": 1,
                    "principal_filter": "User:nobody",
                    "operation": 1,
                    "permission_type": 1,
                }
            ]
        },
        lambda n: [(C, CL, Op.ALTER)],
        ErrorCode.cluster_authorization_failed,
    ),
    32: Case(
        3,
        lambda n: {"resources": [{"resource_type": 2, "resource_name": n.topic}]},
        lambda n: [(T, n.topic, Op.DESCRIBE_CONFIGS)],
        ErrorCode.topic_authorization_failed,
    ),
    33: Case(
        1,
        lambda n: {
            "resources": [
                {
                    "resource_type": 2,
                    "resource_name": n.topic,
                    "configs": [{"name": "retention.ms", "value": "100000"}],
                }
            ]
        },
        lambda n: [(T, n.topic, Op.ALTER_CONFIGS)],
        ErrorCode.topic_authorization_failed,
    ),
    37: Case(
        2,
        lambda n: {"topics": [{"name": n.topic, "count": 2}], "timeout": 5000},
        lambda n: [(T, n.topic, Op.ALTER)],
        ErrorCode.topic_authorization_failed,
    ),
    42: Case(
        1,
        lambda n: {"groups_names": [n.group]},
        lambda n: [(G, n.group, Op.DELETE)],
        ErrorCode.group_authorization_failed,
    ),
    44: Case(
        1,
        lambda n: {
            "resources": [
                {
                    "resource_type": 2,
                    "resource_name": n.topic,
                    "configs": [{"name": "retention.ms", "config_operation": 0, "value": "100000"}],
                }
            ]
        },
        lambda n: [(T, n.topic, Op.ALTER_CONFIGS)],
        ErrorCode.topic_authorization_failed,
    ),
    47: Case(
        0,
        lambda n: {"group_id": n.group, "topics": _parts(n)},
        lambda n: [(G, n.group, Op.DELETE), (T, n.topic, Op.READ)],
        ErrorCode.group_authorization_failed,
    ),
    # DescribeLogDirs: DESCRIBE cluster (Kafka's KafkaApis.handleDescribeLogDirsRequest)
    35: Case(
        4,
        lambda n: {"topics": None},
        lambda n: [(C, CL, Op.DESCRIBE)],
        ErrorCode.cluster_authorization_failed,
    ),
    # APIs other branches add (SCRAM users, transaction admin): checked once served
    50: Case(
        0,
        lambda n: {"users": None},
        lambda n: [(C, CL, Op.DESCRIBE)],
        ErrorCode.cluster_authorization_failed,
    ),
    51: Case(
        0,
        lambda n: {"deletions": [{"name": "nobody", "mechanism": 1}], "upsertions": []},
        lambda n: [(C, CL, Op.ALTER)],
        ErrorCode.cluster_authorization_failed,
    ),
    61: Case(
        0,
        lambda n: {"topics": [{"name": n.topic, "partition_indexes": [0]}]},
        lambda n: [(T, n.topic, Op.READ)],
        ErrorCode.topic_authorization_failed,
    ),
    65: Case(
        0,
        lambda n: {"transactional_ids": [n.txn]},
        lambda n: [(X, n.txn, Op.DESCRIBE)],
        ErrorCode.transactional_id_authorization_failed,
    ),
}
# Kafka checks nothing for these (ApiVersions and SASL before authentication;
# DescribeCluster only hides its authorized operations); ListGroups and
# ListTransactions filter what they list instead of refusing.
UNCHECKED = {18: 3, 60: 1}
BEFORE_AUTHENTICATION = {17, 36}
FILTERED = {16, 66}


def _codes(obj: Any) -> set[int]:
    """Every error code anywhere in a decoded response."""
    out: set[int] = set()
    if isinstance(obj, tuple | list):
        for x in obj:
            out |= _codes(x)
    elif hasattr(obj, "__dataclass_fields__"):
        for name in obj.__dataclass_fields__:
            v = getattr(obj, name)
            if isinstance(v, ErrorCode):
                out.add(int(v))
            else:
                out |= _codes(v)
    return out


def _grant(b, grants) -> list[AclBinding]:
    az = b.broker.state.extra[AUTHORIZER_KEY]
    acls = [
        AclBinding(int(rt), name, int(PatternType.LITERAL), ANON, "*", int(op), 3)
        for rt, name, op in grants
    ]
    az.store.add(acls)
    return acls


def _revoke_all(b) -> None:
    az = b.broker.state.extra[AUTHORIZER_KEY]
    az.store.remove([AclFilter(principal=ANON)])


def test_every_served_api_has_a_case_and_a_policy(secured):
    """A new API must say which ACL it needs, here and in kompakt.broker.authz."""
    b, _data = secured
    keys = b.broker.registry.keys()
    assert authz.unpoliced(keys) == []
    assert sorted(set(keys) - set(CASES) - set(UNCHECKED) - FILTERED - BEFORE_AUTHENTICATION) == []


@pytest.mark.parametrize("api_key", sorted(CASES))
def test_refused_without_the_acl_and_nothing_changes_on_disk(secured, api_key):
    b, data = secured
    if api_key not in b.broker.registry:
        pytest.skip(f"API {api_key} is not served on this branch")
    case = CASES[api_key]
    n = Names()
    b.logs.create_topic(n.topic, 1)
    _revoke_all(b)
    before = snapshot(data)
    resp = call(b.port, api_key, case.version, case.body(n))
    assert int(case.refused) in _codes(resp), resp
    assert snapshot(data) == before, "a refused request changed the data dir"
    if api_key == 19:
        assert not b.logs.has_topic(n.new_topic)

    acls = _grant(b, case.grants(n))
    try:
        resp = call(b.port, api_key, case.version, case.body(n))
        assert not (_codes(resp) & {int(c) for c in AUTH_ERRORS}), resp
    finally:
        _revoke_all(b)
    assert acls


def test_each_needed_acl_alone_is_not_enough(secured):
    """Where Kafka asks for two ACLs (group and topic, transactional id and topic), one
    of them is not enough: the other's error comes back."""
    b, _data = secured
    n = Names()
    b.logs.create_topic(n.topic, 1)
    _grant(b, [(G, n.group, Op.READ)])
    try:
        resp = call(b.port, 8, 8, CASES[8].body(n))
        assert _codes(resp) == {int(ErrorCode.topic_authorization_failed)}
        resp = call(b.port, 28, 3, CASES[28].body(n))
        assert _codes(resp) == {int(ErrorCode.transactional_id_authorization_failed)}
    finally:
        _revoke_all(b)


def test_unchecked_apis_answer_without_acls(secured):
    b, _data = secured
    _revoke_all(b)
    for api_key, version in UNCHECKED.items():
        body = {"include_cluster_authorized_operations": True} if api_key == 60 else {}
        resp = call(b.port, api_key, version, body)
        assert _codes(resp) == {0}, resp
    resp = call(b.port, 60, 1, {"include_cluster_authorized_operations": True})
    assert resp.cluster_authorized_operations == 0  # KafkaApis: needs DESCRIBE on cluster


def test_metadata_hides_topics_and_reports_real_authorized_operations(secured):
    """KafkaApis.handleTopicMetadataRequest: an all-topics request lists only topics the
    principal may DESCRIBE; topic_authorized_operations are the ACLs' answer."""
    b, _data = secured
    n = Names()
    b.logs.create_topic(n.topic, 1)
    hidden = unique("acl-hidden")
    b.logs.create_topic(hidden, 1)
    _grant(b, [(T, n.topic, Op.READ)])
    try:
        resp = call(b.port, 3, 12, {"topics": None, "include_topic_authorized_operations": True})
        names = {t.name: t for t in resp.topics}
        assert hidden not in names
        assert names[n.topic].topic_authorized_operations == (1 << Op.READ) | (1 << Op.DESCRIBE)
    finally:
        _revoke_all(b)


def test_metadata_auto_create_needs_create(secured):
    """Kafka: auto-creation by Metadata needs CREATE on the cluster or the topic; with
    only DESCRIBE the topic is TOPIC_AUTHORIZATION_FAILED and not made (KafkaApis'
    unauthorizedForCreateTopics), so a client fails at once instead of retrying an
    unknown topic; with auto-creation off it is UNKNOWN_TOPIC_OR_PARTITION."""
    b, _data = secured
    name = unique("acl-auto")
    body = {"topics": [{"name": name}], "allow_auto_topic_creation": True}
    _grant(b, [(T, name, Op.DESCRIBE)])
    try:
        resp = call(b.port, 3, 12, body)
        assert resp.topics[0].error_code == ErrorCode.topic_authorization_failed
        assert resp.topics[0].name == name
        assert not b.logs.has_topic(name)
        off = {**body, "allow_auto_topic_creation": False}
        resp = call(b.port, 3, 12, off)
        assert resp.topics[0].error_code == ErrorCode.unknown_topic_or_partition
        assert not b.logs.has_topic(name)
        _grant(b, [(T, name, Op.CREATE)])
        resp = call(b.port, 3, 12, body)
        assert resp.topics[0].error_code == ErrorCode.none
        assert b.logs.has_topic(name)
    finally:
        _revoke_all(b)


def test_list_groups_shows_only_describable_groups_without_cluster_describe(secured):
    b, _data = secured
    n = Names()
    b.logs.create_topic(n.topic, 1)
    _grant(b, CASES[8].grants(n))
    try:
        assert _codes(call(b.port, 8, 8, CASES[8].body(n))) == {0}
        _revoke_all(b)
        listed = {g.group_id for g in call(b.port, 16, 4, {}).groups}
        assert n.group not in listed
        _grant(b, [(G, n.group, Op.DESCRIBE)])
        listed = {g.group_id for g in call(b.port, 16, 4, {}).groups}
        assert n.group in listed
    finally:
        _revoke_all(b)


def test_deny_for_anonymous_beats_a_wildcard_allow_end_to_end(secured):
    """A real client (confluent-kafka) as User:ANONYMOUS: ALLOW User:* WRITE on the topic
    lets it produce until a DENY for User:ANONYMOUS is added."""
    from confluent_kafka import Producer

    b, _data = secured
    n = Names()
    b.logs.create_topic(n.topic, 1)
    az = b.broker.state.extra[AUTHORIZER_KEY]
    allow = AclBinding(int(T), n.topic, int(PatternType.LITERAL), "User:*", "*", int(Op.WRITE), 3)
    deny = AclBinding(
        int(T), n.topic, int(PatternType.LITERAL), ANON, "*", int(Op.WRITE), int(Permission.DENY)
    )
    az.store.add([allow])
    try:

        def produce() -> Any:
            errors: list[Any] = []
            p = Producer({"bootstrap.servers": b.bootstrap, "message.timeout.ms": 5000})
            p.produce(n.topic, b"v", on_delivery=lambda e, _m: errors.append(e))
            p.flush(10)
            return errors[0]

        assert produce() is None
        az.store.add([deny])
        err = produce()
        assert err is not None and err.code() == 29  # TOPIC_AUTHORIZATION_FAILED
        assert b.logs.get_log(n.topic, 0).log_end_offset == 1
    finally:
        az.store.remove([AclFilter(resource_type=int(T), name=n.topic)])


def test_group_consumer_reads_with_read_on_topic_and_group_only(secured):
    """A real group consumer (confluent-kafka, classic protocol) as User:ANONYMOUS with
    READ on the topic and the group: FindCoordinator, JoinGroup, SyncGroup, Fetch and
    OffsetCommit all pass; without READ on the group it gets GROUP_AUTHORIZATION_FAILED."""
    from confluent_kafka import Consumer

    b, _data = secured
    n = Names()
    b.logs.create_topic(n.topic, 1)
    _grant(b, [(T, n.topic, Op.WRITE)])
    try:
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": b.bootstrap})
        p.produce(n.topic, b"v")
        assert p.flush(10) == 0

        def consume() -> Any:
            c = Consumer(
                {
                    "bootstrap.servers": b.bootstrap,
                    "group.id": n.group,
                    "auto.offset.reset": "earliest",
                    "enable.auto.commit": False,
                }
            )
            try:
                c.subscribe([n.topic])
                m = poll_until(lambda: c.poll(0.5), 20)
                if m is None or m.error():
                    return None if m is None else m.error()
                c.commit(m, asynchronous=False)
                return m.value()
            finally:
                c.close()

        _grant(b, [(T, n.topic, Op.READ)])
        err = consume()
        assert err is not None and err.code() == 30, err  # GROUP_AUTHORIZATION_FAILED
        _grant(b, [(G, n.group, Op.READ)])
        assert consume() == b"v"
    finally:
        _revoke_all(b)


@pytest.mark.parametrize("api_key,version", [(1, 16), (0, 13), (3, 12)])
def test_requests_naming_topics_by_id_are_checked_on_the_topic_they_name(secured, api_key, version):
    """KIP-516 requests carry topic ids, not names: the ACL is still the named topic's
    (Fetch v13+, Produce v13, Metadata by id), and a refused id does not leak the name."""
    b, _data = secured
    n = Names()
    b.logs.create_topic(n.topic, 1)
    tid = b.broker.state.topic_id(n.topic)
    part = {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
    bodies = {
        1: {"max_wait": 0, "max_bytes": 1 << 20,
            "topics": [{"topic_id": tid, "partitions": [part]}]},
        0: {"acks": -1, "timeout": 5000,
            "topic_data": [{"topic_id": tid,
                            "partition_data": [{"index": 0, "records": _batch()}]}]},
        3: {"topics": [{"topic_id": tid, "name": None}], "allow_auto_topic_creation": False},
    }  # fmt: skip
    grants = {1: Op.READ, 0: Op.WRITE, 3: Op.DESCRIBE}
    _revoke_all(b)
    resp = call(b.port, api_key, version, bodies[api_key])
    assert int(ErrorCode.topic_authorization_failed) in _codes(resp), resp
    assert n.topic not in repr(resp)
    assert b.logs.get_log(n.topic, 0).log_end_offset == 0
    _grant(b, [(T, n.topic, grants[api_key])])
    try:
        resp = call(b.port, api_key, version, bodies[api_key])
        assert _codes(resp) <= {0}, resp
    finally:
        _revoke_all(b)
    if api_key == 0:
        assert b.logs.get_log(n.topic, 0).log_end_offset == 1


def test_transactional_batches_need_write_on_the_transactional_id(secured):
    """KafkaApis.handleProduceRequest: a produce with transactional batches needs WRITE on
    its transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition,
    nothing appended); a transactional id beside plain batches is not checked."""
    b, _data = secured
    n = Names()
    b.logs.create_topic(n.topic, 1)
    ts = int(time.time() * 1000)

    def body(transactional: bool) -> dict[str, Any]:
        batch = build_simple_batch(
            [(b"k", b"v")],
            timestamp=ts,
            producer_id=1 if transactional else -1,
            producer_epoch=0 if transactional else -1,
            base_sequence=0 if transactional else -1,
            transactional=transactional,
        )
        return {
            "transactional_id": n.txn,
            "acks": -1,
            "timeout": 5000,
            "topic_data": [{"name": n.topic, "partition_data": [{"index": 0, "records": batch}]}],
        }

    _grant(b, [(T, n.topic, Op.WRITE)])
    try:
        resp = call(b.port, 0, 9, body(True))
        assert _codes(resp) == {int(ErrorCode.transactional_id_authorization_failed)}
        assert b.logs.get_log(n.topic, 0).log_end_offset == 0
        resp = call(b.port, 0, 9, body(False))
        assert _codes(resp) == {0}
        assert b.logs.get_log(n.topic, 0).log_end_offset == 1
    finally:
        _revoke_all(b)


def test_transactional_producer_is_refused_at_init_without_its_transactional_id_acl(secured):
    """A real transactional producer (confluent-kafka): InitProducerId needs WRITE on
    the transactional id; with it (and WRITE on the topic) the transaction commits."""
    from confluent_kafka import KafkaException, Producer

    b, _data = secured
    n = Names()
    b.logs.create_topic(n.topic, 1)
    conf = {"bootstrap.servers": b.bootstrap, "transactional.id": n.txn}
    _grant(b, [(T, n.topic, Op.WRITE)])
    try:
        with pytest.raises(KafkaException, match="(?i)transactional.?id.?authorization"):
            Producer(conf).init_transactions(10)
        _grant(b, [(X, n.txn, Op.WRITE)])
        p = Producer(conf)
        p.init_transactions(10)
        p.begin_transaction()
        p.produce(n.topic, b"v")
        p.commit_transaction(10)
        # the record, then the commit marker (written after EndTxn answers, as in Kafka)
        wait_for(lambda: b.logs.get_log(n.topic, 0).log_end_offset == 2, "the commit marker")
    finally:
        _revoke_all(b)


def test_create_topics_without_describe_configs_makes_the_topic_but_hides_its_configs(secured):
    """Kafka's ReplicationControlManager.createTopic: CREATE makes the topic; without
    DESCRIBE_CONFIGS the answer has topic_config_error_code TOPIC_AUTHORIZATION_FAILED
    and no configs."""
    b, _data = secured
    n = Names()
    _grant(b, [(T, n.new_topic, Op.CREATE)])
    try:
        resp = call(b.port, 19, 5, CASES[19].body(n))
        (t,) = resp.topics
        assert t.error_code == ErrorCode.none
        assert t.topic_config_error_code == ErrorCode.topic_authorization_failed
        assert not t.configs
        assert b.logs.has_topic(n.new_topic)
    finally:
        _revoke_all(b)


def test_offset_fetch_v8_answers_each_group_on_its_own_acl(secured):
    """OffsetFetch v8+ (KIP-709) asks for several groups: each without DESCRIBE gets
    GROUP_AUTHORIZATION_FAILED, the others their offsets; DescribeGroups'
    authorized_operations are the group's real ACLs."""
    b, _data = secured
    n, other = Names(), Names()
    b.logs.create_topic(n.topic, 1)
    _grant(b, CASES[8].grants(n))
    try:
        assert _codes(call(b.port, 8, 8, CASES[8].body(n))) == {0}
        body = {
            "groups": [
                {"group_id": n.group, "topics": None},
                {"group_id": other.group, "topics": None},
            ]
        }
        resp = call(b.port, 9, 8, body)
        by_group = {g.group_id: g for g in resp.groups}
        assert by_group[other.group].error_code == ErrorCode.group_authorization_failed
        mine = by_group[n.group]
        assert mine.error_code == ErrorCode.none
        assert [t.name for t in mine.topics] == [n.topic]
        resp = call(b.port, 15, 5, {"groups": [n.group], "include_authorized_operations": True})
        assert resp.groups[0].authorized_operations == (1 << Op.READ) | (1 << Op.DESCRIBE)
    finally:
        _revoke_all(b)


@pytest.mark.parametrize("api_key", [50, 51, 61, 65])
def test_policies_for_apis_of_other_branches_refuse_with_an_encodable_answer(secured, api_key):
    """The policies for APIs this branch does not serve yet refuse without calling the
    handler, with Kafka's error code in an answer the response schema encodes."""
    from kompakt.broker.protocol import build, schemas
    from kompakt.broker.state import RequestContext

    b, _data = secured
    n = Names()
    case = CASES[api_key]
    req_cls, resp_cls = schemas(api_key, case.version)
    _revoke_all(b)

    def handler(_ctx, _req):
        raise AssertionError("a refused request reached the handler")

    guarded = authz.guard(b.broker.state.extra[AUTHORIZER_KEY])(api_key, handler)
    ctx = RequestContext(b.broker.state, api_key, case.version, 1, "t", "127.0.0.1:1")
    answer = build(resp_cls, guarded(ctx, build(req_cls, case.body(n))))
    assert int(case.refused) in _codes(answer), answer


def test_a_refusal_is_logged_once_a_filtered_listing_is_not(secured, caplog):
    """Kafka's kafka.authorizer.logger: a refused check is one INFO line naming the
    principal, operation, host and resource; hiding topics from an all-topics Metadata
    is not a refusal (logIfDenied = false)."""
    b, _data = secured
    n = Names()
    b.logs.create_topic(n.topic, 1)
    _revoke_all(b)
    with caplog.at_level(logging.INFO, logger="kompakt.authorizer"):
        call(b.port, 0, 9, CASES[0].body(n))
        call(b.port, 3, 12, {"topics": None})
    lines = [r.getMessage() for r in caplog.records if r.name == "kompakt.authorizer"]
    assert lines == [
        f"Principal = User:ANONYMOUS is Denied operation = WRITE from host = 127.0.0.1 on "
        f"resource = TOPIC:{n.topic} (Produce v9)"
    ]
