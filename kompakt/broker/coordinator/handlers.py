"""Group API handlers: FindCoordinator (10), JoinGroup (11), Heartbeat (12), LeaveGroup
(13), SyncGroup (14), DescribeGroups (15), ListGroups (16), OffsetCommit (8),
OffsetFetch (9), DeleteGroups (42), OffsetDelete (47). One :class:`GroupCoordinator` per
broker, created on first use and kept in ``state.extra``."""

from __future__ import annotations

from typing import Any

from kompakt.broker.coordinator.group import (
    COORDINATOR_NOT_AVAILABLE,
    DEAD,
    GROUP_ID_NOT_FOUND,
    INVALID_GROUP_ID,
    MAX_METADATA,
    NONE,
    OFFSET_METADATA_TOO_LARGE,
    OFFSETS_TOPIC,
    UNKNOWN_MEMBER_ID,
    UNKNOWN_TOPIC_OR_PARTITION,
    GroupCoordinator,
)
from kompakt.broker.coordinator.records import OffsetAndMetadata
from kompakt.broker.handlers.common import error_of
from kompakt.broker.protocol import ZERO_UUID, ms
from kompakt.broker.registry import ApiRegistry
from kompakt.broker.state import RequestContext
from kompakt.errors import KompaktError

OFFSET_COMMIT = 8
OFFSET_FETCH = 9
FIND_COORDINATOR = 10
JOIN_GROUP = 11
HEARTBEAT = 12
LEAVE_GROUP = 13
SYNC_GROUP = 14
DESCRIBE_GROUPS = 15
LIST_GROUPS = 16
DELETE_GROUPS = 42
OFFSET_DELETE = 47
ADD_PARTITIONS_TO_TXN = 24

_KEY = "group_coordinator"


def coordinator_if_started(state: Any) -> GroupCoordinator | None:
    """The broker's group coordinator if a group request or the start-up load made it."""
    return state.extra.get(_KEY)


async def load_coordinator(state: Any) -> GroupCoordinator:
    """The broker's group coordinator, created and loaded from ``__consumer_offsets`` on
    first use. The broker calls it at start-up when that topic exists (Kafka loads its
    coordinator partitions on election), so offsets expire after a restart even before
    any client asks."""
    gc = coordinator_if_started(state)
    if gc is None:
        gc = state.extra[_KEY] = GroupCoordinator(state)
    await gc.ensure_loaded()
    return gc


async def coordinator(ctx: RequestContext) -> GroupCoordinator:
    return await load_coordinator(ctx.state)


def _host(ctx: RequestContext) -> str:
    peer = ctx.peer or ""
    return "/" + peer.rsplit(":", 1)[0] if peer else ""


# -- FindCoordinator ---------------------------------------------------------------------


TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
NO_TRANSACTIONS = (
    "transactions are not supported by this kompakt broker yet "
    "(use an idempotent producer without transactional.id)"
)


async def handle_find_coordinator(ctx: RequestContext, req: Any) -> dict[str, Any]:
    """FindCoordinator. Until the broker has a transaction coordinator, a transaction key
    (key_type 1) answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED with a message saying
    why: librdkafka (``rd_kafka_txn_handle_FindCoordinator``), the Java client and
    KafkaJS treat it as fatal, so ``init_transactions()`` fails at once; the retriable
    COORDINATOR_NOT_AVAILABLE would keep them retrying until their timeout."""
    key_type = int(getattr(req, "key_type", 0))
    ok = key_type == 0 or (key_type == 1 and ADD_PARTITIONS_TO_TXN in ctx.state.registry)
    error_code = COORDINATOR_NOT_AVAILABLE
    error_message = "no coordinator for this key type"
    if key_type == 1 and not ok:
        error_code, error_message = TRANSACTIONAL_ID_AUTHORIZATION_FAILED, NO_TRANSACTIONS
    if key_type == 0:
        try:
            await coordinator(ctx)  # creates __consumer_offsets, loads offsets
        except (KompaktError, OSError) as exc:  # e.g. a full disk creating the topic
            ok, error_message = False, f"group coordinator not available: {exc}"
    ep = ctx.state.broker_endpoint()

    def one(key: str) -> dict[str, Any]:
        if not ok:
            return {
                "key": key,
                "error_code": error_code,
                "error_message": error_message,
                "node_id": -1,
                "host": "",
                "port": -1,
            }
        return {
            "key": key,
            "error_code": NONE,
            "error_message": None,
            "node_id": ep["node_id"],
            "host": ep["host"],
            "port": ep["port"],
        }

    if ctx.api_version >= 4:
        return {"throttle_time": 0, "coordinators": [one(k) for k in req.coordinator_keys]}
    return {"throttle_time": 0, **one(req.key)}


