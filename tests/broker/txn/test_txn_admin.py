"""kafka-transactions.sh's APIs on a real broker: DescribeTransactions, ListTransactions,
DescribeProducers (KIP-664), the one FindCoordinator handler, and the open-transaction
gauges on the admin /metrics endpoint. A confluent-kafka transactional producer makes
the state; the admin calls go as raw kio frames, as Kafka's Admin client sends them."""

from __future__ import annotations

import re
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode
from raw_kafka import API, call

from kompakt.broker.app import BrokerThread, start_test_broker
from kompakt.broker.coordinator import register as register_group_apis
from kompakt.broker.handlers import register_all
from kompakt.broker.handlers.find_coordinator import handle_find_coordinator
from kompakt.broker.registry import ApiRegistry
from kompakt.broker.txn.log import TRANSACTION_STATE_TOPIC
from kompakt.cli import raw_request
from kompakt.cli import txn as txn_cli

TIMEOUT = 30


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    b = start_test_broker(tmp_path_factory.mktemp("txn-admin"))
    yield b
    b.stop()


@pytest.fixture(scope="module")
def open_txn(broker: BrokerThread) -> Iterator[tuple[str, str, Producer]]:
    """A topic and a transactional producer with a transaction open on partition 1
    (two records) after one committed transaction on partition 0."""
    bootstrap = f"127.0.0.1:{broker.port}"
    topic = "txn-admin-t"
    a = AdminClient({"bootstrap.servers": bootstrap})
    a.create_topics([NewTopic(topic, 2, 1)])[topic].result(TIMEOUT)
    tid = "admin-tid"
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 0})
    p.init_transactions(TIMEOUT)
    p.begin_transaction()
    p.produce(topic, b"v", b"k", partition=0)
    p.commit_transaction(TIMEOUT)
    p.begin_transaction()
    p.produce(topic, b"v1", b"k1", partition=1)
    p.produce(topic, b"v2", b"k2", partition=1)
    p.flush(TIMEOUT)
    yield topic, tid, p
    p.abort_transaction(TIMEOUT)


def metric(broker: BrokerThread, name: str) -> float:
    text = urllib.request.urlopen(
        f"http://127.0.0.1:{broker.admin_port}/metrics", timeout=TIMEOUT
    ).read()
    m = re.search(rf"^{name} (\S+)$", text.decode(), re.M)
    assert m, name
    return float(m.group(1))


def test_apiversions_lists_the_kip_664_apis(broker: BrokerThread) -> None:
    """ApiVersions advertises DescribeProducers v0, DescribeTransactions v0 and
    ListTransactions v0-2 (kafka-transactions.sh negotiates against these)."""
    r = call(broker.port, API.api_versions, 3, {})
    got = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in r.api_keys}
    assert got[API.describe_producers] == (0, 0)
    assert got[API.describe_transactions] == (0, 0)
    assert got[API.list_transactions] == (0, 2)


def test_describe_transactions_reports_the_open_transaction(
    broker: BrokerThread, open_txn: tuple[str, str, Producer]
) -> None:
    """Kafka's handleDescribeTransactionsRequest: state Ongoing, the producer's
    timeout, start time and partitions; an unknown id is TRANSACTIONAL_ID_NOT_FOUND."""
    topic, tid, _ = open_txn
    bootstrap = f"127.0.0.1:{broker.port}"
    frame = raw_request.send(
        bootstrap, API.describe_transactions, 0, {"transactional_ids": [tid, "nope"]}
    )
    # kio cannot read the -1 start time of an id with no transaction: the CLI's reader
    found, missing = txn_cli.decode_describe_transactions(frame)
    assert found.error is None
    assert found.state == "Ongoing"
    assert found.timeout_ms == 60_000  # librdkafka's transaction.timeout.ms default
    assert abs(found.start_time_ms / 1000 - time.time()) < 60
    assert found.producer_id >= 0 and found.producer_epoch == 0
    assert found.partitions == [(topic, 1)]
    assert missing.error == "TRANSACTIONAL_ID_NOT_FOUND"
    # Kafka's coordinator sets only the error code on a failed entry: the other fields
    # keep DescribeTransactionsResponse.json's zero defaults (so kio can read them too)
    assert (missing.start_time_ms, missing.producer_id) == (0, 0)


