"""Group API handlers: FindCoordinator, JoinGroup, Heartbeat, LeaveGroup, SyncGroup,
DescribeGroups, ListGroups, OffsetCommit, OffsetFetch, DeleteGroups, OffsetDelete.

This is the coordinator's asyncio layer: one :class:`GroupCoordinator` per broker, made
by :func:`start_coordinator` (the broker calls it at start-up with its clock; a state
without one gets it on first use) and kept in ``state.extra``, its timers on the
broker's loop through a :class:`LoopScheduler`, its parked joins and syncs awaited
here. API keys are kio's (``__api_key__``), error codes kio's ``ErrorCode``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from kio.schema.delete_groups.v0.request import DeleteGroupsRequest
from kio.schema.describe_groups.v0.request import DescribeGroupsRequest
from kio.schema.errors import ErrorCode
from kio.schema.heartbeat.v0.request import HeartbeatRequest
from kio.schema.join_group.v0.request import JoinGroupRequest
from kio.schema.leave_group.v0.request import LeaveGroupRequest
from kio.schema.list_groups.v0.request import ListGroupsRequest
from kio.schema.offset_commit.v2.request import OffsetCommitRequest
from kio.schema.offset_delete.v0.request import OffsetDeleteRequest
from kio.schema.offset_fetch.v1.request import OffsetFetchRequest
from kio.schema.sync_group.v0.request import SyncGroupRequest

from kompakt.broker.coordinator.commit import check_commit, topic_name
from kompakt.broker.coordinator.commit import (  # the authorization guard's refusals
    commit_error_partition as commit_error_partition,
)
from kompakt.broker.coordinator.coordinator import GroupCoordinator
from kompakt.broker.coordinator.faults import NO_FAULTS, CoordinatorFaults
from kompakt.broker.coordinator.records import NO_LEADER_EPOCH, NO_OFFSET
from kompakt.broker.coordinator.scheduler import LoopScheduler
from kompakt.broker.coordinator.state import UNKNOWN_GENERATION_ID, GroupState
from kompakt.broker.coordinator.storage import OFFSETS_TOPIC, OffsetsStorage
from kompakt.broker.handlers.common import error_of
from kompakt.broker.protocol import ZERO_UUID, ms
from kompakt.broker.registry import ApiRegistry
from kompakt.broker.state import RequestContext
from kompakt.errors import KompaktError

_KEY = "group_coordinator"

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1
"""FindCoordinator ``key_type`` values (Kafka's ``CoordinatorType.GROUP`` / ``TRANSACTION``)."""

NO_NODE = -1
"""Node id and port of FindCoordinator's answer when there is none (Kafka's ``Node.noNode``)."""

DEFAULT_RETENTION_TIME = -1
"""OffsetCommit v2-v4 ``retention_time`` meaning: the broker's ``offsets.retention.minutes``."""

AUTHORIZED_OPERATIONS_OMITTED = -(2**31)
"""DescribeGroups ``authorized_operations`` when not asked for (Kafka's ``Int.MinValue``)."""


def coordinator_if_started(state: Any) -> GroupCoordinator | None:
    """The broker's group coordinator if the broker or a group request made it."""
    return state.extra.get(_KEY)


def start_coordinator(
    state: Any, clock: Callable[[], int] | None = None, faults: CoordinatorFaults = NO_FAULTS
) -> GroupCoordinator:
    """Make the broker's coordinator on the running loop (not yet loaded): timers on the
    loop, time from ``clock`` (default: the log manager's), ``__consumer_offsets`` in the
    broker's logs. It shuts down (parked requests answered NOT_COORDINATOR, timers
    stopped) when the broker starts closing."""
    cfg = state.config
    loop = asyncio.get_running_loop()
    storage = OffsetsStorage(
        state.logs,
        int(cfg.get("offsets.topic.num.partitions")),
        int(cfg.get("offsets.topic.segment.bytes")),
    )
    gc = GroupCoordinator(
        cfg, LoopScheduler(loop, clock or state.logs.clock), storage, faults, loop=loop
    )
    state.extra[_KEY] = gc
    shutdown_when_closing(state, _KEY, gc)
    return gc


def shutdown_when_closing(state: Any, key: str, target: Any) -> None:
    """Call ``target.shutdown()`` once the broker starts closing (it wakes every waiter
    of its append notifier); the watching task is kept in ``state.extra[key.watch]``."""
    notifier = getattr(state, "notifier", None)
    if notifier is not None:
        ev = notifier.register([])
        loop = asyncio.get_running_loop()
        state.extra[key + ".watch"] = loop.create_task(_shutdown_on_close(state, target, ev))


async def _shutdown_on_close(state: Any, target: Any, ev: asyncio.Event) -> None:
    while True:
        await ev.wait()
        ev.clear()
        if state.closing:
            break
    state.notifier.unregister(ev, [])
    target.shutdown()


async def load_coordinator(state: Any) -> GroupCoordinator:
    """The broker's group coordinator, made if need be and loaded from
    ``__consumer_offsets`` on first use. The broker calls it at start-up when that topic
    exists (Kafka loads its coordinator partitions on election), so offsets expire after
    a restart even before any client asks."""
    gc = coordinator_if_started(state)
    if gc is None:
        gc = start_coordinator(state)
    await gc.ensure_loaded()
    return gc


async def coordinator(ctx: RequestContext) -> GroupCoordinator:
    return await load_coordinator(ctx.state)


def _host(ctx: RequestContext) -> str:
    peer = ctx.peer or ""
    return "/" + peer.rsplit(":", 1)[0] if peer else ""


# -- FindCoordinator ---------------------------------------------------------------------


async def find_group_coordinator(ctx: RequestContext, req: Any) -> dict[str, Any]:
    """FindCoordinator's answer for GROUP keys: this node, once ``__consumer_offsets``
    exists and is loaded. :mod:`kompakt.broker.handlers.find_coordinator` owns the API
    and sends GROUP keys here (Kafka's ``KafkaApis.getCoordinator``, GROUP case)."""
    try:
        await coordinator(ctx)  # creates __consumer_offsets, loads offsets
    except (KompaktError, OSError) as exc:  # e.g. a full disk creating the topic
        return coordinator_response(
            ctx,
            req,
            ErrorCode.coordinator_not_available,
            f"group coordinator not available: {exc}",
        )
    return coordinator_response(ctx, req, ErrorCode.none, None)


def coordinator_response(
    ctx: RequestContext, req: Any, error_code: ErrorCode, error_message: str | None
) -> dict[str, Any]:
    """FindCoordinator's answer for every key of ``req``: this node, or ``error_code``
    and no node (Kafka's ``Node.noNode``)."""
    ep = ctx.state.broker_endpoint(ctx.listener)
    ok = error_code == ErrorCode.none

    def one(key: str) -> dict[str, Any]:
        return {
            "key": key,
            "error_code": error_code,
            "error_message": error_message,
            "node_id": ep["node_id"] if ok else NO_NODE,
            "host": ep["host"] if ok else "",
            "port": ep["port"] if ok else NO_NODE,
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
    resp.setdefault("generation_id", UNKNOWN_GENERATION_ID)
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
    """LeaveGroup, answered once a group it emptied is stored (as Kafka's runtime
    answers after the operation's records are written)."""
    gc = await coordinator(ctx)
    if ctx.api_version < 3:
        code = gc.leave(req.group_id, req.member_id)
        await gc.flushed(req.group_id)
        return {"throttle_time": 0, "error_code": code}
    if gc.group(req.group_id) is None:
        return {"throttle_time": 0, "error_code": ErrorCode.unknown_member_id, "members": []}
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
    await gc.flushed(req.group_id)
    return {"throttle_time": 0, "error_code": ErrorCode.none, "members": members}


# -- OffsetCommit / OffsetFetch ----------------------------------------------------------


def offset_fetch_error_partition(index: int, code: ErrorCode) -> dict[str, Any]:
    """An OffsetFetch partition answered ``code``: no committed offset, no metadata."""
    return {
        "partition_index": index,
        "committed_offset": NO_OFFSET,
        "committed_leader_epoch": NO_LEADER_EPOCH,
        "metadata": "",
        "error_code": code,
    }


async def handle_offset_commit(ctx: RequestContext, req: Any) -> dict[str, Any]:
    gc = await coordinator(ctx)
    # Kafka takes an empty group id here "for backwards compatibility"
    # (GroupCoordinatorService.commitOffsets; only a null one is INVALID_GROUP_ID)
    group_error = (
        ErrorCode.invalid_group_id
        if req.group_id is None
        else gc.commit_check(
            req.group_id,
            req.generation_id_or_member_epoch,
            req.member_id,
            getattr(req, "group_instance_id", None),
            ctx.api_version,
        )
    )
    now = gc.now()
    # v2-v4 retention_time gives an explicit expire timestamp, as Kafka's OffsetCommit
    # handling does.
    retention = ms(getattr(req, "retention_time", DEFAULT_RETENTION_TIME))
    expire = now + retention if retention >= 0 else None
    check = check_commit(ctx, req.topics, group_error, now, expire)
    if check.to_commit:
        try:
            refused = await gc.offsets.commit(req.group_id, check.to_commit)
            check.refuse(refused, ErrorCode.unknown_topic_or_partition)
        except Exception as exc:  # the offsets topic cannot be written
            code, _msg = error_of(exc)
            if code in (ErrorCode.none, ErrorCode.unknown_server_error):
                code = ErrorCode.coordinator_not_available
            check.fail_rest(code)
    topics = [
        {
            "name": name or getattr(t, "name", ""),
            "topic_id": getattr(t, "topic_id", None),
            "partitions": parts,
        }
        for t, name, parts in check.topics
    ]
    return {"throttle_time": 0, "topics": topics}


def _fetch_group(
    ctx: RequestContext, gc: GroupCoordinator, group_id: str, topics: Any, stable: bool = False
) -> list[dict[str, Any]]:
    """OffsetFetch for one group; with ``require_stable`` (v7+) a partition whose
    transactional offset awaits its marker answers UNSTABLE_OFFSET_COMMIT and the client
    retries (Kafka's ``GroupMetadataManager.getOffsets``)."""
    unstable = gc.offsets.unstable(group_id) if stable else set()
    wanted = None
    ids: dict[str, Any] = {}
    if topics is not None:
        wanted = []
        for t in topics:
            name = topic_name(ctx, t) or getattr(t, "name", "") or ""
            ids[name] = getattr(t, "topic_id", None)
            wanted.append((name, list(t.partition_indexes)))
    out = []
    for name, parts in gc.offsets.fetch(group_id, wanted).items():
        tid = ids.get(name)
        if tid is None and ctx.logs.has_topic(name):
            tid = ctx.state.topic_id(name)
        out.append(
            {
                "name": name,
                "topic_id": tid or ZERO_UUID,
                "partitions": [
                    offset_fetch_error_partition(p, ErrorCode.unstable_offset_commit)
                    if (name, p) in unstable
                    else {
                        "partition_index": p,
                        "committed_offset": om.offset if om else NO_OFFSET,
                        "committed_leader_epoch": om.leader_epoch if om else NO_LEADER_EPOCH,
                        "metadata": om.metadata if om else "",
                        "error_code": ErrorCode.none,
                    }
                    for p, om in parts
                ],
            }
        )
    return out


async def handle_offset_fetch(ctx: RequestContext, req: Any) -> dict[str, Any]:
    gc = await coordinator(ctx)
    stable = bool(getattr(req, "require_stable", False))
    if ctx.api_version >= 8:
        groups = [
            {
                "group_id": g.group_id,
                "topics": _fetch_group(ctx, gc, g.group_id, g.topics, stable),
                "error_code": ErrorCode.none,
            }
            for g in req.groups
        ]
        return {"throttle_time": 0, "groups": groups}
    return {
        "throttle_time": 0,
        "topics": _fetch_group(ctx, gc, req.group_id, req.topics, stable),
        "error_code": ErrorCode.none,
    }


# -- ListGroups / DescribeGroups / DeleteGroups ------------------------------------------


async def handle_list_groups(ctx: RequestContext, req: Any) -> dict[str, Any]:
    gc = await coordinator(ctx)
    states = {s.lower() for s in getattr(req, "states_filter", ()) or ()}
    types = {s.lower() for s in getattr(req, "types_filter", ()) or ()}
    groups = []
    for g in list(gc.groups.values()):
        if g.state == GroupState.DEAD:
            continue
        if states and g.state.lower() not in states:
            continue
        if types and "classic" not in types:
            continue
        groups.append(
            {
                "group_id": g.group_id,
                "protocol_type": g.protocol_type or "",
                "group_state": g.state.value,
                "group_type": "classic",
            }
        )
    return {"throttle_time": 0, "error_code": ErrorCode.none, "groups": groups}


async def handle_describe_groups(ctx: RequestContext, req: Any) -> dict[str, Any]:
    gc = await coordinator(ctx)
    out = []
    for gid in req.groups:
        g = gc.group(gid)
        if g is None:
            out.append(
                {
                    "error_code": ErrorCode.group_id_not_found
                    if ctx.api_version >= 6
                    else ErrorCode.none,
                    "error_message": None,
                    "group_id": gid,
                    "group_state": GroupState.DEAD.value,
                    "protocol_type": "",
                    "protocol_data": "",
                    "members": [],
                    "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
                }
            )
            continue
        stable = g.state == GroupState.STABLE
        out.append(
            {
                "error_code": ErrorCode.none,
                "error_message": None,
                "group_id": gid,
                "group_state": g.state.value,
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
                "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
            }
        )
    return {"throttle_time": 0, "groups": out}


async def handle_delete_groups(ctx: RequestContext, req: Any) -> dict[str, Any]:
    gc = await coordinator(ctx)
    results = []
    for gid in req.groups_names:
        code = await gc.offsets.delete_group(gid)
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
                errors[(t.name, p.partition_index)] = ErrorCode.unknown_topic_or_partition
    if not req.group_id:
        group_error, found = ErrorCode.invalid_group_id, {}
    else:
        group_error, found = await gc.offsets.delete_offsets(req.group_id, wanted)
    if group_error != ErrorCode.none:
        return {"throttle_time": 0, "error_code": group_error, "topics": []}
    errors.update(found)
    topics: dict[str, list[dict[str, int]]] = {}
    for t in req.topics:
        parts = topics.setdefault(t.name, [])
        for p in t.partitions:
            code = errors.get((t.name, p.partition_index), ErrorCode.none)
            parts.append({"partition_index": p.partition_index, "error_code": code})
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "topics": [{"name": n, "partitions": ps} for n, ps in topics.items()],
    }


async def topics_deleted(state: Any, topics: set[str]) -> None:
    """Called by DeleteTopics once ``topics`` are gone: their committed offsets leave
    every group (Kafka's ``GroupCoordinator.onPartitionsDeleted``). Loads the coordinator
    first if ``__consumer_offsets`` exists, so no committed offset is missed."""
    topics = {t for t in topics if t != OFFSETS_TOPIC}
    if not topics:
        return
    started = coordinator_if_started(state)
    if (started is None or not started.loaded) and not state.logs.has_topic(OFFSETS_TOPIC):
        return  # no group ever committed anything
    gc = await load_coordinator(state)
    await gc.offsets.on_topics_deleted(topics)


def register(registry: ApiRegistry) -> None:
    registry.register(JoinGroupRequest.__api_key__, 0, 9, handle_join_group)
    registry.register(SyncGroupRequest.__api_key__, 0, 5, handle_sync_group)
    registry.register(HeartbeatRequest.__api_key__, 0, 4, handle_heartbeat)
    registry.register(LeaveGroupRequest.__api_key__, 0, 5, handle_leave_group)
    registry.register(OffsetCommitRequest.__api_key__, 2, 10, handle_offset_commit)
    registry.register(OffsetFetchRequest.__api_key__, 1, 10, handle_offset_fetch)
    registry.register(ListGroupsRequest.__api_key__, 0, 5, handle_list_groups)
    registry.register(DescribeGroupsRequest.__api_key__, 0, 6, handle_describe_groups)
    registry.register(DeleteGroupsRequest.__api_key__, 0, 2, handle_delete_groups)
    registry.register(OffsetDeleteRequest.__api_key__, 0, 0, handle_offset_delete)