# -- JoinGroup / SyncGroup / Heartbeat / LeaveGroup --------------------------------------


async def handle_join_group(ctx: RequestContext, req: Any) -> dict[str, Any]:
    gc = await coordinator(ctx)
    session = ms(req.session_timeout)
    rebalance = ms(getattr(req, "rebalance_timeout", req.session_timeout))
    resp = await gc.join(
        req.group_id,
        req.member_id or "",
        getattr(req, "group_instance_id", None),
        ctx.client_id or "",
        _host(ctx),
        session,
        rebalance,
        req.protocol_type,
        [(p.name, bytes(p.metadata)) for p in req.protocols],
        require_known_member_id=ctx.api_version >= 4,
    )
    resp.setdefault("generation_id", -1)
    resp.setdefault("leader", "")
    resp.setdefault("member_id", req.member_id or "")
    resp.setdefault("protocol_type", None)
    resp.setdefault("protocol_name", None if ctx.api_version >= 7 else "")
    if resp.get("protocol_name") is None and ctx.api_version < 7:
        resp["protocol_name"] = ""
    resp["throttle_time"] = 0
    return resp


async def handle_sync_group(ctx: RequestContext, req: Any) -> dict[str, Any]:
    gc = await coordinator(ctx)
    resp = await gc.sync(
        req.group_id,
        req.generation_id,
        req.member_id,
        {a.member_id: bytes(a.assignment) for a in req.assignments},
        getattr(req, "group_instance_id", None),
        getattr(req, "protocol_type", None),
        getattr(req, "protocol_name", None),
    )
    resp.setdefault("assignment", b"")
    resp["throttle_time"] = 0
    return resp


async def handle_heartbeat(ctx: RequestContext, req: Any) -> dict[str, Any]:
    gc = await coordinator(ctx)
    return {
        "throttle_time": 0,
        "error_code": gc.heartbeat(
            req.group_id, req.generation_id, req.member_id, getattr(req, "group_instance_id", None)
        ),
    }


async def handle_leave_group(ctx: RequestContext, req: Any) -> dict[str, Any]:
    gc = await coordinator(ctx)
    if ctx.api_version < 3:
        return {"throttle_time": 0, "error_code": gc.leave(req.group_id, req.member_id)}
    if gc.group(req.group_id) is None:
        return {"throttle_time": 0, "error_code": UNKNOWN_MEMBER_ID, "members": []}
    members = [
        {
            "member_id": m.member_id,
            "group_instance_id": m.group_instance_id,
            "error_code": gc.leave(
                req.group_id, m.member_id, getattr(m, "group_instance_id", None)
            ),
        }
        for m in req.members
    ]
    return {"throttle_time": 0, "error_code": NONE, "members": members}


# -- OffsetCommit / OffsetFetch ----------------------------------------------------------


def _topic_name(ctx: RequestContext, t: Any) -> str | None:
    name = getattr(t, "name", None)
    if name:
        return name
    tid = getattr(t, "topic_id", None)
    if tid is not None and tid != ZERO_UUID:
        return ctx.state.topic_by_id(tid)
    return None