def test_list_transactions_filters(
    broker: BrokerThread, open_txn: tuple[str, str, Producer]
) -> None:
    """Kafka's listTransactionStates: state and producer-id filters, v1's duration
    filter (KIP-994), v2's id pattern (KIP-1152), unknown states echoed back."""
    _, tid, _ = open_txn

    def ids(version: int, **body: object) -> tuple[list[str], list[str]]:
        r = call(broker.port, API.list_transactions, version, body)
        assert r.error_code == ErrorCode.none
        return [s.transactional_id for s in r.transaction_states], list(r.unknown_state_filters)

    assert ids(0) == ([tid], [])
    assert ids(0, state_filters=["Ongoing", "Bogus"]) == ([tid], ["Bogus"])
    assert ids(0, state_filters=["CompleteCommit"]) == ([], [])
    pid = call(broker.port, API.list_transactions, 0, {}).transaction_states[0].producer_id
    assert ids(0, producer_id_filters=[pid]) == ([tid], [])
    assert ids(0, producer_id_filters=[pid + 1]) == ([], [])
    assert ids(1, duration_filter=0) == ([tid], [])
    assert ids(1, duration_filter=3_600_000) == ([], [])
    assert ids(2, transactional_id_pattern="admin-.*") == ([tid], [])
    assert ids(2, transactional_id_pattern="admin") == ([], [])  # a full match, as Java's
    bad = call(broker.port, API.list_transactions, 2, {"transactional_id_pattern": "("})
    assert bad.error_code == ErrorCode.invalid_regular_expression


def test_describe_producers_reports_sequence_and_open_txn_start(
    broker: BrokerThread, open_txn: tuple[str, str, Producer]
) -> None:
    """ProducerStateManager.activeProducers through DescribeProducers: on partition 1
    the open transaction starts at offset 0 and the last sequence is 1 (two records);
    on partition 0 the committed one is closed (-1). An unknown partition is
    UNKNOWN_TOPIC_OR_PARTITION."""
    topic, _, _ = open_txn
    body = {
        "topics": [
            {"name": topic, "partition_indexes": [0, 1, 7]},
            {"name": "nope", "partition_indexes": [0]},
        ]
    }
    r = call(broker.port, API.describe_producers, 0, body)
    p0, p1, p7 = r.topics[0].partitions
    assert p7.error_code == ErrorCode.unknown_topic_or_partition
    assert r.topics[1].partitions[0].error_code == ErrorCode.unknown_topic_or_partition
    (s0,) = p0.active_producers
    (s1,) = p1.active_producers
    assert s0.producer_id == s1.producer_id and s1.producer_epoch == 0
    assert s0.current_txn_start_offset == -1  # committed: closed by its marker
    assert s1.current_txn_start_offset == 0
    assert s1.last_sequence == 1 and s1.last_timestamp > 0
    assert s1.coordinator_epoch == -1


def test_gauges_count_open_transactions_and_the_oldest_age(
    broker: BrokerThread, open_txn: tuple[str, str, Producer]
) -> None:
    """The admin /metrics endpoint: one open transaction; the oldest age is now minus
    the start time DescribeTransactions reports."""
    _, tid, _ = open_txn
    assert metric(broker, "kompakt_transaction_coordinator_open_transactions") == 1
    frame = raw_request.send(
        f"127.0.0.1:{broker.port}", API.describe_transactions, 0, {"transactional_ids": [tid]}
    )
    (d,) = txn_cli.decode_describe_transactions(frame)
    age = metric(broker, "kompakt_transaction_coordinator_oldest_open_transaction_age_seconds")
    assert age > 0
    assert abs(age - (time.time() - d.start_time_ms / 1000)) < 5


