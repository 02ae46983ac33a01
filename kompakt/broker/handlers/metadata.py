"""ApiVersions (18), Metadata (3) and DescribeCluster (60).

This node is every partition's leader and the controller (ControllerId = node.id), so
admin clients send CreateTopics & co. here. Metadata auto-creates unknown topics with
``num.partitions`` when ``auto.create.topics.enable`` and the request allow it; the
topic is created synchronously, so the answer already lists it (Kafka answers
LEADER_NOT_AVAILABLE first and lets the client retry).
"""

from __future__ import annotations

import importlib
import threading
from typing import Any

from kio.schema.api_versions.v0.request import ApiVersionsRequest
from kio.schema.describe_cluster.v0.request import DescribeClusterRequest
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v0.request import MetadataRequest

from kompakt.broker.coordinator.storage import ensure_internal_topic
from kompakt.broker.handlers.common import (
    CLUSTER_OPERATIONS,
    LEADER_EPOCH,
    TOPIC_OPERATIONS,
    authorized_operations,
    error_of,
    log,
)
from kompakt.broker.protocol import ZERO_UUID, build
from kompakt.broker.registry import ApiRegistry
from kompakt.broker.state import RequestContext
from kompakt.errors import TopicExistsError, UnknownTopicError
from kompakt.log.names import is_internal, is_valid_topic_name

# DescribeClusterRequest.endpointType (KIP-919): brokers (1) or controllers (2); before
# v1 there is no field and the answer lists brokers.
ENDPOINT_TYPE_BROKERS = 1


def make_api_versions_handler(registry: ApiRegistry):
    def handle_api_versions(ctx: RequestContext, req: Any) -> dict[str, Any]:
        return {
            "error_code": ErrorCode.none,
            "api_keys": registry.advertised(),
            "throttle_time": 0,
        }

    return handle_api_versions


def _partitions(ctx: RequestContext, name: str) -> tuple[Any, ...] | list[dict[str, Any]]:
    """The partitions of ``name``. With every log dir online, ready-made kio entities of
    the request's version: every partition of a topic on one node says the same but its
    index, so they are built once per (version, node) and sliced (a Metadata of 10,000
    partitions otherwise spends most of its time turning dicts into entities). A
    partition in an offline log dir answers KAFKA_STORAGE_ERROR and lists this node in
    ``offline_replicas`` (as Kafka's metadata names a replica on a failed dir)."""
    node = ctx.state.node_id
    count = ctx.logs.partition_count(name)
    if not ctx.logs.offline_dirs():
        return _partition_entities(ctx.api_version, node, count)
    out = []
    for i in range(count):
        offline = ctx.logs.is_offline(name, i)
        out.append(
            {
                "error_code": ErrorCode.kafka_storage_error if offline else ErrorCode.none,
                "partition_index": i,
                "leader_id": node,
                "leader_epoch": LEADER_EPOCH,
                "replica_nodes": [node],
                "isr_nodes": [] if offline else [node],
                "offline_replicas": [node] if offline else [],
            }
        )
    return out


_PARTITIONS: dict[tuple[int, int], list[Any]] = {}
_PARTITIONS_LOCK = threading.Lock()


def _partition_entities(version: int, node: int, count: int) -> tuple[Any, ...]:
    with _PARTITIONS_LOCK:
        built = _PARTITIONS.setdefault((version, node), [])
        if len(built) < count:
            cls = importlib.import_module(
                f"kio.schema.metadata.v{version}.response"
            ).MetadataResponsePartition
            built.extend(
                build(
                    cls,
                    {
                        "error_code": ErrorCode.none,
                        "partition_index": i,
                        "leader_id": node,
                        "leader_epoch": LEADER_EPOCH,
                        "replica_nodes": [node],
                        "isr_nodes": [node],
                        "offline_replicas": [],
                    },
                )
                for i in range(len(built), count)
            )
        return tuple(built[:count])


def unknown_topic_error(name: str) -> ErrorCode:
    """Kafka's ``KafkaApis.getTopicMetadata``: ``Topic.validate`` decides whether a topic
    that is not there is unknown or an invalid name."""
    if is_valid_topic_name(name):
        return ErrorCode.unknown_topic_or_partition
    return ErrorCode.invalid_topic_exception


def _topic(ctx: RequestContext, name: str, include_ops: bool) -> dict[str, Any]:
    return {
        "error_code": ErrorCode.none,
        "name": name,
        "topic_id": ctx.state.topic_id(name),
        "is_internal": is_internal(name),
        "partitions": _partitions(ctx, name),
        "topic_authorized_operations": authorized_operations(TOPIC_OPERATIONS, include_ops),
    }


