"""Transaction APIs: FindCoordinator (TRANSACTION keys), InitProducerId,
AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit and the admin APIs of
``kafka-transactions.sh`` (DescribeTransactions, ListTransactions, DescribeProducers).

Requests become calls of the broker's transaction coordinator
(:class:`~kompakt.broker.txn.broker.TransactionBroker`, made and loaded on first use);
this module only reads requests and shapes answers, as Kafka's ``KafkaApis`` does.
"""

from __future__ import annotations

import re
from typing import Any

from kio.schema.add_offsets_to_txn.v0.request import AddOffsetsToTxnRequest
from kio.schema.add_partitions_to_txn.v0.request import AddPartitionsToTxnRequest
from kio.schema.describe_producers.v0.request import DescribeProducersRequest
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.end_txn.v0.request import EndTxnRequest
from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v0.request import InitProducerIdRequest
from kio.schema.list_transactions.v0.request import ListTransactionsRequest
from kio.schema.txn_offset_commit.v0.request import TxnOffsetCommitRequest

from kompakt.broker.coordinator import handlers as group_handlers
from kompakt.broker.coordinator.commit import check_commit
from kompakt.broker.protocol import ms
from kompakt.broker.registry import ApiRegistry
from kompakt.broker.state import RequestContext
from kompakt.broker.txn.broker import (  # also the broker's start-up and seams
    TransactionBroker,
    load_txn_coordinator,
    loaded_txn_broker,
    start_txn_coordinator,
    txn_broker_if_started,
)
from kompakt.broker.txn.broker import wait_completion as _wait
from kompakt.broker.txn.inline import run_inline
from kompakt.broker.txn.log import TRANSACTION_STATE_TOPIC
from kompakt.broker.txn.results import TransactionDescription, TransactionResult, client_error
from kompakt.broker.txn.state import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, TransactionState
from kompakt.broker.txn.verify import verify_offsets
from kompakt.errors import KompaktError

__all__ = [
    "TRANSACTION_STATE_TOPIC",
    "load_txn_coordinator",
    "register",
    "start_txn_coordinator",
    "txn_broker_if_started",
]


async def _coordinator(ctx: RequestContext) -> TransactionBroker:
    """The loaded coordinator with its I/O; calls of ``.coordinator`` hold its ``lock``."""
    return await load_txn_coordinator(ctx.state)


# -- FindCoordinator (TRANSACTION keys) -------------------------------------------------


async def find_transaction_coordinator(ctx: RequestContext, req: Any) -> dict[str, Any]:
    """FindCoordinator's answer for TRANSACTION keys: this node once
    ``__transaction_state`` is there (made on first use, as Kafka does).
    :mod:`kompakt.broker.handlers.find_coordinator` owns the API and sends them here."""
    try:
        await load_txn_coordinator(ctx.state)
    except (KompaktError, OSError) as exc:  # e.g. a full disk creating the topic
        return group_handlers.coordinator_response(
            ctx, req, ErrorCode.coordinator_not_available, f"transaction coordinator: {exc}"
        )
    return group_handlers.coordinator_response(ctx, req, ErrorCode.none, None)


# -- InitProducerId ----------------------------------------------------------------------


async def handle_init_producer_id(ctx: RequestContext, req: Any) -> dict[str, Any]:
    """Kafka's ``handleInitProducerIdRequest``: without a transactional id a fresh
    producer id (idempotence only); with one, the coordinator's epoch bump and fence."""
    tid = req.transactional_id
    pid = int(getattr(req, "producer_id", NO_PRODUCER_ID))
    epoch = int(getattr(req, "producer_epoch", NO_PRODUCER_EPOCH))
    expected = None if pid == NO_PRODUCER_ID and epoch == NO_PRODUCER_EPOCH else (pid, epoch)
    if tid is None:
        return {
            **_init_failed(ErrorCode.none),
            "producer_id": ctx.state.producers.new_producer_id(),
            "producer_epoch": 0,
        }
    try:
        tb = await _coordinator(ctx)
    except (KompaktError, OSError):
        return _init_failed(ErrorCode.coordinator_not_available)
    with tb.lock:
        pending = tb.coordinator.init_producer_id(tid, ms(req.transaction_timeout), expected)
    result = await _wait(pending, tb.lock)
    return {
        "throttle_time": 0,
        "error_code": client_error(result.error, ctx.api_key, ctx.api_version),
        "producer_id": result.producer_id,
        "producer_epoch": result.producer_epoch,
        "ongoing_txn_producer_id": NO_PRODUCER_ID,
        "ongoing_txn_producer_epoch": NO_PRODUCER_EPOCH,
    }


