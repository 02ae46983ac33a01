"""The pieces every authorization policy is made of: one request's questions to the
authorizer (:class:`Check`) and the ways a policy answers (keep the allowed entries, refuse
the whole request, add the refused entries to the handler's answer).

A policy only decides: the entry a refused topic, partition or group is answered with is
the handler's own errored entry (``part_entry``), built where the handler builds it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from kompakt.broker.acls import CLUSTER_NAME, Authorizer, Op, ResourceType, authorize, client_host
from kompakt.broker.protocol import ZERO_UUID
from kompakt.broker.registry import api_name
from kompakt.broker.state import RequestContext

TOPIC = ResourceType.TOPIC
GROUP = ResourceType.GROUP
CLUSTER = ResourceType.CLUSTER
TXN = ResourceType.TRANSACTIONAL_ID
TOPIC_DENIED = ErrorCode.topic_authorization_failed
GROUP_DENIED = ErrorCode.group_authorization_failed
CLUSTER_DENIED = ErrorCode.cluster_authorization_failed
TXN_DENIED = ErrorCode.transactional_id_authorization_failed
DENIED_MESSAGE = "Authorization failed."

Finish = Callable[[Any], Any]
Decision = tuple[Any, Finish]
Policy = Callable[["Check", Any], Decision]
# (request partition entry, error code) -> the handler's errored partition
PartEntry = Callable[[Any, ErrorCode], dict[str, Any]]


def same(resp: Any) -> Any:
    return resp


class Check:
    """One request's questions to the authorizer (principal and host fixed)."""

    def __init__(self, ctx: RequestContext, authorizer: Authorizer):
        self.ctx = ctx
        self.authorizer = authorizer
        self.principal = ctx.principal
        self.host = client_host(ctx.peer)

    def ok(self, op: Op, rtype: ResourceType, name: str, log_denied: bool = True) -> bool:
        """``log_denied=False`` where a refusal only filters a listing (Kafka's
        ``logIfDenied = false``: Metadata of all topics, ListGroups)."""
        what = f"{api_name(self.ctx.api_key)} v{self.ctx.api_version}"
        return authorize(
            self.authorizer, self.principal, self.host, op, rtype, name, what, log_denied
        )

    def cluster(self, op: Op, log_denied: bool = True) -> bool:
        return self.ok(op, CLUSTER, CLUSTER_NAME, log_denied)

    def any_of(self, op: Op, rtype: ResourceType) -> bool:
        return self.authorizer.authorize_any(self.principal, self.host, op, rtype)

    def ops(self, rtype: ResourceType, name: str) -> int:
        return self.authorizer.operations(self.principal, self.host, rtype, name)

    def topic_name(self, entry: Any, attr: str = "name") -> str | None:
        """The topic an entry names, by name or (KIP-516) by id; None if unknown. The
        request schemas differ by version (``name``/``topic``, with or without
        ``topic_id``), so the fields are looked up by name."""
        name = getattr(entry, attr, None)
        if name:
            return name
        tid = getattr(entry, "topic_id", None)
        if tid is not None and tid != ZERO_UUID:
            return self.ctx.state.topic_by_id(tid)
        return None


def ident(entry: Any, *attrs: str) -> dict[str, Any]:
    """The identifying fields of a request entry, as the response entry repeats them."""
    return {a: getattr(entry, a) for a in attrs if hasattr(entry, a)}


def append(field: str, extra: list[dict[str, Any]], then: Finish = same) -> Finish:
    """A finish that adds ``extra`` entries to the response list ``field``."""

    def finish(resp: Any) -> Any:
        out = dict(resp or {})
        out[field] = list(out.get(field) or ()) + extra
        return then(out)

    return finish