def topic_error(code: int, name: str | None, topic_id: Any = ZERO_UUID) -> dict[str, Any]:
    """A Metadata topic answered ``code``: no partitions (``name`` None: not told,
    which the wire carries as "" before v12)."""
    return {"error_code": code, "name": name, "topic_id": topic_id, "partitions": []}


def handle_metadata(ctx: RequestContext, req: Any) -> dict[str, Any]:
    include_ops = bool(getattr(req, "include_topic_authorized_operations", False))
    allow_auto = bool(getattr(req, "allow_auto_topic_creation", True)) and bool(
        ctx.config.get("auto.create.topics.enable")
    )
    topics_req = req.topics
    if ctx.api_version == 0 and not topics_req:
        topics_req = None
    topics = []
    if topics_req is None:
        for name in ctx.logs.topics():
            try:
                topics.append(_topic(ctx, name, include_ops))
            except UnknownTopicError:  # deleted meanwhile: not listed, as in Kafka's cache
                continue
    else:
        for t in topics_req:
            name = getattr(t, "name", None)
            tid = getattr(t, "topic_id", None)
            if not name and tid is not None and tid != ZERO_UUID:
                found = ctx.state.topic_by_id(tid)
                if found is None:
                    # nullable only from v12: before it, "" on the wire
                    unnamed = None if ctx.api_version >= 12 else ""
                    topics.append(topic_error(ErrorCode.unknown_topic_id, unnamed, tid))
                    continue
                name = found
            if name is None:  # neither a name nor an id (Kafka: InvalidRequestException)
                topics.append(topic_error(ErrorCode.invalid_request, ""))
                continue
            if not ctx.logs.has_topic(name):
                if not allow_auto:
                    topics.append(topic_error(unknown_topic_error(name), name))
                    continue
                try:
                    _auto_create(ctx, name)
                    log.info("auto-created topic %s for %s", name, ctx.client_id)
                except TopicExistsError:
                    pass
                except Exception as exc:
                    code, _msg = error_of(exc)
                    topics.append(topic_error(code, name))
                    continue
            try:
                topics.append(_topic(ctx, name, include_ops))
            except UnknownTopicError:  # deleted meanwhile
                topics.append(topic_error(ErrorCode.unknown_topic_or_partition, name))
    include_cluster_ops = bool(getattr(req, "include_cluster_authorized_operations", False))
    return {
        "throttle_time": 0,
        "brokers": [ctx.state.broker_endpoint(ctx.listener)],
        "cluster_id": ctx.state.cluster_id,
        "controller_id": ctx.state.node_id,
        "topics": topics,
        "cluster_authorized_operations": authorized_operations(
            CLUSTER_OPERATIONS, include_cluster_ops
        ),
        "error_code": ErrorCode.none,
    }


def handle_describe_cluster(ctx: RequestContext, req: Any) -> dict[str, Any]:
    ops = bool(getattr(req, "include_cluster_authorized_operations", False))
    ep = ctx.state.broker_endpoint(ctx.listener)
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "endpoint_type": getattr(req, "endpoint_type", ENDPOINT_TYPE_BROKERS),
        "cluster_id": ctx.state.cluster_id,
        "controller_id": ctx.state.node_id,
        "brokers": [
            {
                "broker_id": ep["node_id"],
                "host": ep["host"],
                "port": ep["port"],
                "rack": None,
                "is_fenced": False,
            }
        ],
        "cluster_authorized_operations": authorized_operations(CLUSTER_OPERATIONS, ops),
    }


# Kafka's AutoTopicCreationManager.creatableTopic: a coordinator's internal topic is made
# with the coordinator's own partition count and configs, never num.partitions
_INTERNAL_TOPIC_KEYS = {
    "__consumer_offsets": ("offsets.topic.num.partitions", "offsets.topic.segment.bytes"),
    "__transaction_state": (
        "transaction.state.log.num.partitions",
        "transaction.state.log.segment.bytes",
    ),
}


def _auto_create(ctx: RequestContext, name: str) -> None:
    keys = _INTERNAL_TOPIC_KEYS.get(name)
    if keys is None:
        ctx.logs.create_topic(name, int(ctx.config.get("num.partitions")))
        return

    partitions, segment_bytes = (int(ctx.config.get(k)) for k in keys)
    ensure_internal_topic(ctx.logs, name, partitions, segment_bytes)


def register(registry: ApiRegistry) -> None:
    registry.register(ApiVersionsRequest.__api_key__, 0, 4, make_api_versions_handler(registry))
    registry.register(MetadataRequest.__api_key__, 0, 13, handle_metadata)
    registry.register(DescribeClusterRequest.__api_key__, 0, 2, handle_describe_cluster)
