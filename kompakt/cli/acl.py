"""``kompakt acl add|list|remove``: a broker's ACLs, as ``kafka-acls.sh`` manages them.

The options are kafka-acls.sh's (``--allow-principal``, ``--deny-principal``,
``--operation``, ``--topic``/``--group``/``--cluster``/``--transactional-id``,
``--resource-pattern-type``, ``--allow-host``/``--deny-host``, ``--principal`` to filter
a listing), against ``--bootstrap-server`` through the Kafka ACL APIs (CreateAcls,
DescribeAcls, DeleteAcls). ``add`` and ``remove`` go through confluent-kafka's
AdminClient. ``list`` sends DescribeAcls itself: librdkafka (2.12) drops that response's
error code, so a refused listing (CLUSTER_AUTHORIZATION_FAILED) or a broker without an
authorizer (SECURITY_DISABLED) would read as "no ACLs", which means the opposite.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Annotated, Any

import typer

from .backend import CliError
from .common import DEFAULT_BOOTSTRAP, BrokerOnly, JsonFlag, emit, emit_json, print_table
from .raw_request import request

app = typer.Typer(
    help="Add, list and remove ACLs on a broker, as kafka-acls.sh "
    f"(--bootstrap-server, default {DEFAULT_BOOTSTRAP}).",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)

# Kafka's codes (org.apache.kafka.common.acl / resource); kafka-acls.sh's names
RESOURCE_TYPES = {"ANY": 1, "TOPIC": 2, "GROUP": 3, "CLUSTER": 4, "TRANSACTIONAL_ID": 5}
PATTERN_TYPES = {"ANY": 1, "MATCH": 2, "LITERAL": 3, "PREFIXED": 4}
OPERATIONS = {
    "ANY": 1,
    "ALL": 2,
    "READ": 3,
    "WRITE": 4,
    "CREATE": 5,
    "DELETE": 6,
    "ALTER": 7,
    "DESCRIBE": 8,
    "CLUSTERACTION": 9,
    "DESCRIBECONFIGS": 10,
    "ALTERCONFIGS": 11,
    "IDEMPOTENTWRITE": 12,
}
PERMISSIONS = {"ANY": 1, "DENY": 2, "ALLOW": 3}
CLUSTER_NAME = "kafka-cluster"


def _name(table: dict[str, int], code: int) -> str:
    return next((k for k, v in table.items() if v == code), str(code))


@dataclass(frozen=True)
class Acl:
    """One ACL binding as the CLI prints it."""

    principal: str
    host: str
    operation: str
    permission: str
    resource_type: str
    name: str
    pattern_type: str


Principals = Annotated[
    list[str] | None,
    typer.Option("--allow-principal", help="Principal to allow, e.g. User:alice (repeatable)."),
]
DenyPrincipals = Annotated[
    list[str] | None,
    typer.Option("--deny-principal", help="Principal to deny (repeatable)."),
]
Operations = Annotated[
    list[str] | None,
    typer.Option(
        "--operation",
        help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, "
        "DescribeConfigs, AlterConfigs, IdempotentWrite or All (repeatable).",
    ),
]
Topics = Annotated[list[str] | None, typer.Option("--topic", help="Topic (repeatable).")]
Groups = Annotated[list[str] | None, typer.Option("--group", help="Group (repeatable).")]
Cluster = Annotated[bool, typer.Option("--cluster", help="The cluster resource.")]
TxnIds = Annotated[
    list[str] | None,
    typer.Option("--transactional-id", help="Transactional id (repeatable)."),
]
AllowHosts = Annotated[
    list[str] | None,
    typer.Option("--allow-host", help="Host the allow applies from (default *)."),
]
DenyHosts = Annotated[
    list[str] | None,
    typer.Option("--deny-host", help="Host the deny applies from (default *)."),
]


def _pattern_option(default: str) -> Any:
    return typer.Option(
        "--resource-pattern-type",
        help="literal or prefixed (add); also any or match to select (list, remove).",
        show_default=True,
    )


def _code(table: dict[str, int], text: str, what: str, allowed: set[str] | None = None) -> int:
    key = text.replace("-", "").replace("_", "").upper()
    key = {"TRANSACTIONALID": "TRANSACTIONAL_ID"}.get(key, key)
    if key not in table or (allowed is not None and key not in allowed):
        names = sorted(allowed or table)
        raise CliError(f"invalid {what} {text!r}: expected one of {', '.join(names).lower()}")
    return table[key]


def _resources(
    topics: list[str] | None,
    groups: list[str] | None,
    cluster: bool,
    txn_ids: list[str] | None,
) -> list[tuple[int, str]]:
    out = [(RESOURCE_TYPES["TOPIC"], t) for t in topics or ()]
    out += [(RESOURCE_TYPES["GROUP"], g) for g in groups or ()]
    out += [(RESOURCE_TYPES["TRANSACTIONAL_ID"], x) for x in txn_ids or ()]
    if cluster:
        out.append((RESOURCE_TYPES["CLUSTER"], CLUSTER_NAME))
    return out


def _entries(
    allow: list[str] | None,
    deny: list[str] | None,
    allow_hosts: list[str] | None,
    deny_hosts: list[str] | None,
) -> list[tuple[str, str, int]]:
    for p in (allow or []) + (deny or []):
        kind, sep, name = p.partition(":")
        if not (sep and kind and name):
            raise CliError(f"invalid principal {p!r}: expected Type:name, e.g. User:alice")
    return [(p, h, PERMISSIONS["ALLOW"]) for p in allow or () for h in allow_hosts or ["*"]] + [
        (p, h, PERMISSIONS["DENY"]) for p in deny or () for h in deny_hosts or ["*"]
    ]


@app.command("add")
def add(
    allow_principal: Principals = None,
    deny_principal: DenyPrincipals = None,
    operation: Operations = None,
    topic: Topics = None,
    group: Groups = None,
    cluster: Cluster = False,
    transactional_id: TxnIds = None,
    resource_pattern_type: Annotated[str, _pattern_option("literal")] = "literal",
    allow_host: AllowHosts = None,
    deny_host: DenyHosts = None,
    bootstrap_server: BrokerOnly = DEFAULT_BOOTSTRAP,
    json_out: JsonFlag = False,
) -> None:
    """Add ACLs: every principal x host x operation x resource given (kafka-acls.sh --add)."""
    resources = _resources(topic, group, cluster, transactional_id)
    if not resources:
        raise CliError("name a resource: --topic, --group, --cluster or --transactional-id")
    entries = _entries(allow_principal, deny_principal, allow_host, deny_host)
    if not entries:
        raise CliError("name a principal: --allow-principal or --deny-principal")
    if not operation:
        raise CliError("name an operation: --operation (Read, Write, ... or All)")
    pattern = _code(PATTERN_TYPES, resource_pattern_type, "pattern type", {"LITERAL", "PREFIXED"})
    ops = [_code(OPERATIONS, o, "operation", set(OPERATIONS) - {"ANY"}) for o in operation]
    acls = [
        Acl(
            p,
            h,
            _name(OPERATIONS, op),
            _name(PERMISSIONS, perm),
            _name(RESOURCE_TYPES, rt),
            name,
            _name(PATTERN_TYPES, pattern),
        )
        for rt, name in resources
        for p, h, perm in entries
        for op in ops
    ]
    from confluent_kafka.admin import AclBinding

    from .broker_backend import BrokerConnection

    with BrokerConnection(bootstrap_server) as conn:
        ck = _ck_enums()
        bindings = [
            AclBinding(
                ck.rt(RESOURCE_TYPES[a.resource_type]),
                a.name,
                ck.pt(pattern),
                a.principal,
                a.host,
                ck.op(OPERATIONS[a.operation]),
                ck.perm(PERMISSIONS[a.permission]),
            )
            for a in acls
        ]
        futures = conn._call(lambda: conn.admin.create_acls(bindings))
        for f in futures.values():
            conn._wait(f)
    _print(acls, json_out, "Added")


@app.command("list")
def list_(
    topic: Topics = None,
    group: Groups = None,
    cluster: Cluster = False,
    transactional_id: TxnIds = None,
    principal: Annotated[
        str | None, typer.Option("--principal", help="Only this principal's ACLs.")
    ] = None,
    resource_pattern_type: Annotated[str, _pattern_option("any")] = "any",
    bootstrap_server: BrokerOnly = DEFAULT_BOOTSTRAP,
    json_out: JsonFlag = False,
) -> None:
    """ACLs on the named resources (all ACLs without one), kafka-acls.sh --list."""
    pattern = _code(PATTERN_TYPES, resource_pattern_type, "pattern type")
    resources = _resources(topic, group, cluster, transactional_id) or [(1, None)]
    found: list[Acl] = []
    for rt, name in resources:
        found += _describe(bootstrap_server, rt, name, pattern, principal)
    _print(sorted(set(found), key=lambda a: (a.resource_type, a.name, a.principal)), json_out)


@app.command("remove")
def remove(
    allow_principal: Principals = None,
    deny_principal: DenyPrincipals = None,
    operation: Operations = None,
    topic: Topics = None,
    group: Groups = None,
    cluster: Cluster = False,
    transactional_id: TxnIds = None,
    resource_pattern_type: Annotated[str, _pattern_option("literal")] = "literal",
    allow_host: AllowHosts = None,
    deny_host: DenyHosts = None,
    bootstrap_server: BrokerOnly = DEFAULT_BOOTSTRAP,
    json_out: JsonFlag = False,
) -> None:
    """Remove ACLs on the named resources (kafka-acls.sh --remove): those of the given
    principals and operations, or every ACL of the resource when none is given."""
    resources = _resources(topic, group, cluster, transactional_id)
    if not resources:
        raise CliError("name a resource: --topic, --group, --cluster or --transactional-id")
    pattern = _code(PATTERN_TYPES, resource_pattern_type, "pattern type")
    ops = [_code(OPERATIONS, o, "operation") for o in operation or ["ANY"]]
    entries: list[tuple[str | None, str | None, int]] = list(
        _entries(allow_principal, deny_principal, allow_host, deny_host)
    ) or [(None, None, PERMISSIONS["ANY"])]
    from confluent_kafka.admin import AclBindingFilter

    from .broker_backend import BrokerConnection

    removed: list[Acl] = []
    with BrokerConnection(bootstrap_server) as conn:
        ck = _ck_enums()
        filters = [
            AclBindingFilter(ck.rt(rt), name, ck.pt(pattern), p, h, ck.op(op), ck.perm(perm))
            for rt, name in resources
            for p, h, perm in entries
            for op in ops
        ]
        futures = conn._call(lambda: conn.admin.delete_acls(filters))
        for f in futures.values():
            for b in conn._wait(f):
                removed.append(
                    Acl(
                        b.principal,
                        b.host,
                        _name(OPERATIONS, int(b.operation.value)),
                        _name(PERMISSIONS, int(b.permission_type.value)),
                        _name(RESOURCE_TYPES, int(b.restype.value)),
                        b.name,
                        _name(PATTERN_TYPES, int(b.resource_pattern_type.value)),
                    )
                )
    _print(sorted(set(removed), key=lambda a: (a.resource_type, a.name)), json_out, "Removed")


def _print(acls: list[Acl], json_out: bool, verb: str | None = None) -> None:
    if json_out:
        emit_json([asdict(a) for a in acls])
        return
    if verb is not None:
        emit(f"{verb} {len(acls)} ACL{'s' if len(acls) != 1 else ''}")
    if acls:
        print_table(
            [
                (
                    a.resource_type,
                    a.name,
                    a.pattern_type,
                    a.principal,
                    a.host,
                    a.operation,
                    a.permission,
                )
                for a in acls
            ],  # fmt: skip
            ["RESOURCE", "NAME", "PATTERN", "PRINCIPAL", "HOST", "OPERATION", "PERMISSION"],
        )


@dataclass(frozen=True)
class _Enums:
    rt: Any
    pt: Any
    op: Any
    perm: Any


def _ck_enums() -> _Enums:
    from confluent_kafka.admin import (
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    return _Enums(ResourceType, ResourcePatternType, AclOperation, AclPermissionType)


# -- DescribeAcls over the Kafka protocol (librdkafka drops its error code) --------------

DESCRIBE_ACLS, DESCRIBE_ACLS_VERSION = 29, 1  # v1: the first with pattern types


def _describe(
    bootstrap: str, rtype: int, name: str | None, pattern: int, principal: str | None
) -> list[Acl]:
    from kio.schema.errors import ErrorCode

    body = {
        "resource_type_filter": rtype,
        "resource_name_filter": name,
        "pattern_type_filter": pattern,
        "principal_filter": principal,
        "host_filter": None,
        "operation": OPERATIONS["ANY"],
        "permission_type": PERMISSIONS["ANY"],
    }
    resp = request(bootstrap, DESCRIBE_ACLS, DESCRIBE_ACLS_VERSION, body)
    if resp.error_code != ErrorCode.none:
        raise CliError(f"{resp.error_code.name.upper()}: {resp.error_message or ''}".strip(": "))
    return [
        Acl(
            e.principal,
            e.host,
            _name(OPERATIONS, int(e.operation)),
            _name(PERMISSIONS, int(e.permission_type)),
            _name(RESOURCE_TYPES, int(r.resource_type)),
            r.resource_name,
            _name(PATTERN_TYPES, int(r.pattern_type)),
        )
        for r in resp.resources
        for e in r.acls
    ]
