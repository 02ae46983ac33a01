"""Offline verbs touch only what they are aimed at (issue 12, "nothing a user does loses
data").

Kafka formats a log dir once (``kafka-storage format`` / first start) and its tools that
only read (``kafka-dump-log.sh``, ``kafka-topics.sh --describe``) never write to it. So:
a read-only verb on a folder that is not a data dir says so and touches nothing; on a
real data dir it changes no byte and no mtime; only ``topic create`` makes a data dir,
and only in a missing or empty folder.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_kit import assert_one_line_error
from tree_kit import snapshot
from typer.testing import CliRunner

from kompakt.cli.main import app

runner = CliRunner()


def run(*args: str | Path, input: str | bytes | None = None):
    return runner.invoke(app, [str(a) for a in args], input=input)


@pytest.fixture
def user_folder(tmp_path: Path) -> Path:
    """A folder of a user's that was never a data dir; ``photos-2019`` looks like
    partition 2019 of a topic 'photos' to a LogManager, which would create 2019 folders."""
    folder = tmp_path / "home"
    (folder / "photos-2019").mkdir(parents=True)
    (folder / "photos-2019" / "beach.jpg").write_bytes(b"\xff\xd8 jpeg")
    (folder / "notes.txt").write_text("shopping list\n")
    return folder


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    d = tmp_path / "data"
    assert run("topic", "create", "users", "-d", d, "-p", "2",
               "-c", "cleanup.policy=compact").exit_code == 0  # fmt: skip
    assert run("topic", "create", "events", "-d", d).exit_code == 0
    r = run("produce", "users", "-d", d, input="alice\tLondon\nbob\tParis\nalice\tRome\n")
    assert r.exit_code == 0, r.output
    return d


NOT_A_DATA_DIR_VERBS = [
    ("topic", "list"),
    ("topic", "describe"),
    ("topic", "describe", "photos"),
    ("consume", "photos"),
    ("topic", "alter", "photos", "--config", "retention.ms=1"),
    ("topic", "delete", "photos"),
    ("produce", "photos"),
]


@pytest.mark.parametrize("verb", NOT_A_DATA_DIR_VERBS, ids=" ".join)
def test_verbs_refuse_a_folder_that_is_not_a_data_dir_and_touch_nothing(
    verb: tuple[str, ...], user_folder: Path
):
    before = snapshot(user_folder)
    r = run(*verb, "--data-dir", user_folder, input="k\tv\n")
    assert_one_line_error(r, "is not a kompakt data dir")
    assert snapshot(user_folder) == before


@pytest.mark.parametrize(
    "verb", [v for v in NOT_A_DATA_DIR_VERBS if v[0] != "consume"], ids=" ".join
)
def test_an_empty_folder_is_not_a_data_dir_either(verb: tuple[str, ...], tmp_path: Path):
    before = snapshot(tmp_path)
    assert_one_line_error(run(*verb, "-d", tmp_path, input="k\tv\n"), "not a kompakt data dir")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("verb", [("topic", "list"), ("consume", "t"), ("topic", "create", "t")])
def test_data_dir_that_is_a_file_is_not_a_directory(verb: tuple[str, ...], tmp_path: Path):
    f = tmp_path / "file"
    f.write_text("x")
    assert_one_line_error(run(*verb, "-d", f), f"data dir '{f}' is not a directory")
    assert f.read_text() == "x"


def test_missing_data_dir_is_not_created_by_a_read(tmp_path: Path):
    missing = tmp_path / "missing"
    assert_one_line_error(run("topic", "list", "-d", missing), "does not exist")
    assert not missing.exists()


READ_ONLY_VERBS = [
    ("topic", "list"),
    ("topic", "list", "--json"),
    ("topic", "describe"),
    ("topic", "describe", "users", "--json"),
    ("consume", "users"),
    ("consume", "users", "--json", "--partition", "1", "--offset", "1"),
    ("consume", "events", "--format", "hex"),
]


@pytest.mark.parametrize("verb", READ_ONLY_VERBS, ids=" ".join)
def test_read_only_verbs_change_no_byte_and_no_mtime_of_a_data_dir(
    verb: tuple[str, ...], data_dir: Path
):
    before = snapshot(data_dir)
    r = run(*verb, "--data-dir", data_dir)
    assert r.exit_code == 0, r.output
    assert snapshot(data_dir) == before


def test_read_only_verbs_report_what_a_log_manager_reports(data_dir: Path):
    """The reader shows the same topics, ids, offsets, sizes and records as the
    LogManager-based path did (compared against LogManager itself)."""
    import json

    from kompakt.log.manager import LogManager

    [desc] = json.loads(run("topic", "describe", "users", "-d", data_dir, "--json").stdout)
    records = [
        json.loads(line)
        for line in run("consume", "users", "-d", data_dir, "--json").stdout.split("\n")
        if line
    ]
    with LogManager(data_dir) as logs:
        assert desc["topic_id"] == logs.topic_meta("users").topic_id
        for p in desc["partitions"]:
            plog = logs.get_log("users", p["partition"])
            assert (p["start_offset"], p["end_offset"], p["size_bytes"], p["segments"]) == (
                plog.log_start_offset,
                plog.log_end_offset,
                plog.size_bytes(),
                len(plog.segments),
            )
        expected = [
            (part, r.offset, r.key.decode(), r.value.decode())
            for part in range(2)
            for b in logs.get_log("users", part).iter_batches()
            for r in b.records()
        ]
    assert [(r["partition"], r["offset"], r["key"], r["value"]) for r in records] == expected


def test_read_only_verbs_share_the_lock_but_a_writer_waits(data_dir: Path):
    """Readers hold .lock shared: two may read at once; an offline writer (which takes it
    exclusively, like a broker) is refused meanwhile, as Kafka's log dir lock is."""
    from kompakt.log.manager import shared_dir_lock

    with shared_dir_lock(data_dir):
        assert run("topic", "list", "-d", data_dir).exit_code == 0
        assert_one_line_error(
            run("topic", "delete", "events", "-d", data_dir), "locked by another process"
        )
    assert run("topic", "delete", "events", "-d", data_dir).exit_code == 0


