"""CreateTopics (19), DeleteTopics (20), CreatePartitions (37), DeleteRecords (21)."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from kio.schema.create_partitions.v0.request import CreatePartitionsRequest
from kio.schema.create_topics.v2.request import CreateTopicsRequest
from kio.schema.delete_records.v0.request import DeleteRecordsRequest
from kio.schema.delete_topics.v1.request import DeleteTopicsRequest
from kio.schema.errors import ErrorCode

from kompakt.broker.handlers.common import (
    UNKNOWN_OFFSET,
    error_of,
    resolve_topic,
    unknown_topic_code,
)
from kompakt.broker.handlers.configs import SOURCE_CODES
from kompakt.broker.protocol import ZERO_UUID, topic_uuid
from kompakt.broker.registry import ApiRegistry
from kompakt.broker.state import RequestContext
from kompakt.broker.tiering import check_topic_config, tiering_of
from kompakt.errors import KompaktError
from kompakt.log.config import TopicConfig
from kompakt.log.manager import MAX_PARTITIONS_PER_OP, check_batch_size
from kompakt.log.names import is_internal

# CreateTopicsRequest.NO_NUM_PARTITIONS / NO_REPLICATION_FACTOR: the broker's default
# (in a response: not known, e.g. the create failed)
USE_DEFAULT = -1
# DeleteRecordsRequest.HIGH_WATERMARK: delete everything below the high watermark
HIGH_WATERMARK = -1


# Kafka's ReplicationControlManager.validateTotalNumberOfPartitions: a CreateTopics
# request naming more than MAX_PARTITIONS_PER_BATCH partitions in all is refused whole
CREATE_TOO_LARGE = "Excessively large number of partitions per request."


def _requested_partitions(ctx: RequestContext, topics: Any) -> int:
    """The partitions a CreateTopics asks for, counted as Kafka counts them: the
    assignments when given, else num_partitions, the broker default for -1, and 0 for
    an invalid count (that topic fails on its own)."""
    default = int(ctx.config.get("num.partitions"))
    total = 0
    for t in topics:
        if t.assignments:
            total += len(t.assignments)
        elif t.num_partitions == USE_DEFAULT:
            total += default
        elif t.num_partitions > 0:
            total += t.num_partitions
    return total


def topic_errors(names: list[str], code: int, message: str, **extra: Any) -> list[dict]:
    """Kafka's getErrorResponse: every topic named gets the one error."""
    return [{"name": n, "error_code": code, "error_message": message, **extra} for n in names]


def create_topics_errors(names: list[str], code: int, message: str) -> list[dict]:
    """CreateTopics results of topics not created: no id, partitions or configs."""
    return topic_errors(
        names,
        code,
        message,
        topic_id=ZERO_UUID,
        num_partitions=USE_DEFAULT,
        replication_factor=USE_DEFAULT,
        configs=[],
    )


