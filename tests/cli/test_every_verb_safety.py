"""Every ``kompakt`` verb, aimed at (a) a folder that is not a data dir and (b) a data
dir a running broker owns, changes nothing outside its purpose (issue 12).

The file tree is hashed before and after each run (names, sizes, contents). Where a verb
must refuse, it exits non-zero with exactly one readable ``error:`` line. The verbs are
read from the app itself: a verb added later without a case here fails
:func:`test_every_verb_has_a_case`.

Kafka's rules followed: a log dir has one owner at a time (``LogManager``'s ``.lock``:
offline verbs on a broker's dir are refused, as Kafka's tools that need the lock are);
tools that only read segment files (``kafka-dump-log.sh``) need no lock and write
nothing; a broker refuses a log dir holding folders that are not partitions.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from cli_kit import assert_one_line_error
from confluent_kafka import Producer
from shared_kit import wait_for
from tree_kit import changed, snapshot
from typer.testing import CliRunner

import kompakt.pipeline
from kompakt.broker.app import BrokerThread, start_test_broker
from kompakt.broker.producers import PRODUCER_ID_BLOCK_FILE
from kompakt.broker.security.scram_store import SCRAM_FILE
from kompakt.cli.main import app

runner = CliRunner()


def all_verbs() -> set[str]:
    """'topic create', 'produce', ...: every command ``kompakt --help`` leads to."""
    out: set[str] = set()

    def walk(cmd, prefix: str) -> None:
        if hasattr(cmd, "commands"):  # a group
            for name, sub in cmd.commands.items():
                walk(sub, f"{prefix} {name}".strip())
        else:
            out.add(prefix)

    walk(typer.main.get_command(app), "")
    return out


def verb_of(args: list[str]) -> str:
    return " ".join(args[:2]) if args[0] in ("topic", "group", "acl", "user", "txn") else args[0]


@pytest.fixture(autouse=True)
def no_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every refusal happens before Spark would start (export, compact --engine spark)."""

    def tripwire(*_a, **_k):
        raise AssertionError("Spark was started by a verb that had to refuse")

    monkeypatch.setattr(kompakt.pipeline, "session", tripwire)


def run_cli(args: list[str], input: str | None = None):
    return runner.invoke(app, args, input=input)


def run_serve(*overrides: str) -> subprocess.CompletedProcess:
    """``kompakt serve`` as a process (in-process it would serve forever on a bug).

    Where hypothesis is installed (dev installs), kio imports it and it makes
    ``.hypothesis/`` in the working directory; that is kept out of the folder here.
    """
    script = Path(sys.executable).with_name("kompakt")
    args = [str(script), "serve"]
    for o in overrides:
        args += ["--override", o]
    env = {**os.environ, "HYPOTHESIS_STORAGE_DIRECTORY": tempfile.mkdtemp()}
    return subprocess.run(args, capture_output=True, text=True, timeout=120, env=env)