def test_find_coordinator_has_one_handler_for_every_key_type(broker: BrokerThread) -> None:
    """Kafka's KafkaApis.getCoordinator dispatches on key_type: one handler owns the
    API (the group coordinator's module no longer registers it); GROUP and
    TRANSACTION keys find this node, an unknown key type is INVALID_REQUEST."""
    groups_only = ApiRegistry()
    register_group_apis(groups_only)
    assert API.find_coordinator not in groups_only
    assert register_all(ApiRegistry()).get(API.find_coordinator).handler is handle_find_coordinator
    for key_type in (0, 1):
        r = call(
            broker.port,
            API.find_coordinator,
            4,
            {"key_type": key_type, "coordinator_keys": ["k"]},
        )
        assert r.coordinators[0].error_code == ErrorCode.none
        assert r.coordinators[0].port == broker.port
    r = call(broker.port, API.find_coordinator, 4, {"key_type": 5, "coordinator_keys": ["k"]})
    assert r.coordinators[0].error_code == ErrorCode.invalid_request
    # SHARE (KIP-932) below v6: refused as Kafka 3.9+ does; at v6 no share coordinator here
    r = call(broker.port, API.find_coordinator, 4, {"key_type": 2, "coordinator_keys": ["k"]})
    assert r.coordinators[0].error_code == ErrorCode.invalid_request
    r = call(broker.port, API.find_coordinator, 6, {"key_type": 2, "coordinator_keys": ["k"]})
    assert r.coordinators[0].error_code == ErrorCode.coordinator_not_available


def test_admin_reads_never_create_the_transaction_state_topic(tmp_path: Path) -> None:
    """On a broker where no transactional id was ever used, ListTransactions lists
    nothing and DescribeTransactions is TRANSACTIONAL_ID_NOT_FOUND, and neither makes
    __transaction_state (a read must not write)."""
    b = start_test_broker(tmp_path / "data")
    try:
        r = call(b.port, API.list_transactions, 0, {"state_filters": ["Ongoing", "Bogus"]})
        assert r.error_code == ErrorCode.none
        assert list(r.transaction_states) == [] and list(r.unknown_state_filters) == ["Bogus"]
        frame = raw_request.send(
            f"127.0.0.1:{b.port}", API.describe_transactions, 0, {"transactional_ids": ["x"]}
        )
        (d,) = txn_cli.decode_describe_transactions(frame)
        assert d.error == "TRANSACTIONAL_ID_NOT_FOUND"
        assert not b.logs.has_topic(TRANSACTION_STATE_TOPIC)
    finally:
        b.stop()


def test_kafka_python_admin_reads_the_same_answers(
    broker: BrokerThread, open_txn: tuple[str, str, Producer]
) -> None:
    """Another client's decoding of the KIP-664 APIs: kafka-python's KafkaAdminClient
    (list_transactions / describe_transactions / describe_producers, as Kafka's Admin
    does them: FindCoordinator TRANSACTION, then DescribeTransactions to it); an
    unknown id fails with TransactionalIdNotFoundError."""
    from kafka.admin import KafkaAdminClient
    from kafka.errors import TransactionalIdNotFoundError
    from kafka.structs import TopicPartition

    topic, tid, _ = open_txn
    a = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{broker.port}")
    try:
        (listed,) = a.list_transactions(state_filters=["Ongoing"]).values()
        assert [(x.transactional_id, x.state.value) for x in listed] == [(tid, "Ongoing")]
        d = a.describe_transactions([tid])[tid]
        assert d.state.value == "Ongoing" and d.transaction_timeout_ms == 60_000
        assert d.topic_partitions == {TopicPartition(topic, 1)}
        with pytest.raises(TransactionalIdNotFoundError):
            a.describe_transactions(["nope"])
        states = a.describe_producers([TopicPartition(topic, 1)])
        (s,) = states[TopicPartition(topic, 1)].active_producers
        assert s.producer_id == d.producer_id and s.current_transaction_start_offset == 0
    finally:
        a.close()
