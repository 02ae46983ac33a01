"""``__transaction_state`` durability on a real broker: the Complete record, appended
without an fsync of its own (nothing is answered on it), is fsynced soon after even when
no further transaction comes, and every record a client was answered on is fsynced
before its answer (Kafka writes each with acks=-1; kompakt's acks=all is an fsync).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from shared_kit import unique, wait_for

from kompakt.broker.app import start_test_broker
from kompakt.broker.txn import records as txn_rec
from kompakt.broker.txn.broker import txn_broker_if_started
from kompakt.broker.txn.log import TRANSACTION_STATE_TOPIC
from kompakt.broker.txn.state import TransactionState
from kompakt.log.partition_log import PartitionLog

TIMEOUT = 20
PARTITION_DIR = re.compile(r".+-\d+")


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
                done = plog.durable_offset == plog.log_end_offset
            return done and last_state(plog, tid) == TransactionState.COMPLETE_COMMIT

        wait_for(flushed_complete, "CompleteCommit appended and fsynced", TIMEOUT)
    finally:
        b.stop()


def partition_fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The files of partition folders (``<topic>-<n>/``) that the process fsyncs from now
    on: the data dir's checkpoints and a folder's own entry are not the commit's."""
    paths: list[Path] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        path = Path(os.readlink(f"/proc/self/fd/{fd}"))
        if PARTITION_DIR.fullmatch(path.parent.name):
            paths.append(path)
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return paths


def test_a_transactions_commit_path_fsyncs_only_log_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kafka appends every record of a transaction's commit with ``requiredAcks = -1``:
    the coordinator's ``__transaction_state`` records (``TransactionLog.
    EnforcedRequiredAcks``), the TxnOffsetCommit (``offsets.commit.required.acks``) and
    the markers (``handleWriteTxnMarkersRequest``), which on one node is an fsync of the
    records, as an acks=all Produce's. The indexes (one entry per append here) are
    derived and left to the periodic flush, and recovery rebuilds them. Was: each of
    these writes ran the log's full flush, the offset and time indexes fsynced too."""
    b = start_test_broker(
        tmp_path,
        **{
            "transaction.state.log.num.partitions": 1,
            "offsets.topic.num.partitions": 1,
            "log.index.interval.bytes": 0,
        },
    )
    try:
        topic, tid = unique("only-log"), unique("tx")
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(TIMEOUT)
        group = Consumer({"bootstrap.servers": b.bootstrap, "group.id": unique("g")})
        p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": tid})
        p.init_transactions(TIMEOUT)
        state = b.logs.get_log(TRANSACTION_STATE_TOPIC, 0)

        def one_transaction(value: bytes) -> None:
            p.begin_transaction()
            p.produce(topic, value)
            offsets = [TopicPartition(topic, 0, 1)]
            p.send_offsets_to_transaction(offsets, group.consumer_group_metadata(), TIMEOUT)
            p.commit_transaction(TIMEOUT)

            def complete_durable() -> bool:
                done = state.durable_offset == state.log_end_offset
                return done and last_state(state, tid) == TransactionState.COMPLETE_COMMIT

            wait_for(complete_durable, "CompleteCommit appended and fsynced", TIMEOUT)

        one_transaction(b"v0")  # the files made and their folders' entries fsynced
        fsynced = partition_fsyncs(monkeypatch)
        one_transaction(b"v1")
        monkeypatch.undo()
        folders = {f.parent.name for f in fsynced}
        assert {f"{topic}-0", "__consumer_offsets-0", f"{TRANSACTION_STATE_TOPIC}-0"} <= folders
        assert [f.name for f in fsynced if f.suffix != ".log"] == []
        assert state.recovery_point < state.log_end_offset  # the periodic flush's to move
        group.close()
    finally:
        b.stop()


def test_a_complete_record_goes_in_the_next_batch_after_the_markers(broker) -> None:
    """Kafka writes an id's CompleteCommit once its markers are durable, and its next
    Ongoing after that (``TransactionMetadata.prepareAddPartitions`` only from a
    Complete state). Nothing is answered on the Complete record, so it waits for the
    partition's next batch: in a stream of transactions it goes first in the batch of
    the id's next Ongoing record instead of a batch of its own. Was: one append, and
    one log write, of its own per transaction."""
    topic, tid = unique("complete-next"), unique("tx")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(TIMEOUT)
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": tid})
    p.init_transactions(TIMEOUT)
    for i in range(5):
        p.begin_transaction()
        p.produce(topic, b"v%d" % i)
        p.commit_transaction(TIMEOUT)
    tb = txn_broker_if_started(broker.broker.state)
    assert tb is not None
    plog = broker.logs.get_log(TRANSACTION_STATE_TOPIC, tb.coordinator.partition_for(tid))
    wait_for(lambda: last_state(plog, tid) == TransactionState.COMPLETE_COMMIT, "complete", TIMEOUT)
    batches = []
    for b in plog.iter_batches(plog.log_start_offset):
        states = []
        for r in b.records():
            rec = txn_rec.read_record(bytes(r.key), r.value and bytes(r.value))
            if rec is not None and rec[0] == tid and rec[1] is not None:
                states.append(rec[1].state)
        if states:
            batches.append(states)
    flat = [s for states in batches for s in states]
    S = TransactionState
    cycle = [S.ONGOING, S.PREPARE_COMMIT, S.COMPLETE_COMMIT]
    assert flat == [S.EMPTY] + cycle * 5
    assert [S.COMPLETE_COMMIT, S.ONGOING] in batches
