"""The authorizer alone: Kafka's StandardAuthorizer rules (``StandardAuthorizerData``,
``StandardAuthorizerTest``), the ACL file and the authorizer config keys."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kompakt.broker.acls import (
    ACLS_FILE,
    AclBinding,
    AclError,
    AclFilter,
    AclStore,
    Authorizer,
    Op,
    PatternType,
    Permission,
    ResourceType,
    build_authorizer,
    client_host,
    parse_super_users,
    validate_binding,
)
from kompakt.broker.config import BrokerConfig
from kompakt.errors import InvalidConfigError, KompaktError

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY
ALICE, BOB = "User:alice", "User:bob"


def acl(name, op, perm=ALLOW, principal=ALICE, rtype=TOPIC, pattern=LIT, host="*"):
    return AclBinding(int(rtype), name, int(pattern), principal, host, int(op), int(perm))


def authorizer(tmp_path, *acls, supers=(), allow_if_none=False):
    tmp_path.mkdir(parents=True, exist_ok=True)
    store = AclStore(tmp_path)
    store.add(acls)
    return Authorizer(store, frozenset(supers), allow_if_none)


def test_no_acl_denies_unless_allow_everyone_if_no_acl_found(tmp_path):
    """StandardAuthorizer: a resource no ACL names falls to allow.everyone.if.no.acl.found
    (default false); once any ACL names it, only the ACLs decide."""
    assert not authorizer(tmp_path).authorize(ALICE, "1.2.3.4", Op.READ, TOPIC, "t")
    az = authorizer(tmp_path, allow_if_none=True)
    assert az.authorize(ALICE, "1.2.3.4", Op.READ, TOPIC, "t")
    az.store.add([acl("t", Op.WRITE, principal=BOB)])
    assert not az.authorize(ALICE, "1.2.3.4", Op.READ, TOPIC, "t")  # t now has an ACL
    assert az.authorize(ALICE, "1.2.3.4", Op.READ, TOPIC, "other")


def test_super_users_are_allowed_everything_even_against_a_deny(tmp_path):
    az = authorizer(tmp_path, acl("t", Op.ALL, DENY, principal="User:root"), supers={"User:root"})
    assert az.authorize("User:root", "h", Op.DELETE, TOPIC, "t")
    assert az.authorize("User:root", "h", Op.ALTER, CLUSTER, "kafka-cluster")


def test_deny_wins_over_allow_and_deny_all_denies_every_operation(tmp_path):
    az = authorizer(tmp_path, acl("t", Op.READ), acl("t", Op.READ, DENY, principal="User:*"))
    assert not az.authorize(ALICE, "h", Op.READ, TOPIC, "t")
    az = authorizer(tmp_path, acl("t", Op.ALL), acl("t", Op.ALL, DENY, pattern=PRE))
    assert not az.authorize(ALICE, "h", Op.WRITE, TOPIC, "t")


def test_read_write_delete_alter_imply_describe_but_a_deny_implies_nothing(tmp_path):
    """AclAuthorizer/StandardAuthorizerData: ALLOW READ, WRITE, DELETE or ALTER allows
    DESCRIBE; ALLOW ALTER_CONFIGS allows DESCRIBE_CONFIGS; DENY READ does not deny DESCRIBE."""
    for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
        az = authorizer(tmp_path / op.name, acl("t", op))
        assert az.authorize(ALICE, "h", Op.DESCRIBE, TOPIC, "t"), op
        assert not az.authorize(ALICE, "h", Op.DESCRIBE_CONFIGS, TOPIC, "t"), op
    az = authorizer(tmp_path / "c", acl("t", Op.ALTER_CONFIGS))
    assert az.authorize(ALICE, "h", Op.DESCRIBE_CONFIGS, TOPIC, "t")
    assert not az.authorize(ALICE, "h", Op.DESCRIBE, TOPIC, "t")
    az = authorizer(tmp_path / "d", acl("t", Op.DESCRIBE), acl("t", Op.READ, DENY))
    assert az.authorize(ALICE, "h", Op.DESCRIBE, TOPIC, "t")
    assert not az.authorize(ALICE, "h", Op.READ, TOPIC, "t")


def test_literal_wildcard_and_prefixed_patterns(tmp_path):
    az = authorizer(
        tmp_path,
        acl("*", Op.READ, rtype=GROUP),
        acl("orders-", Op.WRITE, pattern=PRE),
        acl("exact", Op.READ),
    )
    assert az.authorize(ALICE, "h", Op.READ, GROUP, "any-group")
    assert az.authorize(ALICE, "h", Op.WRITE, TOPIC, "orders-eu")
    assert not az.authorize(ALICE, "h", Op.WRITE, TOPIC, "order")
    assert az.authorize(ALICE, "h", Op.READ, TOPIC, "exact")
    assert not az.authorize(ALICE, "h", Op.READ, TOPIC, "exact2")  # literal is not a prefix
    assert not az.authorize(ALICE, "h", Op.READ, TOPIC, "*")  # only GROUP has the wildcard


def test_principal_wildcard_and_host_matching(tmp_path):
    az = authorizer(
        tmp_path,
        acl("t", Op.READ, principal="User:*", host="10.0.0.1"),
        acl("u", Op.READ, principal=BOB),
    )
    assert az.authorize(ALICE, "10.0.0.1", Op.READ, TOPIC, "t")
    assert not az.authorize(ALICE, "10.0.0.2", Op.READ, TOPIC, "t")
    assert not az.authorize(ALICE, "10.0.0.1", Op.READ, TOPIC, "u")
    assert client_host("10.0.0.1:5555") == "10.0.0.1"
    assert client_host("::1:5555") == "::1"


def test_authorize_any_is_kafkas_authorize_by_resource_type(tmp_path):
    """InitProducerId without a transactional id: IDEMPOTENT_WRITE on the cluster or WRITE
    on some topic (KIP-679); a DENY on the whole pattern takes that back."""
    az = authorizer(tmp_path, acl("orders-", Op.WRITE, pattern=PRE))
    assert az.authorize_any(ALICE, "h", Op.WRITE, TOPIC)
    assert not az.authorize_any(BOB, "h", Op.WRITE, TOPIC)
    az.store.add([acl("orders", Op.WRITE, DENY, pattern=PRE)])
    assert not az.authorize_any(ALICE, "h", Op.WRITE, TOPIC)


def test_authorized_operations_bits(tmp_path):
    az = authorizer(tmp_path, acl("t", Op.READ), acl("g", Op.ALL, rtype=GROUP))
    bits = az.operations(ALICE, "h", TOPIC, "t")
    assert bits == (1 << Op.READ) | (1 << Op.DESCRIBE)
    assert az.operations(ALICE, "h", GROUP, "g") == sum(
        1 << o for o in (Op.READ, Op.DESCRIBE, Op.DELETE)
    )


class FixedAcls:
    """A stand-in for AclStore's one read (``all``), so property examples need no disk."""

    def __init__(self, acls):
        self.acls = frozenset(acls)

    def all(self):
        return self.acls


