"""The ``kompakt`` CLI against a running broker (``--bootstrap-server``): topic verbs,
produce/consume, consumer groups, and one-line errors. One real broker per module."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_kit import assert_one_line_error
from confluent_kafka import Consumer
from shared_kit import free_port, wait_for
from typer.testing import CliRunner

from kompakt.broker.app import BrokerThread, start_test_broker
from kompakt.cli.main import app

runner = CliRunner()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    b = start_test_broker(
        str(tmp_path_factory.mktemp("broker")), **{"group.initial.rebalance.delay.ms": 0}
    )
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def cli(broker: BrokerThread):
    """``cli(*args, input=...)``: the CLI against the module's broker."""

    def run(*args: str | Path, input: str | None = None):
        return runner.invoke(
            app, [str(a) for a in args] + ["--bootstrap-server", broker.bootstrap], input=input
        )

    return run


def ok(result) -> str:
    assert result.exit_code == 0, (result.output, result.exception)
    return result.stdout


def admin_url(broker: BrokerThread) -> str:
    return f"http://127.0.0.1:{broker.admin_port}"


def describe_json(cli, broker: BrokerThread, topic: str) -> dict:
    [desc] = json.loads(
        ok(cli("topic", "describe", topic, "--admin-url", admin_url(broker), "--json"))
    )
    return desc


def group_json(cli, group: str) -> dict:
    return json.loads(ok(cli("group", "describe", group, "--json")))


# -- topics --------------------------------------------------------------------------------


def test_topic_create_alter_describe_list_delete(cli, broker: BrokerThread):
    ok(cli("topic", "create", "users", "--partitions", "3",
           "--config", "cleanup.policy=compact", "--config", "segment.bytes=2000"))  # fmt: skip
    ok(cli("topic", "create", "events"))
    assert {"events", "users"} <= set(ok(cli("topic", "list")).splitlines())
    listed = {t["name"]: t for t in json.loads(ok(cli("topic", "list", "--json")))}
    assert (listed["users"]["partitions"], listed["events"]["partitions"]) == (3, 1)

    out = ok(cli("topic", "alter", "users", "--config", "retention.ms=1000",
                 "--delete-config", "segment.bytes"))  # fmt: skip
    assert "overrides: cleanup.policy=compact,retention.ms=1000" in out

    desc = describe_json(cli, broker, "users")
    assert desc["partition_count"] == 3 and desc["topic_id"] == listed["users"]["topic_id"]
    configs = {c["name"]: c for c in desc["configs"]}
    assert configs["cleanup.policy"]["value"] == "compact"
    assert configs["cleanup.policy"]["override"] is True
    assert configs["retention.ms"]["value"] == "1000"
    assert configs["segment.bytes"]["override"] is False
    p0 = desc["partitions"][0]
    assert (p0["start_offset"], p0["end_offset"], p0["segments"]) == (0, 0, 1)
    assert p0["dirty_ratio"] == 0.0 and p0["tombstones_pending"] == 0
    assert p0["last_compaction_ms"] is None and p0["uncleanable_reason"] is None

    text = ok(cli("topic", "describe", "users", "--admin-url", admin_url(broker)))
    assert "PartitionCount: 3" in text
    header = next(line for line in text.splitlines() if line.startswith("Partition"))
    for column in ("Start", "End", "Size", "Segments", "Dirty ratio", "Last compaction"):
        assert column in header
    everything = json.loads(ok(cli("topic", "describe", "--json")))
    assert {"events", "users"} <= {t["name"] for t in everything}
    # a topic that is not compacted has no dirty ratio
    assert describe_json(cli, broker, "events")["partitions"][0]["dirty_ratio"] is None

    ok(cli("topic", "delete", "events"))
    assert "events" not in ok(cli("topic", "list")).splitlines()


def test_describe_without_admin_endpoint_warns_and_leaves_columns_out(cli, broker: BrokerThread):
    ok(cli("topic", "create", "noadmin", "--config", "cleanup.policy=compact"))
    r = cli("topic", "describe", "noadmin", "--admin-url", "http://127.0.0.1:1")
    out = ok(r)
    [warning] = r.stderr.strip().splitlines()
    assert warning.startswith("warning: admin endpoint http://127.0.0.1:1 not reachable")
    header = next(line for line in out.splitlines() if line.startswith("Partition"))
    assert header.split() == ["Partition", "Start", "End"]


# -- records -------------------------------------------------------------------------------


