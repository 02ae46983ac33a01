"""Policies of the admin APIs: topics and partitions, configs, ACLs, SCRAM users, log
dirs, DescribeCluster (Kafka's ``KafkaApis`` rules, 4.x)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from kompakt.broker.acls import CLUSTER_NAME, Op
from kompakt.broker.authz.check import (
    CLUSTER,
    CLUSTER_DENIED,
    DENIED_MESSAGE,
    GROUP,
    GROUP_DENIED,
    TOPIC,
    TOPIC_DENIED,
    Check,
    Decision,
    Policy,
    append,
    split,
)
from kompakt.broker.handlers.configs import ResourceType as ConfigResource
from kompakt.broker.handlers.configs import alter_result, describe_result
from kompakt.broker.handlers.topics import (
    create_topics_errors,
    delete_topics_result,
    topic_errors,
)


def create_topics(c: Check, req: Any) -> Decision:
    """CREATE cluster or topic; a topic made for whom may not DESCRIBE_CONFIGS it comes
    back without its configs."""
    may_create_any = c.cluster(Op.CREATE, log_denied=False)
    kept, refused = split(req, "topics", lambda t: may_create_any or c.ok(Op.CREATE, TOPIC, t.name))
    extra = create_topics_errors([t.name for t in refused], TOPIC_DENIED, DENIED_MESSAGE)

    def configs(resp: Any) -> Any:
        """ReplicationControlManager.createTopic: a topic made for whom may not
        DESCRIBE_CONFIGS it comes back without its configs (TOPIC_AUTHORIZATION_FAILED)."""
        out = dict(resp)
        out["topics"] = [
            {**t, "topic_config_error_code": TOPIC_DENIED, "configs": None}
            if t.get("error_code") == ErrorCode.none
            and not c.ok(Op.DESCRIBE_CONFIGS, TOPIC, t["name"])
            else t
            for t in (dict(x) for x in out.get("topics") or ())
        ]
        return out

    return kept, append("topics", extra, configs)


def delete_topics(c: Check, req: Any) -> Decision:
    """DELETE topic."""
    if hasattr(req, "topic_names"):  # v0-v5
        kept, refused = split(req, "topic_names", lambda n: c.ok(Op.DELETE, TOPIC, n))
        extra = [delete_topics_result(n, None, TOPIC_DENIED) for n in refused]
        return kept, append("responses", extra)

    def allowed(t: Any) -> bool:
        name = c.topic_name(t)
        return name is None or c.ok(Op.DELETE, TOPIC, name)

    kept, refused = split(req, "topics", allowed)
    extra = [delete_topics_result(t.name, t.topic_id, TOPIC_DENIED) for t in refused]
    return kept, append("responses", extra)


def create_partitions(c: Check, req: Any) -> Decision:
    """ALTER topic."""
    kept, refused = split(req, "topics", lambda t: c.ok(Op.ALTER, TOPIC, t.name))
    extra = topic_errors([t.name for t in refused], TOPIC_DENIED, DENIED_MESSAGE)
    return kept, append("results", extra)


def configs(op: Op, resp_field: str) -> Policy:
    """DESCRIBE_CONFIGS / ALTER_CONFIGS on the topic, the group (its own ACLs, as
    KafkaApis), else the cluster (BROKER, BROKER_LOGGER, unknown types)."""
    result = describe_result if op == Op.DESCRIBE_CONFIGS else alter_result

    def policy(c: Check, req: Any) -> Decision:
        def allowed(r: Any) -> bool:
            if int(r.resource_type) == ConfigResource.TOPIC:
                return c.ok(op, TOPIC, r.resource_name)
            if int(r.resource_type) == ConfigResource.GROUP:
                return c.ok(op, GROUP, r.resource_name)
            return c.cluster(op)

        def denied(r: Any) -> ErrorCode:
            kind = int(r.resource_type)
            if kind == ConfigResource.TOPIC:
                return TOPIC_DENIED
            return GROUP_DENIED if kind == ConfigResource.GROUP else CLUSTER_DENIED

        kept, refused = split(req, "resources", allowed)
        extra = [result(r, denied(r), DENIED_MESSAGE) for r in refused]
        return kept, append(resp_field, extra)

    return policy


def describe_cluster(c: Check, req: Any) -> Decision:
    """None; its authorized operations need DESCRIBE cluster."""

    def ops(resp: Any) -> Any:
        out = dict(resp)
        if getattr(req, "include_cluster_authorized_operations", False):
            out["cluster_authorized_operations"] = (
                c.ops(CLUSTER, CLUSTER_NAME) if c.cluster(Op.DESCRIBE) else 0
            )
        return out

    return req, ops


def each_result(field: str, source: str) -> Callable[[Any], dict[str, Any]]:
    """A refusal answering each entry of ``source`` with CLUSTER_AUTHORIZATION_FAILED."""

    def refusal(req: Any) -> dict[str, Any]:
        return {
            field: [
                {"error_code": CLUSTER_DENIED, "error_message": DENIED_MESSAGE}
                for _ in getattr(req, source) or ()
            ]
        }

    return refusal


def scram_describe_refusal(req: Any) -> dict[str, Any]:
    """Kafka's ``DescribeUserScramCredentialsRequest.getErrorResponse``: the code at the
    top and in one unnamed result per user asked for, no message (``ApiError`` drops
    the code's generic one). librdkafka keeps a top-level message in a buffer that dies
    with its parser: a message here crashed every confluent-kafka client (exit 139)."""
    each = {"user": "", "error_code": CLUSTER_DENIED, "error_message": None}
    return {
        "error_code": CLUSTER_DENIED,
        "error_message": None,
        "results": [{**each, "credential_infos": []} for _ in req.users or ()],
    }


def scram_alter_refusal(req: Any) -> dict[str, Any]:
    users = [d.name for d in req.deletions or ()] + [u.name for u in req.upsertions or ()]
    return {"results": [{"user": u, "error_code": CLUSTER_DENIED} for u in users]}