def _init_failed(error: ErrorCode) -> dict[str, Any]:
    return {
        "throttle_time": 0,
        "error_code": error,
        "producer_id": NO_PRODUCER_ID,
        "producer_epoch": NO_PRODUCER_EPOCH,
        "ongoing_txn_producer_id": NO_PRODUCER_ID,
        "ongoing_txn_producer_epoch": NO_PRODUCER_EPOCH,
    }


# -- AddPartitionsToTxn / AddOffsetsToTxn / EndTxn ---------------------------------------


def add_partitions_result(index: int, code: ErrorCode) -> dict[str, Any]:
    """One partition's result of AddPartitionsToTxn (v3 and below)."""
    return {"partition_index": index, "partition_error_code": code}


def handle_add_partitions_to_txn(ctx: RequestContext, req: Any) -> dict[str, Any]:
    """AddPartitionsToTxn v0-3 (one transaction per request): an unknown partition
    fails the request, the others answer OPERATION_NOT_ATTEMPTED (Kafka's
    ``handleAddPartitionsToTxnRequest``). Run on a handler thread, the coordinator
    called there (:mod:`~kompakt.broker.txn.inline`)."""
    tid = req.v3_and_below_transactional_id
    topics = req.v3_and_below_topics
    wanted = [(t.name, int(p)) for t in topics for p in t.partitions]
    unknown = {
        (t, p)
        for t, p in wanted
        if not ctx.logs.has_topic(t) or not 0 <= p < ctx.logs.partition_count(t)
    }
    if unknown:
        errors = {
            tp: ErrorCode.unknown_topic_or_partition
            if tp in unknown
            else ErrorCode.operation_not_attempted
            for tp in wanted
        }
    else:
        try:
            tb = loaded_txn_broker(ctx.state)
            code = run_inline(
                tb.lock,
                lambda: tb.coordinator.add_partitions(
                    tid,
                    int(req.v3_and_below_producer_id),
                    int(req.v3_and_below_producer_epoch),
                    wanted,
                ),
            )
        except (KompaktError, OSError):
            code = ErrorCode.coordinator_not_available
        code = client_error(code, ctx.api_key, ctx.api_version)
        errors = dict.fromkeys(wanted, code)
    return {
        "throttle_time": 0,
        "results_by_topic_v3_and_below": [
            {
                "name": t.name,
                "results_by_partition": [
                    add_partitions_result(p, errors[(t.name, int(p))]) for p in t.partitions
                ],
            }
            for t in topics
        ],
    }


async def handle_add_offsets_to_txn(ctx: RequestContext, req: Any) -> dict[str, Any]:
    """AddOffsetsToTxn: the group's ``__consumer_offsets`` partition joins the
    transaction (Kafka's ``handleAddOffsetsToTxnRequest``)."""
    try:
        await group_handlers.coordinator(ctx)  # __consumer_offsets exists for the marker
        tb = await _coordinator(ctx)
        with tb.lock:
            pending = tb.coordinator.add_offsets(
                req.transactional_id, int(req.producer_id), int(req.producer_epoch), req.group_id
            )
        code = await _wait(pending, tb.lock)
    except (KompaktError, OSError):
        code = ErrorCode.coordinator_not_available
    return {"throttle_time": 0, "error_code": client_error(code, ctx.api_key, ctx.api_version)}


def handle_end_txn(ctx: RequestContext, req: Any) -> dict[str, Any]:
    """EndTxn: answered once PrepareCommit/PrepareAbort is written (Kafka's
    ``handleEndTxnRequest``); the markers follow. Run on a handler thread, as
    AddPartitionsToTxn."""
    result = TransactionResult.COMMIT if req.committed else TransactionResult.ABORT
    try:
        tb = loaded_txn_broker(ctx.state)
        code = run_inline(
            tb.lock,
            lambda: tb.coordinator.end_txn(
                req.transactional_id, int(req.producer_id), int(req.producer_epoch), result
            ),
        )
    except (KompaktError, OSError):
        code = ErrorCode.coordinator_not_available
    return {"throttle_time": 0, "error_code": client_error(code, ctx.api_key, ctx.api_version)}


# -- TxnOffsetCommit ---------------------------------------------------------------------


