"""DescribeTransactions under ACLs (Kafka's KafkaApis.handleDescribeTransactionsRequest):
an id the caller may not DESCRIBE is refused, and a described transaction lists only the
partitions of topics the caller may DESCRIBE. A real transactional producer makes the
state; the admin call goes as a raw frame, as Kafka's Admin client sends it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from kio.schema.errors import ErrorCode
from raw_kafka import API, call
from shared_kit import unique

from kompakt.broker.acls import AclBinding, AclFilter, Op, PatternType, Permission, ResourceType
from kompakt.broker.app import BrokerThread, start_test_broker
from kompakt.broker.handlers.acls import AUTHORIZER_KEY

ANON = "User:ANONYMOUS"  # a PLAINTEXT client's principal
TIMEOUT = 30


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    b = start_test_broker(
        tmp_path_factory.mktemp("txn-acls"),
        **{"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"},
    )
    yield b
    b.stop()


def _set_acls(b: BrokerThread, grants: list[tuple[ResourceType, str, Op]]) -> None:
    """Exactly these ALLOW ACLs for ``User:ANONYMOUS``."""
    store = b.broker.state.extra[AUTHORIZER_KEY].store
    store.remove([AclFilter(principal=ANON)])
    lit, allow = int(PatternType.LITERAL), int(Permission.ALLOW)
    store.add([AclBinding(int(rt), n, lit, ANON, "*", int(op), allow) for rt, n, op in grants])


def test_describe_transactions_lists_only_the_topics_the_caller_may_describe(
    secured: BrokerThread,
) -> None:
    """The issue's finding: the open transaction's other topic was named to a caller
    without DESCRIBE on it. Kafka removes such topics from ``topics`` (not logged as a
    refusal) and answers the rest."""
    b = secured
    seen, hidden, tid = unique("seen"), unique("hidden"), unique("tid")
    for name in (seen, hidden):
        b.logs.create_topic(name, 1)
    TOPIC, TXN = ResourceType.TOPIC, ResourceType.TRANSACTIONAL_ID
    writer = [(TOPIC, seen, Op.WRITE), (TOPIC, hidden, Op.WRITE), (TXN, tid, Op.WRITE)]
    _set_acls(b, writer)
    p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": tid, "linger.ms": 0})
    p.init_transactions(TIMEOUT)
    p.begin_transaction()
    p.produce(seen, b"v")
    p.produce(hidden, b"v")
    p.flush(TIMEOUT)
    try:
        _set_acls(b, [(TXN, tid, Op.DESCRIBE), (TOPIC, seen, Op.DESCRIBE)])
        r = call(b.port, API.describe_transactions, 0, {"transactional_ids": [tid]})
        (state,) = r.transaction_states
        assert state.error_code == ErrorCode.none and state.transaction_state == "Ongoing"
        assert [(t.topic, list(t.partitions)) for t in state.topics] == [(seen, [0])]
        _set_acls(b, [(TXN, tid, Op.DESCRIBE), (TOPIC, seen, Op.DESCRIBE)] + writer[1:2])
        r = call(b.port, API.describe_transactions, 0, {"transactional_ids": [tid]})
        assert sorted(t.topic for t in r.transaction_states[0].topics) == sorted([seen, hidden])
        _set_acls(b, [(TOPIC, seen, Op.DESCRIBE)])
        r = call(b.port, API.describe_transactions, 0, {"transactional_ids": [tid]})
        assert r.transaction_states[0].error_code == ErrorCode.transactional_id_authorization_failed
        assert list(r.transaction_states[0].topics) == []
    finally:
        _set_acls(b, writer)
        p.abort_transaction(TIMEOUT)
