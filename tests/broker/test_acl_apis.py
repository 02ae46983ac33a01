"""CreateAcls / DescribeAcls / DeleteAcls (APIs 30/29/31) with real clients, the ACLs'
persistence across a restart, and ``kompakt acl`` switching identity end to end.

Without SASL every client is ``User:ANONYMOUS`` (Kafka's principal on PLAINTEXT), so the
identity is switched the way Kafka allows it: the same data dir is served once with
``super.users=User:ANONYMOUS`` (an administrator sets ACLs) and once without (the same
client is an ordinary principal, held to those ACLs).
"""

from __future__ import annotations

import json

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from kio.schema.errors import ErrorCode
from raw_kafka import call
from typer.testing import CliRunner

from kompakt.broker.acls import ACLS_FILE
from kompakt.broker.app import start_test_broker
from kompakt.cli.main import app

STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ANY_FILTER = AclBindingFilter(
    ResourceType.ANY,
    None,
    ResourcePatternType.ANY,
    None,
    None,
    AclOperation.ANY,
    AclPermissionType.ANY,
)
runner = CliRunner()


def kompakt(*args: str):
    return runner.invoke(app, list(args))


def _binding(name, op=AclOperation.READ, principal="User:alice", pattern=None):
    return AclBinding(
        ResourceType.TOPIC,
        name,
        pattern or ResourcePatternType.LITERAL,
        principal,
        "*",
        op,
        AclPermissionType.ALLOW,
    )


def _produce(bootstrap: str, topic: str):
    errors = []
    p = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 5000})
    p.produce(topic, b"v", on_delivery=lambda e, _m: errors.append(e))
    p.flush(10)
    return errors[0]


def test_acl_apis_answer_security_disabled_without_an_authorizer(tmp_path):
    """Kafka's AclApis without an authorizer: SECURITY_DISABLED (54), and ApiVersions
    still advertises the three APIs."""
    b = start_test_broker(tmp_path)
    try:
        versions = {a.api_key: a for a in call(b.port, 18, 3, {}).api_keys}
        assert {29, 30, 31} <= set(versions)
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        with pytest.raises(KafkaException, match="SECURITY_DISABLED"):
            admin.create_acls([_binding("t")])[_binding("t")].result(10)
        resp = call(
            b.port,
            29,
            2,
            {"resource_type_filter": 1, "pattern_type_filter": 1, "operation": 1,
             "permission_type": 1},
        )  # fmt: skip
        assert resp.error_code == ErrorCode.security_disabled
        r = kompakt("acl", "list", "-b", b.bootstrap)
        assert r.exit_code == 1 and "SECURITY_DISABLED" in r.output
        assert not (tmp_path / ACLS_FILE).exists()
    finally:
        b.stop()


