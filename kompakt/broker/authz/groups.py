"""Policies of the consumer-group APIs: OffsetCommit/Fetch/Delete, FindCoordinator, the
membership calls, Describe/List/DeleteGroups (Kafka's ``KafkaApis`` rules, 4.x)."""

from __future__ import annotations

import dataclasses
from typing import Any

from kio.schema.errors import ErrorCode

from kompakt.broker.acls import Op
from kompakt.broker.authz.check import (
    GROUP,
    GROUP_DENIED,
    TOPIC,
    TOPIC_DENIED,
    TXN,
    TXN_DENIED,
    Check,
    Decision,
    Finish,
    all_topics_error,
    append,
    by_topic,
    describable_only,
    group,
    ident,
    refuse,
    same,
    split,
    top,
)
from kompakt.broker.coordinator.handlers import (
    commit_error_partition,
    coordinator_response,
    offset_fetch_error_partition,
)

UNKNOWN_AUTHORIZED_OPERATIONS = -(2**31)  # Kafka's Integer.MIN_VALUE: not asked for


def commit_part(p: Any, code: ErrorCode) -> dict[str, Any]:
    """OffsetCommit's (and TxnOffsetCommit's, OffsetDelete's) errored partition."""
    return commit_error_partition(p.partition_index, code)


read_topics = by_topic("topics", "topics", Op.READ, "partitions", "partitions", commit_part)


def offset_commit(c: Check, req: Any) -> Decision:
    """READ group, READ topic."""
    if not c.ok(Op.READ, GROUP, req.group_id):
        return all_topics_error(
            req, "topics", "topics", "partitions", "partitions", commit_part, GROUP_DENIED
        )
    return read_topics(c, req)


def offset_delete(c: Check, req: Any) -> Decision:
    """DELETE group, READ topic."""
    if not c.ok(Op.DELETE, GROUP, req.group_id):
        return refuse({"error_code": GROUP_DENIED})
    return read_topics(c, req)


def _offset_fetch_topics(c: Check, entry: Any) -> tuple[Any, Finish]:
    """One group's topics: (entry with the allowed topics, finish for its answer)."""
    if entry.topics is None:  # all committed topics: those one may not describe vanish

        def unlist(g: dict[str, Any]) -> dict[str, Any]:
            g = dict(g)
            g["topics"] = [
                t
                for t in g.get("topics") or ()
                if (n := _resp_topic_name(c, t)) is None
                or c.ok(Op.DESCRIBE, TOPIC, n, log_denied=False)
            ]
            return g

        return entry, unlist

    def allowed(t: Any) -> bool:
        name = c.topic_name(t)
        return name is None or c.ok(Op.DESCRIBE, TOPIC, name)

    kept, refused = split(entry, "topics", allowed)
    extra = [
        {
            **ident(t, "name", "topic_id"),
            "partitions": [
                offset_fetch_error_partition(i, TOPIC_DENIED) for i in t.partition_indexes or ()
            ],
        }
        for t in refused
    ]
    if kept is None:
        kept = dataclasses.replace(entry, topics=())
    return kept, append("topics", extra)


def _resp_topic_name(c: Check, t: dict[str, Any]) -> str | None:
    """The topic of a response entry (a dict the handler built), by name or id."""
    name = t.get("name")
    if name:
        return name
    tid = t.get("topic_id")
    return c.ctx.state.topic_by_id(tid) if tid else None


def offset_fetch(c: Check, req: Any) -> Decision:
    """DESCRIBE group, DESCRIBE topic (all topics: the others filtered out)."""
    if not hasattr(req, "groups"):  # v1-v7: one group, top-level error code
        if not c.ok(Op.DESCRIBE, GROUP, req.group_id):
            return refuse({"error_code": GROUP_DENIED, "topics": []})
        return _offset_fetch_topics(c, req)
    finishes: dict[str, Finish] = {}
    keep = []
    refused = []
    for g in req.groups:
        if not c.ok(Op.DESCRIBE, GROUP, g.group_id):
            refused.append({"group_id": g.group_id, "error_code": GROUP_DENIED, "topics": []})
            continue
        kept, finishes[g.group_id] = _offset_fetch_topics(c, g)
        keep.append(kept)

    def finish(resp: Any) -> Any:
        out = dict(resp or {})
        out["groups"] = [
            finishes.get(g["group_id"], same)(g) for g in (dict(x) for x in out.get("groups") or ())
        ] + refused
        return out

    if not keep:
        return None, finish
    return dataclasses.replace(req, groups=tuple(keep)), finish


_KEY_TYPES = {0: (GROUP, GROUP_DENIED), 1: (TXN, TXN_DENIED)}


def find_coordinator(c: Check, req: Any) -> Decision:
    """DESCRIBE group / transactional id."""
    rtype, code = _KEY_TYPES.get(int(getattr(req, "key_type", 0)), (None, None))
    if rtype is None:  # the handler answers an unknown key type
        return req, same
    if not hasattr(req, "coordinator_keys"):
        if c.ok(Op.DESCRIBE, rtype, req.key):
            return req, same
        return refuse(coordinator_response(c.ctx, req, code, None))
    kept, refused = split(req, "coordinator_keys", lambda k: c.ok(Op.DESCRIBE, rtype, k))
    asked = dataclasses.replace(req, coordinator_keys=tuple(refused))
    return kept, append(
        "coordinators", coordinator_response(c.ctx, asked, code, None)["coordinators"]
    )


join_group = group(
    Op.READ,
    lambda req: {"error_code": GROUP_DENIED, "generation_id": -1, "member_id": req.member_id},
)
member_call = group(Op.READ, top(GROUP_DENIED))  # SyncGroup, Heartbeat, LeaveGroup


def describe_groups(c: Check, req: Any) -> Decision:
    """DESCRIBE group; authorized operations when asked for."""
    include_ops = bool(getattr(req, "include_authorized_operations", False))
    kept, refused = split(req, "groups", lambda g: c.ok(Op.DESCRIBE, GROUP, g))
    extra = [
        {
            "group_id": g,
            "error_code": GROUP_DENIED,
            "authorized_operations": UNKNOWN_AUTHORIZED_OPERATIONS,
        }
        for g in refused
    ]

    def ops(resp: Any) -> Any:
        if include_ops:
            resp["groups"] = [
                {**g, "authorized_operations": c.ops(GROUP, g["group_id"])}
                if g.get("error_code") == ErrorCode.none
                else g
                for g in (dict(x) for x in resp["groups"])
            ]
        return resp

    return kept, append("groups", extra, ops)


def list_groups(c: Check, req: Any) -> Decision:
    """DESCRIBE cluster, else only the groups one may DESCRIBE."""
    if c.cluster(Op.DESCRIBE, log_denied=False):
        return req, same
    return req, describable_only(c, "groups", GROUP, "group_id")


def delete_groups(c: Check, req: Any) -> Decision:
    """DELETE group."""
    kept, refused = split(req, "groups_names", lambda g: c.ok(Op.DELETE, GROUP, g))
    return kept, append("results", [{"group_id": g, "error_code": GROUP_DENIED} for g in refused])
