"""One transactional id's state: Kafka's ``TransactionState`` and ``TransactionMetadata``.

A transactional id is in one of eight :class:`TransactionState` values; each lists the
states it may be entered from (Kafka's ``validPreviousStates``), checked on every
transition. A change is done in two steps, as Kafka's ``TransactionMetadata`` does:
:meth:`TransactionMetadata.prepare_transition` checks the move, records the target as
``pending_state`` and returns the target as a frozen :class:`TxnTransitMetadata` (what
the coordinator appends to ``__transaction_state``); only once that append succeeded does
:meth:`TransactionMetadata.complete_transition` copy it in. While a transition is
pending, the coordinator answers every other request for the id with
CONCURRENT_TRANSACTIONS, so two requests can never race one log append.

Nothing here does I/O or reads a clock: the coordinator passes ``now``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Generic, TypeVar

from kompakt.broker.transitions import check_transition

NO_PRODUCER_ID = -1
"""A producer id not given (Kafka's ``RecordBatch.NO_PRODUCER_ID``)."""
NO_PRODUCER_EPOCH = -1
"""A producer epoch not given (Kafka's ``RecordBatch.NO_PRODUCER_EPOCH``)."""
NO_TXN_START = -1
"""``txn_start_timestamp`` of an id with no transaction open."""
SHORT_MAX = 2**15 - 1
"""Java's ``Short.MaxValue``: the largest producer epoch."""


class TransactionState(Enum):
    """Kafka's transaction states: value = the id written to ``__transaction_state``
    (``TransactionState.id``), ``str()`` = the name DescribeTransactions reports."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    def __str__(self) -> str:
        return _NAMES[self]

    @property
    def expiration_allowed(self) -> bool:
        """Kafka's ``isExpirationAllowed``: an idle id in this state may be expired by
        ``transactional.id.expiration.ms``; one with a transaction open never is."""
        return self in (
            TransactionState.EMPTY,
            TransactionState.COMPLETE_COMMIT,
            TransactionState.COMPLETE_ABORT,
        )

    @property
    def in_prepare(self) -> bool:
        """PrepareCommit or PrepareAbort: the outcome is decided, markers are due."""
        return self in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT)

    @classmethod
    def from_name(cls, name: str) -> TransactionState:
        """The state DescribeTransactions / ListTransactions call ``name``."""
        for state, known in _NAMES.items():
            if known == name:
                return state
        raise ValueError(f"unknown transaction state {name!r}")


_NAMES = {
    TransactionState.EMPTY: "Empty",
    TransactionState.ONGOING: "Ongoing",
    TransactionState.PREPARE_COMMIT: "PrepareCommit",
    TransactionState.PREPARE_ABORT: "PrepareAbort",
    TransactionState.COMPLETE_COMMIT: "CompleteCommit",
    TransactionState.COMPLETE_ABORT: "CompleteAbort",
    TransactionState.DEAD: "Dead",
    TransactionState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}

_S = TransactionState
VALID_PREVIOUS_STATES: dict[TransactionState, frozenset[TransactionState]] = {
    _S.EMPTY: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.ONGOING: frozenset({_S.ONGOING, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_COMMIT: frozenset({_S.ONGOING}),
    _S.PREPARE_ABORT: frozenset({_S.ONGOING, _S.PREPARE_EPOCH_FENCE}),
    _S.COMPLETE_COMMIT: frozenset({_S.PREPARE_COMMIT}),
    _S.COMPLETE_ABORT: frozenset({_S.PREPARE_ABORT}),
    _S.DEAD: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_EPOCH_FENCE: frozenset({_S.ONGOING}),
}
"""Kafka's ``validPreviousStates`` of each state (``TransactionMetadata.scala``)."""


class IllegalTransactionTransition(RuntimeError):
    """A transition Kafka's ``TransactionMetadata`` forbids: our bug, never a client's
    (Kafka throws ``IllegalStateException``)."""


def is_epoch_exhausted(epoch: int) -> bool:
    """Kafka's ``TransactionMetadata.isEpochExhausted``: the last usable epoch is
    ``Short.MaxValue - 1``, so the coordinator can always fence with one more bump."""
    return epoch >= SHORT_MAX - 1


TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class TxnTransitMetadata:
    """Kafka's ``TxnTransitMetadata``: the target of one transition, appended to
    ``__transaction_state`` before it becomes the id's state."""

    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState
    topic_partitions: frozenset[TopicPartition]
    txn_start_timestamp: int
    txn_last_update_timestamp: int


@dataclass(eq=False)
class TransactionMetadata:
    """Kafka's ``TransactionMetadata`` of one transactional id."""

    transactional_id: str
    producer_id: int
    last_producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    txn_timeout_ms: int = 0
    state: TransactionState = TransactionState.EMPTY
    topic_partitions: set[TopicPartition] = field(default_factory=set)
    txn_start_timestamp: int = NO_TXN_START
    txn_last_update_timestamp: int = -1
    pending_state: TransactionState | None = None
    """The state an in-flight log append will move to (Kafka's ``pendingState``)."""
    has_failed_epoch_fence: bool = False
    """A fencing bump whose append failed: the next fence reuses that epoch instead of
    bumping again (Kafka's ``hasFailedEpochFence``), since it was never handed out."""

    @property
    def pending_transition_in_progress(self) -> bool:
        return self.pending_state is not None

    @property
    def epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    @property
    def has_pending_transaction(self) -> bool:
        return self.state in (_S.ONGOING, _S.PREPARE_ABORT, _S.PREPARE_COMMIT)

    def snapshot(self, **changes: Any) -> TxnTransitMetadata:
        """The current state as a transit (Kafka's ``prepareNoTransit``), with
        ``changes`` (fields of :class:`TxnTransitMetadata`): one object built, not a
        copy replaced (two of these per transaction on the client's path)."""
        fields = {
            "producer_id": self.producer_id,
            "last_producer_id": self.last_producer_id,
            "producer_epoch": self.producer_epoch,
            "last_producer_epoch": self.last_producer_epoch,
            "txn_timeout_ms": self.txn_timeout_ms,
            "state": self.state,
            "txn_start_timestamp": self.txn_start_timestamp,
            "txn_last_update_timestamp": self.txn_last_update_timestamp,
        }
        if "topic_partitions" not in changes:
            fields["topic_partitions"] = frozenset(self.topic_partitions)
        fields.update(changes)
        return TxnTransitMetadata(**fields)

    # -- prepare: one per kind of request (Kafka's prepareXxx) -----------------------------
    def prepare_fence_producer_epoch(self) -> TxnTransitMetadata:
        """Kafka's ``prepareFenceProducerEpoch``: bump the epoch to fence the current
        producer before aborting its open transaction (never told to any client)."""
        if self.producer_epoch == SHORT_MAX:
            raise IllegalTransactionTransition("cannot fence a producer at Short.MaxValue")
        bumped = self.producer_epoch if self.has_failed_epoch_fence else self.producer_epoch + 1
        return self.prepare_transition(
            _S.PREPARE_EPOCH_FENCE, producer_epoch=bumped, last_producer_epoch=NO_PRODUCER_EPOCH
        )

    def prepare_increment_producer_epoch(
        self, txn_timeout_ms: int, expected_epoch: int | None, now: int
    ) -> TxnTransitMetadata | None:
        """Kafka's ``prepareIncrementProducerEpoch``; None means PRODUCER_FENCED.

        Without an expected epoch (a new producer instance) the epoch is bumped and the
        last epoch forgotten; with one (KIP-360, a producer recovering from an abortable
        error) it must be the current epoch (bump, remember the old one) or the last one
        (a retry of a bump that succeeded: hand out the current epoch again)."""
        if self.epoch_exhausted:
            raise IllegalTransactionTransition(
                f"no producer epochs left for producer id {self.producer_id}"
            )
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            epoch, last = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            epoch, last = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            epoch, last = self.producer_epoch, self.last_producer_epoch
        else:
            return None
        return self._prepare_empty(self.producer_id, epoch, last, txn_timeout_ms, now)

    def prepare_producer_id_rotation(
        self, new_producer_id: int, txn_timeout_ms: int, now: int, record_last_epoch: bool
    ) -> TxnTransitMetadata:
        """Kafka's ``prepareProducerIdRotation``: the epochs of this producer id are
        used up, so continue with a new producer id at epoch 0."""
        if self.has_pending_transaction:
            raise IllegalTransactionTransition("cannot rotate producer ids mid-transaction")
        last = self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH
        return self._prepare_empty(new_producer_id, 0, last, txn_timeout_ms, now)

    def _prepare_empty(
        self, producer_id: int, epoch: int, last_epoch: int, txn_timeout_ms: int, now: int
    ) -> TxnTransitMetadata:
        """InitProducerId's transition: Empty, no partitions, no start time."""
        return self.prepare_transition(
            _S.EMPTY,
            producer_id=producer_id,
            producer_epoch=epoch,
            last_producer_epoch=last_epoch,
            txn_timeout_ms=txn_timeout_ms,
            topic_partitions=frozenset(),
            txn_start_timestamp=NO_TXN_START,
            txn_last_update_timestamp=now,
        )

    def prepare_add_partitions(
        self, partitions: frozenset[TopicPartition], now: int
    ) -> TxnTransitMetadata:
        """Kafka's ``prepareAddPartitions``: the first partition starts the transaction
        (and its timeout clock)."""
        idle = self.state in (_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT)
        return self.prepare_transition(
            _S.ONGOING,
            topic_partitions=frozenset(self.topic_partitions) | partitions,
            txn_start_timestamp=now if idle else self.txn_start_timestamp,
            txn_last_update_timestamp=now,
        )

    def prepare_abort_or_commit(self, state: TransactionState, now: int) -> TxnTransitMetadata:
        """Kafka's ``prepareAbortOrCommit``: PrepareCommit or PrepareAbort."""
        return self.prepare_transition(state, txn_last_update_timestamp=now)

    def prepare_complete(self, now: int) -> TxnTransitMetadata:
        """Kafka's ``prepareComplete``: the markers are written, the transaction ends."""
        state = _S.COMPLETE_COMMIT if self.state == _S.PREPARE_COMMIT else _S.COMPLETE_ABORT
        self.has_failed_epoch_fence = False
        return self.prepare_transition(
            state, topic_partitions=frozenset(), txn_last_update_timestamp=now
        )

    def prepare_dead(self) -> TxnTransitMetadata:
        """Kafka's ``prepareDead``: the id expires; its tombstone is being written."""
        return self.prepare_transition(_S.DEAD, topic_partitions=frozenset())

    # -- the two halves of a transition ----------------------------------------------------
    def prepare_transition(self, state: TransactionState, **changes: Any) -> TxnTransitMetadata:
        """Kafka's ``prepareTransitionTo``: the current metadata with ``changes`` (fields
        of :class:`TxnTransitMetadata`; the last producer id is always the current one,
        as in Kafka), checked against ``validPreviousStates``, recorded as pending."""
        if self.pending_state is not None:
            raise IllegalTransactionTransition(
                f"{self.transactional_id}: preparing {state} while {self.pending_state} is pending"
            )
        target = self.snapshot(state=state, last_producer_id=self.producer_id, **changes)
        if target.producer_id < 0:
            raise IllegalTransactionTransition(f"illegal new producer id {target.producer_id}")
        if state != _S.DEAD and target.producer_epoch < 0:
            raise IllegalTransactionTransition(
                f"illegal new producer epoch {target.producer_epoch}"
            )
        check_transition(
            VALID_PREVIOUS_STATES,
            self.state,
            state,
            subject=self.transactional_id,
            error=IllegalTransactionTransition,
        )
        self.pending_state = state
        return target

    def complete_transition(self, t: TxnTransitMetadata) -> None:
        """Kafka's ``completeTransitionTo``: the append of ``t`` succeeded; check it is
        the pending transition and consistent with the current state, then adopt the
        whole of it (as Kafka's ``TransactionMetadata.java`` does), so the state in
        memory is exactly what a reload of the log gives."""
        if self.pending_state is None or self.pending_state != t.state:
            self._fail(t)
        same_producer = (t.producer_id, t.producer_epoch) == (self.producer_id, self.producer_epoch)
        if t.state == _S.EMPTY:
            bump = t.producer_epoch == self.producer_epoch + 1 or (
                t.producer_epoch == 0 and t.producer_id != self.producer_id
            )
            ok = (
                (t.producer_epoch == self.producer_epoch or bump)
                and not t.topic_partitions
                and t.txn_start_timestamp == NO_TXN_START
            )
        elif t.state == _S.ONGOING:
            ok = (
                same_producer
                and self.topic_partitions <= t.topic_partitions
                and self.txn_timeout_ms == t.txn_timeout_ms
            )
        elif t.state.in_prepare:
            ok = (
                same_producer
                and self.topic_partitions == t.topic_partitions
                and self.txn_timeout_ms == t.txn_timeout_ms
                and self.txn_start_timestamp == t.txn_start_timestamp
            )
        elif t.state in (_S.COMPLETE_COMMIT, _S.COMPLETE_ABORT):
            ok = (
                same_producer
                and self.txn_timeout_ms == t.txn_timeout_ms
                and t.txn_start_timestamp != NO_TXN_START
            )
        else:
            # PrepareEpochFence is never completed (the abort replaces it) and Dead ends
            # in removal from the cache, never in a state.
            ok = False
        if not ok:
            self._fail(t)
        self.producer_id = t.producer_id
        self.last_producer_id = t.last_producer_id
        self.producer_epoch = t.producer_epoch
        self.last_producer_epoch = t.last_producer_epoch
        self.txn_timeout_ms = t.txn_timeout_ms
        self.topic_partitions = set(t.topic_partitions)
        self.txn_start_timestamp = t.txn_start_timestamp
        self.txn_last_update_timestamp = t.txn_last_update_timestamp
        self.pending_state = None
        self.state = t.state

    def _fail(self, t: TxnTransitMetadata) -> None:
        raise IllegalTransactionTransition(
            f"{self.transactional_id} ({self.state}, pending {self.pending_state}) cannot "
            f"complete the transition to {t}"
        )


T = TypeVar("T")


class Completion(Generic[T]):
    """A result owed later: what the injected ``append`` and ``write_markers`` callbacks
    return and what every coordinator call returns. Sans-IO: whoever finishes the I/O
    calls :meth:`complete`, which runs the callbacks at once, in order; the first
    answer wins. The asyncio layer bridges it to a future with :meth:`add_done_callback`.
    """

    __slots__ = ("_callbacks", "_done", "_value")

    def __init__(self) -> None:
        self._done = False
        self._value: T | None = None
        self._callbacks: list[Callable[[T], None]] = []

    @classmethod
    def of(cls, value: T) -> Completion[T]:
        """A completion answered at once."""
        c: Completion[T] = cls()
        c.complete(value)
        return c

    def done(self) -> bool:
        return self._done

    def result(self) -> T:
        if not self._done:
            raise LookupError("completion not done yet")
        return self._value  # type: ignore[return-value]

    def complete(self, value: T) -> None:
        if self._done:
            return
        self._done, self._value = True, value
        callbacks, self._callbacks = self._callbacks, []
        for cb in callbacks:
            cb(value)

    def add_done_callback(self, fn: Callable[[T], None]) -> None:
        """Run ``fn(value)`` when done (at once if already done)."""
        if self._done:
            fn(self._value)  # type: ignore[arg-type]
        else:
            self._callbacks.append(fn)