async def handle_offset_commit(ctx: RequestContext, req: Any) -> dict[str, Any]:
    gc = await coordinator(ctx)
    group_error = (
        INVALID_GROUP_ID
        if not req.group_id
        else gc.commit_check(
            req.group_id,
            req.generation_id_or_member_epoch,
            req.member_id,
            getattr(req, "group_instance_id", None),
            ctx.api_version,
        )
    )
    now = gc.now()
    # v2-v4 retention_time (-1: the broker's offsets.retention.minutes) gives an explicit
    # expire timestamp, as Kafka's OffsetCommit handling does.
    retention = ms(getattr(req, "retention_time", -1))
    expire = now + retention if retention >= 0 else None
    to_commit: dict[tuple[str, int], OffsetAndMetadata] = {}
    topics = []
    for t in req.topics:
        name = _topic_name(ctx, t)
        nparts = ctx.logs.partition_count(name) if name and ctx.logs.has_topic(name) else 0
        parts = []
        for p in t.partitions:
            code = group_error
            if code == NONE:
                if p.partition_index < 0 or p.partition_index >= nparts:
                    code = UNKNOWN_TOPIC_OR_PARTITION
                elif p.committed_metadata is not None and len(p.committed_metadata) > MAX_METADATA:
                    code = OFFSET_METADATA_TOO_LARGE
                else:
                    assert name is not None
                    to_commit[(name, p.partition_index)] = OffsetAndMetadata(
                        p.committed_offset,
                        int(getattr(p, "committed_leader_epoch", -1)),
                        p.committed_metadata or "",
                        now,
                        expire,
                    )
            parts.append({"partition_index": p.partition_index, "error_code": code})
        topics.append(
            {
                "name": name or getattr(t, "name", ""),
                "topic_id": getattr(t, "topic_id", None),
                "partitions": parts,
            }
        )
    if to_commit:
        try:
            refused = await gc.commit(req.group_id, to_commit)
            for t in topics:
                for p in t["partitions"]:
                    if (t["name"], p["partition_index"]) in refused:
                        p["error_code"] = UNKNOWN_TOPIC_OR_PARTITION
        except Exception as exc:  # the offsets topic cannot be written
            code, _msg = error_of(exc)
            if code in (NONE, -1):
                code = COORDINATOR_NOT_AVAILABLE
            for t in topics:
                for p in t["partitions"]:
                    if p["error_code"] == NONE:
                        p["error_code"] = code
    return {"throttle_time": 0, "topics": topics}


def _fetch_group(
    ctx: RequestContext, gc: GroupCoordinator, group_id: str, topics: Any
) -> list[dict[str, Any]]:
    wanted = None
    ids: dict[str, Any] = {}
    if topics is not None:
        wanted = []
        for t in topics:
            name = _topic_name(ctx, t) or getattr(t, "name", "") or ""
            ids[name] = getattr(t, "topic_id", None)
            wanted.append((name, list(t.partition_indexes)))
    out = []
    for name, parts in gc.fetch_offsets(group_id, wanted).items():
        tid = ids.get(name)
        if tid is None and ctx.logs.has_topic(name):
            tid = ctx.state.topic_id(name)
        out.append(
            {
                "name": name,
                "topic_id": tid or ZERO_UUID,
                "partitions": [
                    {
                        "partition_index": p,
                        "committed_offset": om.offset if om else -1,
                        "committed_leader_epoch": om.leader_epoch if om else -1,
                        "metadata": om.metadata if om else "",
                        "error_code": NONE,
                    }
                    for p, om in parts
                ],
            }
        )
    return out


async def handle_offset_fetch(ctx: RequestContext, req: Any) -> dict[str, Any]:
    gc = await coordinator(ctx)
    if ctx.api_version >= 8:
        groups = [
            {
                "group_id": g.group_id,
                "topics": _fetch_group(ctx, gc, g.group_id, g.topics),
                "error_code": NONE,
            }
            for g in req.groups
        ]
        return {"throttle_time": 0, "groups": groups}
    return {
        "throttle_time": 0,
        "topics": _fetch_group(ctx, gc, req.group_id, req.topics),
        "error_code": NONE,
    }


# -- ListGroups / DescribeGroups / DeleteGroups ------------------------------------------


async def handle_list_groups(ctx: RequestContext, req: Any) -> dict[str, Any]:
    gc = await coordinator(ctx)
    states = {s.lower() for s in getattr(req, "states_filter", ()) or ()}
    types = {s.lower() for s in getattr(req, "types_filter", ()) or ()}
    groups = []
    for g in list(gc.groups.values()):
        if g.state == DEAD:
            continue
        if states and g.state.lower() not in states:
            continue
        if types and "classic" not in types:
            continue
        groups.append(
            {
                "group_id": g.group_id,
                "protocol_type": g.protocol_type or "",
                "group_state": g.state,
                "group_type": "classic",
            }
        )
    return {"throttle_time": 0, "error_code": NONE, "groups": groups}