def test_acls_set_by_a_super_user_hold_after_a_restart_for_an_ordinary_principal(tmp_path):
    admin_cfg = {"authorizer.class.name": STANDARD, "super.users": "User:ANONYMOUS"}
    b = start_test_broker(tmp_path, **admin_cfg)
    try:
        b.logs.create_topic("orders-eu", 1)
        b.logs.create_topic("secret", 1)
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        # Kafka's validateNewAcl: a bad creation fails alone, the good one is made
        bad = AclBinding(
            ResourceType.BROKER,
            "not-kafka-cluster",
            ResourcePatternType.LITERAL,
            "User:x",
            "*",
            AclOperation.ALTER,
            AclPermissionType.ALLOW,
        )
        good = _binding(
            "orders-", AclOperation.WRITE, "User:ANONYMOUS", ResourcePatternType.PREFIXED
        )
        futures = admin.create_acls([bad, good])
        with pytest.raises(KafkaException, match="INVALID_REQUEST|kafka-cluster"):
            futures[bad].result(10)
        assert futures[good].result(10) is None
        r = kompakt(
            "acl", "add", "--allow-principal", "User:alice", "--operation", "Read",
            "--topic", "secret", "-b", b.bootstrap,
        )  # fmt: skip
        assert r.exit_code == 0, r.output
        listed = admin.describe_acls(ANY_FILTER).result(10)
        assert {(a.name, a.principal) for a in listed} == {
            ("orders-", "User:ANONYMOUS"),
            ("secret", "User:alice"),
        }
        # DescribeAcls MATCH: every ACL that applies to orders-eu (the prefix)
        match = AclBindingFilter(
            ResourceType.TOPIC, "orders-eu", ResourcePatternType.MATCH, None, None,
            AclOperation.ANY, AclPermissionType.ANY,
        )  # fmt: skip
        assert [a.name for a in admin.describe_acls(match).result(10)] == ["orders-"]
    finally:
        b.stop()
    on_disk = json.loads((tmp_path / ACLS_FILE).read_text())["acls"]
    assert len(on_disk) == 2

    b = start_test_broker(tmp_path, **{"authorizer.class.name": STANDARD})
    try:
        # the reloaded ACLs decide: WRITE on orders-* (which implies DESCRIBE), nothing on secret
        assert _produce(b.bootstrap, "orders-eu") is None
        err = _produce(b.bootstrap, "secret")
        assert err is not None and err.code() == 29  # TOPIC_AUTHORIZATION_FAILED
        assert b.logs.get_log("secret", 0).log_end_offset == 0
        # an ordinary principal may neither list nor change ACLs (ALTER/DESCRIBE cluster)
        r = kompakt("acl", "list", "-b", b.bootstrap)
        assert r.exit_code == 1 and "CLUSTER_AUTHORIZATION_FAILED" in r.output
        r = kompakt(
            "acl", "add", "--allow-principal", "User:ANONYMOUS", "--operation", "All",
            "--cluster", "-b", b.bootstrap,
        )  # fmt: skip
        assert r.exit_code == 1 and "uthorization" in r.output
        r = kompakt("acl", "remove", "--topic", "secret", "-b", b.bootstrap)
        assert r.exit_code == 1
        assert len(json.loads((tmp_path / ACLS_FILE).read_text())["acls"]) == 2
        # Metadata hides what ANONYMOUS may not describe
        md = AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(timeout=10)
        assert "orders-eu" in md.topics and "secret" not in md.topics
    finally:
        b.stop()

    b = start_test_broker(tmp_path, **admin_cfg)
    try:
        r = kompakt("acl", "remove", "--topic", "orders-", "--resource-pattern-type",
                    "prefixed", "-b", b.bootstrap, "--json")  # fmt: skip
        assert r.exit_code == 0, r.output
        assert [a["name"] for a in json.loads(r.output)] == ["orders-"]
        r = kompakt("acl", "list", "-b", b.bootstrap, "--json")
        assert [a["name"] for a in json.loads(r.output)] == ["secret"]
    finally:
        b.stop()


def test_allow_everyone_if_no_acl_found_ends_once_the_cluster_has_an_acl(tmp_path):
    """allow.everyone.if.no.acl.found=true with kafka-python's admin client: while no ACL
    names the cluster, User:ANONYMOUS may manage ACLs; the first ACL on the cluster (for
    User:admin) ends that, and the next DescribeAcls is CLUSTER_AUTHORIZATION_FAILED."""
    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePattern,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as KpResourceType
    from kafka.errors import ClusterAuthorizationFailedError

    b = start_test_broker(
        tmp_path,
        **{"authorizer.class.name": STANDARD, "allow.everyone.if.no.acl.found": "true"},
    )
    everything = ACLFilter(
        None,
        None,
        ACLOperation.ANY,
        ACLPermissionType.ANY,
        ResourcePatternFilter(KpResourceType.ANY, None, ACLResourcePatternType.ANY),
    )
    try:
        a = KafkaAdminClient(bootstrap_servers=b.bootstrap)
        try:
            group_acl = ACL(
                "User:carol", "*", ACLOperation.READ, ACLPermissionType.ALLOW,
                ResourcePattern(KpResourceType.GROUP, "billing", ACLResourcePatternType.LITERAL),
            )  # fmt: skip
            assert a.create_acls([group_acl])["failed"] == []
            acls, _err = a.describe_acls(everything)
            assert [x.principal for x in acls] == ["User:carol"]
            admin_acl = ACL(
                "User:admin", "*", ACLOperation.ALL, ACLPermissionType.ALLOW,
                ResourcePattern(
                    KpResourceType.CLUSTER, "kafka-cluster", ACLResourcePatternType.LITERAL
                ),
            )  # fmt: skip
            assert a.create_acls([admin_acl])["failed"] == []
            with pytest.raises(ClusterAuthorizationFailedError):
                a.describe_acls(everything)
            [(_f, deleted, err)] = a.delete_acls([everything])
            assert deleted == [] and err is ClusterAuthorizationFailedError
        finally:
            a.close()
        assert len(json.loads((tmp_path / ACLS_FILE).read_text())["acls"]) == 2
    finally:
        b.stop()