def describable_only(c: Check, field: str, rtype: ResourceType, key: str) -> Finish:
    """A finish that keeps only the entries of the response list ``field`` whose ``key``
    names a ``rtype`` resource the caller may DESCRIBE (a listing filters silently,
    as Kafka's ListGroups and ListTransactions do)."""

    def finish(resp: Any) -> Any:
        out = dict(resp)
        out[field] = [
            e for e in out.get(field) or () if c.ok(Op.DESCRIBE, rtype, e[key], log_denied=False)
        ]
        return out

    return finish


def split(req: Any, field: str, allowed: Callable[[Any], bool]) -> tuple[Any | None, list[Any]]:
    """(``req`` with only the allowed entries of ``field``, or None if it had some and
    none is allowed; the refused entries)."""
    entries = tuple(getattr(req, field) or ())
    verdicts = [(e, allowed(e)) for e in entries]
    keep = tuple(e for e, ok in verdicts if ok)
    refused = [e for e, ok in verdicts if not ok]
    if entries and not keep:
        return None, refused
    return dataclasses.replace(req, **{field: keep}), refused


def refuse(body: dict[str, Any]) -> Decision:
    """Do not call the handler; answer ``body``."""
    return None, lambda _resp: body


def topic_error(
    e: Any,
    parts: str,
    resp_parts: str,
    part_entry: PartEntry,
    code: ErrorCode,
    name_attr: str = "name",
) -> dict[str, Any]:
    """A refused topic entry: its identity and each partition as the handler errs it."""
    out = ident(e, name_attr, "topic_id")
    if name_attr != "name" and name_attr in out:
        out["name"] = out[name_attr]
    out[resp_parts] = [part_entry(p, code) for p in (getattr(e, parts) or ())]
    return out


def by_topic(
    field: str,
    resp_field: str,
    op: Op,
    parts: str,
    resp_parts: str,
    part_entry: PartEntry,
    name_attr: str = "name",
) -> Policy:
    """Per-topic APIs: topics without ``op`` are answered with TOPIC_AUTHORIZATION_FAILED
    on each of their partitions, the others go to the handler."""

    def policy(c: Check, req: Any) -> Decision:
        def allowed(e: Any) -> bool:
            name = c.topic_name(e, name_attr)
            return name is None or c.ok(op, TOPIC, name)  # unknown: the handler answers

        kept, refused = split(req, field, allowed)
        extra = [topic_error(e, parts, resp_parts, part_entry, TOPIC_DENIED) for e in refused]
        return kept, append(resp_field, extra)

    return policy


def all_topics_error(
    req: Any,
    field: str,
    resp_field: str,
    parts: str,
    resp_parts: str,
    part_entry: PartEntry,
    code: ErrorCode,
    **top: Any,
) -> Decision:
    """Refuse the whole request, every partition of every topic answered ``code``."""
    body = dict(top)
    body[resp_field] = [
        topic_error(e, parts, resp_parts, part_entry, code) for e in getattr(req, field) or ()
    ]
    return refuse(body)


def cluster(op: Op, refusal: Callable[[Any], dict[str, Any]]) -> Policy:
    """APIs on the cluster as a whole: ``op`` on CLUSTER, else ``refusal(req)``."""

    def policy(c: Check, req: Any) -> Decision:
        if c.cluster(op):
            return req, same
        return refuse(refusal(req))

    return policy


def group(op: Op, refusal: Callable[[Any], dict[str, Any]], attr: str = "group_id") -> Policy:
    """APIs on one group: ``op`` on it, else ``refusal(req)``."""

    def policy(c: Check, req: Any) -> Decision:
        if c.ok(op, GROUP, getattr(req, attr)):
            return req, same
        return refuse(refusal(req))

    return policy


def top(code: ErrorCode, **extra: Any) -> Callable[[Any], dict[str, Any]]:
    """A refusal with the error at the top of the answer."""
    return lambda _req: {"error_code": code, **extra}


def public(c: Check, req: Any) -> Decision:
    """No ACL needed (ApiVersions, SASL before authentication)."""
    return req, same
