"""What the transaction coordinator answers without deciding anything: DescribeTransactions,
ListTransactions and the open-transaction gauges, read from its cache (Kafka's
``TransactionCoordinator.handleDescribeTransactions`` and
``TransactionStateManager.listTransactionStates``). Called under the broker's lock, as
the coordinator's other methods; the gauge also from the /metrics thread.
"""

from __future__ import annotations

from collections.abc import Iterable

from kio.schema.errors import ErrorCode

from kompakt.broker.coordinator.scheduler import Scheduler
from kompakt.broker.txn.results import TransactionDescription
from kompakt.broker.txn.state import TransactionMetadata, TransactionState


class TransactionViews:
    """The coordinator's read-only answers over its cache (``transactions``)."""

    transactions: dict[str, TransactionMetadata]
    scheduler: Scheduler

    def describe(self, transactional_id: str) -> TransactionDescription:
        """Kafka's ``handleDescribeTransactions`` for one id: INVALID_REQUEST for an
        empty id, TRANSACTIONAL_ID_NOT_FOUND for an unknown one."""
        if not transactional_id:
            return TransactionDescription.failed(transactional_id, ErrorCode.invalid_request)
        meta = self.transactions.get(transactional_id)
        if meta is None or meta.state == TransactionState.DEAD:
            return TransactionDescription.failed(
                transactional_id, ErrorCode.transactional_id_not_found
            )
        topics: dict[str, list[int]] = {}
        for topic, partition in sorted(meta.topic_partitions):
            topics.setdefault(topic, []).append(partition)
        return TransactionDescription(
            transactional_id,
            ErrorCode.none,
            str(meta.state),
            meta.txn_timeout_ms,
            meta.txn_start_timestamp,
            meta.producer_id,
            meta.producer_epoch,
            {t: tuple(ps) for t, ps in topics.items()},
        )

    def verify(
        self,
        transactional_id: str | None,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[tuple[str, int]],
    ) -> ErrorCode:
        """KIP-890 part 1 (Kafka's ``handleVerifyPartitionsInTransaction``): whether a
        transactional write to ``partitions`` belongs to the ongoing transaction of
        ``transactional_id`` at this producer id and epoch. A fenced producer, a write
        after EndTxn or to a partition never added would otherwise leave a transaction
        no marker ends (the partition's last stable offset held for ever) or offsets a
        later commit applies. Partitions count once their AddPartitionsToTxn is written."""
        if not transactional_id:
            return ErrorCode.invalid_request
        meta = self.transactions.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping
        if meta.producer_epoch != producer_epoch:
            return ErrorCode.producer_fenced
        if meta.state.in_prepare:
            return ErrorCode.concurrent_transactions
        if not set(partitions) <= meta.topic_partitions:
            return ErrorCode.invalid_txn_state
        return ErrorCode.none

    def list_transactions(
        self,
        producer_ids: Iterable[int] = (),
        state_names: Iterable[str] = (),
        min_duration_ms: int = -1,
    ) -> tuple[list[tuple[str, int, str]], list[str]]:
        """Kafka's ``listTransactionStates``: (transactional id, producer id, state
        name) of each id passing every filter given, and the state names not known
        (``unknownStateFilters``). ``min_duration_ms`` >= 0 keeps transactions open
        longer than that (ListTransactions v1, KIP-994)."""
        pids = set(producer_ids)
        names = list(state_names)
        states, unknown = set(), []
        for name in names:
            try:
                states.add(TransactionState.from_name(name))
            except ValueError:
                unknown.append(name)
        now = self.scheduler.now()
        listed = [
            (tid, m.producer_id, str(m.state))
            for tid, m in sorted(self.transactions.items())
            if m.state != TransactionState.DEAD
            and (not pids or m.producer_id in pids)
            and (not names or m.state in states)
            and (min_duration_ms < 0 or now - m.txn_start_timestamp > min_duration_ms)
        ]
        return listed, unknown

    def open_transactions(self) -> tuple[int, int]:
        """(how many transactions are open, age in ms of the oldest, 0 if none): the
        Prometheus gauges of issue 15. Open = Ongoing, PrepareCommit or PrepareAbort."""
        starts = [
            m.txn_start_timestamp
            for m in list(self.transactions.values())  # also read by the /metrics thread
            if m.has_pending_transaction
        ]
        return len(starts), (self.scheduler.now() - min(starts)) if starts else 0