def test_topic_create_refuses_a_non_empty_folder_that_is_not_a_data_dir(user_folder: Path):
    before = snapshot(user_folder)
    r = run("topic", "create", "t", "--data-dir", user_folder)
    assert_one_line_error(r, "is not empty and not a kompakt data dir")
    assert snapshot(user_folder) == before


def test_topic_create_makes_a_data_dir_in_an_empty_or_missing_folder(tmp_path: Path):
    empty = tmp_path / "empty"
    empty.mkdir()
    volume = tmp_path / "volume"  # a new file system's root
    (volume / "lost+found").mkdir(parents=True)
    new = tmp_path / "new" / "dir"
    for d in (empty, volume, new):
        r = run("topic", "create", "t", "-d", d)
        assert r.exit_code == 0, r.output
        assert run("topic", "list", "-d", d).stdout == "t\n"


def test_a_kafka_log_dir_without_kompakt_files_is_a_data_dir(tmp_path: Path):
    """A log dir Apache Kafka formatted (meta.properties, as ``kafka-storage format``
    writes it) is a data dir without any kompakt file."""
    d = tmp_path / "kafka"
    (d / "orders-0").mkdir(parents=True)
    (d / "orders-0" / "00000000000000000000.log").write_bytes(b"")
    (d / "orders-0" / "partition.metadata").write_text(
        "version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA\n"
    )
    (d / "meta.properties").write_text(
        "#\nnode.id=1\ndirectory.id=BBBBBBBBBBBBBBBBBBBBBB\nversion=1\n"
        "cluster.id=CCCCCCCCCCCCCCCCCCCCCC\n"
    )
    before = snapshot(d)
    r = run("topic", "describe", "-d", d, "--json")
    assert r.exit_code == 0, r.output
    assert '"topic_id": "AAAAAAAAAAAAAAAAAAAAAA"' in r.stdout
    assert snapshot(d) == before


def test_a_log_dir_without_meta_properties_is_refused_as_kafka_refuses_it(tmp_path: Path):
    """Kafka refuses a log dir without meta.properties ("No `meta.properties` found in
    DIR (have you run `kafka-storage.sh` to format the directory?)"): partition-shaped
    folders do not make one, even with segments and partition.metadata."""
    d = tmp_path / "copied"
    (d / "orders-0").mkdir(parents=True)
    (d / "orders-0" / "00000000000000000000.log").write_bytes(b"")
    (d / "orders-0" / "partition.metadata").write_text(
        "version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA\n"
    )
    before = snapshot(d)
    assert_one_line_error(run("topic", "describe", "-d", d), "has no meta.properties")
    assert snapshot(d) == before


# -- writers touch only their topic --------------------------------------------------------


@pytest.fixture
def neighbours(tmp_path: Path) -> Path:
    """Topics whose names and folders look alike: 'a' (partitions a-0, a-1), 'a-1'
    (folder a-1-0), 'a-10' (a-10-0) and 'b'; each with records."""
    d = tmp_path / "data"
    for name, parts in [("a", 2), ("a-1", 1), ("a-10", 1), ("b", 1)]:
        assert run("topic", "create", name, "-d", d, "-p", str(parts)).exit_code == 0
        r = run("produce", name, "-d", d, input="".join(f"k{i}\t{name}{i}\n" for i in range(5)))
        assert r.exit_code == 0, r.output
    return d


def _topic_files(snap: dict, topic: str) -> dict:
    from kompakt.log.manager import parse_partition_dir

    return {
        p: v
        for p, v in snap.items()
        if (parsed := parse_partition_dir(p.split("/")[0])) and parsed[0] == topic
    }


@pytest.mark.parametrize(
    "verb",
    [
        ("topic", "delete", "a"),
        ("topic", "alter", "a", "--config", "retention.ms=1000"),
        ("produce", "a"),
        ("topic", "create", "a-2"),
    ],
    ids=" ".join,
)
def test_an_offline_writer_leaves_other_topics_byte_identical(
    verb: tuple[str, ...], neighbours: Path
):
    """Only the named topic's folders change; look-alike names ('a-1' is both partition
    1 of 'a' and a topic) and the rest keep every byte."""
    before = snapshot(neighbours, mtimes=False)
    r = run(*verb, "-d", neighbours, input="k\tv\n")
    assert r.exit_code == 0, r.output
    after = snapshot(neighbours, mtimes=False)
    for other in ("a-1", "a-10", "b"):
        assert _topic_files(after, other) == _topic_files(before, other), other
        assert run("consume", other, "-d", neighbours).stdout.count("\n") == 5


def test_consume_group_offline_is_refused_before_the_folder_is_looked_at(user_folder: Path):
    before = snapshot(user_folder)
    r = run("consume", "photos", "-d", user_folder, "--group", "g")
    assert_one_line_error(r, "--group needs a broker")
    assert snapshot(user_folder) == before


@pytest.mark.parametrize("body", ["{not json", "[1, 2]", '{"t": {"partitions": 1}}'])
def test_a_damaged_topics_file_is_one_error_line_for_readers(data_dir: Path, body: str):
    (data_dir / "kompakt-topics.json").write_text(body)
    before = snapshot(data_dir)
    for verb in (("topic", "list"), ("topic", "describe"), ("consume", "users")):
        assert_one_line_error(run(*verb, "-d", data_dir), "kompakt-topics.json")
    assert snapshot(data_dir) == before
