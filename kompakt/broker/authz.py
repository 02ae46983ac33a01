"""Which ACL each Kafka API needs: one policy per API key, applied around the handler.

With an authorizer configured, :func:`install` puts :func:`guard` around every handler of
the registry (DESIGN: "the authorizer is one check called by the dispatch table for every
API, never inside handlers one by one"). A policy reads the request, asks the authorizer
what ``KafkaApis`` asks for that API, and returns ``(request, finish)``: the request with
the refused parts removed (None: do not call the handler at all) and a function that adds
the refused parts, with Kafka's error code, to the handler's answer. So a refused topic is
never seen by the handler, and nothing is written for it.

The rules, after Kafka's ``KafkaApis`` (4.x):

=========================  ==========================================================
Produce                    WRITE topic; transactional batches WRITE transactional id
                           (idempotence is checked once, at InitProducerId: KIP-679)
Fetch                      READ topic
ListOffsets                DESCRIBE topic
Metadata                   DESCRIBE topic (unlisted when all topics are asked for);
                           auto-creation CREATE on cluster or topic
OffsetCommit               READ group, READ topic
OffsetFetch                DESCRIBE group, DESCRIBE topic (all topics: filtered)
OffsetDelete               DELETE group, READ topic
FindCoordinator            DESCRIBE group / transactional id
Join/Sync/Heartbeat/Leave  READ group
DescribeGroups             DESCRIBE group
ListGroups                 DESCRIBE cluster, else the groups one may DESCRIBE
DeleteGroups               DELETE group
CreateTopics               CREATE cluster or topic
DeleteTopics/DeleteRecords DELETE topic
CreatePartitions           ALTER topic
DescribeConfigs            DESCRIBE_CONFIGS topic / group / cluster (broker, broker logger)
(Incremental)AlterConfigs  ALTER_CONFIGS topic / group / cluster
InitProducerId             WRITE transactional id; without one IDEMPOTENT_WRITE cluster
                           or WRITE on some topic
AddPartitionsToTxn         WRITE transactional id, WRITE topic
AddOffsetsToTxn            WRITE transactional id, READ group
EndTxn                     WRITE transactional id
TxnOffsetCommit            WRITE transactional id, READ group, READ topic
DescribeAcls               DESCRIBE cluster;  CreateAcls/DeleteAcls ALTER cluster
DescribeLogDirs            DESCRIBE cluster
ApiVersions, SASL          none (before authentication)
DescribeCluster            none; its authorized operations need DESCRIBE cluster
=========================  ==========================================================

An API with no policy here is refused to everyone but super users and closes the
connection: a new API must say what it needs (the ACL matrix test iterates the registry).
The admin HTTP listener is not a Kafka API, but its requests have a principal as a Kafka
connection's and each route asks :func:`authorize` for the operation it amounts to (its
table is :data:`kompakt.broker.http_gate.RULES`).
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
from collections.abc import Callable, Iterable
from typing import Any

from kio.schema.errors import ErrorCode

from kompakt.broker.acls import (
    CLUSTER_NAME,
    Authorizer,
    Op,
    ResourceType,
    authorize,
    client_host,
)
from kompakt.broker.handlers.acls import AUTHORIZER_KEY
from kompakt.broker.handlers.common import AUTHORIZED_OPERATIONS_OMITTED
from kompakt.broker.protocol import ZERO_UUID
from kompakt.broker.registry import ApiRegistry, DelayedResponse, Handler, api_name
from kompakt.broker.state import BrokerState, RequestContext
from kompakt.errors import KompaktError
from kompakt.log.names import is_valid_topic_name
from kompakt.record.header import ATTRIBUTES_POS, LOG_OVERHEAD, TRANSACTIONAL_BIT, batch_size

log = logging.getLogger(__name__)

TOPIC = ResourceType.TOPIC
GROUP = ResourceType.GROUP
CLUSTER = ResourceType.CLUSTER
TXN = ResourceType.TRANSACTIONAL_ID
TOPIC_DENIED = ErrorCode.topic_authorization_failed
GROUP_DENIED = ErrorCode.group_authorization_failed
CLUSTER_DENIED = ErrorCode.cluster_authorization_failed
TXN_DENIED = ErrorCode.transactional_id_authorization_failed

Finish = Callable[[Any], Any]
Decision = tuple[Any, Finish]
Policy = Callable[["Check", Any], Decision]


def _same(resp: Any) -> Any:
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
        """The topic an entry names, by name or (KIP-516) by id; None if unknown."""
        name = getattr(entry, attr, None)
        if name:
            return name
        tid = getattr(entry, "topic_id", None)
        if tid is not None and tid != ZERO_UUID:
            return self.ctx.state.topic_by_id(tid)
        return None


# -- building blocks ---------------------------------------------------------------------


def _ident(entry: Any, *attrs: str) -> dict[str, Any]:
    """The identifying fields of a request entry, as the response entry repeats them."""
    return {a: getattr(entry, a) for a in attrs if hasattr(entry, a)}


def _append(field: str, extra: list[dict[str, Any]], then: Finish = _same) -> Finish:
    """A finish that adds ``extra`` entries to the response list ``field``."""

    def finish(resp: Any) -> Any:
        out = dict(resp or {})
        out[field] = list(out.get(field) or ()) + extra
        return then(out)

    return finish


def _split(req: Any, field: str, allowed: Callable[[Any], bool]) -> tuple[Any | None, list[Any]]:
    """(``req`` with only the allowed entries of ``field``, or None if it had some and
    none is allowed; the refused entries)."""
    entries = tuple(getattr(req, field) or ())
    verdicts = [(e, allowed(e)) for e in entries]
    keep = tuple(e for e, ok in verdicts if ok)
    refused = [e for e, ok in verdicts if not ok]
    if entries and not keep:
        return None, refused
    return dataclasses.replace(req, **{field: keep}), refused


def _refuse(body: dict[str, Any]) -> Decision:
    return None, lambda _resp: body


def _by_topic(
    field: str,
    resp_field: str,
    op: Op,
    parts: str,
    resp_parts: str,
    part_entry: Callable[[Any, ErrorCode], dict[str, Any]],
    name_attr: str = "name",
) -> Policy:
    """Per-topic APIs: topics without ``op`` are answered with TOPIC_AUTHORIZATION_FAILED
    on each of their partitions, the others go to the handler."""

    def policy(c: Check, req: Any) -> Decision:
        def allowed(e: Any) -> bool:
            name = c.topic_name(e, name_attr)
            return name is None or c.ok(op, TOPIC, name)  # unknown: the handler answers

        kept, refused = _split(req, field, allowed)
        extra = [_topic_error(e, parts, resp_parts, part_entry, TOPIC_DENIED) for e in refused]
        return kept, _append(resp_field, extra)

    return policy


def _topic_error(
    e: Any,
    parts: str,
    resp_parts: str,
    part_entry: Callable[[Any, ErrorCode], dict[str, Any]],
    code: ErrorCode,
    name_attr: str = "name",
) -> dict[str, Any]:
    out = _ident(e, name_attr, "topic_id")
    if name_attr != "name" and name_attr in out:
        out["name"] = out[name_attr]
    out[resp_parts] = [part_entry(p, code) for p in (getattr(e, parts) or ())]
    return out


def _all_topics_error(
    req: Any,
    field: str,
    resp_field: str,
    parts: str,
    resp_parts: str,
    part_entry: Callable[[Any, ErrorCode], dict[str, Any]],
    code: ErrorCode,
    **top: Any,
) -> Decision:
    body = dict(top)
    body[resp_field] = [
        _topic_error(e, parts, resp_parts, part_entry, code) for e in getattr(req, field) or ()
    ]
    return _refuse(body)


def _cluster(op: Op, refusal: Callable[[Any], dict[str, Any]]) -> Policy:
    def policy(c: Check, req: Any) -> Decision:
        if c.cluster(op):
            return req, _same
        return _refuse(refusal(req))

    return policy


def _group(op: Op, refusal: Callable[[Any], dict[str, Any]], attr: str = "group_id") -> Policy:
    def policy(c: Check, req: Any) -> Decision:
        if c.ok(op, GROUP, getattr(req, attr)):
            return req, _same
        return _refuse(refusal(req))

    return policy


def _public(c: Check, req: Any) -> Decision:
    return req, _same


# -- partition entries of the per-topic responses ----------------------------------------


def _produce_part(p: Any, code: ErrorCode) -> dict[str, Any]:
    return {
        "index": p.index,
        "error_code": code,
        "base_offset": -1,
        "log_append_time": -1,
        "log_start_offset": -1,
    }


def _fetch_part(p: Any, code: ErrorCode) -> dict[str, Any]:
    return {
        "partition_index": p.partition,
        "error_code": code,
        "high_watermark": -1,
        "last_stable_offset": -1,
        "log_start_offset": -1,
        "preferred_read_replica": -1,
        "records": b"",  # Kafka's MemoryRecords.EMPTY: librdkafka refuses a null set
    }


def _offset_part(p: Any, code: ErrorCode) -> dict[str, Any]:
    return {"partition_index": p.partition_index, "error_code": code, "timestamp": -1, "offset": -1}


def _commit_part(p: Any, code: ErrorCode) -> dict[str, Any]:
    return {"partition_index": p.partition_index, "error_code": code}


def _delete_records_part(p: Any, code: ErrorCode) -> dict[str, Any]:
    return {"partition_index": p.partition_index, "error_code": code, "low_watermark": -1}


def _index_part(i: int, code: ErrorCode) -> dict[str, Any]:
    return {"partition_index": i, "error_code": code, "committed_offset": -1}


def _txn_part(i: int, code: ErrorCode) -> dict[str, Any]:
    return {"partition_index": i, "partition_error_code": code}


# -- the policies ------------------------------------------------------------------------


def _transactional(records: bytes | None) -> bool:
    """Kafka's ``RequestUtils.hasTransactionalRecords`` for one partition's batches (a
    header walk; a torn tail is the handler's to refuse)."""
    buf = memoryview(records or b"")
    pos = 0
    while pos + ATTRIBUTES_POS + 2 <= len(buf):
        if int.from_bytes(buf[pos + ATTRIBUTES_POS : pos + ATTRIBUTES_POS + 2]) & (
            TRANSACTIONAL_BIT
        ):
            return True
        size = batch_size(buf, pos)
        if size <= LOG_OVERHEAD:
            return False
        pos += size
    return False


def _produce(c: Check, req: Any) -> Decision:
    acks_zero = int(req.acks) == 0
    tid = req.transactional_id
    transactional = any(_transactional(p.records) for t in req.topic_data for p in t.partition_data)
    if transactional and (tid is None or not c.ok(Op.WRITE, TXN, tid)):
        d = _all_topics_error(
            req, "topic_data", "responses", "partition_data", "partition_responses",
            _produce_part, TXN_DENIED,
        )  # fmt: skip
        return (None, lambda _r: None) if acks_zero else d
    kept, finish = _by_topic(
        "topic_data", "responses", Op.WRITE, "partition_data", "partition_responses",
        _produce_part,
    )(c, req)  # fmt: skip
    if acks_zero:  # no answer either way (Kafka closes the connection on an error)
        return kept, lambda _r: None
    return kept, finish


def _fetch(c: Check, req: Any) -> Decision:
    attr = "topic" if c.ctx.api_version < 13 else "topic_id"

    def allowed(e: Any) -> bool:
        name = c.topic_name(e, "topic")  # v13+: no name, the id is resolved
        return name is None or c.ok(Op.READ, TOPIC, name)

    kept, refused = _split(req, "topics", allowed)
    extra = [
        _topic_error(e, "partitions", "partitions", _fetch_part, TOPIC_DENIED, attr)
        for e in refused
    ]
    for entry in extra:
        entry.pop("name", None)
    return kept, _append("responses", extra)


def _metadata(c: Check, req: Any) -> Decision:
    ctx = c.ctx
    topics = req.topics
    every = topics is None or (ctx.api_version == 0 and not topics)
    include_ops = bool(getattr(req, "include_topic_authorized_operations", False))
    extra: list[dict[str, Any]] = []
    if not every:
        auto = bool(getattr(req, "allow_auto_topic_creation", True)) and bool(
            ctx.config.get("auto.create.topics.enable")
        )
        keep = []
        for t in topics:
            name = c.topic_name(t)
            if name is None:
                keep.append(t)
            elif not c.ok(Op.DESCRIBE, TOPIC, name):
                # by id, the name is not told to whom may not describe the topic
                by_name = bool(getattr(t, "name", None))
                extra.append(
                    {
                        "error_code": TOPIC_DENIED,
                        "name": name if by_name else None if ctx.api_version >= 12 else "",
                        "topic_id": ZERO_UUID if by_name else t.topic_id,
                        "partitions": [],
                    }
                )
            elif (
                auto
                and not ctx.logs.has_topic(name)
                and not (c.cluster(Op.CREATE, log_denied=False) or c.ok(Op.CREATE, TOPIC, name))
            ):  # KafkaApis: may describe, may not create: as if auto-creation were off
                code = (
                    ErrorCode.unknown_topic_or_partition
                    if is_valid_topic_name(name)
                    else ErrorCode.invalid_topic_exception
                )
                extra.append({"error_code": code, "name": name, "partitions": []})
            else:
                keep.append(t)
        if not keep and ctx.api_version == 0:  # an empty v0 list means every topic
            return None, lambda _r: {"brokers": [ctx.state.broker_endpoint()], "topics": extra}
        req = dataclasses.replace(req, topics=tuple(keep))

    def finish(resp: Any) -> Any:
        out = dict(resp)
        listed = []
        for t in out.get("topics") or ():
            t = dict(t)
            name = t.get("name")
            if every and name and not c.ok(Op.DESCRIBE, TOPIC, name, log_denied=False):
                continue
            if include_ops and name and t.get("error_code") == ErrorCode.none:
                t["topic_authorized_operations"] = c.ops(TOPIC, name)
            listed.append(t)
        out["topics"] = listed + extra
        if out.get("cluster_authorized_operations", AUTHORIZED_OPERATIONS_OMITTED) != (
            AUTHORIZED_OPERATIONS_OMITTED
        ):
            out["cluster_authorized_operations"] = c.ops(CLUSTER, CLUSTER_NAME)
        return out

    return req, finish


def _offset_commit(c: Check, req: Any) -> Decision:
    if not c.ok(Op.READ, GROUP, req.group_id):
        return _all_topics_error(
            req, "topics", "topics", "partitions", "partitions", _commit_part, GROUP_DENIED
        )
    return _by_topic("topics", "topics", Op.READ, "partitions", "partitions", _commit_part)(c, req)


def _txn_offset_commit(c: Check, req: Any) -> Decision:
    for ok, code in (
        (lambda: c.ok(Op.WRITE, TXN, req.transactional_id), TXN_DENIED),
        (lambda: c.ok(Op.READ, GROUP, req.group_id), GROUP_DENIED),
    ):
        if not ok():
            return _all_topics_error(
                req, "topics", "topics", "partitions", "partitions", _commit_part, code
            )
    return _by_topic("topics", "topics", Op.READ, "partitions", "partitions", _commit_part)(c, req)


def _offset_delete(c: Check, req: Any) -> Decision:
    if not c.ok(Op.DELETE, GROUP, req.group_id):
        return _refuse({"error_code": GROUP_DENIED})
    return _by_topic("topics", "topics", Op.READ, "partitions", "partitions", _commit_part)(c, req)


def _offset_fetch_topics(c: Check, group: Any) -> tuple[Any, Finish]:
    """One group's topics: (entry with the allowed topics, finish for its answer)."""
    if group.topics is None:  # all committed topics: those one may not describe vanish

        def unlist(g: dict[str, Any]) -> dict[str, Any]:
            g = dict(g)
            g["topics"] = [
                t
                for t in g.get("topics") or ()
                if (n := _resp_topic_name(c, t)) is None
                or c.ok(Op.DESCRIBE, TOPIC, n, log_denied=False)
            ]
            return g

        return group, unlist

    def allowed(t: Any) -> bool:
        name = c.topic_name(t)
        return name is None or c.ok(Op.DESCRIBE, TOPIC, name)

    kept, refused = _split(group, "topics", allowed)
    extra = [
        {
            **_ident(t, "name", "topic_id"),
            "partitions": [_index_part(i, TOPIC_DENIED) for i in t.partition_indexes or ()],
        }
        for t in refused
    ]
    if kept is None:
        kept = dataclasses.replace(group, topics=())
    return kept, _append("topics", extra)


def _resp_topic_name(c: Check, t: Any) -> str | None:
    name = t.get("name") if isinstance(t, dict) else getattr(t, "name", None)
    if name:
        return name
    tid = t.get("topic_id") if isinstance(t, dict) else getattr(t, "topic_id", None)
    return c.ctx.state.topic_by_id(tid) if tid else None


def _offset_fetch(c: Check, req: Any) -> Decision:
    if not hasattr(req, "groups"):  # v1-v7: one group, top-level error code
        if not c.ok(Op.DESCRIBE, GROUP, req.group_id):
            return _refuse({"error_code": GROUP_DENIED, "topics": []})
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
            finishes.get(g["group_id"], _same)(g)
            for g in (dict(x) for x in out.get("groups") or ())
        ] + refused
        return out

    if not keep:
        return None, finish
    return dataclasses.replace(req, groups=tuple(keep)), finish


