"""Exactly-once end to end (issue 15's must-shows) with three clients' transactional
producers against a real broker on 127.0.0.1.

The consume-transform-produce loop is ``benchmarks/eos.py``'s, run here at a few hundred
transactions (the script runs 10,000): KIP-98's promise that a READ_COMMITTED reader sees
each input exactly once and only from committed transactions, a READ_UNCOMMITTED one the
aborted copies too, and the group's offsets are those the last committed transaction
sent. The zombie tests extend ``test_transactions.py``'s fencing test (which checks
librdkafka's fatal ``_FENCED`` on commit) to a zombie's produce and to aiokafka, and check
what a READ_COMMITTED reader sees afterwards.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from shared_kit import load_script, unique

from kompakt.broker.app import BrokerThread, start_test_broker

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 20
SMALL = {"transaction.state.log.num.partitions": 2, "offsets.topic.num.partitions": 2}


eos = load_script("eos", REPO / "benchmarks" / "eos.py")


@pytest.fixture(scope="module")
def ebroker(tmp_path_factory: pytest.TempPathFactory) -> Any:
    b = start_test_broker(tmp_path_factory.mktemp("eos-data"), **SMALL)
    yield b
    b.stop()


def check(fig: Any, transactions: int, per_txn: int) -> None:
    committed = transactions - sum(eos.aborted(t) for t in range(transactions))
    assert fig.problems == []
    assert fig.read_committed == committed * per_txn
    assert fig.read_uncommitted == transactions * per_txn
    assert fig.group_offsets == fig.input_ends
    assert sum(fig.input_ends.values()) == committed * per_txn


@pytest.mark.parametrize("transactions", [150, 99])  # 99: the last one is aborted
def test_confluent_consume_transform_produce_is_exactly_once_kip98(
    ebroker: BrokerThread, transactions: int
) -> None:
    fig = eos.run_confluent(ebroker.bootstrap, transactions, per_txn=2)
    check(fig, transactions, 2)


def test_aiokafka_consume_transform_produce_is_exactly_once_kip98(ebroker: BrokerThread) -> None:
    fig = eos.run_aiokafka(ebroker.bootstrap, 150, per_txn=2)
    check(fig, 150, 2)


def test_verify_catches_a_duplicate_and_an_aborted_copy(ebroker: BrokerThread) -> None:
    """The check above can fail: an output holding one input twice (a non-transactional
    write, as a loop without EOS would leave after a retry) is reported."""
    fig = eos.run_confluent(ebroker.bootstrap, 6, per_txn=1)
    assert fig.problems == []
    dst = fig.output_topic
    p = Producer({"bootstrap.servers": ebroker.bootstrap})
    p.produce(dst, value=b"in-0000000|t0", partition=0)
    p.produce(dst, value=b"in-0000001|t2", partition=0)  # a copy from aborted txn 2
    assert p.flush(TIMEOUT) == 0
    again = eos.verify(
        ebroker.bootstrap,
        eos.Figures(
            "again", 6, fig.committed, fig.aborted, fig.inputs, 1, 0.0, input_ends=fig.input_ends
        ),
        fig.input_topic,
        dst,
        fig.group,
    )
    assert any("exactly once" in s for s in again.problems)
    assert any("aborted transaction" in s for s in again.problems)


# -- zombies (KIP-98 fencing by epoch) ----------------------------------------------------------


def test_zombie_produce_after_fencing_fails_and_none_of_its_records_are_read_committed(
    ebroker: BrokerThread,
) -> None:
    """Kafka's TransactionCoordinator: InitProducerId for a ``transactional.id`` with an
    open transaction bumps the epoch and aborts that transaction; the old producer's
    next produce is refused (PRODUCER_FENCED/INVALID_PRODUCER_EPOCH), a fatal error."""
    topic, tid = unique("zombie"), unique("tx")
    eos.create_topics(ebroker.bootstrap, topic)
    zombie = Producer({"bootstrap.servers": ebroker.bootstrap, "transactional.id": tid})
    zombie.init_transactions(TIMEOUT)
    zombie.begin_transaction()
    zombie.produce(topic, value=b"zombie-1", partition=0)
    assert zombie.flush(TIMEOUT) == 0
    fresh = Producer({"bootstrap.servers": ebroker.bootstrap, "transactional.id": tid})
    fresh.init_transactions(TIMEOUT)
    # partition 0 is already in the zombie's transaction: its Produce goes straight to
    # the partition leader with the old epoch, which the partition's producer state
    # refuses (Kafka: INVALID_PRODUCER_EPOCH, librdkafka turns it into fatal _FENCED)
    zombie.produce(topic, value=b"zombie-2", partition=0)
    with pytest.raises(KafkaException) as info:
        zombie.flush(TIMEOUT)
        zombie.commit_transaction(TIMEOUT)
    error = info.value.args[0]
    assert error.fatal() and error.code() == KafkaError._FENCED, error
    fresh.begin_transaction()
    fresh.produce(topic, value=b"fresh", partition=0)
    fresh.commit_transaction(TIMEOUT)
    assert eos.read_all(ebroker.bootstrap, topic, "read_committed") == [b"fresh"]
    assert b"zombie-1" in eos.read_all(ebroker.bootstrap, topic, "read_uncommitted")


def test_aiokafka_zombie_is_fenced_and_invisible_to_read_committed(ebroker: BrokerThread) -> None:
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaError as AIOKafkaError

    topic, tid = unique("azombie"), unique("tx")
    eos.create_topics(ebroker.bootstrap, topic)

    async def scenario() -> type[BaseException]:
        zombie = AIOKafkaProducer(bootstrap_servers=ebroker.bootstrap, transactional_id=tid)
        fresh = AIOKafkaProducer(bootstrap_servers=ebroker.bootstrap, transactional_id=tid)
        await zombie.start()
        try:
            await zombie.begin_transaction()
            await zombie.send_and_wait(topic, b"zombie", partition=0)
            await fresh.start()  # InitProducerId: epoch bump, the zombie's txn aborted
            await fresh.begin_transaction()
            await fresh.send_and_wait(topic, b"fresh", partition=0)
            await fresh.commit_transaction()
            with pytest.raises(AIOKafkaError) as info:
                await zombie.send_and_wait(topic, b"zombie-late", partition=0)
                await zombie.commit_transaction()
            return type(info.value)
        finally:
            await fresh.stop()
            await zombie.stop()

    error = asyncio.run(scenario())
    assert error.__name__ in {"ProducerFenced", "InvalidProducerEpoch"}, error
    assert eos.read_all(ebroker.bootstrap, topic, "read_committed") == [b"fresh"]