def test_produce_consume_round_trip(cli, broker: BrokerThread):
    ok(cli("topic", "create", "rt", "--partitions", "2", "--config", "cleanup.policy=compact"))
    stdin = "alice\tLondon\nbob\tParis\nalice\tRome\nbob\t__DEL__\n"
    summary = json.loads(ok(cli("produce", "rt", "--tombstone", "__DEL__", "--json", input=stdin)))
    assert summary["records"] == 4

    records = [json.loads(line) for line in ok(cli("consume", "rt", "--json")).splitlines()]
    by_key: dict[str, list] = {}
    for r in records:
        by_key.setdefault(r["key"], []).append((r["partition"], r["offset"], r["value"]))
    # Kafka's murmur2 partitioner: one partition per key, offsets in order
    assert [v for _p, _o, v in by_key["alice"]] == ["London", "Rome"]
    assert [v for _p, _o, v in by_key["bob"]] == ["Paris", None]
    assert len({p for p, _o, _v in by_key["alice"]}) == 1
    assert records == sorted(records, key=lambda r: (r["partition"], r["offset"]))

    text = ok(cli("consume", "rt", "--max-messages", "1"))
    assert len(text.splitlines()) == 1
    p = by_key["alice"][0][0]
    tail = ok(cli("consume", "rt", "--partition", str(p), "--offset", "1", "--json"))
    assert [json.loads(line)["offset"] for line in tail.splitlines()][0] == 1

    assert_one_line_error(cli("produce", "rt", input="k\tv\nno key\n"), "without key")
    desc = describe_json(cli, broker, "rt")
    assert sum(p["end_offset"] for p in desc["partitions"]) == 4
    assert sum(p["tombstones_pending"] for p in desc["partitions"]) == 1


# -- consumer groups -----------------------------------------------------------------------


def test_group_consume_with_max_messages_commits_exactly_what_it_printed(cli):
    """Kafka's console consumer with --max-messages commits the offsets after the
    records it printed, so the next run of the group starts at the first one it did
    not print (the limit closes the group consumer at once, which commits)."""
    ok(cli("topic", "create", "gmax"))
    ok(cli("produce", "gmax", input="".join(f"k{i}\tv{i}\n" for i in range(5))))
    first = ok(cli("consume", "gmax", "--group", "gmax-1", "--max-messages", "2"))
    assert first.splitlines() == ["k0\tv0", "k1\tv1"]
    assert [p["committed_offset"] for p in group_json(cli, "gmax-1")["partitions"]] == [2]
    rest = ok(cli("consume", "gmax", "--group", "gmax-1"))
    assert rest.splitlines() == ["k2\tv2", "k3\tv3", "k4\tv4"]


def test_group_consume_commit_describe_reset_delete(cli):
    ok(cli("topic", "create", "gt", "--partitions", "2"))
    ok(cli("produce", "gt", input="".join(f"k{i}\tv{i}\n" for i in range(10))))

    consumed = ok(cli("consume", "gt", "--group", "g1")).splitlines()
    assert sorted(consumed) == sorted(f"k{i}\tv{i}" for i in range(10))
    assert ok(cli("consume", "gt", "--group", "g1")) == ""  # everything was committed

    assert "g1" in ok(cli("group", "list")).splitlines()
    listed = {g["group_id"]: g for g in json.loads(ok(cli("group", "list", "--json")))}
    assert listed["g1"]["state"] == "Empty"

    d = group_json(cli, "g1")
    assert d["state"] == "Empty" and d["members"] == []
    assert [(p["partition"], p["lag"]) for p in d["partitions"]] == [(0, 0), (1, 0)]
    assert sum(p["committed_offset"] for p in d["partitions"]) == 10
    text = ok(cli("group", "describe", "g1"))
    assert "CURRENT-OFFSET" in text and "LAG" in text

    dry = json.loads(ok(cli("group", "reset-offsets", "g1", "--topic", "gt", "--to-earliest",
                            "--dry-run", "--json")))  # fmt: skip
    assert [o["new_offset"] for o in dry["offsets"]] == [0, 0]
    assert all(p["lag"] == 0 for p in group_json(cli, "g1")["partitions"])  # unchanged

    ok(cli("group", "reset-offsets", "g1", "--topic", "gt", "--to-earliest"))
    for p in group_json(cli, "g1")["partitions"]:
        assert p["committed_offset"] == 0 and p["lag"] == p["end_offset"] > 0

    ok(cli("group", "reset-offsets", "g1", "--topic", "gt", "--partition", "0", "--to-latest"))
    lags = {p["partition"]: p["lag"] for p in group_json(cli, "g1")["partitions"]}
    assert lags[0] == 0 and lags[1] > 0
    ok(cli("group", "reset-offsets", "g1", "--topic", "gt", "--partition", "1",
           "--to-offset", "1"))  # fmt: skip
    assert {p["partition"]: p["committed_offset"] for p in group_json(cli, "g1")["partitions"]}[
        1
    ] == 1

    out = ok(cli("group", "delete", "g1"))
    assert out.strip() == "Deleted group g1."
    assert "g1" not in ok(cli("group", "list")).splitlines()
    assert_one_line_error(cli("group", "describe", "g1"), "'g1' does not exist")
    assert_one_line_error(cli("group", "delete", "g1"), "'g1' does not exist")