OPS = st.sampled_from([o for o in Op if o not in (Op.UNKNOWN, Op.ANY)])
NAMES = st.sampled_from(["t", "t-1", "*", "x"])
BINDINGS = st.builds(
    acl,
    NAMES,
    OPS,
    st.sampled_from([ALLOW, DENY]),
    st.sampled_from([ALICE, BOB, "User:*"]),
    st.just(TOPIC),
    st.sampled_from([LIT, PRE]),
    st.sampled_from(["*", "h", "other"]),
)


@given(st.lists(BINDINGS, max_size=8), OPS, st.sampled_from(["t", "t-1", "x-2"]))
def test_a_matching_deny_always_wins(acls, op, name):
    """Whatever ALLOWs exist, adding a DENY ALL for the caller on the literal resource
    refuses every operation (the DENY-wins rule)."""
    deny = acl(name, Op.ALL, DENY, principal=ALICE)
    az = Authorizer(FixedAcls([*acls, deny]), frozenset(), True)
    assert not az.authorize(ALICE, "h", op, TOPIC, name)


@given(st.lists(BINDINGS, max_size=8), OPS)
def test_allowed_needs_a_matching_allow_or_no_acl(acls, op):
    az = Authorizer(FixedAcls(acls), frozenset(), True)
    name = "t-1"
    applies = [
        b
        for b in acls
        if (b.name in (name, "*") if b.pattern_type == LIT else name.startswith(b.name))
    ]
    if az.authorize(ALICE, "h", op, TOPIC, name):
        mine = [b for b in applies if b.principal in (ALICE, "User:*") and b.host in ("*", "h")]
        assert not applies or any(b.permission == ALLOW for b in mine)
        assert not any(b.permission == DENY and b.operation in (op, Op.ALL) for b in mine)