async def handle_describe_groups(ctx: RequestContext, req: Any) -> dict[str, Any]:
    gc = await coordinator(ctx)
    out = []
    for gid in req.groups:
        g = gc.group(gid)
        if g is None:
            out.append(
                {
                    "error_code": GROUP_ID_NOT_FOUND if ctx.api_version >= 6 else NONE,
                    "error_message": None,
                    "group_id": gid,
                    "group_state": DEAD,
                    "protocol_type": "",
                    "protocol_data": "",
                    "members": [],
                    "authorized_operations": -(2**31),
                }
            )
            continue
        stable = g.state == "Stable"
        out.append(
            {
                "error_code": NONE,
                "error_message": None,
                "group_id": gid,
                "group_state": g.state,
                "protocol_type": g.protocol_type or "",
                "protocol_data": (g.protocol or "") if stable else "",
                "members": [
                    {
                        "member_id": m.member_id,
                        "group_instance_id": m.group_instance_id,
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "member_metadata": m.metadata_for(g.protocol) if stable else b"",
                        "member_assignment": m.assignment if stable else b"",
                    }
                    for m in g.members.values()
                ],
                "authorized_operations": -(2**31),
            }
        )
    return {"throttle_time": 0, "groups": out}


async def handle_delete_groups(ctx: RequestContext, req: Any) -> dict[str, Any]:
    gc = await coordinator(ctx)
    results = []
    for gid in req.groups_names:
        code = await gc.delete_group(gid)
        results.append({"group_id": gid, "error_code": code})
    return {"throttle_time": 0, "results": results}


async def handle_offset_delete(ctx: RequestContext, req: Any) -> dict[str, Any]:
    """OffsetDelete (KIP-496), as Kafka's ``KafkaApis.handleOffsetDeleteRequest``: unknown
    topics and partitions answer UNKNOWN_TOPIC_OR_PARTITION and are not passed on; a
    group error (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP) is the whole answer."""
    gc = await coordinator(ctx)
    errors: dict[tuple[str, int], int] = {}
    wanted: list[tuple[str, int]] = []
    for t in req.topics:
        nparts = ctx.logs.partition_count(t.name) if ctx.logs.has_topic(t.name) else 0
        for p in t.partitions:
            if 0 <= p.partition_index < nparts:
                wanted.append((t.name, p.partition_index))
            else:
                errors[(t.name, p.partition_index)] = UNKNOWN_TOPIC_OR_PARTITION
    if not req.group_id:
        group_error, found = INVALID_GROUP_ID, {}
    else:
        group_error, found = await gc.delete_offsets(req.group_id, wanted)
    if group_error != NONE:
        return {"throttle_time": 0, "error_code": group_error, "topics": []}
    errors.update(found)
    topics: dict[str, list[dict[str, int]]] = {}
    for t in req.topics:
        parts = topics.setdefault(t.name, [])
        for p in t.partitions:
            code = errors.get((t.name, p.partition_index), NONE)
            parts.append({"partition_index": p.partition_index, "error_code": code})
    return {
        "throttle_time": 0,
        "error_code": NONE,
        "topics": [{"name": n, "partitions": ps} for n, ps in topics.items()],
    }


async def topics_deleted(state: Any, topics: set[str]) -> None:
    """Called by DeleteTopics once ``topics`` are gone: their committed offsets leave
    every group (Kafka's ``GroupCoordinator.onPartitionsDeleted``). Loads the coordinator
    first if ``__consumer_offsets`` exists, so no committed offset is missed."""
    topics = {t for t in topics if t != OFFSETS_TOPIC}
    if not topics:
        return
    if coordinator_if_started(state) is None and not state.logs.has_topic(OFFSETS_TOPIC):
        return  # no group ever committed anything
    gc = await load_coordinator(state)
    await gc.on_topics_deleted(topics)


def register(registry: ApiRegistry) -> None:
    registry.register(FIND_COORDINATOR, 0, 6, handle_find_coordinator)
    registry.register(JOIN_GROUP, 0, 9, handle_join_group)
    registry.register(SYNC_GROUP, 0, 5, handle_sync_group)
    registry.register(HEARTBEAT, 0, 4, handle_heartbeat)
    registry.register(LEAVE_GROUP, 0, 5, handle_leave_group)
    registry.register(OFFSET_COMMIT, 2, 10, handle_offset_commit)
    registry.register(OFFSET_FETCH, 1, 10, handle_offset_fetch)
    registry.register(LIST_GROUPS, 0, 5, handle_list_groups)
    registry.register(DESCRIBE_GROUPS, 0, 6, handle_describe_groups)
    registry.register(DELETE_GROUPS, 0, 2, handle_delete_groups)
    registry.register(OFFSET_DELETE, 0, 0, handle_offset_delete)
