"""KIP-890 part 1 on a real broker: a transactional write is checked against its
transaction before it is appended (Kafka's ``transaction.partition.verification.enable``,
on by default since 3.6), so a fenced producer, a write after EndTxn or to a partition
never added cannot leave a transaction no marker ends nor offsets a later commit
applies. Raw kio frames, as a delayed or zombie client would send them (found with
aiokafka and raw requests from outside)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode
from raw_kafka import API, call
from shared_kit import unique, wait_for

from kompakt.broker.app import BrokerThread, start_test_broker
from kompakt.record.encode import build_simple_batch

TIMEOUT = 30


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    b = start_test_broker(tmp_path_factory.mktemp("txn-verify"))
    yield b
    b.stop()


def _init(b: BrokerThread, tid: str) -> dict[str, Any]:
    """InitProducerId, retried while it aborts the id's open transaction (as clients
    retry CONCURRENT_TRANSACTIONS)."""
    body = {"transactional_id": tid, "transaction_timeout": 60000}
    body |= {"producer_id": -1, "producer_epoch": -1}

    def ready() -> Any:
        r = call(b.port, API.init_producer_id, 4, body)
        return r if r.error_code != ErrorCode.concurrent_transactions else None

    r = wait_for(ready, "InitProducerId", TIMEOUT)
    assert r.error_code == ErrorCode.none
    return {
        "transactional_id": tid,
        "producer_id": r.producer_id,
        "producer_epoch": r.producer_epoch,
    }


def _add(b: BrokerThread, p: dict[str, Any], topic: str, partition: int) -> None:
    body = {
        "v3_and_below_transactional_id": p["transactional_id"],
        "v3_and_below_producer_id": p["producer_id"],
        "v3_and_below_producer_epoch": p["producer_epoch"],
        "v3_and_below_topics": [{"name": topic, "partitions": [partition]}],
    }
    r = call(b.port, API.add_partitions_to_txn, 3, body)
    assert r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0


def _produce(b: BrokerThread, p: dict[str, Any], topic: str, partition: int, seq: int) -> Any:
    batch = build_simple_batch(
        [(b"k", b"v%d" % seq)],
        timestamp=1_700_000_000_000,
        producer_id=p["producer_id"],
        producer_epoch=p["producer_epoch"],
        base_sequence=seq,
        transactional=True,
    )
    body = {
        "transactional_id": p["transactional_id"],
        "acks": -1,
        "timeout": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": batch}]}],
    }
    return call(b.port, API.produce, 9, body).responses[0].partition_responses[0]


def _commit_offsets(b: BrokerThread, p: dict[str, Any], group: str, topic: str, offset: int):
    body = {
        **p,
        "group_id": group,
        "generation_id": -1,
        "member_id": "",
        "group_instance_id": None,
        "topics": [
            {
                "name": topic,
                "partitions": [
                    {
                        "partition_index": 0,
                        "committed_offset": offset,
                        "committed_leader_epoch": -1,
                        "committed_metadata": "",
                    }
                ],
            }
        ],
    }
    r = call(b.port, API.txn_offset_commit, 3, body)
    return r.topics[0].partitions[0].error_code


def _end(b: BrokerThread, p: dict[str, Any], commit: bool = True) -> None:
    assert call(b.port, API.end_txn, 3, {**p, "committed": commit}).error_code == 0


def _committed(b: BrokerThread, group: str, topic: str) -> tuple[int, int]:
    """(error, offset) of partition 0 as a read_committed consumer asks (require_stable)."""
    body = {
        "group_id": group,
        "topics": [{"name": topic, "partition_indexes": [0]}],
        "require_stable": True,
    }
    part = call(b.port, API.offset_fetch, 7, body).topics[0].partitions[0]
    return part.error_code, part.committed_offset


def _topic(b: BrokerThread, partitions: int = 2) -> str:
    name = unique("verify")
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(TIMEOUT)
    return name


def test_a_produce_to_a_partition_never_added_is_refused_and_holds_no_stable_offset(broker):
    """A stray transactional batch on a partition outside the transaction was appended,
    and as no marker ever reached that partition its last stable offset stayed put for
    ever (read_committed consumers and the cleaner stuck behind it)."""
    topic = _topic(broker)
    p = _init(broker, unique("tx"))
    _add(broker, p, topic, 0)
    assert _produce(broker, p, topic, 0, 0).error_code == ErrorCode.none
    stray = _produce(broker, p, topic, 1, 0)
    assert stray.error_code == ErrorCode.invalid_txn_state
    assert stray.error_message == "Partition was not added to the transaction"
    _end(broker, p)
    plog = broker.logs.get_log(topic, 1)
    assert (plog.log_end_offset, plog.last_stable_offset) == (0, 0)


def test_a_produce_after_its_transaction_ended_is_refused(broker):
    """A delayed Produce arriving after EndTxn (the case KIP-890 was written for)."""
    topic = _topic(broker, 1)
    p = _init(broker, unique("tx"))
    _add(broker, p, topic, 0)
    assert _produce(broker, p, topic, 0, 0).error_code == ErrorCode.none
    _end(broker, p)
    plog = broker.logs.get_log(topic, 0)
    wait_for(lambda: plog.last_stable_offset == 2, "the COMMIT marker", TIMEOUT)
    # NOT_ENOUGH_REPLICAS (retriable) until the Complete record is written, as Kafka
    late = wait_for(
        lambda: (
            (r := _produce(broker, p, topic, 0, 1)).error_code != ErrorCode.not_enough_replicas
            and r
        ),
        "the transaction's end",
        TIMEOUT,
    )
    assert late.error_code == ErrorCode.invalid_txn_state
    assert (plog.log_end_offset, plog.last_stable_offset) == (2, 2)


def test_a_fenced_producers_offsets_are_refused_and_never_applied(broker):
    """The old producer's TxnOffsetCommit (epoch 0) after a new producer of the same id
    fenced it was written, and the new producer's commit then applied it: the group's
    offset became the zombie's, over the new one's."""
    topic, group, tid = _topic(broker, 1), unique("g"), unique("tx")
    old = _init(broker, tid)
    call(broker.port, API.add_offsets_to_txn, 3, {**old, "group_id": group})
    new = _init(broker, tid)  # fences old, aborting its transaction
    assert new["producer_epoch"] > old["producer_epoch"]
    assert _commit_offsets(broker, old, group, topic, 43) == ErrorCode.invalid_producer_epoch
    assert call(broker.port, API.add_offsets_to_txn, 3, {**new, "group_id": group}).error_code == 0
    assert _commit_offsets(broker, new, group, topic, 10) == ErrorCode.none
    assert _commit_offsets(broker, old, group, topic, 77) == ErrorCode.invalid_producer_epoch
    _end(broker, new)
    got = wait_for(
        lambda: (r := _committed(broker, group, topic))[0] == 0 and r, "the offsets", TIMEOUT
    )
    assert got == (ErrorCode.none, 10)


def test_offsets_outside_any_transaction_are_refused_and_leave_nothing_pending(broker):
    """A TxnOffsetCommit with no AddOffsetsToTxn before it was written as pending, and
    a read_committed member's OffsetFetch (require_stable) then answered
    UNSTABLE_OFFSET_COMMIT until that producer id next wrote a marker there."""
    topic, group = _topic(broker, 1), unique("g")
    p = _init(broker, unique("tx"))
    assert _commit_offsets(broker, p, group, topic, 5) == ErrorCode.invalid_txn_state
    assert _committed(broker, group, topic) == (ErrorCode.none, -1)


def test_verification_off_takes_a_stray_write_as_kafka_does(tmp_path):
    """transaction.partition.verification.enable=false: Kafka's escape hatch, the
    write goes to the log unchecked (and holds its partition until a marker)."""
    b = start_test_broker(tmp_path, **{"transaction.partition.verification.enable": "false"})
    try:
        topic = _topic(b, 1)
        p = _init(b, unique("tx"))
        assert _produce(b, p, topic, 0, 0).error_code == ErrorCode.none
        assert b.logs.get_log(topic, 0).last_stable_offset == 0
    finally:
        b.stop()


def test_a_write_whose_transaction_ends_while_it_is_verified_is_refused(broker, monkeypatch):
    """The check and the append are two steps: a marker reaching the partition between
    them (EndTxn's, for a client that did not wait for its Produce) would leave the
    write after the marker, an open transaction no marker ends. The append takes it
    only if no marker of its producer came since the check (Kafka's verification
    guard); here a marker is written right after the real check passes."""
    from kompakt.broker.handlers import produce as produce_handler
    from kompakt.record.encode import build_control_batch
    from kompakt.record.header import CONTROL_ABORT

    topic = _topic(broker, 1)
    p = _init(broker, unique("tx"))
    _add(broker, p, topic, 0)
    plog = broker.logs.get_log(topic, 0)
    real = produce_handler.verify_produce

    def marker_meanwhile(state, tid, records, log):
        answer = real(state, tid, records, log)
        marker = build_control_batch(
            CONTROL_ABORT,
            producer_id=p["producer_id"],
            producer_epoch=p["producer_epoch"],
            timestamp=plog.clock(),
        )
        with plog.lock:
            broker.broker.state.producers.for_log(plog)
            plog.append(marker, trusted=True)
        return answer

    monkeypatch.setattr(produce_handler, "verify_produce", marker_meanwhile)
    late = _produce(broker, p, topic, 0, 0)
    assert late.error_code == ErrorCode.invalid_txn_state
    assert (plog.log_end_offset, plog.last_stable_offset) == (1, 1)  # the marker alone