# -- (a) a folder that is not a data dir ----------------------------------------------------


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user's folder, also the working directory (a default like ./kompakt-data would
    show up in it)."""
    f = tmp_path / "home"
    (f / "photos-2019").mkdir(parents=True)
    (f / "photos-2019" / "beach.jpg").write_bytes(b"\xff\xd8 jpeg")
    (f / "notes.txt").write_text("shopping list\n")
    (f / "00000000000000000000.log").write_bytes(b"not a segment")
    monkeypatch.chdir(f)
    return f


def closed_port() -> str:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def not_a_data_dir_cases(f: Path) -> list[tuple[list[str], str]]:
    d = ["--data-dir", str(f)]
    b = ["--bootstrap-server", closed_port()]
    return [
        (["topic", "create", "t", *d], "not a kompakt data dir"),
        (["topic", "alter", "t", *d, "--config", "retention.ms=1"], "not a kompakt data dir"),
        (["topic", "describe", *d], "not a kompakt data dir"),
        (["topic", "list", *d], "not a kompakt data dir"),
        (["topic", "delete", "t", *d], "not a kompakt data dir"),
        (["produce", "t", *d], "not a kompakt data dir"),
        (["consume", "t", *d], "not a kompakt data dir"),
        (["dump", str(f / "notes.txt")], "unsupported file type"),
        (["dump", str(f / "00000000000000000000.log")], "00000000000000000000.log"),
        (["compact", "t", *d, "--engine", "local"], "not a kompakt data dir"),
        (["compact", *d, "--engine", "spark"], "not a kompakt data dir"),
        (["export", "t", *d, "--out", str(f / "out")], "not a kompakt data dir"),
        (["user", "create", "u", *d, "--password-stdin"], "not a kompakt data dir"),
        (["user", "delete", "u", *d], "not a kompakt data dir"),
        (["user", "list", *d], "not a kompakt data dir"),
        (["group", "list", *b], ""),
        (["group", "describe", "g", *b], ""),
        (["group", "reset-offsets", "g", "--topic", "t", "--to-earliest", *b], ""),
        (["group", "delete", "g", *b], ""),
        (
            [
                "acl",
                "add",
                "--allow-principal",
                "User:a",
                "--operation",
                "Read",
                "--topic",
                "t",
                *b,
            ],
            "",
        ),
        (["acl", "list", *b], ""),
        (["acl", "remove", "--topic", "t", *b], ""),
        (["txn", "list", *b], ""),
        (["txn", "describe", "x", *b], ""),
        (["txn", "producers", "t", *b], ""),
    ]


def test_every_verb_refuses_a_folder_that_is_not_a_data_dir(folder: Path):
    before = snapshot(folder, mtimes=False)
    seen = set()
    for args, message in not_a_data_dir_cases(folder):
        seen.add(verb_of(args))
        r = run_cli(args, input="k\tv\n")
        assert_one_line_error(r, message)
        assert snapshot(folder, mtimes=False) == before, args
    r = run_serve(f"log.dirs={folder}")
    seen.add("serve")
    assert r.returncode == 1, r.stderr
    [line] = r.stderr.strip().splitlines()
    assert line.startswith("error: ") and "not a kompakt data dir" in line
    assert snapshot(folder, mtimes=False) == before
    assert seen == all_verbs()


def test_every_verb_has_a_case():
    """The cases above and below name every verb the app has."""
    assert {verb_of(a) for a, _m in not_a_data_dir_cases(Path("/x"))} | {"serve"} == all_verbs()
    assert {verb_of(a) for a in BROKER_DIR_OFFLINE} | {verb_of(a) for a, _p in BROKER_VERBS} | {
        "serve",
        "dump",
    } == all_verbs()


# -- (b) a data dir in use by a running broker ------------------------------------------------


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    b = start_test_broker(
        str(tmp_path_factory.mktemp("broker")),
        **{
            "group.initial.rebalance.delay.ms": 0,
            "log.cleaner.enable": "false",
            # nothing rewrites files behind the test's back
            "log.flush.offset.checkpoint.interval.ms": 3_600_000,
            "log.retention.check.interval.ms": 3_600_000,
            # small files, so hashing the tree is quick
            "offsets.topic.num.partitions": 1,
            "log.index.size.max.bytes": 4096,
            # the ACL verbs need an authorizer; the CLI's User:ANONYMOUS may do anything
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:ANONYMOUS",
        },
    )
    try:
        b.logs.create_topic("keep", 2, {"cleanup.policy": "compact", "segment.bytes": "1024"})
        b.logs.create_topic("t", 1, {"cleanup.policy": "compact"})
        _produce(b.bootstrap, "keep", 50)
        _produce(b.bootstrap, "t", 10)
        # a group with committed offsets (this also creates __consumer_offsets)
        r = run_cli(["consume", "t", "--group", "g", "-b", b.bootstrap])
        assert r.exit_code == 0, r.output
        _wait_for_group_empty(b, "g")
        yield b
    finally:
        b.stop()


def _wait_for_group_empty(b: BrokerThread, group: str) -> None:
    """The consumer left: the coordinator's rebalance with no member ends in Empty and
    writes that to ``__consumer_offsets`` in the background; the tests snapshot the data
    dir only once that write is done (a loaded machine once let it land mid-test, as if
    a refused verb had written it)."""
    from confluent_kafka import ConsumerGroupState
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    coordinator = b.broker.state.extra["group_coordinator"]

    def settled() -> bool:
        (desc,) = admin.describe_consumer_groups([group]).values()
        empty = desc.result(10).state == ConsumerGroupState.EMPTY
        return empty and not coordinator._tasks  # no group record still being written

    wait_for(settled, f"group {group} to be Empty, its record written", timeout=30)


def _produce(bootstrap: str, topic: str, n: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(n):
        p.produce(topic, value=b"v%d" % i, key=b"k%d" % (i % 7))
    assert p.flush(10) == 0


# Offline verbs pointed at the broker's data dir: all refused by its lock.
BROKER_DIR_OFFLINE = [
    ["topic", "create", "new"],
    ["topic", "alter", "t", "--config", "retention.ms=1"],
    ["topic", "describe"],
    ["topic", "list"],
    ["topic", "delete", "keep"],
    ["produce", "keep"],
    ["consume", "keep"],
    ["compact", "keep", "--engine", "local"],
    ["compact", "--engine", "spark"],
    ["export", "keep", "--out", "OUT"],
    ["user", "create", "u", "--password-stdin"],
    ["user", "delete", "u"],
    ["user", "list"],
]  # the group verbs have no --data-dir (groups live on the broker): see BROKER_VERBS

# Verbs through the broker: what each may change ("" = nothing at all).
BROKER_VERBS: list[tuple[list[str], str]] = [
    (["topic", "list"], ""),
    (["topic", "describe", "keep"], ""),
    (["consume", "keep"], ""),
    (["group", "list"], ""),
    (["group", "describe", "g"], ""),
    (["group", "reset-offsets", "g", "--topic", "t", "--to-earliest", "--dry-run"], ""),
    (["compact", "keep", "--dry-run"], ""),
    (["txn", "list"], ""),
    (["txn", "describe", "x"], ""),
    (["txn", "producers", "keep"], ""),
    (["topic", "create", "made"], "made-"),
    (["topic", "alter", "made", "--config", "retention.ms=100000"], ""),
    (["produce", "made"], "made-"),
    (["group", "reset-offsets", "g", "--topic", "t", "--to-earliest"], "__consumer_offsets-"),
    (["group", "delete", "g"], "__consumer_offsets-"),
    (["topic", "delete", "made"], "made-"),
    (["acl", "list"], ""),
    (
        ["acl", "add", "--allow-principal", "User:a", "--operation", "Read", "--topic", "keep"],
        "kompakt-acls.json",
    ),
    (["acl", "remove", "--topic", "keep"], "kompakt-acls.json"),
    (["user", "list"], ""),
    (["user", "create", "u", "--password-stdin"], SCRAM_FILE),
    (["user", "delete", "u"], SCRAM_FILE),
]

# Files of broker-wide metadata a topic verb may rewrite: every topic's configs, and
# the group coordinator's topic ids (offsets of a deleted topic go with it, as in Kafka).
# broker metadata a verb may move on as a side effect of its own work; the producer-id
# block is reserved when an (idempotent) produce asks for a producer id, as Kafka's
# controller records its ProducerIdsBlock
METADATA = {"kompakt-topics.json", "kompakt-offsets-topic-ids.json", PRODUCER_ID_BLOCK_FILE}


def test_offline_verbs_on_a_data_dir_a_broker_owns_are_refused_and_change_nothing(
    broker: BrokerThread, tmp_path: Path
):
    data = broker.logs.dir
    before = snapshot(data, mtimes=False)
    for args in BROKER_DIR_OFFLINE:
        args = [str(tmp_path / "out") if a == "OUT" else a for a in args]
        r = run_cli([*args, "--data-dir", str(data)], input="k\tv\n")
        assert_one_line_error(r, "locked by another process")
        assert snapshot(data, mtimes=False) == before, args
    assert not (tmp_path / "out").exists()
    r = run_serve(
        f"log.dirs={data}",
        "listeners=PLAINTEXT://127.0.0.1:0",
        "kompakt.admin.listener=http://127.0.0.1:0",
    )
    assert r.returncode == 1, r.stderr
    [line] = r.stderr.strip().splitlines()
    assert line.startswith("error: ") and "locked by another process" in line
    # dump reads segment files without the lock, as kafka-dump-log.sh does
    for seg in sorted(data.glob("keep-*/*.log")) + sorted(data.glob("keep-*/*.index")):
        r = run_cli(["dump", str(seg), "--deep"])
        assert r.exit_code == 0, r.output
    assert snapshot(data, mtimes=False) == before


def test_verbs_through_the_broker_change_only_what_they_are_for(broker: BrokerThread):
    data = broker.logs.dir
    admin = ["--admin-url", f"http://127.0.0.1:{broker.admin_port}"]
    for args, allowed in BROKER_VERBS:
        transport = admin if args[0] == "compact" else ["-b", broker.bootstrap]
        before = snapshot(data, mtimes=False)
        r = run_cli([*args, *transport], input="k1\tv1\nk2\tv2\n")
        # no transactional id was ever used on this broker: describe's answer is
        # TRANSACTIONAL_ID_NOT_FOUND (exit 1); what counts is that it changed nothing
        expected = 1 if args[:2] == ["txn", "describe"] else 0
        assert r.exit_code == expected, (args, r.output)
        diff = changed(before, snapshot(data, mtimes=False))
        diff -= {".", *METADATA, "recovery-point-offset-checkpoint", "log-start-offset-checkpoint"}
        stray = {p for p in diff if not (allowed and p.startswith(allowed))}
        assert not stray, (args, sorted(stray))
        if args[:2] in (["topic", "create"], ["topic", "delete"], ["produce", "made"]):
            assert diff, args  # and it did do its job