def test_reset_and_delete_refused_while_the_group_has_members(cli, broker: BrokerThread):
    ok(cli("topic", "create", "busy"))
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "busy-group",
            "client.id": "busy-client",
            "session.timeout.ms": 6000,
        }
    )
    assigned: list = []
    consumer.subscribe(["busy"], on_assign=lambda _c, tps: assigned.extend(tps))
    try:
        wait_for(lambda: consumer.poll(0.2) or assigned, "the test consumer's assignment", 20)
        assert assigned
        d = group_json(cli, "busy-group")
        assert d["state"] == "Stable"
        [member] = d["members"]
        assert member["client_id"] == "busy-client" and member["assignment"] == [["busy", 0]]

        r = cli("group", "reset-offsets", "busy-group", "--topic", "busy", "--to-earliest")
        assert_one_line_error(r, "can only be reset if the group 'busy-group' is inactive",
                              "current state is Stable")  # fmt: skip
        assert_one_line_error(cli("group", "delete", "busy-group"), "not empty")
    finally:
        consumer.close()
    d = group_json(cli, "busy-group")
    assert d["state"] == "Empty"
    ok(cli("group", "delete", "busy-group"))


def test_reset_offsets_needs_exactly_one_target(cli):
    assert_one_line_error(
        cli("group", "reset-offsets", "g", "--topic", "t"), "exactly one of --to-earliest"
    )
    assert_one_line_error(
        cli("group", "reset-offsets", "g", "--topic", "t", "--to-earliest", "--to-latest"),
        "exactly one",
    )


# -- errors --------------------------------------------------------------------------------


def test_unknown_topic_and_bad_config_are_one_line_errors(cli):
    assert_one_line_error(cli("consume", "nope"), "unknown topic 'nope'")
    assert_one_line_error(cli("topic", "describe", "nope"), "unknown topic 'nope'")
    assert_one_line_error(cli("topic", "delete", "nope"), "'nope'")
    assert_one_line_error(cli("topic", "alter", "nope", "-c", "retention.ms=1"), "'nope'")
    assert_one_line_error(cli("produce", "nope", input="a\tb\n"), "'nope'")
    assert_one_line_error(
        cli("group", "reset-offsets", "nogroup", "--topic", "nope", "--to-earliest"), "'nope'"
    )
    assert_one_line_error(cli("topic", "create", "bad", "-c", "retention.ms=abc"), "retention.ms")
    ok(cli("topic", "create", "dup"))
    assert_one_line_error(cli("topic", "create", "dup"), "already exists")
    assert_one_line_error(cli("consume", "dup", "-p", "3"), "partition 3")
    assert_one_line_error(
        cli("consume", "dup", "--group", "g", "--offset", "1"), "cannot be combined"
    )


@pytest.mark.parametrize(
    "args",
    [
        ("topic", "list"),
        ("topic", "describe", "t"),
        ("consume", "t"),
        ("group", "list"),
    ],
)
def test_unreachable_broker_is_one_line_quickly(args: tuple[str, ...]):
    """Quickly, without timing it: the refused connect is reported itself, not a client
    timeout after the broker was retried ("within N s")."""
    port = free_port()
    r = runner.invoke(app, [*args, "--bootstrap-server", f"127.0.0.1:{port}"], input="")
    assert_one_line_error(r, f"broker 127.0.0.1:{port} not reachable: Connection refused")


def test_transport_options_are_exclusive_and_checked(tmp_path: Path):
    r = runner.invoke(
        app, ["topic", "list", "--data-dir", str(tmp_path), "--bootstrap-server", "h:1"]
    )
    assert_one_line_error(r, "not both")
    r = runner.invoke(app, ["topic", "list", "--bootstrap-server", "no-port"])
    assert_one_line_error(r, "invalid --bootstrap-server")
    r = runner.invoke(app, ["consume", "t", "--data-dir", str(tmp_path), "--group", "g"])
    assert_one_line_error(r, "--group needs a broker")