def _create_one(
    ctx: RequestContext, t: Any, validate_only: bool, dup: bool, described: dict
) -> dict[str, Any]:
    res: dict[str, Any] = {
        "name": t.name,
        "topic_id": ZERO_UUID,
        "error_code": ErrorCode.none,
        "error_message": None,
        "num_partitions": USE_DEFAULT,
        "replication_factor": USE_DEFAULT,
        "configs": [],
    }
    if dup:
        res["error_code"] = ErrorCode.invalid_request
        res["error_message"] = (
            f"Create topics request from client contains {t.name} more than once."
        )
        return res
    n = t.num_partitions
    rf = t.replication_factor
    if t.assignments:
        if n != USE_DEFAULT or rf != USE_DEFAULT:
            res["error_code"] = ErrorCode.invalid_request
            res["error_message"] = (
                "Both numPartitions or replicationFactor and replicasAssignments were set."
            )
            return res
        n = len(t.assignments)
        for a in t.assignments:
            if list(a.broker_ids) != [ctx.state.node_id]:
                res["error_code"] = ErrorCode.invalid_replication_factor
                res["error_message"] = (
                    f"replica assignment {list(a.broker_ids)} names brokers other than the "
                    f"single node {ctx.state.node_id}"
                )
                return res
        rf = 1
    if n == USE_DEFAULT:
        n = int(ctx.config.get("num.partitions"))
    if rf == USE_DEFAULT:
        rf = int(ctx.config.get("default.replication.factor"))
    if n < 1:
        res["error_code"] = ErrorCode.invalid_partitions
        res["error_message"] = "Number of partitions was set to an invalid non-positive value."
        return res
    if rf < 1:
        res["error_code"] = ErrorCode.invalid_replication_factor
        res["error_message"] = (
            "Replication factor must be larger than 0, or -1 to use the default value."
        )
        return res
    if rf > 1:
        res["error_code"] = ErrorCode.invalid_replication_factor
        res["error_message"] = (
            f"Unable to replicate the partition {rf} time(s): The target replication factor "
            f"of {rf} cannot be reached because only 1 broker(s) are registered."
        )
        return res
    configs = {c.name: c.value for c in t.configs}
    try:
        check_topic_config(ctx.config, TopicConfig(configs, ctx.logs.broker_config))
        meta = ctx.logs.create_topic(t.name, n, configs, validate_only=validate_only)
    except Exception as exc:
        res["error_code"], res["error_message"] = error_of(exc)
        return res
    res["topic_id"] = topic_uuid(meta.topic_id) if not validate_only else ZERO_UUID
    res["num_partitions"] = n
    res["replication_factor"] = rf
    key = tuple(sorted(meta.overrides.items()))
    if key not in described:  # topics of one request mostly share their overrides
        cfg = TopicConfig(meta.overrides, ctx.logs.broker_config)
        described[key] = [
            {
                "name": e.name,
                "value": e.value,
                "read_only": False,
                "config_source": SOURCE_CODES[e.source],
                "is_sensitive": False,
            }
            for e in cfg.describe()
        ]
    res["configs"] = described[key]
    return res


def _create_topics(ctx: RequestContext, req: Any) -> list:
    names = [t.name for t in req.topics]
    if _requested_partitions(ctx, req.topics) > MAX_PARTITIONS_PER_OP:
        return create_topics_errors(names, ErrorCode.policy_violation, CREATE_TOO_LARGE)
    counts = Counter(names)
    validate_only = bool(getattr(req, "validate_only", False))
    described: dict = {}
    return [_create_one(ctx, t, validate_only, counts[t.name] > 1, described) for t in req.topics]


def handle_create_topics(ctx: RequestContext, req: Any) -> dict[str, Any]:
    return {"throttle_time": 0, "topics": _create_topics(ctx, req)}


def delete_topics_result(
    name: str | None, topic_id: Any, code: int, message: str | None = None
) -> dict[str, Any]:
    """One topic's DeleteTopics result (by name, or by id with the name not told)."""
    return {"name": name, "topic_id": topic_id, "error_code": code, "error_message": message}


def _delete_topics(ctx: RequestContext, req: Any) -> list:
    if hasattr(req, "topic_names"):
        items = [(n, None) for n in req.topic_names]
    else:
        items = [(t.name, t.topic_id) for t in req.topics]
    out = []
    for name, tid in items:
        found, real_id = resolve_topic(ctx, name, tid)
        res = delete_topics_result(found or name, real_id, ErrorCode.none)
        if found is None:
            by_id = not name and tid is not None and tid != ZERO_UUID
            res["error_code"] = unknown_topic_code(by_id)
        else:
            try:
                topic_id = ctx.logs.topic_meta(found).topic_id
                ctx.logs.delete_topic(found)
                tier = tiering_of(ctx.state)
                if tier is not None:  # Kafka deletes the remote data too
                    tier.topic_deleted(found, topic_id)
                res["error_code"] = ErrorCode.none
            except Exception as exc:
                res["error_code"], res["error_message"] = error_of(exc)
        out.append(res)
    return out


async def handle_delete_topics(ctx: RequestContext, req: Any) -> dict[str, Any]:
    """A coroutine, unlike the other topic handlers: once the logs are gone (on a worker
    thread) the group coordinator, whose state the event loop owns, drops their offsets."""
    responses = await asyncio.to_thread(_delete_topics, ctx, req)
    deleted = {r["name"] for r in responses if r["error_code"] == ErrorCode.none}
    if deleted:  # Kafka's GroupCoordinator.onPartitionsDeleted: the offsets go too
        # imported here: the coordinator's handlers import this package (a cycle)
        from kompakt.broker.coordinator.handlers import topics_deleted

        await topics_deleted(ctx.state, deleted)
    return {"throttle_time": 0, "responses": responses}


