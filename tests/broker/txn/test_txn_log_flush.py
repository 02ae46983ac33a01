"""``__transaction_state`` durability on a real broker: the Complete record, appended
without an fsync of its own (nothing is answered on it), is fsynced soon after even when
no further transaction comes, and every record a client was answered on is fsynced
before its answer (Kafka writes each with acks=-1; kompakt's acks=all is an fsync).
"""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from shared_kit import unique, wait_for

from kompakt.broker.app import start_test_broker
from kompakt.broker.txn import records as txn_rec
from kompakt.broker.txn.log import TRANSACTION_STATE_TOPIC
from kompakt.broker.txn.state import TransactionState
from kompakt.log.partition_log import PartitionLog

TIMEOUT = 20


def last_state(plog: PartitionLog, tid: str) -> TransactionState | None:
    found = None
    for b in plog.iter_batches(plog.log_start_offset):
        for r in b.records():
            rec = txn_rec.read_record(bytes(r.key), r.value and bytes(r.value))
            if rec is not None and rec[0] == tid and rec[1] is not None:
                found = rec[1].state
    return found


def test_complete_record_is_fsynced_without_a_next_transaction(tmp_path: Path) -> None:
    b = start_test_broker(tmp_path, **{"transaction.state.log.num.partitions": 1})
    try:
        topic, tid = unique("flush"), unique("tx")
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(TIMEOUT)
        p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": tid})
        p.init_transactions(TIMEOUT)
        p.begin_transaction()
        p.produce(topic, b"v")
        p.commit_transaction(TIMEOUT)
        plog = b.logs.get_log(TRANSACTION_STATE_TOPIC, 0)

        def flushed_complete() -> bool:
            with plog.lock:
                done = plog.recovery_point == plog.log_end_offset
            return done and last_state(plog, tid) == TransactionState.COMPLETE_COMMIT

        wait_for(flushed_complete, "CompleteCommit appended and fsynced", TIMEOUT)
    finally:
        b.stop()
