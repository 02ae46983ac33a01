"""Transaction APIs: FindCoordinator (TRANSACTION keys), InitProducerId,
AddPartitionsToTxn, AddOffsetsToTxn, EndTxn and TxnOffsetCommit.

This is the asyncio layer of the sans-IO :class:`~kompakt.broker.txn.coordinator.
TransactionCoordinator`, as :mod:`kompakt.broker.coordinator.handlers` is the group
coordinator's: one coordinator per broker, kept in ``state.extra``, its timers on the
broker's loop (:class:`~kompakt.broker.coordinator.scheduler.LoopScheduler`) and its
log appends on one worker thread, so the ``__transaction_state`` records and the
markers are written in the order the coordinator asked for them (Kafka's
``TransactionStateManager`` appends and ``TransactionMarkerChannelManager``).

Kafka's storage of the coordinator's state is :class:`TransactionLog`: the compacted
``__transaction_state`` topic, read back at start-up (a transaction found in
PrepareCommit/PrepareAbort then gets its markers and its Complete record).

Offsets committed inside a transaction (TxnOffsetCommit) are written to
``__consumer_offsets`` at once in a transactional batch of the producer, as Kafka's
``GroupMetadataManager.storeOffsets`` writes them, and become the group's offsets only
when the transaction's COMMIT marker is written there (``handleTxnCompletion``); an
ABORT drops them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
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
from kompakt.broker.coordinator import records as group_rec
from kompakt.broker.coordinator.commit import check_commit
from kompakt.broker.coordinator.faults import NO_FAULTS, CoordinatorFaults
from kompakt.broker.coordinator.records import OffsetAndMetadata
from kompakt.broker.coordinator.scheduler import LoopScheduler
from kompakt.broker.coordinator.state import Group
from kompakt.broker.coordinator.storage import OFFSETS_TOPIC, ensure_internal_topic
from kompakt.broker.handlers.common import error_of
from kompakt.broker.protocol import ms
from kompakt.broker.registry import ApiRegistry
from kompakt.broker.state import RequestContext
from kompakt.broker.txn import records as txn_rec
from kompakt.broker.txn.coordinator import (
    Records,
    TransactionConfig,
    TransactionCoordinator,
    TransactionDescription,
    TransactionResult,
    client_error,
)
from kompakt.broker.txn.records import TransactionLogValue
from kompakt.broker.txn.state import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    Completion,
    TopicPartition,
    TransactionState,
)
from kompakt.errors import KompaktError, UnknownTopicError
from kompakt.record.decode import iter_batches
from kompakt.record.encode import build_control_batch, build_simple_batch
from kompakt.record.header import CONTROL_ABORT, CONTROL_COMMIT

log = logging.getLogger("kompakt.broker.txn")

TRANSACTION_STATE_TOPIC = "__transaction_state"

_KEY = "txn_coordinator"


class TransactionLog:
    """``__transaction_state`` in ``logs`` (Kafka's ``TransactionLog`` topic): compacted,
    one batch per append, flushed like an acks=all produce. Blocking file I/O."""

    def __init__(self, logs: Any, num_partitions: int, segment_bytes: int):
        self.logs = logs
        self.num_partitions = num_partitions
        self.segment_bytes = segment_bytes

    def ensure_topic(self) -> None:
        """Create the topic if absent; an existing one keeps its partition count."""
        self.num_partitions = ensure_internal_topic(
            self.logs, TRANSACTION_STATE_TOPIC, self.num_partitions, self.segment_bytes
        )

    def read(self) -> list[tuple[str, TransactionLogValue | None]]:
        """Every record in offset order, decoded (Kafka's
        ``loadTransactionsForTxnTopicPartition``); undecodable ones are skipped."""
        out: list[tuple[str, TransactionLogValue | None]] = []
        for p in range(self.logs.partition_count(TRANSACTION_STATE_TOPIC)):
            plog = self.logs.get_log(TRANSACTION_STATE_TOPIC, p)
            for batch in plog.iter_batches(plog.log_start_offset):
                if batch.header.is_control:
                    continue
                for r in batch.records():
                    if r.key is None:
                        continue
                    try:
                        found = txn_rec.read_record(bytes(r.key), r.value and bytes(r.value))
                    except Exception:
                        log.warning("skipping undecodable %s record at %d", plog.name, r.offset)
                        continue
                    if found is not None:
                        out.append(found)
        return out

    def append(self, partition: int, items: Records) -> None:
        plog = self.logs.get_log(TRANSACTION_STATE_TOPIC, partition)
        plog.append(build_simple_batch(items, timestamp=plog.clock()))
        plog.flush()


class TransactionBroker:
    """The coordinator with its I/O: ``__transaction_state``, the markers and the
    transactional offsets waiting for their marker."""

    def __init__(
        self,
        state: Any,
        clock: Callable[[], int] | None = None,
        faults: CoordinatorFaults = NO_FAULTS,
    ):
        cfg = state.config
        self.faults = faults
        loop = asyncio.get_running_loop()
        self.state = state
        self.loop = loop
        self.storage = TransactionLog(
            state.logs,
            int(cfg.get("transaction.state.log.num.partitions")),
            int(cfg.get("transaction.state.log.segment.bytes")),
        )
        self.config = TransactionConfig(
            transactional_id_expiration_ms=int(cfg.get("transactional.id.expiration.ms")),
            transaction_max_timeout_ms=int(cfg.get("transaction.max.timeout.ms")),
            transaction_state_log_num_partitions=self.storage.num_partitions,
            abort_timed_out_transaction_cleanup_interval_ms=int(
                cfg.get("transaction.abort.timed.out.transaction.cleanup.interval.ms")
            ),
            remove_expired_transaction_cleanup_interval_ms=int(
                cfg.get("transaction.remove.expired.transaction.cleanup.interval.ms")
            ),
        )
        self._io = ThreadPoolExecutor(1, thread_name_prefix="kompakt-txn-log")
        self.coordinator = self._make(clock or state.logs.clock)
        self._loaded: asyncio.Task | None = None

    def _make(self, clock: Callable[[], int]) -> TransactionCoordinator:
        offsets = int(self.state.config.get("offsets.topic.num.partitions"))
        return TransactionCoordinator(
            self.config,
            LoopScheduler(self.loop, clock),
            self._append,
            self._write_markers,
            self.state.producers.new_producer_id,
            lambda group: group_rec.partition_for(group, offsets),
        )

    # -- start-up ------------------------------------------------------------------------
    async def ensure_loaded(self) -> None:
        """Create or read ``__transaction_state`` once, then start the periodic tasks."""
        if self._loaded is None:
            self._loaded = asyncio.ensure_future(self._load())
        await asyncio.shield(self._loaded)

    async def _load(self) -> None:
        try:
            found = await self.loop.run_in_executor(self._io, self._read)
            # before the load finishes cut-off commits: their offsets wait in the log
            pending = await self.loop.run_in_executor(self._io, self._read_pending_offsets)
        except BaseException:
            self._loaded = None  # the next request tries again
            raise
        if pending:  # the group coordinator's offsets first, so the marker's win
            await group_handlers.load_coordinator(self.state)
        # an existing topic's partition count wins over the configured one (Kafka's
        # partitionFor uses the topic's), or ids would be looked up in the wrong place
        self.coordinator.config = self.config = dataclasses.replace(
            self.config, transaction_state_log_num_partitions=self.storage.num_partitions
        )
        gc = group_handlers.coordinator_if_started(self.state)
        for pid, groups in pending.items():
            assert gc is not None  # loaded above
            mine = gc.offsets.pending_txn.setdefault(pid, {})
            for group_id, offsets in groups.items():
                mine.setdefault(group_id, {}).update(offsets)
        for _tid, value in found:
            if value is not None:
                self.state.producers.ensure_above(value.producer_id)
        self.coordinator.load(found)
        self.coordinator.startup()
        if found:
            log.info(
                "loaded %d transactional ids from %s",
                len(self.coordinator.transactions),
                TRANSACTION_STATE_TOPIC,
            )

    def _read(self) -> list[tuple[str, TransactionLogValue | None]]:
        self.storage.ensure_topic()
        return self.storage.read()

    def _read_pending_offsets(
        self,
    ) -> dict[int, dict[str, dict[tuple[str, int], OffsetAndMetadata]]]:
        """TxnOffsetCommit records in ``__consumer_offsets`` whose producer has no marker
        after them (Kafka's ``pendingTransactionalOffsetCommits`` at load): a restart
        that finishes their transaction applies or drops them like a live one."""
        logs = self.state.logs
        pending: dict[int, dict[str, dict[tuple[str, int], OffsetAndMetadata]]] = {}
        if not logs.has_topic(OFFSETS_TOPIC):
            return pending
        for p in range(logs.partition_count(OFFSETS_TOPIC)):
            plog = logs.get_log(OFFSETS_TOPIC, p)
            for batch in plog.iter_batches(plog.log_start_offset):
                h = batch.header
                if not h.is_transactional:
                    continue
                if h.is_control:
                    pending.pop(h.producer_id, None)
                    continue
                for r in batch.records():
                    parsed = group_rec.parse_key(bytes(r.key)) if r.key is not None else None
                    if parsed is None or parsed[0] != "offset" or r.value is None:
                        continue
                    group_id, topic, partition = parsed[1]
                    om = group_rec.parse_offset_value(bytes(r.value))
                    groups = pending.setdefault(h.producer_id, {})
                    groups.setdefault(group_id, {})[(topic, partition)] = om
        return pending

    def shutdown(self) -> None:
        self.coordinator.shutdown()
        self._io.shutdown(wait=False)

    # -- the coordinator's I/O -----------------------------------------------------------
    def _on_io(self, fn: Callable[[], None]) -> Completion[ErrorCode]:
        """Run ``fn`` on the log thread; complete on the loop with its error code."""
        out: Completion[ErrorCode] = Completion()

        def done(fut: asyncio.Future) -> None:
            exc = fut.exception()
            if exc is None:
                out.complete(ErrorCode.none)
            else:
                code, _msg = error_of(exc)
                log.warning("transaction log write failed: %s", exc)
                out.complete(ErrorCode(code))

        try:
            self.loop.run_in_executor(self._io, fn).add_done_callback(done)
        except RuntimeError:  # shut down: a reload finishes what is left
            out.complete(ErrorCode.not_coordinator)
        return out

    def _append(self, partition: int, items: Records) -> Completion[ErrorCode]:
        return self._on_io(lambda: self.storage.append(partition, items))

    def _write_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        result: TransactionResult,
        partitions: frozenset[TopicPartition],
    ) -> Completion[ErrorCode]:
        """Kafka's ``WriteTxnMarkers`` to this node: a COMMIT or ABORT control batch
        appended to each partition (a partition already marked by an earlier, failed
        try is skipped; a deleted one is dropped, as Kafka's marker channel does), then
        the transactional offsets of ``__consumer_offsets`` applied or dropped."""
        todo = set(partitions)
        control = CONTROL_COMMIT if result == TransactionResult.COMMIT else CONTROL_ABORT

        hook = self.faults.before_txn_markers

        def write() -> None:
            if hook is not None:
                hook(producer_id)
            for topic, partition in sorted(todo):
                try:
                    plog = self.state.logs.get_log(topic, partition)
                except (UnknownTopicError, KompaktError) as exc:
                    if isinstance(exc, UnknownTopicError):
                        todo.discard((topic, partition))
                        continue
                    raise
                marker = build_control_batch(
                    control,
                    producer_id=producer_id,
                    producer_epoch=producer_epoch,
                    timestamp=plog.clock(),
                )
                with plog.lock:  # the marker's epoch fences older ones (see producers)
                    producers = self.state.producers.for_log(plog)
                    info = plog.append(marker)
                    for b in iter_batches(marker):
                        producers.update(b.header, info.first_offset)
                plog.flush()
                todo.discard((topic, partition))

        out: Completion[ErrorCode] = Completion()

        def written(error: ErrorCode) -> None:
            if error == ErrorCode.none:
                self._complete_offsets(producer_id, result)
            out.complete(error)

        self._on_io(write).add_done_callback(written)
        return out

    def _complete_offsets(self, producer_id: int, result: TransactionResult) -> None:
        """Kafka's ``GroupMetadataManager.handleTxnCompletion``: the producer's pending
        offsets become its groups' offsets on COMMIT and vanish on ABORT."""
        gc = group_handlers.coordinator_if_started(self.state)
        if gc is None:  # nothing pending: the group coordinator's load replays the log
            return
        pending = gc.offsets.pending_txn.pop(producer_id, {})
        if result != TransactionResult.COMMIT:
            return
        for group_id, offsets in pending.items():
            g = gc.offsets.groups.get(group_id)
            if g is None:
                g = gc.offsets.groups[group_id] = Group(group_id)
            g.offsets.update(offsets)

    def store_offsets(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        offsets: dict[tuple[str, int], OffsetAndMetadata],
    ) -> Completion[ErrorCode]:
        """TxnOffsetCommit's write (Kafka's ``storeOffsets`` with a producer id): one
        transactional batch of the producer in the group's ``__consumer_offsets``
        partition; pending until the marker."""
        gc = group_handlers.coordinator_if_started(self.state)
        assert gc is not None and gc.storage is not None
        storage = gc.storage
        items = [
            (group_rec.offset_key(group_id, t, p), group_rec.offset_value(om))
            for (t, p), om in offsets.items()
        ]
        partition = storage.partition_for(group_id)

        def write() -> None:
            plog = self.state.logs.get_log(OFFSETS_TOPIC, partition)
            plog.append(
                build_simple_batch(
                    items,
                    timestamp=plog.clock(),
                    producer_id=producer_id,
                    producer_epoch=producer_epoch,
                    transactional=True,
                )
            )
            plog.flush()

        out: Completion[ErrorCode] = Completion()

        def written(error: ErrorCode) -> None:
            if error == ErrorCode.none:
                mine = gc.offsets.pending_txn.setdefault(producer_id, {})
                mine.setdefault(group_id, {}).update(offsets)
            out.complete(error)

        self._on_io(write).add_done_callback(written)
        return out


def txn_broker_if_started(state: Any) -> TransactionBroker | None:
    """The broker's transaction coordinator if the broker or a request made it."""
    return state.extra.get(_KEY)


def start_txn_coordinator(
    state: Any, clock: Callable[[], int] | None = None, faults: CoordinatorFaults = NO_FAULTS
) -> TransactionBroker:
    """Make the broker's transaction coordinator on the running loop (not yet loaded).
    It shuts down when the broker starts closing, like the group coordinator."""
    tb = TransactionBroker(state, clock, faults)
    state.extra[_KEY] = tb
    group_handlers.shutdown_when_closing(state, _KEY, tb)
    return tb


async def load_txn_coordinator(state: Any) -> TransactionBroker:
    """The transaction coordinator, made if need be and loaded from
    ``__transaction_state`` on first use. The broker calls it at start-up when that
    topic exists, so a transaction cut off by a crash finishes without a client."""
    tb = txn_broker_if_started(state)
    if tb is None:
        tb = start_txn_coordinator(state)
    await tb.ensure_loaded()
    return tb


async def _wait(c: Completion[Any]) -> Any:
    fut = asyncio.get_running_loop().create_future()

    def done(value: Any) -> None:
        if not fut.done():
            fut.set_result(value)

    c.add_done_callback(done)
    return await fut


async def _coordinator(ctx: RequestContext) -> TransactionCoordinator:
    return (await load_txn_coordinator(ctx.state)).coordinator


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
        tc = await _coordinator(ctx)
    except (KompaktError, OSError):
        return _init_failed(ErrorCode.coordinator_not_available)
    result = await _wait(tc.init_producer_id(tid, ms(req.transaction_timeout), expected))
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


async def handle_add_partitions_to_txn(ctx: RequestContext, req: Any) -> dict[str, Any]:
    """AddPartitionsToTxn v0-3 (one transaction per request): an unknown partition
    fails the request, the others answer OPERATION_NOT_ATTEMPTED (Kafka's
    ``handleAddPartitionsToTxnRequest``)."""
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
            tc = await _coordinator(ctx)
            code = await _wait(
                tc.add_partitions(
                    tid,
                    int(req.v3_and_below_producer_id),
                    int(req.v3_and_below_producer_epoch),
                    wanted,
                )
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
        tc = await _coordinator(ctx)
        code = await _wait(
            tc.add_offsets(
                req.transactional_id, int(req.producer_id), int(req.producer_epoch), req.group_id
            )
        )
    except (KompaktError, OSError):
        code = ErrorCode.coordinator_not_available
    return {"throttle_time": 0, "error_code": client_error(code, ctx.api_key, ctx.api_version)}


async def handle_end_txn(ctx: RequestContext, req: Any) -> dict[str, Any]:
    """EndTxn: answered once PrepareCommit/PrepareAbort is written (Kafka's
    ``handleEndTxnRequest``); the markers follow."""
    result = TransactionResult.COMMIT if req.committed else TransactionResult.ABORT
    try:
        tc = await _coordinator(ctx)
        code = await _wait(
            tc.end_txn(req.transactional_id, int(req.producer_id), int(req.producer_epoch), result)
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


async def _existing_coordinator(ctx: RequestContext) -> TransactionCoordinator | None:
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
    tc: TransactionCoordinator | None = None
    unavailable = False
    try:
        tc = await _existing_coordinator(ctx)
    except (KompaktError, OSError):
        unavailable = True
    states = []
    for tid in req.transactional_ids:
        if tc is not None:
            d = tc.describe(tid)
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
        tc = await _existing_coordinator(ctx)
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
    if tc is None:  # no __transaction_state: nothing to list, unknown states still named
        listed, unknown = [], [n for n in filters[1] if not _known_state(n)]
    else:
        listed, unknown = tc.list_transactions(*filters)
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
