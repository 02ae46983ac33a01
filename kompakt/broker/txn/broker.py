"""The transaction coordinator with its I/O: the threaded side of the sans-IO
:class:`~kompakt.broker.txn.coordinator.TransactionCoordinator`, as
:mod:`kompakt.broker.coordinator.handlers` is the group coordinator's. One per broker,
kept in ``state.extra``, called under its :attr:`TransactionBroker.lock` by whichever
thread serves the request (:mod:`~kompakt.broker.txn.inline`: AddPartitionsToTxn and
EndTxn on a handler thread, the rest on the loop), its timers on the broker's loop.
Each ``__transaction_state`` record is appended by the thread that decided it, under
the lock, so in the coordinator's order; its fsync runs on that handler thread or on
the log thread, which also writes the markers, after which the Complete record goes
first in its partition's next batch (Kafka's ``TransactionStateManager`` appends and
``TransactionMarkerChannelManager``).

The coordinator's state is stored in :class:`~kompakt.broker.txn.log.TransactionLog`,
read back at start-up (a transaction found in PrepareCommit/PrepareAbort then gets its
markers and its Complete record).

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
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kio.schema.errors import ErrorCode

from kompakt.broker.coordinator import handlers as group_handlers
from kompakt.broker.coordinator import records as group_rec
from kompakt.broker.coordinator.faults import NO_FAULTS, CoordinatorFaults
from kompakt.broker.coordinator.records import OffsetAndMetadata
from kompakt.broker.coordinator.state import Group
from kompakt.broker.coordinator.storage import OFFSETS_TOPIC
from kompakt.broker.handlers.common import error_of
from kompakt.broker.txn.coordinator import TransactionCoordinator
from kompakt.broker.txn.inline import ANSWER_WAIT_S, LockedScheduler, on_loop, owe_fsync
from kompakt.broker.txn.log import TRANSACTION_STATE_TOPIC, TransactionLog
from kompakt.broker.txn.records import TransactionLogValue
from kompakt.broker.txn.results import (
    Append,
    MarkersWritten,
    Records,
    TransactionConfig,
    TransactionResult,
)
from kompakt.broker.txn.state import Completion, TopicPartition
from kompakt.broker.workers import after_answer
from kompakt.errors import KompaktError, UnknownTopicError
from kompakt.record.encode import build_control_batch, build_simple_batch
from kompakt.record.header import CONTROL_ABORT, CONTROL_COMMIT

log = logging.getLogger("kompakt.broker.txn")

_KEY = "txn_coordinator"
COMPLETE_FLUSH_DELAY_MS = 50
"""How long a Complete record waits to go with another append before one of its own:
longer than a client takes from EndTxn's answer to its next AddPartitionsToTxn, short
enough that an idle id's record is on disk at once to a person's eye."""


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
            add_partitions_retry_backoff_max_ms=int(
                cfg.get("add.partitions.to.txn.retry.backoff.max.ms")
            ),
        )
        self.lock = threading.RLock()
        """guards ``coordinator`` and its state: held by whoever calls it (a handler
        thread, the loop's handlers and timers, the marker writer's completion), so its
        ``__transaction_state`` appends are made in the order it decides them
        (:mod:`~kompakt.broker.txn.inline`; Kafka's ``txnMetadata.inLock``)."""
        self.ready = False  # set once, by the loop, when loaded
        self._io = ThreadPoolExecutor(1, thread_name_prefix="kompakt-txn-log")
        self._flushers = ThreadPoolExecutor(4, thread_name_prefix="kompakt-txn-fsync")
        self._flush_due: set[int] = set()  # guarded by ``lock``
        """``__transaction_state`` partitions with a Complete record's fsync ahead."""
        self._owed: dict[int, Records] = {}  # guarded by ``lock``
        """Complete records by partition, not yet appended: each goes first in the
        partition's next batch (:meth:`_append_now`)."""
        self.coordinator = self._make(clock or state.logs.clock)
        self._loaded: asyncio.Task | None = None

    def _make(self, clock: Callable[[], int]) -> TransactionCoordinator:
        offsets = int(self.state.config.get("offsets.topic.num.partitions"))
        return TransactionCoordinator(
            self.config,
            LockedScheduler(self.loop, clock, self.lock),
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
        with self.lock:
            self.coordinator.load(found)
            self.coordinator.startup()
        self.ready = True
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
        with self.lock:
            self.coordinator.shutdown()
            for partition in list(self._owed):  # the log's close flushes them
                try:
                    self._append_now(partition, [])
                except Exception as exc:  # a reload completes their PrepareX again
                    log.warning("transaction log write failed: %s", exc)
        self._io.shutdown(wait=False)
        self._flushers.shutdown(wait=False)

    # -- the coordinator's I/O -----------------------------------------------------------
    def _on_io(self, fn: Callable[[], None], locked: bool = True) -> Completion[ErrorCode]:
        """Run ``fn`` on the log thread; complete with its error code there, under
        :attr:`lock` (a coordinator completion), or on the loop if not ``locked`` (a
        completion touching the group coordinator, whose state the loop owns). The
        marker write's completion, one per transaction, thereby costs no wake of the
        loop and no second thread hop."""
        out: Completion[ErrorCode] = Completion()
        loop = self.loop

        def run() -> None:
            code = ErrorCode.none
            try:
                fn()
            except Exception as exc:
                code = ErrorCode(error_of(exc)[0])
                log.warning("transaction log write failed: %s", exc)
            if locked:
                with self.lock:
                    out.complete(code)
                return
            try:
                loop.call_soon_threadsafe(out.complete, code)
            except RuntimeError:  # the loop is closed: nobody waits for the answer
                pass

        def submit() -> None:
            try:
                self._io.submit(run)
            except RuntimeError:  # shut down: a reload finishes what is left
                with self.lock:
                    out.complete(ErrorCode.not_coordinator)

        # from a handler thread (EndTxn's markers): once its answer is written, so the
        # log thread does not take the interpreter lock from the loop writing it
        if not after_answer(submit):
            submit()
        return out

    def _append(self, partition: int, items: Records, durable: bool) -> Completion[ErrorCode]:
        """A ``__transaction_state`` append, made now on the calling thread (the
        coordinator's lock held: its records land in the order it decided them). A
        ``durable`` one completes once fsynced: by this thread after it lets go of the
        lock inside :func:`~kompakt.broker.txn.inline.run_inline`, else by the log
        thread; one not ``durable`` (a Complete record) at once, fsynced by
        :meth:`_flush_soon`."""
        out: Completion[ErrorCode] = Completion()
        try:
            end = self._append_now(partition, items)
        except Exception as exc:
            log.warning("transaction log write failed: %s", exc)
            out.complete(ErrorCode(error_of(exc)[0]))
            return out
        if not durable:
            out.complete(ErrorCode.none)
            self._flush_soon(partition)
        elif not owe_fsync(lambda: self.storage.flush_covering(partition, end), out):
            self._on_io(lambda: self.storage.flush(partition)).add_done_callback(out.complete)
        return out

    def _append_now(self, partition: int, items: Records) -> int:
        """Append ``items`` (under :attr:`lock`) after the partition's owed Complete
        records, in one batch; returns the log end offset after it. A failed append
        keeps them owed."""
        owed = self._owed.pop(partition, None)
        try:
            return self.storage.append(partition, owed + items if owed else items)
        except Exception:
            if owed:
                self._owed[partition] = owed
            raise

    def _locked(self, fn: Callable[[Any], None]) -> Callable[[Any], None]:
        """``fn`` run under :attr:`lock` (a completion reaching the coordinator)."""

        def run(value: Any) -> None:
            with self.lock:
                fn(value)

        return run

    def _flush_soon(self, partition: int) -> None:
        """Append and fsync a Complete record of ``partition`` a little later unless
        another append took it and its fsync covered it by then: nothing is answered on
        it (a reload would complete its PrepareX again), and in a stream of
        transactions the id's next AddPartitionsToTxn arrives first and appends and
        fsyncs it with its own record, so a transaction costs no append, fsync or
        log-thread job of its own for it. One timer per partition at a time, set from
        any thread holding :attr:`lock`."""
        if partition in self._flush_due:
            return
        self._flush_due.add(partition)

        def due() -> None:  # on the loop, under the lock (LockedScheduler)
            self._flush_due.discard(partition)
            if partition in self._owed:  # nobody appended to the partition meanwhile
                try:
                    self._append_now(partition, [])
                except Exception as exc:  # still owed: tried again a little later
                    log.warning("transaction log write failed: %s", exc)
                    self._flush_soon(partition)
                    return
            if self.storage.unflushed(partition):
                self._on_io(lambda: self.storage.flush(partition))

        self.coordinator.scheduler.call_later(COMPLETE_FLUSH_DELAY_MS, due)

    def _write_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        result: TransactionResult,
        partitions: frozenset[TopicPartition],
        complete: Append,
    ) -> Completion[MarkersWritten]:
        """Kafka's ``WriteTxnMarkers`` to this node: a COMMIT or ABORT control batch
        appended to each partition (a partition already marked by an earlier, failed
        try is skipped; a deleted one is dropped, as Kafka's marker channel does), then
        the transactional offsets of ``__consumer_offsets`` applied or dropped. Once
        the markers are fsynced, the ``complete`` record is owed to its partition: it
        goes first in the partition's next batch (in a stream of transactions, the
        id's next Ongoing record's) or in one of its own a little later
        (:meth:`_flush_soon`), so a transaction costs no append of its own for it.
        Kafka's order holds: the record is written after the markers are durable, and
        the id's next record after it."""
        todo = set(partitions)
        unflushed: dict[TopicPartition, Any] = {}  # marker appended, not yet fsynced
        control = CONTROL_COMMIT if result == TransactionResult.COMMIT else CONTROL_ABORT

        hook = self.faults.before_txn_markers

        def write() -> None:
            if hook is not None:
                hook(producer_id)
            for topic, partition in sorted(todo - unflushed.keys()):
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
                    self.state.producers.for_log(plog)  # built: the append feeds it
                    plog.append(marker, trusted=True)
                unflushed[(topic, partition)] = plog
            self._flush_together(unflushed, todo)

        out: Completion[MarkersWritten] = Completion()

        # The producer's transactional offsets complete when its marker reaches
        # __consumer_offsets (Kafka's handleWriteTxnMarkersRequest calls the group
        # coordinator's onTransactionCompleted for that topic's partitions only): known
        # from the partitions alone, so no other thread reads the group coordinator's
        # state, which the loop owns; the completion then runs there.
        offsets = any(topic == OFFSETS_TOPIC for topic, _partition in partitions)

        def written(error: ErrorCode) -> None:  # under the lock; on the loop if offsets
            if error != ErrorCode.none:
                return out.complete((error, ErrorCode.none))
            if offsets:
                self._complete_offsets(producer_id, result)
            partition, records = complete
            self._owed.setdefault(partition, []).extend(records)
            out.complete((error, ErrorCode.none))
            self._flush_soon(partition)

        written_on = self._on_io(write, locked=not offsets)
        written_on.add_done_callback(self._locked(written) if offsets else written)
        return out

    def _flush_together(
        self, unflushed: dict[TopicPartition, Any], todo: set[TopicPartition]
    ) -> None:
        """fsync the partitions' markers at once, each on its own thread (a journaling
        file system commits fsyncs that wait together in one go). Only the ``.log``
        files: Kafka's ``handleWriteTxnMarkersRequest`` appends the markers with
        ``requiredAcks = -1``, durable as an acks=all Produce (the indexes and the
        recovery point are the periodic flush's, rebuilt by recovery). A partition done
        leaves ``unflushed`` and ``todo``, a failed one stays for the retry, which then
        only fsyncs it (no second marker), and the first failure is raised."""
        if len(unflushed) == 1:  # nothing to overlap
            ((tp, plog),) = unflushed.items()
            plog.flush_records()
            del unflushed[tp]
            todo.discard(tp)
            return
        futures = [
            (tp, self._flushers.submit(plog.flush_records)) for tp, plog in unflushed.items()
        ]
        failed: Exception | None = None
        for tp, fut in futures:
            try:
                fut.result()
            except Exception as exc:
                failed = failed or exc
                continue
            del unflushed[tp]
            todo.discard(tp)
        if failed is not None:
            raise failed

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
        partition, its records fsynced as acks=all's (``offsets.commit.required.acks``
        -1); pending until the marker."""
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
                ),
                trusted=True,
            )
            plog.flush_records()

        out: Completion[ErrorCode] = Completion()

        def written(error: ErrorCode) -> None:
            if error == ErrorCode.none:
                mine = gc.offsets.pending_txn.setdefault(producer_id, {})
                mine.setdefault(group_id, {}).update(offsets)
            out.complete(error)

        self._on_io(write, locked=False).add_done_callback(written)
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


def loaded_txn_broker(state: Any) -> TransactionBroker:
    """:func:`load_txn_coordinator` for a handler thread: the loaded coordinator, loaded
    on the loop first if need be (once, for the broker's first transactional request)."""
    tb = txn_broker_if_started(state)
    if tb is not None and tb.ready:
        return tb
    loop = tb.loop if tb is not None else state.notifier.loop
    loading = asyncio.run_coroutine_threadsafe(load_txn_coordinator(state), loop)
    return loading.result(ANSWER_WAIT_S)  # a TimeoutError (an OSError) if the loop stopped


async def wait_completion(c: Completion[Any], lock: threading.RLock | None = None) -> Any:
    """The value of ``c``, which any thread holding ``lock`` may complete."""
    loop = asyncio.get_running_loop()
    fut = loop.create_future()

    def set_result(value: Any) -> None:
        if not fut.done():
            fut.set_result(value)

    def done(value: Any) -> None:
        if on_loop(loop):
            set_result(value)
        else:
            loop.call_soon_threadsafe(set_result, value)

    if lock is None:
        c.add_done_callback(done)
    else:
        with lock:
            c.add_done_callback(done)
    return await fut
