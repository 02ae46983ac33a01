"""DescribeAcls (29), CreateAcls (30), DeleteAcls (31): Kafka's ACL admin APIs.

Without an authorizer (``authorizer.class.name`` empty) they are still served, and
answer SECURITY_DISABLED, as Kafka's ``AclApis`` do. Who may call them (DESCRIBE or
ALTER on the cluster) is the authorizer's guard's business (:mod:`kompakt.broker.authz`).
"""

from __future__ import annotations

from itertools import groupby
from typing import Any

from kio.schema.create_acls.v1.request import CreateAclsRequest
from kio.schema.delete_acls.v1.request import DeleteAclsRequest
from kio.schema.describe_acls.v1.request import DescribeAclsRequest
from kio.schema.errors import ErrorCode

from kompakt.broker.acls import AclBinding, AclError, AclFilter, Authorizer, validate_binding
from kompakt.broker.handlers.common import log
from kompakt.broker.registry import ApiRegistry
from kompakt.broker.state import BrokerState, RequestContext

AUTHORIZER_KEY = "authorizer"  # BrokerState.extra key of the broker's Authorizer
_DISABLED = "No Authorizer is configured (authorizer.class.name is empty)."


def authorizer_of(state: BrokerState) -> Authorizer | None:
    return state.extra.get(AUTHORIZER_KEY)


def _filter(f: Any) -> AclFilter:
    out = AclFilter(
        int(f.resource_type_filter),
        f.resource_name_filter,
        int(f.pattern_type_filter),
        f.principal_filter,
        f.host_filter,
        int(f.operation),
        int(f.permission_type),
    )
    out.validate()
    return out


def _entry(b: AclBinding) -> dict[str, Any]:
    return {
        "principal": b.principal,
        "host": b.host,
        "operation": b.operation,
        "permission_type": b.permission,
    }


def handle_describe_acls(ctx: RequestContext, req: Any) -> dict[str, Any]:
    authorizer = authorizer_of(ctx.state)
    if authorizer is None:
        return {"error_code": ErrorCode.security_disabled, "error_message": _DISABLED}
    try:
        flt = _filter(req)
    except AclError as exc:
        return {"error_code": ErrorCode.invalid_request, "error_message": str(exc)}
    found = sorted(b for b in authorizer.store.all() if flt.matches(b))
    resources = [
        {
            "resource_type": rtype,
            "resource_name": name,
            "pattern_type": ptype,
            "acls": [_entry(b) for b in group],
        }
        for (rtype, name, ptype), group in groupby(
            found, key=lambda b: (b.resource_type, b.name, b.pattern_type)
        )
    ]
    return {"error_code": ErrorCode.none, "error_message": None, "resources": resources}


def handle_create_acls(ctx: RequestContext, req: Any) -> dict[str, Any]:
    authorizer = authorizer_of(ctx.state)
    results: list[dict[str, Any]] = []
    valid: list[AclBinding] = []
    for c in req.creations:
        if authorizer is None:
            results.append({"error_code": ErrorCode.security_disabled, "error_message": _DISABLED})
            continue
        b = AclBinding(
            int(c.resource_type),
            c.resource_name,
            int(c.resource_pattern_type),
            c.principal,
            c.host,
            int(c.operation),
            int(c.permission_type),
        )
        try:
            validate_binding(b)
        except AclError as exc:
            results.append({"error_code": ErrorCode.invalid_request, "error_message": str(exc)})
            continue
        valid.append(b)
        results.append({"error_code": ErrorCode.none, "error_message": None})
    if valid:
        assert authorizer is not None
        authorizer.store.add(valid)
        for b in valid:
            log.info("%s added ACL %s", ctx.principal, b.describe())
    return {"results": results}


def handle_delete_acls(ctx: RequestContext, req: Any) -> dict[str, Any]:
    authorizer = authorizer_of(ctx.state)
    if authorizer is None:
        return {
            "filter_results": [
                {"error_code": ErrorCode.security_disabled, "error_message": _DISABLED}
                for _ in req.filters
            ]
        }
    results: list[dict[str, Any] | None] = []
    filters: list[AclFilter] = []
    for f in req.filters:
        try:
            filters.append(_filter(f))
            results.append(None)
        except AclError as exc:
            results.append({"error_code": ErrorCode.invalid_request, "error_message": str(exc)})
    matched = iter(authorizer.store.remove(filters))
    out = []
    for r in results:
        if r is not None:
            out.append(r)
            continue
        gone = next(matched)
        for b in gone:
            log.info("%s removed ACL %s", ctx.principal, b.describe())
        out.append(
            {
                "error_code": ErrorCode.none,
                "error_message": None,
                "matching_acls": [
                    {
                        "error_code": ErrorCode.none,
                        "error_message": None,
                        "resource_type": b.resource_type,
                        "resource_name": b.name,
                        "pattern_type": b.pattern_type,
                        **_entry(b),
                    }
                    for b in gone
                ],
            }
        )
    return {"filter_results": out}


def register(registry: ApiRegistry) -> None:
    # kio has no v0 (before KIP-290's pattern types); Kafka 4 serves v1-v3 too
    registry.register(DescribeAclsRequest.__api_key__, 1, 3, handle_describe_acls)
    registry.register(CreateAclsRequest.__api_key__, 1, 3, handle_create_acls)
    registry.register(DeleteAclsRequest.__api_key__, 1, 3, handle_delete_acls)