# -- ACLs on disk ----------------------------------------------------------------------


def test_acls_survive_a_reopen_and_the_file_is_replaced_atomically(tmp_path):
    store = AclStore(tmp_path)
    a, b = acl("t", Op.READ), acl("g", Op.READ, rtype=GROUP)
    store.add([a, b])
    assert not (tmp_path / (ACLS_FILE + ".tmp")).exists()
    assert AclStore(tmp_path).all() == {a, b}
    gone = store.remove([AclFilter(resource_type=GROUP)])
    assert gone == [[b]]
    assert AclStore(tmp_path).all() == {a}


def test_a_damaged_acl_file_is_a_clear_error_not_an_empty_acl_list(tmp_path):
    """An unreadable ACL file must stop the start: reading it as "no ACLs" could open
    everything when allow.everyone.if.no.acl.found is on."""
    (tmp_path / ACLS_FILE).write_text("{not json")
    with pytest.raises(KompaktError, match=ACLS_FILE):
        AclStore(tmp_path)
    (tmp_path / ACLS_FILE).write_text(json.dumps({"acls": [{"name": "t"}]}))
    with pytest.raises(KompaktError):
        AclStore(tmp_path)


def test_filters_any_and_match():
    """ResourcePatternFilter: ANY matches every pattern type, MATCH every pattern that
    applies to the named resource (literal, wildcard, prefixes)."""
    lit, star, pre, other = (
        acl("orders", Op.READ),
        acl("*", Op.READ),
        acl("ord", Op.READ, pattern=PRE),
        acl("ordersX", Op.READ),
    )
    match = AclFilter(TOPIC, "orders", PatternType.MATCH)
    assert [b for b in (lit, star, pre, other) if match.matches(b)] == [lit, star, pre]
    anyf = AclFilter(TOPIC, "orders", PatternType.ANY)
    assert [b for b in (lit, star, pre, other) if anyf.matches(b)] == [lit]
    with pytest.raises(AclError):
        AclFilter(pattern_type=PatternType.UNKNOWN).validate()
    with pytest.raises(AclError):
        AclFilter(operation=99).validate()


@pytest.mark.parametrize(
    "bad",
    [
        acl("t", Op.READ, pattern=PatternType.MATCH),
        acl("t", Op.ANY),
        acl("t", Op.READ, perm=Permission.ANY),
        acl("", Op.READ),
        acl("t", Op.READ, principal="alice"),
        acl("other", Op.ALTER, rtype=CLUSTER),
        acl("t", Op.READ, rtype=ResourceType.ANY),
    ],
)
def test_create_refuses_what_kafkas_validate_new_acl_refuses(bad):
    with pytest.raises(AclError):
        validate_binding(bad)


# -- config ----------------------------------------------------------------------------


def _config(tmp_path, **kv):
    return BrokerConfig.from_mapping({"log.dirs": str(tmp_path), **kv})


def test_authorizer_class_names_kafka_accepts_and_others_are_a_config_error(tmp_path):
    assert build_authorizer(_config(tmp_path), tmp_path) is None  # Kafka's default: none
    for name in (
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "kafka.security.authorizer.AclAuthorizer",
    ):
        cfg = _config(tmp_path, **{"authorizer.class.name": name, "super.users": "User:a;User:b"})
        az = build_authorizer(cfg, tmp_path)
        assert az is not None and az.super_users == {"User:a", "User:b"}
        assert az.allow_if_no_acl is False
    with pytest.raises(InvalidConfigError, match="authorizer.class.name"):
        _config(tmp_path, **{"authorizer.class.name": "com.example.MyAuthorizer"})
    with pytest.raises(InvalidConfigError, match="super.users.*'alice' is not a principal"):
        _config(tmp_path, **{"super.users": "User:admin;alice"})


def test_super_users_must_be_principals():
    assert parse_super_users(" User:a ; User:b;") == {"User:a", "User:b"}
    with pytest.raises(AclError, match="super.users"):
        parse_super_users("alice")