_KEY_TYPES = {0: (GROUP, GROUP_DENIED), 1: (TXN, TXN_DENIED)}


def _find_coordinator(c: Check, req: Any) -> Decision:
    rtype, code = _KEY_TYPES.get(int(getattr(req, "key_type", 0)), (None, None))
    if rtype is None:  # the handler answers an unknown key type
        return req, _same
    refusal = {"error_code": code, "node_id": -1, "host": "", "port": -1}
    if not hasattr(req, "coordinator_keys"):
        return (req, _same) if c.ok(Op.DESCRIBE, rtype, req.key) else _refuse(refusal)
    kept, refused = _split(req, "coordinator_keys", lambda k: c.ok(Op.DESCRIBE, rtype, k))
    return kept, _append("coordinators", [{**refusal, "key": k} for k in refused])


def _join_refusal(req: Any) -> dict[str, Any]:
    return {"error_code": GROUP_DENIED, "generation_id": -1, "member_id": req.member_id}


def _describe_groups(c: Check, req: Any) -> Decision:
    include_ops = bool(getattr(req, "include_authorized_operations", False))
    kept, refused = _split(req, "groups", lambda g: c.ok(Op.DESCRIBE, GROUP, g))
    extra = [
        {"group_id": g, "error_code": GROUP_DENIED, "authorized_operations": -(2**31)}
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

    return kept, _append("groups", extra, ops)


def _list_groups(c: Check, req: Any) -> Decision:
    if c.cluster(Op.DESCRIBE, log_denied=False):
        return req, _same

    def visible(resp: Any) -> Any:
        out = dict(resp)
        out["groups"] = [
            g
            for g in out.get("groups") or ()
            if c.ok(
                Op.DESCRIBE,
                GROUP,
                g["group_id"] if isinstance(g, dict) else g.group_id,
                log_denied=False,
            )
        ]
        return out

    return req, visible


def _delete_groups(c: Check, req: Any) -> Decision:
    kept, refused = _split(req, "groups_names", lambda g: c.ok(Op.DELETE, GROUP, g))
    return kept, _append("results", [{"group_id": g, "error_code": GROUP_DENIED} for g in refused])


def _create_topics(c: Check, req: Any) -> Decision:
    may_create_any = c.cluster(Op.CREATE, log_denied=False)
    kept, refused = _split(
        req, "topics", lambda t: may_create_any or c.ok(Op.CREATE, TOPIC, t.name)
    )
    extra = [
        {
            "name": t.name,
            "error_code": TOPIC_DENIED,
            "error_message": "Authorization failed.",
            "num_partitions": -1,
            "replication_factor": -1,
        }
        for t in refused
    ]

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

    return kept, _append("topics", extra, configs)


def _delete_topics(c: Check, req: Any) -> Decision:
    if hasattr(req, "topic_names"):  # v0-v5
        kept, refused = _split(req, "topic_names", lambda n: c.ok(Op.DELETE, TOPIC, n))
        extra = [{"name": n, "error_code": TOPIC_DENIED} for n in refused]
        return kept, _append("responses", extra)

    def allowed(t: Any) -> bool:
        name = c.topic_name(t)
        return name is None or c.ok(Op.DELETE, TOPIC, name)

    kept, refused = _split(req, "topics", allowed)
    extra = [{**_ident(t, "name", "topic_id"), "error_code": TOPIC_DENIED} for t in refused]
    return kept, _append("responses", extra)


def _create_partitions(c: Check, req: Any) -> Decision:
    kept, refused = _split(req, "topics", lambda t: c.ok(Op.ALTER, TOPIC, t.name))
    extra = [
        {"name": t.name, "error_code": TOPIC_DENIED, "error_message": "Authorization failed."}
        for t in refused
    ]
    return kept, _append("results", extra)


# DescribeConfigs/AlterConfigs resource types (ConfigResource.Type)
_CONFIG_TOPIC = 2
_CONFIG_GROUP = 32  # ConfigResource.Type.GROUP


def _configs(op: Op, resp_field: str) -> Policy:
    def policy(c: Check, req: Any) -> Decision:
        def allowed(r: Any) -> bool:
            if int(r.resource_type) == _CONFIG_TOPIC:
                return c.ok(op, TOPIC, r.resource_name)
            if int(r.resource_type) == _CONFIG_GROUP:  # KafkaApis: the group's own ACLs
                return c.ok(op, GROUP, r.resource_name)
            return c.cluster(op)  # BROKER, BROKER_LOGGER (unknown types: cluster too)

        def denied(r: Any) -> ErrorCode:
            kind = int(r.resource_type)
            if kind == _CONFIG_TOPIC:
                return TOPIC_DENIED
            return GROUP_DENIED if kind == _CONFIG_GROUP else CLUSTER_DENIED

        kept, refused = _split(req, "resources", allowed)
        extra = [
            {
                "error_code": denied(r),
                "error_message": "Authorization failed.",
                "resource_type": r.resource_type,
                "resource_name": r.resource_name,
            }
            for r in refused
        ]
        return kept, _append(resp_field, extra)

    return policy


def _init_producer_id(c: Check, req: Any) -> Decision:
    refusal = {"producer_id": -1, "producer_epoch": -1}
    tid = req.transactional_id
    if tid is not None:
        if c.ok(Op.WRITE, TXN, tid):
            return req, _same
        return _refuse({**refusal, "error_code": TXN_DENIED})
    if c.cluster(Op.IDEMPOTENT_WRITE, log_denied=False) or c.any_of(Op.WRITE, TOPIC):
        return req, _same
    return _refuse({**refusal, "error_code": CLUSTER_DENIED})


def _add_partitions_to_txn(c: Check, req: Any) -> Decision:
    topics = req.v3_and_below_topics or ()

    def refuse(code_of: Callable[[Any], ErrorCode]) -> Decision:
        return _refuse(
            {
                "results_by_topic_v3_and_below": [
                    {
                        "name": t.name,
                        "results_by_partition": [_txn_part(i, code_of(t)) for i in t.partitions],
                    }
                    for t in topics
                ]
            }
        )

    if not c.ok(Op.WRITE, TXN, req.v3_and_below_transactional_id):
        return refuse(lambda _t: TXN_DENIED)
    denied = {t.name for t in topics if not c.ok(Op.WRITE, TOPIC, t.name)}
    if denied:  # KafkaApis: the refused topics' error, the rest OPERATION_NOT_ATTEMPTED
        return refuse(
            lambda t: TOPIC_DENIED if t.name in denied else ErrorCode.operation_not_attempted
        )
    return req, _same


def _add_offsets_to_txn(c: Check, req: Any) -> Decision:
    if not c.ok(Op.WRITE, TXN, req.transactional_id):
        return _refuse({"error_code": TXN_DENIED})
    if not c.ok(Op.READ, GROUP, req.group_id):
        return _refuse({"error_code": GROUP_DENIED})
    return req, _same


def _txn_id(refusal: dict[str, Any]) -> Policy:
    def policy(c: Check, req: Any) -> Decision:
        if c.ok(Op.WRITE, TXN, req.transactional_id):
            return req, _same
        return _refuse(refusal)

    return policy


def _describe_cluster(c: Check, req: Any) -> Decision:
    def ops(resp: Any) -> Any:
        out = dict(resp)
        if getattr(req, "include_cluster_authorized_operations", False):
            out["cluster_authorized_operations"] = (
                c.ops(CLUSTER, CLUSTER_NAME) if c.cluster(Op.DESCRIBE) else 0
            )
        return out

    return req, ops


def _each_result(field: str, source: str) -> Callable[[Any], dict[str, Any]]:
    """A refusal answering each entry of ``source`` with CLUSTER_AUTHORIZATION_FAILED."""

    def refusal(req: Any) -> dict[str, Any]:
        return {
            field: [
                {"error_code": CLUSTER_DENIED, "error_message": "Authorization failed."}
                for _ in getattr(req, source) or ()
            ]
        }

    return refusal


def _top(code: ErrorCode, **extra: Any) -> Callable[[Any], dict[str, Any]]:
    return lambda _req: {"error_code": code, **extra}


def _scram_describe_refusal(req: Any) -> dict[str, Any]:
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


def _scram_alter_refusal(req: Any) -> dict[str, Any]:
    users = [d.name for d in req.deletions or ()] + [u.name for u in req.upsertions or ()]
    return {"results": [{"user": u, "error_code": CLUSTER_DENIED} for u in users]}


def _describe_transactions(c: Check, req: Any) -> Decision:
    kept, refused = _split(req, "transactional_ids", lambda t: c.ok(Op.DESCRIBE, TXN, t))
    extra = [
        _describe_transactions_entry(t, TXN_DENIED)  # Kafka's zero defaults, as refused
        for t in refused
    ]
    return kept, _append("transaction_states", extra, lambda r: _describable_topics(c, r))


def _describable_topics(c: Check, resp: dict[str, Any]) -> dict[str, Any]:
    """Kafka's handleDescribeTransactionsRequest: a described transaction lists only the
    partitions of topics the caller may DESCRIBE (a refusal there is not logged)."""

    def ok(t: Any) -> bool:
        name = t["topic"] if isinstance(t, dict) else t.topic
        return c.ok(Op.DESCRIBE, TOPIC, name, log_denied=False)

    resp["transaction_states"] = [
        {**s, "topics": [t for t in s["topics"] if ok(t)]} for s in resp["transaction_states"]
    ]
    return resp


def _describe_transactions_entry(tid: str, code: ErrorCode) -> dict[str, Any]:
    return {
        "transactional_id": tid,
        "error_code": code,
        "transaction_state": "",
        "transaction_timeout": 0,
        "transaction_start_time": 0,
        "producer_id": 0,
        "producer_epoch": 0,
        "topics": [],
    }


def _list_transactions(c: Check, req: Any) -> Decision:
    def visible(resp: Any) -> Any:
        out = dict(resp)
        out["transaction_states"] = [
            s
            for s in out.get("transaction_states") or ()
            if c.ok(
                Op.DESCRIBE,
                TXN,
                s["transactional_id"] if isinstance(s, dict) else s.transactional_id,
                log_denied=False,
            )
        ]
        return out

    return req, visible


def _describe_producers_part(i: int, code: ErrorCode) -> dict[str, Any]:
    return {"partition_index": i, "error_code": code}


POLICIES: dict[int, Policy] = {
    0: _produce,
    1: _fetch,
    2: _by_topic("topics", "topics", Op.DESCRIBE, "partitions", "partitions", _offset_part),
    3: _metadata,
    8: _offset_commit,
    9: _offset_fetch,
    10: _find_coordinator,
    11: _group(Op.READ, _join_refusal),
    12: _group(Op.READ, _top(GROUP_DENIED)),
    13: _group(Op.READ, _top(GROUP_DENIED)),
    14: _group(Op.READ, _top(GROUP_DENIED)),
    15: _describe_groups,
    16: _list_groups,
    17: _public,  # SaslHandshake: before authentication
    18: _public,  # ApiVersions
    19: _create_topics,
    20: _delete_topics,
    21: _by_topic("topics", "topics", Op.DELETE, "partitions", "partitions", _delete_records_part),
    22: _init_producer_id,
    24: _add_partitions_to_txn,
    25: _add_offsets_to_txn,
    26: _txn_id({"error_code": TXN_DENIED}),
    28: _txn_offset_commit,
    29: _cluster(Op.DESCRIBE, _top(CLUSTER_DENIED, error_message="Authorization failed.")),
    30: _cluster(Op.ALTER, _each_result("results", "creations")),
    31: _cluster(Op.ALTER, _each_result("filter_results", "filters")),
    32: _configs(Op.DESCRIBE_CONFIGS, "results"),
    33: _configs(Op.ALTER_CONFIGS, "responses"),
    35: _cluster(Op.DESCRIBE, _top(CLUSTER_DENIED, results=[])),  # DescribeLogDirs
    36: _public,  # SaslAuthenticate
    37: _create_partitions,
    42: _delete_groups,
    44: _configs(Op.ALTER_CONFIGS, "responses"),
    47: _offset_delete,
    50: _cluster(Op.DESCRIBE, _scram_describe_refusal),
    51: _cluster(Op.ALTER, _scram_alter_refusal),
    60: _describe_cluster,
    61: _by_topic(
        "topics", "topics", Op.READ, "partition_indexes", "partitions", _describe_producers_part
    ),
    65: _describe_transactions,
    66: _list_transactions,
}


class NoPolicyError(KompaktError):
    """An API without a policy, called by someone not a super user (closes the
    connection: there is no safe generic answer)."""


def _unlisted(api_key: int) -> Policy:
    def policy(c: Check, req: Any) -> Decision:
        if c.principal in c.authorizer.super_users:
            return req, _same
        raise NoPolicyError(f"API {api_key} has no authorization policy; refused")

    return policy


# -- the guard ---------------------------------------------------------------------------


def _done(result: Any, finish: Finish) -> Any:
    if isinstance(result, DelayedResponse):
        inner = result.poll

        def poll() -> tuple[Any, bool]:
            resp, complete = inner()
            return finish(resp), complete

        return dataclasses.replace(result, poll=poll)
    if result is None:  # Produce acks=0: no answer
        return None
    return finish(result)


def guard(authorizer: Authorizer) -> Callable[[int, Handler], Handler]:
    """The registry guard: each handler behind its API's policy."""

    def wrap(api_key: int, handler: Handler) -> Handler:
        policy = POLICIES.get(api_key) or _unlisted(api_key)
        if policy is _public:
            return handler
        if inspect.iscoroutinefunction(handler):

            async def guarded_async(ctx: RequestContext, req: Any) -> Any:
                request, finish = policy(Check(ctx, authorizer), req)
                if request is None:
                    return finish(None)
                return _done(await handler(ctx, request), finish)  # type: ignore[misc]

            return guarded_async

        def guarded(ctx: RequestContext, req: Any) -> Any:
            request, finish = policy(Check(ctx, authorizer), req)
            if request is None:
                return finish(None)
            return _done(handler(ctx, request), finish)

        return guarded

    return wrap


def install(registry: ApiRegistry, state: BrokerState, authorizer: Authorizer | None) -> None:
    """Turn authorization on (or off, with None) for every API of ``registry``."""
    if authorizer is None:
        state.extra.pop(AUTHORIZER_KEY, None)
        registry.set_guard(None)
        return
    state.extra[AUTHORIZER_KEY] = authorizer
    registry.set_guard(guard(authorizer))


def unpoliced(keys: Iterable[int]) -> list[int]:
    """The API keys among ``keys`` that have no policy (the matrix test's guard)."""
    return [k for k in keys if k not in POLICIES]
