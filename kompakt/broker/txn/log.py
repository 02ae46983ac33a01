"""``__transaction_state``, the transaction coordinator's log (Kafka's
``TransactionLog`` topic): compacted, one batch per append, flushed like an acks=all
produce (a Complete record with the next flush), read back at start-up. Blocking file I/O, run on the coordinator's log thread
by :class:`~kompakt.broker.txn.broker.TransactionBroker`.
"""

from __future__ import annotations

import logging
from typing import Any

from kompakt.broker.coordinator.storage import (
    append_batch,
    ensure_internal_topic,
    flush_appended,
    unflushed,
)
from kompakt.broker.flush import flush_covering
from kompakt.broker.txn import records as txn_rec
from kompakt.broker.txn.records import TransactionLogValue
from kompakt.broker.txn.results import Records

log = logging.getLogger("kompakt.broker.txn")

TRANSACTION_STATE_TOPIC = "__transaction_state"


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

    def append(self, partition: int, items: Records) -> int:
        """One batch, not fsynced: :meth:`flush` or :meth:`flush_covering` makes it
        durable (a group commit with the partition's other appends); returns the log
        end offset after it."""
        plog = self.logs.get_log(TRANSACTION_STATE_TOPIC, partition)
        append_batch(plog, items, False)
        return int(plog.log_end_offset)

    def flush_covering(self, partition: int, offset: int) -> None:
        """Return once the partition is fsynced below ``offset``, one fsync for the
        threads that appended meanwhile (acks=all's group commit,
        :func:`~kompakt.broker.flush.flush_covering`)."""
        flush_covering(self.logs.get_log(TRANSACTION_STATE_TOPIC, partition), offset)

    def flush(self, partition: int) -> None:
        flush_appended(self.logs.get_log(TRANSACTION_STATE_TOPIC, partition))

    def unflushed(self, partition: int) -> bool:
        """Whether the partition has appends not yet fsynced (:func:`unflushed`)."""
        return unflushed(self.logs.get_log(TRANSACTION_STATE_TOPIC, partition))