async def handle_txn_offset_commit(ctx: RequestContext, req: Any) -> dict[str, Any]:
    """TxnOffsetCommit (Kafka's ``GroupCoordinator.handleTxnCommitOffsets``): the
    offsets are written now, marked by the producer, and count once committed."""
    gc = await group_handlers.coordinator(ctx)
    generation = int(getattr(req, "generation_id", -1))
    group_error = ErrorCode.none
    if not req.group_id:
        group_error = ErrorCode.invalid_group_id
    elif generation >= 0:
        group_error = gc.commit_check(
            req.group_id,
            generation,
            getattr(req, "member_id", ""),
            getattr(req, "group_instance_id", None),
            ctx.api_version,
        )
    check = check_commit(ctx, req.topics, group_error, gc.now())
    if check.to_commit:
        assert gc.storage is not None
        code = await verify_offsets(
            ctx.state,
            req.transactional_id,
            int(req.producer_id),
            int(req.producer_epoch),
            gc.storage.partition_for(req.group_id),
        )
        if code != ErrorCode.none:  # KIP-890: a zombie's or a stray commit, not written
            check.fail_rest(code)
        else:
            tb = await load_txn_coordinator(ctx.state)
            code = await _wait(
                tb.store_offsets(
                    req.group_id, int(req.producer_id), int(req.producer_epoch), check.to_commit
                )
            )
            if code != ErrorCode.none:
                check.fail_rest(ErrorCode.coordinator_not_available)
    topics = [{"name": t.name, "partitions": parts} for t, _name, parts in check.topics]
    return {"throttle_time": 0, "topics": topics}


def register(registry: ApiRegistry) -> None:
    """The transaction APIs (FindCoordinator is
    :mod:`kompakt.broker.handlers.find_coordinator`'s)."""
    registry.register(InitProducerIdRequest.__api_key__, 0, 6, handle_init_producer_id)
    registry.register(AddPartitionsToTxnRequest.__api_key__, 0, 3, handle_add_partitions_to_txn)
    # v4+ of these are KIP-890's transaction.version 2, which kompakt does not offer
    registry.register(AddOffsetsToTxnRequest.__api_key__, 0, 3, handle_add_offsets_to_txn)
    registry.register(EndTxnRequest.__api_key__, 0, 3, handle_end_txn)
    registry.register(TxnOffsetCommitRequest.__api_key__, 0, 3, handle_txn_offset_commit)
    # kafka-transactions.sh's verbs (KIP-664); kio has DescribeProducers and
    # DescribeTransactions v0 only (Kafka's latest too) and ListTransactions v0-2
    registry.register(DescribeProducersRequest.__api_key__, 0, 0, handle_describe_producers)
    registry.register(DescribeTransactionsRequest.__api_key__, 0, 0, handle_describe_transactions)
    registry.register(ListTransactionsRequest.__api_key__, 0, 2, handle_list_transactions)


# -- DescribeTransactions / ListTransactions / DescribeProducers (kafka-transactions.sh) --


async def _existing_coordinator(ctx: RequestContext) -> TransactionBroker | None:
    """The loaded coordinator, or None while ``__transaction_state`` does not exist:
    the read-only admin APIs never create it (no transactional id was ever used)."""
    if not ctx.logs.has_topic(TRANSACTION_STATE_TOPIC):
        return None
    return await _coordinator(ctx)


async def handle_describe_transactions(ctx: RequestContext, req: Any) -> dict[str, Any]:
    """DescribeTransactions (KIP-664; Kafka's ``handleDescribeTransactionsRequest``):
    per id its state, timeout, start time, producer id/epoch and partitions;
    TRANSACTIONAL_ID_NOT_FOUND for an unknown id, COORDINATOR_NOT_AVAILABLE when
    ``__transaction_state`` cannot be read."""
    tb: TransactionBroker | None = None
    unavailable = False
    try:
        tb = await _existing_coordinator(ctx)
    except (KompaktError, OSError):
        unavailable = True
    states = []
    for tid in req.transactional_ids:
        if tb is not None:
            with tb.lock:
                d = tb.coordinator.describe(tid)
        elif unavailable:
            d = TransactionDescription.failed(tid, ErrorCode.coordinator_not_available)
        else:  # no __transaction_state: no id was ever used
            d = TransactionDescription.failed(
                tid,
                ErrorCode.transactional_id_not_found if tid else ErrorCode.invalid_request,
            )
        states.append(describe_transactions_entry(d))
    return {"throttle_time": 0, "transaction_states": states}


