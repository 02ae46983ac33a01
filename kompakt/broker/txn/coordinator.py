"""The transaction coordinator's decisions, sans-IO (Kafka's ``TransactionCoordinator``
with the cache, timers and log half of ``TransactionStateManager``).

Inputs are requests as plain arguments; outputs are kio ``ErrorCode`` values and
results, each in a :class:`~kompakt.broker.txn.state.Completion` because most answers
wait for a log append. The coordinator does no I/O itself. It is given:

- ``append(partition, records, durable)``: append ``[(key, value | None)]`` to that
  partition of ``__transaction_state`` as one batch, completing with an ``ErrorCode``
  once written, and fsynced too if ``durable`` (acks=all);
- ``write_markers(producer_id, epoch, result, partitions, complete)``: append a COMMIT
  or ABORT control batch to each data partition, then the ``complete`` record as
  ``append`` does unfsynced, completing with both errors (a markers error makes the
  coordinator retry them all, so a partition already marked must be skipped by the
  callee, as Kafka's marker channel drops partitions it has done);
- ``new_producer_id()``: the broker's producer id allocator (``ProducerIdManager``);
- a :class:`~kompakt.broker.coordinator.scheduler.Scheduler` (``now`` / ``call_later``)
  for the periodic aborts and id expiry, and the waits of parked AddPartitionsToTxn.

The flow of one transaction, as in Kafka: InitProducerId (Empty, epoch bump) →
AddPartitionsToTxn / AddOffsetsToTxn (Ongoing) → EndTxn: PrepareX appended, the client
answered, markers, then CompleteX; a restart in between finishes it in :meth:`load`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from kio.schema.errors import ErrorCode

from kompakt.broker.coordinator.records import partition_for
from kompakt.broker.coordinator.scheduler import Scheduler, TimerHandle
from kompakt.broker.coordinator.storage import OFFSETS_TOPIC
from kompakt.broker.txn import records as rec
from kompakt.broker.txn.records import TransactionLogValue
from kompakt.broker.txn.results import (  # TransactionDescription: also the guard's
    APPEND_ERRORS,
    OFFSETS_TOPIC_PARTITIONS,
    RETRY_BACKOFF_MS,
    Append,
    AppendFn,
    Done,
    InitProducerIdResult,
    MarkerFn,
    MarkersWritten,
    Records,
    TransactionConfig,
    TransactionDescription,
    TransactionResult,
    end_txn_outside_ongoing,
)
from kompakt.broker.txn.state import (
    NO_PRODUCER_EPOCH,
    Completion,
    IllegalTransactionTransition,
    TopicPartition,
    TransactionMetadata,
    TransactionState,
    TxnTransitMetadata,
    is_epoch_exhausted,
)
from kompakt.broker.txn.views import TransactionViews
from kompakt.broker.txn.waits import CompletionWaits

log = logging.getLogger("kompakt.broker.txn")

__all__ = ["TransactionCoordinator", "TransactionDescription"]

QUIET_ABORT_ERRORS = frozenset(
    (
        ErrorCode.invalid_producer_id_mapping,
        ErrorCode.producer_fenced,
        ErrorCode.concurrent_transactions,
    )
)
"""A timed-out transaction's abort failing with these found the producer moved on
(Kafka logs them at debug)."""


class TransactionCoordinator(TransactionViews):
    """Kafka's ``TransactionCoordinator`` for every partition of ``__transaction_state``
    (one node leads them all); what it answers without deciding is
    :class:`~kompakt.broker.txn.views.TransactionViews`."""

    def __init__(
        self,
        config: TransactionConfig,
        scheduler: Scheduler,
        append: AppendFn,
        write_markers: MarkerFn,
        new_producer_id: Callable[[], int],
        offsets_partition_for: Callable[[str], int] | None = None,
    ):
        self.config = config  # guarded by the broker's lock
        self.scheduler = scheduler  # immutable; thread-safe
        self._append_fn = append  # immutable
        self._write_markers = write_markers  # immutable
        self._new_producer_id = new_producer_id  # immutable; thread-safe
        self._offsets_partition_for = offsets_partition_for or (  # immutable
            lambda group: partition_for(group, OFFSETS_TOPIC_PARTITIONS)
        )
        self.transactions: dict[str, TransactionMetadata] = {}  # guarded by the broker's lock
        """The cache (Kafka's ``transactionMetadataCache``), by transactional id."""
        self._timers: list[TimerHandle] = []  # guarded by the broker's lock
        self._active = False  # guarded by the broker's lock
        self._waits = CompletionWaits(scheduler, config.add_partitions_retry_backoff_max_ms)
        """Parked requests; guarded by the broker's lock (``TransactionBroker.lock``)."""

    # -- lifecycle -------------------------------------------------------------------------
    def startup(self) -> None:
        """Start the two periodic tasks (Kafka's ``startup``: "transaction-abort" and
        ``enableTransactionalIdExpiration``), each first run one interval from now."""
        self._active = True
        self._every(
            self.config.abort_timed_out_transaction_cleanup_interval_ms,
            self.abort_timed_out_transactions,
        )
        self._every(
            self.config.remove_expired_transaction_cleanup_interval_ms,
            self.expire_transactional_ids,
        )

    def shutdown(self) -> None:
        self._active = False
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()

    def _every(self, interval_ms: int, task: Callable[[], None]) -> None:
        slot = len(self._timers)

        def run() -> None:
            if not self._active:
                return
            self._timers[slot] = self.scheduler.call_later(interval_ms, run)
            task()

        self._timers.append(self.scheduler.call_later(interval_ms, run))

    def partition_for(self, transactional_id: str) -> int:
        """The ``__transaction_state`` partition of an id (Kafka's ``partitionFor``:
        ``Utils.abs(transactionalId.hashCode) % partitions``)."""
        return rec.partition_of(transactional_id, self.config.transaction_state_log_num_partitions)

    # -- load --------------------------------------------------------------------------
    def load(self, records: Iterable[tuple[str, TransactionLogValue | None]]) -> None:
        """Kafka's ``loadTransactionsForTxnTopicPartition``: replay decoded
        ``__transaction_state`` records in offset order (the last value of an id wins, a
        tombstone removes it), then finish each transaction found in PrepareCommit or
        PrepareAbort: write its markers and append its Complete record. Ids the records
        tombstone leave the cache."""
        loaded: dict[str, TransactionMetadata | None] = {}
        for tid, value in records:
            loaded[tid] = None if value is None else value.metadata(tid)
        for transactional_id, found in loaded.items():
            if found is None:
                self.transactions.pop(transactional_id, None)
            else:
                self.transactions[transactional_id] = found
        for meta in loaded.values():
            if meta is not None and meta.state.in_prepare:
                result = (
                    TransactionResult.COMMIT
                    if meta.state == TransactionState.PREPARE_COMMIT
                    else TransactionResult.ABORT
                )
                self._send_markers(meta, result, meta.prepare_complete(self.scheduler.now()))

    # -- InitProducerId ----------------------------------------------------------------
    def init_producer_id(
        self,
        transactional_id: str | None,
        txn_timeout_ms: int,
        expected: tuple[int, int] | None = None,
    ) -> Completion[InitProducerIdResult]:
        """Kafka's ``handleInitProducerId``. ``expected`` is the (producer id, epoch) a
        KIP-360 client sends to bump its epoch after an abortable error (None when the
        request carries -1/-1)."""
        if transactional_id is None:
            return Completion.of(InitProducerIdResult(self._new_producer_id(), 0, ErrorCode.none))
        if not transactional_id:
            return Completion.of(InitProducerIdResult.failed(ErrorCode.invalid_request))
        if not 0 < txn_timeout_ms <= self.config.transaction_max_timeout_ms:
            return Completion.of(InitProducerIdResult.failed(ErrorCode.invalid_transaction_timeout))
        now = self.scheduler.now()
        meta = self.transactions.get(transactional_id)
        if meta is None:
            meta = TransactionMetadata(
                transactional_id,
                producer_id=self._new_producer_id(),
                txn_timeout_ms=txn_timeout_ms,
                txn_last_update_timestamp=now,
            )
            self.transactions[transactional_id] = meta
        transit = self._prepare_init(meta, txn_timeout_ms, expected, now)
        out: Completion[InitProducerIdResult] = Completion()
        if isinstance(transit, ErrorCode):
            out.complete(InitProducerIdResult.failed(transit))
        elif transit.state == TransactionState.PREPARE_EPOCH_FENCE:
            # abort the open transaction first; the client retries and bumps again
            def fenced(error: ErrorCode) -> None:
                if error == ErrorCode.none:
                    error = ErrorCode.concurrent_transactions
                out.complete(InitProducerIdResult.failed(error))

            self._end_transaction(
                transactional_id,
                transit.producer_id,
                transit.producer_epoch,
                TransactionResult.ABORT,
                False,
                fenced,
            )
        else:

            def appended(error: ErrorCode) -> None:
                if error == ErrorCode.none:
                    result = InitProducerIdResult(
                        transit.producer_id, transit.producer_epoch, error
                    )
                else:
                    result = InitProducerIdResult.failed(error)
                out.complete(result)

            self._append_transit(meta, transit, appended)
        return out

    def _prepare_init(
        self,
        meta: TransactionMetadata,
        txn_timeout_ms: int,
        expected: tuple[int, int] | None,
        now: int,
    ) -> TxnTransitMetadata | ErrorCode:
        """Kafka's ``prepareInitProducerIdTransit``."""
        if meta.pending_transition_in_progress:
            return ErrorCode.concurrent_transactions
        if expected is not None:
            pid, epoch = expected
            known = (
                meta.producer_epoch == NO_PRODUCER_EPOCH
                or pid == meta.producer_id
                or (pid == meta.last_producer_id and is_epoch_exhausted(epoch))
            )
            if not known:
                return ErrorCode.producer_fenced
        state = meta.state
        if state.in_prepare:
            return ErrorCode.concurrent_transactions
        if state == TransactionState.ONGOING:
            # the fencing epoch is never returned: the abort runs, the client retries
            return meta.prepare_fence_producer_epoch()
        if state not in (
            TransactionState.EMPTY,
            TransactionState.COMPLETE_COMMIT,
            TransactionState.COMPLETE_ABORT,
        ):
            raise IllegalTransactionTransition(
                f"{meta.transactional_id} found in {state}, which is never entered"
            )
        if meta.epoch_exhausted and (expected is None or expected[1] == meta.producer_epoch):
            return meta.prepare_producer_id_rotation(
                self._new_producer_id(), txn_timeout_ms, now, expected is not None
            )
        transit = meta.prepare_increment_producer_epoch(
            txn_timeout_ms, None if expected is None else expected[1], now
        )
        return ErrorCode.producer_fenced if transit is None else transit

    # -- AddPartitionsToTxn / AddOffsetsToTxn ------------------------------------------
    def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
        wait: bool = True,
    ) -> Completion[ErrorCode]:
        """Kafka's ``handleAddPartitionsToTransaction`` (one error for every partition).
        Answers PRODUCER_FENCED for a stale epoch; :func:`client_error` turns it into
        INVALID_PRODUCER_EPOCH for clients before v2. While the id's previous
        transaction writes its markers and Complete record the request waits for them
        (:mod:`~kompakt.broker.txn.waits`) unless ``wait`` is False."""
        added = frozenset(partitions)
        if not transactional_id:
            return Completion.of(ErrorCode.invalid_request)
        meta = self.transactions.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return Completion.of(ErrorCode.invalid_producer_id_mapping)
        if meta.producer_epoch != producer_epoch:
            return Completion.of(ErrorCode.producer_fenced)
        if meta.pending_transition_in_progress or meta.state.in_prepare:
            if wait and meta.state.in_prepare and meta.pending_state is not None:
                return self._waits.park(
                    transactional_id,
                    lambda: self.add_partitions(
                        transactional_id, producer_id, producer_epoch, added, wait=False
                    ),
                )
            return Completion.of(ErrorCode.concurrent_transactions)
        if meta.state == TransactionState.ONGOING and added <= meta.topic_partitions:
            return Completion.of(ErrorCode.none)
        out: Completion[ErrorCode] = Completion()
        transit = meta.prepare_add_partitions(added, self.scheduler.now())
        self._append_transit(meta, transit, out.complete)
        return out

    def add_offsets(
        self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str
    ) -> Completion[ErrorCode]:
        """Kafka's ``handleAddOffsetsToTxnRequest``: add the group's
        ``__consumer_offsets`` partition to the transaction, so the offsets a
        TxnOffsetCommit writes there get the transaction's marker."""
        partition = (OFFSETS_TOPIC, self._offsets_partition_for(group_id))
        return self.add_partitions(transactional_id, producer_id, producer_epoch, [partition])

    # -- EndTxn --------------------------------------------------------------------------
    def end_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        result: TransactionResult,
    ) -> Completion[ErrorCode]:
        """Kafka's ``handleEndTransaction``: answered once PrepareCommit/PrepareAbort is
        in the log; markers and the Complete record follow."""
        out: Completion[ErrorCode] = Completion()
        self._end_transaction(
            transactional_id, producer_id, producer_epoch, result, True, out.complete
        )
        return out

    def _end_transaction(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        result: TransactionResult,
        from_client: bool,
        done: Done,
    ) -> None:
        """Kafka's ``endTransaction``; ``from_client`` False for the coordinator's own
        aborts (a fence), which carry the bumped epoch."""
        if not transactional_id:
            return done(ErrorCode.invalid_request)
        meta = self.transactions.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return done(ErrorCode.invalid_producer_id_mapping)
        if (from_client and producer_epoch != meta.producer_epoch) or (
            producer_epoch < meta.producer_epoch
        ):
            return done(ErrorCode.producer_fenced)
        fencing = meta.pending_state == TransactionState.PREPARE_EPOCH_FENCE
        if meta.pending_transition_in_progress and not fencing:
            return done(ErrorCode.concurrent_transactions)
        target = (
            TransactionState.PREPARE_COMMIT
            if result == TransactionResult.COMMIT
            else TransactionState.PREPARE_ABORT
        )
        state = meta.state
        if state != TransactionState.ONGOING:
            return done(end_txn_outside_ongoing(meta, result))
        if fencing:
            if target != TransactionState.PREPARE_ABORT:
                raise IllegalTransactionTransition("a fence only ever aborts")
            # the fence's epoch becomes the transaction's (Kafka sets it in place)
            meta.pending_state = None
            meta.producer_epoch = producer_epoch
            meta.last_producer_epoch = NO_PRODUCER_EPOCH
        transit = meta.prepare_abort_or_commit(target, self.scheduler.now())

        def prepared(error: ErrorCode) -> None:
            if error != ErrorCode.none:
                if fencing:
                    meta.has_failed_epoch_fence = True
                return done(error)
            # NONE means the Prepare record was adopted just now, in this same call
            # (``_append_transit``): nothing ran in between, so Kafka's re-check of the
            # metadata before sending markers cannot fail here.
            complete = meta.prepare_complete(self.scheduler.now())
            done(ErrorCode.none)
            self._send_markers(meta, result, complete)

        self._append_transit(meta, transit, prepared)

    # -- markers and completion ----------------------------------------------------------
    def _send_markers(
        self, meta: TransactionMetadata, result: TransactionResult, complete: TxnTransitMetadata
    ) -> None:
        """Kafka's ``TransactionMarkerChannelManager.addTxnMarkersToSend``: write the
        markers, then the Complete record (right after them, by the marker writer: the
        id's next AddPartitionsToTxn waits for it, KIP-890); retry either after a failure
        while the id still waits for this completion."""
        partitions = frozenset(meta.topic_partitions)
        ids, record = (complete.producer_id, complete.producer_epoch), self._record(meta, complete)

        def still_due() -> bool:
            return (
                self.transactions.get(meta.transactional_id) is meta
                and meta.pending_state == complete.state
            )

        def write() -> None:
            if not still_due():
                return
            self._write_markers(*ids, result, partitions, record).add_done_callback(written)

        def written(outcome: MarkersWritten) -> None:
            markers_error, record_error = outcome
            if markers_error != ErrorCode.none:
                log.warning(
                    "writing %s markers of %s failed (%s); retrying",
                    result.name,
                    meta.transactional_id,
                    markers_error.name,
                )
                self.scheduler.call_later(RETRY_BACKOFF_MS, write)
                return
            self._adopt(meta, complete, appended, completing=True)(record_error)

        def append() -> None:
            if still_due():
                self._append_transit(meta, complete, appended, completing=True)

        def appended(error: ErrorCode) -> None:
            if error == ErrorCode.coordinator_not_available:
                self.scheduler.call_later(RETRY_BACKOFF_MS, append)
            elif error != ErrorCode.none:
                log.warning(
                    "completing %s of %s failed (%s); a reload will finish it",
                    result.name,
                    meta.transactional_id,
                    error.name,
                )

        write()

    # -- the log -------------------------------------------------------------------------
    def _append_transit(
        self,
        meta: TransactionMetadata,
        transit: TxnTransitMetadata,
        done: Done,
        completing: bool = False,
    ) -> None:
        """Kafka's ``appendTransactionToLog``: append the transition's record, adopt it
        once written. A failure drops the pending state (the client may retry) unless
        ``completing``, a Complete record: kept pending while retried (``retryOnError``
        for COORDINATOR_NOT_AVAILABLE), adopted once appended, not fsynced (nothing is
        answered on it; lost, a reload completes the PrepareX again)."""
        partition, records = self._record(meta, transit)
        self._append_fn(partition, records, not completing).add_done_callback(
            self._adopt(meta, transit, done, completing)
        )

    def _record(self, meta: TransactionMetadata, transit: TxnTransitMetadata) -> Append:
        """The ``__transaction_state`` record of a transition, and its partition."""
        key = rec.key_bytes(meta.transactional_id)
        value = rec.value_bytes(TransactionLogValue.of(transit), self.config.value_version)
        return self.partition_for(meta.transactional_id), [(key, value)]

    def _adopt(
        self, meta: TransactionMetadata, transit: TxnTransitMetadata, done: Done, completing: bool
    ) -> Done:
        """After ``transit``'s append (see :meth:`_append_transit`): ``done`` told, and
        requests waiting on the id decided again once nothing is pending."""

        def appended(error: ErrorCode) -> None:
            error = APPEND_ERRORS.get(error, error)
            if error == ErrorCode.none:
                if self.transactions.get(meta.transactional_id) is not meta:
                    error = ErrorCode.not_coordinator
                else:
                    meta.complete_transition(transit)
            elif not (completing and error == ErrorCode.coordinator_not_available):
                meta.pending_state = None
            done(error)
            if meta.pending_state is None:
                self._waits.wake(meta.transactional_id)

        return appended

    # -- periodic tasks ------------------------------------------------------------------
    def timed_out_transactions(self) -> list[TransactionMetadata]:
        """Kafka's ``timedOutTransactions``: Ongoing, nothing pending, open longer than
        its ``transaction.timeout.ms``."""
        now = self.scheduler.now()
        return [
            m
            for m in self.transactions.values()
            if m.state == TransactionState.ONGOING
            and not m.pending_transition_in_progress
            and m.txn_start_timestamp + m.txn_timeout_ms < now
        ]

    def abort_timed_out_transactions(self) -> None:
        """Kafka's ``abortTimedOutTransactions``: fence each timed-out producer with an
        epoch bump and abort its transaction, so the producer's next request fails
        with PRODUCER_FENCED and its records are never exposed."""
        for meta in self.timed_out_transactions():
            transit = meta.prepare_fence_producer_epoch()

            def aborted(error: ErrorCode, tid: str = meta.transactional_id) -> None:
                # Kafka's onEndTransactionComplete: info when rolled back, debug when
                # the producer moved on meanwhile, a warning otherwise
                if error == ErrorCode.none:
                    log.info("rolled back transaction %s: open past its timeout", tid)
                elif error in QUIET_ABORT_ERRORS:
                    log.debug("timed-out transaction %s not rolled back: %s", tid, error.name)
                else:
                    log.warning("timed-out transaction %s not rolled back: %s", tid, error.name)

            self._end_transaction(
                meta.transactional_id,
                transit.producer_id,
                transit.producer_epoch,
                TransactionResult.ABORT,
                False,
                aborted,
            )

    def expire_transactional_ids(self) -> None:
        """Kafka's ``enableTransactionalIdExpiration`` task: an id idle (Empty or
        Complete, nothing pending) for ``transactional.id.expiration.ms`` gets a
        tombstone in ``__transaction_state`` and leaves the cache once it is written."""
        horizon = self.scheduler.now() - self.config.transactional_id_expiration_ms
        by_partition: dict[int, list[tuple[TransactionMetadata, TxnTransitMetadata]]] = {}
        for meta in list(self.transactions.values()):
            if (
                meta.state.expiration_allowed
                and not meta.pending_transition_in_progress
                and meta.txn_last_update_timestamp <= horizon
            ):
                partition = self.partition_for(meta.transactional_id)
                by_partition.setdefault(partition, []).append((meta, meta.prepare_dead()))
        for partition, dying in by_partition.items():
            tombstones: Records = [(rec.key_bytes(m.transactional_id), None) for m, _ in dying]

            def written(error: ErrorCode, dying: list = dying) -> None:
                for meta, transit in dying:
                    tid = meta.transactional_id
                    if (
                        error == ErrorCode.none
                        and self.transactions.get(tid) is meta
                        and meta.pending_state == TransactionState.DEAD
                        and meta.producer_epoch == transit.producer_epoch
                    ):
                        del self.transactions[tid]
                    else:
                        meta.pending_state = None

            self._append_fn(partition, tombstones, True).add_done_callback(written)
