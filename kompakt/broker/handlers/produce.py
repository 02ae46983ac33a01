"""Produce (API 0); InitProducerId is the transaction coordinator's (handlers/txn.py).

acks=0 sends no response; acks=1 answers once the batch is in the page cache; acks=-1
(all) is answered only once an fsync of the partition covers the batch, so an
acknowledged acks=all write survives a power loss or SIGKILL of the broker (Kafka relies
on replication for that; a single node can only rely on the disk). The fsync is a group
commit (:mod:`kompakt.broker.flush`): one for every request that appended meanwhile.
"""

from __future__ import annotations

import functools
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.produce.v3.request import ProduceRequest

from kompakt.broker.flush import flush_covering
from kompakt.broker.handlers.common import (
    UNKNOWN_OFFSET,
    error_of,
    resolve_topic,
    unknown_topic_code,
)
from kompakt.broker.producers import ProducerStateManager
from kompakt.broker.registry import ApiRegistry
from kompakt.broker.state import RequestContext
from kompakt.broker.txn.verify import Guard, check_guard, verify_produce
from kompakt.errors import InvalidTopicError
from kompakt.log.names import is_internal
from kompakt.log.partition_log import PartitionLog
from kompakt.record.decode import iter_batches
from kompakt.record.header import NO_PRODUCER_ID, NO_TIMESTAMP

# ProduceRequest.acks (Kafka's ``ProduceRequest`` doc): no answer, the leader's write,
# every in-sync replica's (here: the one node's, fsynced).
ACKS_NONE = 0
ACKS_LEADER = 1
ACKS_ALL = -1


def _append(
    plog: PartitionLog,
    producers: ProducerStateManager,
    records: bytes,
    guard: Guard | None = None,
) -> tuple[dict[str, Any], int]:
    """The partition's answer and the offset an acks=all flush must reach for it
    (``guard``: a verified transactional write's, :func:`check_guard`)."""
    headers = [b.header for b in iter_batches(records)]
    idempotent = any(h.producer_id > NO_PRODUCER_ID for h in headers)
    log_append = plog.config.message_timestamp_type == "LogAppendTime"
    with plog.lock:
        check_guard(plog, guard)
        state = producers.for_log(plog) if idempotent else None
        if state is not None:
            for h in headers:
                dup = state.check(h)
                if dup is not None:
                    # the original's fsync may have failed: acks=all waits for a flush
                    return {
                        "error_code": ErrorCode.none,
                        "base_offset": dup.first_offset,
                        # Kafka answers a retried duplicate with the original's time
                        "log_append_time": dup.timestamp if log_append else NO_TIMESTAMP,
                        "log_start_offset": plog.log_start_offset,
                    }, plog.log_end_offset
        info = plog.append(records)
        if state is not None:
            first = info.first_offset
            for h in headers:
                if log_append:
                    h = h._replace(max_timestamp=info.log_append_time)
                state.update(h, first)
                first += h.last_offset_delta + 1
        end = plog.log_end_offset
    return {
        "error_code": ErrorCode.none,
        "base_offset": info.first_offset,
        "log_append_time": info.log_append_time,
        "log_start_offset": info.log_start_offset,
    }, end


def produce_error_partition(index: int, code: ErrorCode) -> dict[str, Any]:
    """A Produce partition answered with ``code``: nothing appended, offsets unknown."""
    return {
        "index": index,
        "error_code": code,
        "base_offset": UNKNOWN_OFFSET,
        "log_append_time": NO_TIMESTAMP,
        "log_start_offset": UNKNOWN_OFFSET,
    }


def _record_errors(exc: BaseException) -> dict[str, Any]:
    """KIP-467: each offending record by its own index (Kafka's ``RecordError``), so the
    client fails only those records and retries or reports the rest."""
    errors = getattr(exc, "record_errors", None)
    if not errors:
        return {}
    return {
        "record_errors": [{"batch_index": i, "batch_index_error_message": m} for i, m in errors]
    }


def _not_durable(resp: dict[str, Any], exc: Exception) -> None:
    """An acks=all partition whose (deferred) fsync failed: answered with the error."""
    resp.update(produce_error_partition(resp["index"], ErrorCode.none))
    resp["error_code"], resp["error_message"] = error_of(exc)


def _produce_all(
    ctx: RequestContext,
    topics: list[tuple[str | None, Any, Any]],
    acks: int,
    transactional_id: str | None = None,
):
    """Append each partition's records, a transactional batch once its transaction is
    found to hold the partition (KIP-890 part 1); with acks=all, answer a partition
    only once an fsync covers its batch (a group commit with the other requests
    appending)."""
    producers: ProducerStateManager = ctx.state.producers
    out = []
    for name, key, tdata in topics:
        parts = []
        for p in tdata.partition_data:
            resp = produce_error_partition(p.index, ErrorCode.none)
            if name is None:
                resp["error_code"] = unknown_topic_code("topic_id" in key)
            elif p.records is None or len(p.records) == 0:
                resp["error_code"] = ErrorCode.corrupt_message
                resp["error_message"] = "empty record set"
            else:
                try:
                    plog = ctx.logs.get_log(name, p.index)
                    if is_internal(name):
                        # ReplicaManager.appendToLocalLog (internalTopicsAllowed=false for
                        # clients): a forged offset record or tombstone would change another
                        # group's offsets at the next load. The coordinator appends to the
                        # log directly and never comes through here.
                        raise InvalidTopicError(f"Cannot append to internal topic {name}")
                    records = bytes(p.records)
                    code, why, guard = verify_produce(ctx.state, transactional_id, records, plog)
                    if code != ErrorCode.none:
                        resp["error_code"], resp["error_message"] = code, why
                        parts.append(resp)
                        continue
                    answer, end = _append(plog, producers, records, guard)
                    if acks == ACKS_ALL:  # a failed fsync: not durable, answered as an error
                        flush_covering(plog, end, functools.partial(_not_durable, resp))
                    resp.update(answer)
                except Exception as exc:
                    code, msg = error_of(exc)
                    resp["error_code"] = code
                    resp["error_message"] = msg
                    resp.update(_record_errors(exc))
            parts.append(resp)
        out.append({**key, "partition_responses": parts})
    return out


def handle_produce(ctx: RequestContext, req: Any) -> dict[str, Any] | None:
    acks = req.acks
    topics = []
    for t in req.topic_data:
        name, tid = resolve_topic(ctx, getattr(t, "name", None), getattr(t, "topic_id", None))
        key = (
            {"topic_id": tid}
            if hasattr(t, "topic_id") and not hasattr(t, "name")
            else {"name": t.name}
        )
        topics.append((name, key, t))
    if acks not in (ACKS_NONE, ACKS_LEADER, ACKS_ALL):
        responses = [
            {
                **key,
                "partition_responses": [
                    produce_error_partition(p.index, ErrorCode.invalid_required_acks)
                    for p in t.partition_data
                ],
            }
            for _n, key, t in topics
        ]
        return {"responses": responses, "throttle_time": 0}
    responses = _produce_all(ctx, topics, acks, req.transactional_id)
    if acks == ACKS_NONE:
        return None
    return {"responses": responses, "throttle_time": 0}


def register(registry: ApiRegistry) -> None:
    # Kafka 4 advertises Produce from v0 (old librdkafka probes compression support
    # with it) but rejects v0-2 (KAFKA-18659); kio has no schema below v3 anyway.
    registry.register(ProduceRequest.__api_key__, 3, 13, handle_produce, advertised_min=0)
