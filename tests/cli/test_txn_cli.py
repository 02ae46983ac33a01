"""``kompakt txn list|describe|producers`` against a real broker: kafka-transactions.sh's
verbs (KIP-664) over Kafka frames, text and --json, one-line errors with exit 1."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from cli_kit import assert_one_line_error
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from shared_kit import free_port
from typer.testing import CliRunner

from kompakt.broker.app import BrokerThread, start_test_broker
from kompakt.cli.main import app

runner = CliRunner()
TIMEOUT = 30
TOPIC = "txn-cli"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    b = start_test_broker(str(tmp_path_factory.mktemp("broker")))
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="module")
def txns(broker: BrokerThread) -> Iterator[None]:
    """``done``: one committed transaction (CompleteCommit); ``open``: a transaction
    open on partition 1; ``fresh``: initialized only (Empty, start time -1)."""
    a = AdminClient({"bootstrap.servers": broker.bootstrap})
    a.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(TIMEOUT)
    producers = []
    for tid, partition, commit in (("done", 0, True), ("open", 1, False)):
        p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": tid})
        p.init_transactions(TIMEOUT)
        p.begin_transaction()
        p.produce(TOPIC, b"v", b"k", partition=partition)
        p.flush(TIMEOUT)
        if commit:
            p.commit_transaction(TIMEOUT)
        producers.append(p)
    fresh = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "fresh"})
    fresh.init_transactions(TIMEOUT)
    yield
    producers[1].abort_transaction(TIMEOUT)


def cli(broker: BrokerThread, *args: str):
    return runner.invoke(app, ["txn", *args, "--bootstrap-server", broker.bootstrap])


def ok(result) -> str:
    assert result.exit_code == 0, (result.output, result.exception)
    return result.stdout


def test_list_shows_every_id_and_filters_by_state(broker: BrokerThread, txns: None) -> None:
    rows = {r["transactional_id"]: r for r in json.loads(ok(cli(broker, "list", "--json")))}
    assert rows["done"]["state"] == "CompleteCommit"
    assert rows["open"]["state"] == "Ongoing"
    text = ok(cli(broker, "list", "--state", "Ongoing"))
    assert "TRANSACTIONAL-ID" in text and "open" in text and "done" not in text
    pid = rows["open"]["producer_id"]
    only = json.loads(ok(cli(broker, "list", "--producer-id", str(pid), "--json")))
    assert [r["transactional_id"] for r in only] == ["open"]
    # KIP-994: only transactions open longer than the duration (an idle id's start
    # time is -1, so the coordinator's rule, as Kafka's, compares now - start)
    long = ["list", "--state", "Ongoing", "--duration-ms", "3600000", "--json"]
    assert json.loads(ok(cli(broker, *long))) == []
    short = json.loads(
        ok(cli(broker, "list", "--state", "Ongoing", "--duration-ms", "0", "--json"))
    )
    assert [r["transactional_id"] for r in short] == ["open"]


def test_list_unknown_state_is_an_error(broker: BrokerThread, txns: None) -> None:
    """Kafka's unknownStateFilters: the CLI refuses rather than list nothing."""
    assert_one_line_error(
        cli(broker, "list", "--state", "Bogus"), "unknown transaction states: Bogus"
    )


def test_describe_open_and_completed(broker: BrokerThread, txns: None) -> None:
    d = json.loads(ok(cli(broker, "describe", "open", "--json")))
    assert d["state"] == "Ongoing" and d["partitions"] == [[TOPIC, 1]]
    assert d["start_time_ms"] > 0 and d["timeout_ms"] == 60_000
    done = json.loads(ok(cli(broker, "describe", "done", "--json")))
    # Kafka's prepareComplete keeps the start time: CompleteCommit still reports it
    assert done["state"] == "CompleteCommit" and done["start_time_ms"] > 0
    assert done["partitions"] == []
    text = ok(cli(broker, "describe", "fresh"))  # Empty: start -1, printed as Kafka's None
    assert "Empty" in text and "None" in text


def test_describe_unknown_id_is_transactional_id_not_found(broker: BrokerThread) -> None:
    assert_one_line_error(cli(broker, "describe", "never"), "TRANSACTIONAL_ID_NOT_FOUND")


def test_producers_per_partition(broker: BrokerThread, txns: None) -> None:
    rows = json.loads(ok(cli(broker, "producers", TOPIC, "--json")))
    by_partition = {r["partition"]: r for r in rows}
    assert by_partition[0]["current_transaction_start_offset"] == -1  # committed
    assert by_partition[1]["current_transaction_start_offset"] == 0  # open at offset 0
    assert by_partition[1]["last_sequence"] == 0
    only = json.loads(ok(cli(broker, "producers", TOPIC, "--partition", "1", "--json")))
    assert [r["partition"] for r in only] == [1]
    assert "CURRENT-TRANSACTION-START-OFFSET" in ok(cli(broker, "producers", TOPIC))


def test_producers_unknown_topic_or_partition(broker: BrokerThread, txns: None) -> None:
    assert_one_line_error(cli(broker, "producers", "nope"), "UNKNOWN_TOPIC_OR_PARTITION")
    assert_one_line_error(
        cli(broker, "producers", TOPIC, "--partition", "9"), "UNKNOWN_TOPIC_OR_PARTITION"
    )


@pytest.mark.parametrize("args", [("list",), ("describe", "x"), ("producers", "t")])
def test_unreachable_broker_is_one_line(args: tuple[str, ...]) -> None:
    port = free_port()
    r = runner.invoke(app, ["txn", *args, "--bootstrap-server", f"127.0.0.1:{port}"])
    assert_one_line_error(r, f"broker 127.0.0.1:{port} not reachable: Connection refused")