def _new_partitions(ctx: RequestContext, topics: Any) -> int:
    """The partitions a CreatePartitions would add to the topics that exist."""
    total = 0
    for t in topics:
        if ctx.logs.has_topic(t.name):
            total += max(0, t.count - ctx.logs.partition_count(t.name))
    return total


def _create_partitions(ctx: RequestContext, req: Any) -> list:
    try:  # Kafka bounds the whole request: a result per topic, a record per new partition
        check_batch_size(max(len(req.topics), _new_partitions(ctx, req.topics)))
    except KompaktError as exc:
        return topic_errors([t.name for t in req.topics], *error_of(exc))
    out = []
    for t in req.topics:
        res: dict[str, Any] = {"name": t.name, "error_code": ErrorCode.none, "error_message": None}
        try:
            if t.assignments:
                for a in t.assignments:
                    if list(a.broker_ids) != [ctx.state.node_id]:
                        raise _InvalidAssignment(
                            f"replica assignment {list(a.broker_ids)} names brokers other than "
                            f"the single node {ctx.state.node_id}"
                        )
            ctx.logs.create_partitions(t.name, t.count, validate_only=bool(req.validate_only))
        except Exception as exc:
            res["error_code"], res["error_message"] = error_of(exc)
        out.append(res)
    return out


class _InvalidAssignment(KompaktError, code="invalid_replica_assignment"):
    """A replica assignment naming brokers other than this node."""


def handle_create_partitions(ctx: RequestContext, req: Any) -> dict[str, Any]:
    return {"throttle_time": 0, "results": _create_partitions(ctx, req)}


def delete_records_error_partition(index: int, code: ErrorCode) -> dict[str, Any]:
    """A DeleteRecords partition answered with ``code``: low watermark unknown."""
    return {"partition_index": index, "error_code": code, "low_watermark": UNKNOWN_OFFSET}


def _delete_records(ctx: RequestContext, req: Any) -> list:
    out = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            res = delete_records_error_partition(p.partition_index, ErrorCode.none)
            if is_internal(t.name):  # Kafka's ReplicaManager.deleteRecordsOnLocalLog
                res["error_code"] = ErrorCode.invalid_topic_exception
                parts.append(res)
                continue
            try:
                plog = ctx.logs.get_log(t.name, p.partition_index)
                if not plog.config.delete:
                    # Kafka's Partition.deleteRecordsOnLeader: only a policy with "delete"
                    # lets records go by request; on compact alone it would cut the
                    # latest value of keys off the front of the log.
                    res["error_code"] = ErrorCode.policy_violation
                    parts.append(res)
                    continue
                offset = plog.high_watermark if p.offset == HIGH_WATERMARK else p.offset
                tier = tiering_of(ctx.state)  # a tiered log starts in the remote tier
                res["low_watermark"] = (
                    tier.delete_records_before(plog, offset)
                    if tier
                    else plog.delete_records_before(offset)
                )
                res["error_code"] = ErrorCode.none
            except Exception as exc:
                res["error_code"], _msg = error_of(exc)
            parts.append(res)
        out.append({"name": t.name, "partitions": parts})
    return out


def handle_delete_records(ctx: RequestContext, req: Any) -> dict[str, Any]:
    topics = _delete_records(ctx, req)
    if ctx.state.logs is not None:
        ctx.logs.checkpoint()
    return {"throttle_time": 0, "topics": topics}


def register(registry: ApiRegistry) -> None:
    registry.register(CreateTopicsRequest.__api_key__, 2, 7, handle_create_topics)
    registry.register(DeleteTopicsRequest.__api_key__, 1, 6, handle_delete_topics)
    registry.register(DeleteRecordsRequest.__api_key__, 0, 2, handle_delete_records)
    registry.register(CreatePartitionsRequest.__api_key__, 0, 3, handle_create_partitions)
