"""Policies of the APIs that read and write topic data: Produce, Fetch, ListOffsets,
Metadata, DeleteRecords, DescribeProducers (Kafka's ``KafkaApis`` rules, 4.x)."""

from __future__ import annotations

import dataclasses
from typing import Any

from kio.schema.errors import ErrorCode

from kompakt.broker.acls import CLUSTER_NAME, Op
from kompakt.broker.authz.check import (
    CLUSTER,
    TOPIC,
    TOPIC_DENIED,
    TXN,
    TXN_DENIED,
    Check,
    Decision,
    all_topics_error,
    append,
    by_topic,
    split,
    topic_error,
)
from kompakt.broker.handlers.common import AUTHORIZED_OPERATIONS_OMITTED
from kompakt.broker.handlers.fetch import fetch_error_partition, list_offsets_error_partition
from kompakt.broker.handlers.metadata import topic_error as topic_error_entry
from kompakt.broker.handlers.produce import produce_error_partition
from kompakt.broker.handlers.topics import delete_records_error_partition
from kompakt.broker.handlers.txn import producers_error_partition
from kompakt.record.header import ATTRIBUTES_POS, LOG_OVERHEAD, TRANSACTIONAL_BIT, batch_size


def _produce_part(p: Any, code: ErrorCode) -> dict[str, Any]:
    return produce_error_partition(p.index, code)


def _fetch_part(p: Any, code: ErrorCode) -> dict[str, Any]:
    return fetch_error_partition(p.partition, code)


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


def produce(c: Check, req: Any) -> Decision:
    """WRITE topic; transactional batches WRITE transactional id."""
    acks_zero = int(req.acks) == 0
    tid = req.transactional_id
    transactional = any(_transactional(p.records) for t in req.topic_data for p in t.partition_data)
    if transactional and (tid is None or not c.ok(Op.WRITE, TXN, tid)):
        d = all_topics_error(
            req, "topic_data", "responses", "partition_data", "partition_responses",
            _produce_part, TXN_DENIED,
        )  # fmt: skip
        return (None, lambda _r: None) if acks_zero else d
    kept, finish = by_topic(
        "topic_data", "responses", Op.WRITE, "partition_data", "partition_responses",
        _produce_part,
    )(c, req)  # fmt: skip
    if acks_zero:  # no answer either way (Kafka closes the connection on an error)
        return kept, lambda _r: None
    return kept, finish


def fetch(c: Check, req: Any) -> Decision:
    """READ topic (v13+: the topic by id, the name never told)."""
    attr = "topic" if c.ctx.api_version < 13 else "topic_id"

    def allowed(e: Any) -> bool:
        name = c.topic_name(e, "topic")  # v13+: no name, the id is resolved
        return name is None or c.ok(Op.READ, TOPIC, name)

    kept, refused = split(req, "topics", allowed)
    extra = [
        topic_error(e, "partitions", "partitions", _fetch_part, TOPIC_DENIED, attr) for e in refused
    ]
    for entry in extra:
        entry.pop("name", None)
    return kept, append("responses", extra)


list_offsets = by_topic(
    "topics",
    "topics",
    Op.DESCRIBE,
    "partitions",
    "partitions",
    lambda p, code: list_offsets_error_partition(p.partition_index, code),
)
delete_records = by_topic(
    "topics",
    "topics",
    Op.DELETE,
    "partitions",
    "partitions",
    lambda p, code: delete_records_error_partition(p.partition_index, code),
)
describe_producers = by_topic(
    "topics", "topics", Op.READ, "partition_indexes", "partitions", producers_error_partition
)


def metadata(c: Check, req: Any) -> Decision:
    """DESCRIBE topic (unlisted when all topics are asked for); auto-creation needs
    CREATE on the cluster or the topic."""
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
                if getattr(t, "name", None):
                    extra.append(topic_error_entry(TOPIC_DENIED, name))
                else:
                    unnamed = None if ctx.api_version >= 12 else ""
                    extra.append(topic_error_entry(TOPIC_DENIED, unnamed, t.topic_id))
            elif (
                auto
                and not ctx.logs.has_topic(name)
                and not (c.cluster(Op.CREATE, log_denied=False) or c.ok(Op.CREATE, TOPIC, name))
            ):  # KafkaApis.handleTopicMetadataRequest's unauthorizedForCreateTopics
                extra.append(topic_error_entry(TOPIC_DENIED, name))
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
