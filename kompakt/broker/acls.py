"""ACLs and the authorizer: Kafka's ``StandardAuthorizer`` semantics (KIP-801).

An ACL binding is a resource pattern (type, name, LITERAL or PREFIXED) and an entry
(principal, host, operation, ALLOW or DENY). :meth:`Authorizer.authorize` decides one
(principal, host, operation, resource) as ``StandardAuthorizerData.authorize`` does:

1. a super user (``super.users``) is allowed everything;
2. the ACLs that apply are those whose pattern matches the resource (LITERAL with the same
   name or the wildcard ``*``, or PREFIXED with a prefix of the name), whose principal is
   the caller or ``User:*`` and whose host is the caller's address or ``*``;
3. a DENY for the operation (or ALL) wins over everything;
4. else an ALLOW for the operation, for ALL, or for an operation that implies it (READ,
   WRITE, DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS) allows;
5. else, if no ACL at all names the resource, ``allow.everyone.if.no.acl.found`` decides;
   otherwise the request is denied.

The bindings live in ``kompakt-acls.json`` in the data dir, replaced atomically (as
``kompakt-topics.json``) on every change and read back at start.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kompakt.errors import KompaktError
from kompakt.log.durable import PRIVATE, write_json_atomically

log = logging.getLogger(__name__)

ACLS_FILE = "kompakt-acls.json"
CLUSTER_NAME = "kafka-cluster"  # Kafka's only CLUSTER resource name
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
AUTHORIZERS = (
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.authorizer.AclAuthorizer",
)


class ResourceType(enum.IntEnum):
    """``org.apache.kafka.common.resource.ResourceType``."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    """``org.apache.kafka.common.resource.PatternType``."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Op(enum.IntEnum):
    """``org.apache.kafka.common.acl.AclOperation`` (the handlers' ``AclOperation``
    plus the filter-only and token codes)."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class Permission(enum.IntEnum):
    """``org.apache.kafka.common.acl.AclPermissionType``."""

    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


# AclEntry.supportedOperations: what an ACL on each resource type can grant; also the
# bits of the *_authorized_operations fields.
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[Op, ...]] = {
    ResourceType.TOPIC: (
        Op.READ,
        Op.WRITE,
        Op.CREATE,
        Op.DESCRIBE,
        Op.DELETE,
        Op.ALTER,
        Op.DESCRIBE_CONFIGS,
        Op.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (Op.READ, Op.DESCRIBE, Op.DELETE),
    ResourceType.CLUSTER: (
        Op.CREATE,
        Op.CLUSTER_ACTION,
        Op.DESCRIBE_CONFIGS,
        Op.ALTER_CONFIGS,
        Op.IDEMPOTENT_WRITE,
        Op.ALTER,
        Op.DESCRIBE,
    ),
    ResourceType.TRANSACTIONAL_ID: (Op.DESCRIBE, Op.WRITE),
}

# An ALLOW of the key operation also allows these (StandardAuthorizerData's
# IMPLIES_DESCRIBE / IMPLIES_DESCRIBE_CONFIGS); a DENY implies nothing.
_IMPLIED_BY: dict[Op, frozenset[Op]] = {
    Op.DESCRIBE: frozenset({Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER}),
    Op.DESCRIBE_CONFIGS: frozenset({Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS}),
}


class AclError(KompaktError):
    """A malformed ACL or filter (Kafka's InvalidRequestException: INVALID_REQUEST)."""

    error_code = 42


@dataclass(frozen=True, order=True)
class AclBinding:
    """One ACL: ``resource_type``/``name``/``pattern_type`` and the entry."""

    resource_type: int
    name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int

    def describe(self) -> str:
        return (
            f"{Permission(self.permission).name} {self.principal} from {self.host} "
            f"{Op(self.operation).name} on {ResourceType(self.resource_type).name}:"
            f"{PatternType(self.pattern_type).name}:{self.name}"
        )


def _principal_ok(principal: str) -> bool:
    kind, sep, name = principal.partition(":")
    return bool(sep and kind and name)


def validate_binding(b: AclBinding) -> None:
    """Kafka's ``AclControlManager.validateNewAcl``: a concrete, well-formed ACL."""
    try:
        rtype = ResourceType(b.resource_type)
        ptype = PatternType(b.pattern_type)
        op = Op(b.operation)
        perm = Permission(b.permission)
    except ValueError as exc:
        raise AclError(f"Invalid ACL: {exc}") from None
    if rtype in (ResourceType.UNKNOWN, ResourceType.ANY):
        raise AclError(f"Invalid resourceType {rtype.name}")
    if ptype not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise AclError(f"Invalid patternType {ptype.name}")
    if op in (Op.UNKNOWN, Op.ANY):
        raise AclError(f"Invalid operation {op.name}")
    if perm in (Permission.UNKNOWN, Permission.ANY):
        raise AclError(f"Invalid permissionType {perm.name}")
    if not b.name:
        raise AclError("Resource name should not be empty")
    if rtype == ResourceType.CLUSTER and b.name != CLUSTER_NAME:
        raise AclError(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if not _principal_ok(b.principal):
        raise AclError(f"Could not parse principal from `{b.principal}` (no colon is found).")
    if not b.host:
        raise AclError("Invalid null host")


@dataclass(frozen=True)
class AclFilter:
    """A DescribeAcls/DeleteAcls filter; None matches anything (Kafka's null)."""

    resource_type: int = ResourceType.ANY
    name: str | None = None
    pattern_type: int = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: int = Op.ANY
    permission: int = Permission.ANY

    def validate(self) -> None:
        """INVALID_REQUEST for codes Kafka has no meaning for (UNKNOWN, out of range)."""
        for enum_type, value, what in (
            (ResourceType, self.resource_type, "resource type"),
            (PatternType, self.pattern_type, "pattern type"),
            (Op, self.operation, "operation"),
            (Permission, self.permission, "permission type"),
        ):
            try:
                code = enum_type(value)
            except ValueError:
                raise AclError(f"Invalid {what} code {value} in the filter") from None
            if code.name == "UNKNOWN":
                raise AclError(f"Filter has an UNKNOWN {what}")

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != b.resource_type:
            return False
        if not self._pattern_matches(b):
            return False
        if self.principal is not None and self.principal != b.principal:
            return False
        if self.host is not None and self.host != b.host:
            return False
        if self.operation != Op.ANY and self.operation != b.operation:
            return False
        return self.permission == Permission.ANY or self.permission == b.permission

    def _pattern_matches(self, b: AclBinding) -> bool:
        """Kafka's ``ResourcePatternFilter.matches``: exact for LITERAL/PREFIXED/ANY;
        MATCH: every pattern that would apply to a resource of that name."""
        if self.pattern_type == PatternType.MATCH:
            if self.name is None:
                return True
            if b.pattern_type == PatternType.LITERAL:
                return b.name in (self.name, WILDCARD)
            return b.pattern_type == PatternType.PREFIXED and self.name.startswith(b.name)
        if self.pattern_type != PatternType.ANY and self.pattern_type != b.pattern_type:
            return False
        return self.name is None or self.name == b.name


def client_host(peer: str) -> str:
    """The address part of ``host:port`` (IPv6 too: the port follows the last colon)."""
    host, sep, _port = peer.rpartition(":")
    return (host if sep else peer).strip("[]")


def parse_super_users(text: str) -> frozenset[str]:
    """``super.users``: principals separated by semicolons (Kafka splits on ';')."""
    users = frozenset(p.strip() for p in (text or "").split(";") if p.strip())
    bad = [p for p in users if not _principal_ok(p)]
    if bad:
        raise AclError(f"super.users: cannot parse principal {bad[0]!r} (want Type:name)")
    return users


class AclStore:
    """The bindings of one data dir, in ``kompakt-acls.json`` (a sorted JSON list)."""

    def __init__(self, data_dir: Path):
        self.path = Path(data_dir) / ACLS_FILE
        self._lock = threading.Lock()
        self._acls: frozenset[AclBinding] = self._load()

    def _load(self) -> frozenset[AclBinding]:
        import json

        if not self.path.exists():
            return frozenset()
        try:
            rows = json.loads(self.path.read_text())["acls"]
            acls = frozenset(AclBinding(**row) for row in rows)
        except (ValueError, KeyError, TypeError) as exc:
            raise KompaktError(f"{self.path} is not a kompakt ACL file: {exc}") from exc
        for b in acls:
            validate_binding(b)
        return acls

    def all(self) -> frozenset[AclBinding]:
        return self._acls

    def _save(self, acls: frozenset[AclBinding]) -> None:
        # who may do what is for the broker's owner only, as the credentials are
        rows = {"acls": [asdict(b) for b in sorted(acls)]}
        write_json_atomically(self.path, rows, mode=PRIVATE)
        self._acls = acls

    def add(self, bindings: Iterable[AclBinding]) -> None:
        with self._lock:
            new = self._acls | frozenset(bindings)
            if new != self._acls:
                self._save(new)

    def remove(self, filters: list[AclFilter]) -> list[list[AclBinding]]:
        """Delete what each filter matches; per filter, the bindings it matched."""
        with self._lock:
            matched = [sorted(b for b in self._acls if f.matches(b)) for f in filters]
            gone = frozenset(b for group in matched for b in group)
            if gone:
                self._save(self._acls - gone)
            return matched


class Authorizer:
    """Kafka's StandardAuthorizer over an :class:`AclStore`."""

    def __init__(self, store: AclStore, super_users: frozenset[str], allow_if_no_acl: bool):
        self.store = store
        self.super_users = super_users
        self.allow_if_no_acl = allow_if_no_acl

    def authorize(
        self, principal: str, host: str, op: Op | int, rtype: ResourceType | int, name: str
    ) -> bool:
        if principal in self.super_users:
            return True
        found = False
        allowed = False
        implied = _IMPLIED_BY.get(Op(op), frozenset({Op(op)}))
        for b in self.store.all():
            if b.resource_type != rtype or not _applies(b, name):
                continue
            found = True
            if b.principal not in (principal, WILDCARD_PRINCIPAL):
                continue
            if b.host not in (host, WILDCARD):
                continue
            if b.permission == Permission.DENY:
                if b.operation in (op, Op.ALL):
                    return False
            elif b.operation == Op.ALL or b.operation in implied:
                allowed = True
        if allowed:
            return True
        return not found and self.allow_if_no_acl

    def authorize_any(self, principal: str, host: str, op: Op, rtype: ResourceType) -> bool:
        """Kafka's ``authorizeByResourceType``: could ``op`` be allowed on some resource
        of ``rtype``? (an ALLOW on any pattern not wholly denied, or a super user)."""
        if principal in self.super_users:
            return True
        denied_all = False
        denied_prefixes: set[str] = set()
        denied_literals: set[str] = set()
        allows: list[AclBinding] = []
        for b in self.store.all():
            if b.resource_type != rtype:
                continue
            if b.principal not in (principal, WILDCARD_PRINCIPAL) or b.host not in (
                host,
                WILDCARD,
            ):
                continue
            if b.permission == Permission.DENY and b.operation in (op, Op.ALL):
                if b.pattern_type == PatternType.LITERAL and b.name == WILDCARD:
                    denied_all = True
                elif b.pattern_type == PatternType.PREFIXED:
                    denied_prefixes.add(b.name)
                else:
                    denied_literals.add(b.name)
            elif b.permission == Permission.ALLOW and b.operation in (op, Op.ALL):
                allows.append(b)
        if denied_all:
            return False
        for b in allows:
            if any(b.name.startswith(p) for p in denied_prefixes):
                continue
            if b.pattern_type == PatternType.LITERAL and b.name in denied_literals:
                continue
            return True
        return self.allow_if_no_acl and not any(b.resource_type == rtype for b in self.store.all())

    def operations(self, principal: str, host: str, rtype: ResourceType, name: str) -> int:
        """The ``*_authorized_operations`` bits for one resource."""
        return sum(
            1 << op
            for op in SUPPORTED_OPERATIONS[rtype]
            if self.authorize(principal, host, op, rtype, name)
        )


def _applies(b: AclBinding, name: str) -> bool:
    if b.pattern_type == PatternType.LITERAL:
        return b.name == name or b.name == WILDCARD
    return name.startswith(b.name)


def build_authorizer(config: Any, data_dir: Path) -> Authorizer | None:
    """The broker's authorizer from its config, or None when ``authorizer.class.name``
    is empty (Kafka's default: no authorization)."""
    name = config.get("authorizer.class.name") or ""
    if not name:
        return None
    if name not in AUTHORIZERS:  # config validation normally stops this first
        raise KompaktError(f"authorizer.class.name={name}: kompakt implements only {AUTHORIZERS}")
    users = parse_super_users(config.get("super.users") or "")
    return Authorizer(AclStore(data_dir), users, bool(config.get("allow.everyone.if.no.acl.found")))


# Kafka's kafka.authorizer.logger: one INFO line per refused check
denied_log = logging.getLogger("kompakt.authorizer")


def authorize(
    authorizer: Authorizer,
    principal: str,
    host: str,
    op: Op,
    rtype: ResourceType,
    name: str,
    what: str,
    log_denied: bool = True,
) -> bool:
    """The one authorization check of every door (each Kafka API's policy, each route of
    the admin listener: :mod:`kompakt.broker.http_gate`), with Kafka's
    ``kafka.authorizer.logger`` line for a refusal; ``what`` names the request."""
    allowed = authorizer.authorize(principal, host, op, rtype, name)
    if not allowed and log_denied:
        denied_log.info(
            "Principal = %s is Denied operation = %s from host = %s on resource = %s:%s (%s)",
            principal,
            op.name,
            host,
            rtype.name,
            name,
            what,
        )
    return allowed
