"""Fetch (API 1) with long polling, and ListOffsets (API 2).

A fetch with less than ``min_bytes`` ready is answered with a
:class:`~kompakt.broker.registry.DelayedResponse`: the server waits up to ``max_wait_ms``
for an append to one of its partitions (no polling) and serves other connections
meanwhile. Fetch sessions are not kept: every response carries session id 0,
which tells clients to send full requests (Kafka does this when its session cache is full).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.fetch.v4.request import FetchRequest
from kio.schema.list_offsets.v1.request import ListOffsetsRequest

from kompakt.broker.handlers.common import (
    LEADER_EPOCH,
    UNKNOWN_OFFSET,
    error_of,
    resolve_topic,
    unknown_topic_code,
)
from kompakt.broker.protocol import ms
from kompakt.broker.registry import ApiRegistry, DelayedResponse
from kompakt.broker.state import RequestContext
from kompakt.broker.tiering import tiering_of
from kompakt.errors import UnknownTopicError
from kompakt.record.decode import iter_batches
from kompakt.record.header import NO_TIMESTAMP

INT32_MAX = 2**31 - 1  # FetchRequest.max_bytes before v3 had none: no limit
NO_FETCH_SESSION = 0  # FetchMetadata.INVALID_SESSION_ID: clients send full requests
NO_PREFERRED_REPLICA = -1  # FetchResponse.INVALID_PREFERRED_REPLICA_ID: read the leader
NO_LEADER_EPOCH = -1  # RecordBatch.NO_PARTITION_LEADER_EPOCH

# Fetch/ListOffsets isolation_level (Kafka's ``IsolationLevel``)
READ_UNCOMMITTED = 0
READ_COMMITTED = 1

# ListOffsetsRequest's special timestamps (Kafka's ``ListOffsetsRequest`` constants)
EARLIEST = -2
LATEST = -1
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4  # KIP-405
LATEST_TIERED = -5  # KIP-1005
EARLIEST_PENDING_UPLOAD = -6  # KIP-1023


def _committed_only(plog: Any, fetch_offset: int, data: bytes, lso: int) -> tuple[bytes, list]:
    """READ_COMMITTED (Kafka's ``FetchIsolation.TXN_COMMITTED``): the batches below the
    last stable offset, and the aborted transactions they overlap, read from the
    segments' ``.txnindex`` (``collectAbortedTransactions`` up to the offset after the
    data returned), so the client drops the aborted records."""
    end = 0
    upper = fetch_offset
    for b in iter_batches(data):
        if b.header.base_offset >= lso:
            break
        end = b.position + b.header.size
        upper = b.header.last_offset + 1
    if end == 0:
        return b"", []
    aborted = plog.collect_aborted_transactions(fetch_offset, upper)
    return data[:end], [
        {"producer_id": a.producer_id, "first_offset": a.first_offset} for a in aborted
    ]


def fetch_error_partition(index: int, code: ErrorCode) -> dict[str, Any]:
    """A Fetch partition answered with ``code`` and no data (Kafka's
    ``FetchResponse.partitionResponse``): offsets unknown, an empty record set (Kafka's
    ``MemoryRecords.EMPTY``: librdkafka refuses a null one)."""
    return {
        "partition_index": index,
        "error_code": code,
        "high_watermark": UNKNOWN_OFFSET,
        "last_stable_offset": UNKNOWN_OFFSET,
        "log_start_offset": UNKNOWN_OFFSET,
        "aborted_transactions": None,
        "preferred_read_replica": NO_PREFERRED_REPLICA,
        "records": b"",
    }


def _read_all(
    ctx: RequestContext, wanted: list, max_bytes: int, committed: bool
) -> tuple[list, int]:
    """One pass over the requested partitions; returns (topics, bytes read)."""
    total = 0
    out = []
    tier = tiering_of(ctx.state)
    for name, key, tdata in wanted:
        parts = []
        for p in tdata.partitions:
            if name is None:
                parts.append(
                    fetch_error_partition(p.partition, unknown_topic_code("topic_id" in key))
                )
                continue
            resp = fetch_error_partition(p.partition, ErrorCode.none)
            try:
                plog = ctx.logs.get_log(name, p.partition)
                with plog.lock:
                    hw = plog.high_watermark
                    lso = plog.last_stable_offset
                    resp["high_watermark"] = hw
                    resp["last_stable_offset"] = lso
                    start = plog.log_start_offset
                resp["log_start_offset"] = tier.log_start_offset(plog, False) if tier else start
                # below the local log start: the remote tier (Kafka's remote fetch)
                source = tier.source_for(plog, p.fetch_offset) if tier else plog
                limit = min(p.partition_max_bytes, max(0, max_bytes - total))
                data = b""
                if limit > 0 or total == 0:
                    data = source.read(p.fetch_offset, max(limit, 1), min_one_batch=total == 0)
                if committed:
                    data, resp["aborted_transactions"] = _committed_only(
                        source, p.fetch_offset, data, lso
                    )
                resp["records"] = data
                resp["error_code"] = ErrorCode.none
                total += len(data)
            except Exception as exc:
                resp["error_code"], _msg = error_of(exc)
            parts.append(resp)
        out.append({**key, "partitions": parts})
    return out, total


def handle_fetch(ctx: RequestContext, req: Any) -> dict[str, Any] | DelayedResponse:
    """Read once; if that is short of ``min_bytes`` and the client will wait
    (``max_wait`` > 0), answer with a :class:`DelayedResponse` the server completes on
    appends or at the timeout (Kafka's ``ReplicaManager.fetchMessages`` reads first and
    parks a ``DelayedFetch`` only when the read is not enough)."""
    v13 = ctx.api_version >= 13
    wanted = []
    keys = []
    for t in req.topics:
        if v13:
            name, tid = resolve_topic(ctx, None, t.topic_id)
            key = {"topic_id": t.topic_id}
        else:
            name, _tid = resolve_topic(ctx, t.topic, None)
            key = {"topic": t.topic}
        wanted.append((name, key, t))
        if name is not None:
            keys += [(name, p.partition) for p in t.partitions]
    max_bytes = getattr(req, "max_bytes", INT32_MAX)
    max_wait = ms(req.max_wait) / 1000
    committed = int(getattr(req, "isolation_level", READ_UNCOMMITTED)) == READ_COMMITTED

    def poll() -> tuple[dict[str, Any], bool]:
        """The response from one read, and whether it may go out before the timeout:
        ``min_bytes`` are there or a partition has an error (``DelayedFetch.tryComplete``)."""
        topics, total = _read_all(ctx, wanted, max_bytes, committed)
        errors = any(p["error_code"] for t in topics for p in t["partitions"])
        response = {
            "throttle_time": 0,
            "error_code": ErrorCode.none,
            "session_id": NO_FETCH_SESSION,
            "responses": topics,
        }
        return response, total >= req.min_bytes or errors

    response, complete = poll()
    if complete or max_wait <= 0 or not keys:
        return response
    return DelayedResponse(tuple(keys), max_wait, poll)


def _list_offset(
    ctx: RequestContext, name: str, p: Any, version: int, committed: bool = False
) -> dict[str, Any]:
    """One partition of ListOffsets; LATEST is the last stable offset for READ_COMMITTED
    (Kafka's ``UnifiedLog.fetchOffsetByTimestamp`` with ``IsolationLevel``)."""
    resp: dict[str, Any] = {
        "partition_index": p.partition_index,
        "error_code": ErrorCode.none,
        "timestamp": NO_TIMESTAMP,
        "offset": UNKNOWN_OFFSET,
        "leader_epoch": LEADER_EPOCH,
    }
    try:
        plog = ctx.logs.get_log(name, p.partition_index)
        tier = tiering_of(ctx.state)
        ts = p.timestamp
        if ts in (EARLIEST, EARLIEST_PENDING_UPLOAD):
            resp["offset"] = tier.log_start_offset(plog) if tier else plog.log_start_offset
        elif ts == EARLIEST_LOCAL:  # Kafka's localLogStartOffset
            resp["offset"] = plog.log_start_offset
        elif ts == LATEST_TIERED:  # Kafka's highestOffsetInRemoteStorage, -1 for none
            resp["offset"] = tier.highest_tiered_offset(plog) if tier else UNKNOWN_OFFSET
        elif ts == LATEST:
            resp["offset"] = plog.last_stable_offset if committed else plog.high_watermark
        elif ts == MAX_TIMESTAMP:
            if version < 7:
                resp["error_code"] = ErrorCode.unsupported_version
            else:
                found = plog.max_timestamp_offset()
                if found is not None:
                    resp["offset"], resp["timestamp"] = found
        elif ts < 0:
            resp["error_code"] = ErrorCode.invalid_request
        else:
            found = tier.offset_for_timestamp(plog, ts) if tier else plog.offset_for_timestamp(ts)
            if found is not None:
                resp["offset"], resp["timestamp"] = found
    except UnknownTopicError:
        resp["error_code"] = ErrorCode.unknown_topic_or_partition
    except Exception as exc:
        resp["error_code"], _msg = error_of(exc)
    return resp


def list_offsets_error_partition(index: int, code: ErrorCode) -> dict[str, Any]:
    """A ListOffsets partition answered with ``code``: no offset, no timestamp."""
    return {
        "partition_index": index,
        "error_code": code,
        "timestamp": NO_TIMESTAMP,
        "offset": UNKNOWN_OFFSET,
        "leader_epoch": NO_LEADER_EPOCH,
    }


def _list_offsets(ctx: RequestContext, req: Any) -> list:
    out = []
    for t in req.topics:
        if not ctx.logs.has_topic(t.name):
            parts = [
                list_offsets_error_partition(
                    p.partition_index, ErrorCode.unknown_topic_or_partition
                )
                for p in t.partitions
            ]
        else:
            committed = int(getattr(req, "isolation_level", READ_UNCOMMITTED)) == READ_COMMITTED
            parts = [_list_offset(ctx, t.name, p, ctx.api_version, committed) for p in t.partitions]
        out.append({"name": t.name, "partitions": parts})
    return out


def handle_list_offsets(ctx: RequestContext, req: Any) -> dict[str, Any]:
    return {"throttle_time": 0, "topics": _list_offsets(ctx, req)}


def register(registry: ApiRegistry) -> None:
    registry.register(FetchRequest.__api_key__, 4, 18, handle_fetch)
    registry.register(ListOffsetsRequest.__api_key__, 1, 11, handle_list_offsets)