def describe_transactions_entry(d: TransactionDescription) -> dict[str, Any]:
    """One transactional id of DescribeTransactions (a refusal: ``TransactionDescription
    .failed``, Kafka's zero defaults)."""
    return {
        "error_code": d.error,
        "transactional_id": d.transactional_id,
        "transaction_state": d.state,
        "transaction_timeout": d.txn_timeout_ms,
        "transaction_start_time": d.txn_start_timestamp,
        "producer_id": d.producer_id,
        "producer_epoch": d.producer_epoch,
        "topics": [{"topic": t, "partitions": list(ps)} for t, ps in d.topics.items()],
    }


async def handle_list_transactions(ctx: RequestContext, req: Any) -> dict[str, Any]:
    """ListTransactions (KIP-664; Kafka's ``listTransactionStates``): filters by state,
    producer id, v1's duration (KIP-994) and v2's transactional id pattern (KIP-1152,
    a full-match regular expression); unknown state names come back in
    ``unknown_state_filters``."""
    try:
        tb = await _existing_coordinator(ctx)
    except (KompaktError, OSError):
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.coordinator_not_available,
            "unknown_state_filters": [],
            "transaction_states": [],
        }
    pattern = getattr(req, "transactional_id_pattern", None)
    try:
        matcher = re.compile(pattern) if pattern else None
    except re.error:
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.invalid_regular_expression,
            "unknown_state_filters": [],
            "transaction_states": [],
        }
    filters = (
        [int(p) for p in req.producer_id_filters],
        list(req.state_filters),
        int(getattr(req, "duration_filter", -1)),
    )
    if tb is None:  # no __transaction_state: nothing to list, unknown states still named
        listed, unknown = [], [n for n in filters[1] if not _known_state(n)]
    else:
        with tb.lock:
            listed, unknown = tb.coordinator.list_transactions(*filters)
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "unknown_state_filters": unknown,
        "transaction_states": [
            {"transactional_id": tid, "producer_id": pid, "transaction_state": state}
            for tid, pid, state in listed
            if matcher is None or matcher.fullmatch(tid)
        ],
    }


def _known_state(name: str) -> bool:
    try:
        TransactionState.from_name(name)
    except ValueError:
        return False
    return True


def handle_describe_producers(ctx: RequestContext, req: Any) -> dict[str, Any]:
    """DescribeProducers (KIP-664; Kafka's ``handleDescribeProducersRequest`` and
    ``ProducerStateManager.activeProducers``): per partition each producer id with
    its epoch, last sequence, last timestamp, coordinator epoch (-1: kompakt's markers
    come from its own coordinator, no epoch is kept) and the first offset of its open
    transaction (-1 if none). An unknown partition is UNKNOWN_TOPIC_OR_PARTITION.
    Blocking: reads the partition's log on first use, on a worker thread."""
    topics = []
    for t in req.topics:
        nparts = ctx.logs.partition_count(t.name) if ctx.logs.has_topic(t.name) else 0
        parts = []
        for p in t.partition_indexes:
            if not 0 <= p < nparts:
                parts.append(producers_error_partition(p, ErrorCode.unknown_topic_or_partition))
                continue
            parts.append(
                {
                    "partition_index": p,
                    "error_code": ErrorCode.none,
                    "error_message": None,
                    "active_producers": active_producers(ctx.state, t.name, int(p)),
                }
            )
        topics.append({"name": t.name, "partitions": parts})
    return {"throttle_time": 0, "topics": topics}


def producers_error_partition(index: int, code: ErrorCode) -> dict[str, Any]:
    """A DescribeProducers partition answered ``code``: no producers listed."""
    return {
        "partition_index": index,
        "error_code": code,
        "error_message": None,
        "active_producers": [],
    }


def active_producers(state: Any, topic: str, partition: int) -> list[dict[str, int]]:
    """The producers of one partition as DescribeProducers reports them."""
    plog = state.logs.get_log(topic, partition)
    with plog.lock:
        entries = dict(state.producers.for_log(plog).entries)
    ongoing = plog.transactions.snapshot()  # fed at append time (log.transactions)
    out = []
    for pid, e in sorted(entries.items()):
        last = e.batches[-1] if e.batches else None
        out.append(
            {
                "producer_id": pid,
                "producer_epoch": e.epoch,
                "last_sequence": last.last_seq if last else -1,
                "last_timestamp": last.timestamp if last else -1,
                "coordinator_epoch": -1,
                "current_txn_start_offset": ongoing.get(pid, -1),
            }
        )
    return out
