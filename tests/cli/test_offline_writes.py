"""Offline verbs write only where they were asked to (issue 25).

- A folder that merely looks like a data dir (``users-0/00000000000000000000.log`` a
  text file, beside the user's ``notes.txt``) is refused by every verb that takes
  ``--data-dir``, in one line, every byte unchanged: Kafka needs ``meta.properties`` in
  a log dir ("No `meta.properties` found in DIR (have you run `kafka-storage.sh` to
  format the directory?)"). Opening it used to truncate the user's file and write a
  data dir's files beside it.
- ``compact --dry-run`` opens the data dir read-only, as Kafka's read-only tools never
  write to a log dir: a copy of a live data dir (its broker killed, so an open runs
  recovery) keeps every byte, mtime and file name.
- ``compact`` gives the disk back before it exits: no ``.deleted`` file is left for the
  next open to remove (Kafka's broker deletes them after ``file.delete.delay.ms``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from cli_kit import assert_one_line_error
from compact_kit import leftovers, make_data_dir
from tree_kit import changed, snapshot
from typer.testing import CliRunner

import kompakt.pipeline
from kompakt.cli.main import app
from kompakt.log.manager import LogManager
from kompakt.record.encode import build_simple_batch

runner = CliRunner()
NOT_A_DATA_DIR = "is not a kompakt data dir: it has no meta.properties"


@pytest.fixture(autouse=True)
def no_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    def tripwire(*_a, **_k):
        raise AssertionError("Spark was started by a verb that had to refuse")

    monkeypatch.setattr(kompakt.pipeline, "session", tripwire)


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The outside user's folder: a text file where a segment would be, and notes."""
    f = tmp_path / "F"
    (f / "users-0").mkdir(parents=True)
    (f / "users-0" / "00000000000000000000.log").write_text("my own text, not a segment\n")
    (f / "notes.txt").write_text("shopping list\n")
    monkeypatch.chdir(f)
    return f


def data_dir_verbs() -> set[str]:
    """Every verb ``kompakt --help`` leads to that takes ``--data-dir``."""
    out: set[str] = set()

    def walk(cmd: Any, prefix: str) -> None:
        if hasattr(cmd, "commands"):  # a group
            for name, sub in cmd.commands.items():
                walk(sub, f"{prefix} {name}".strip())
        elif any("--data-dir" in p.opts for p in cmd.params):
            out.add(prefix)

    walk(typer.main.get_command(app), "")
    return out


def cases(f: Path) -> list[list[str]]:
    d = ["--data-dir", str(f)]
    return [
        ["compact", *d, "--dry-run", "--engine", "local"],
        ["compact", "users", *d, "--dry-run", "--engine", "local"],
        ["compact", *d, "--engine", "local"],
        ["compact", "users:0", *d, "--engine", "spark"],
        ["topic", "create", "t", *d],
        ["topic", "alter", "users", *d, "--config", "retention.ms=1"],
        ["topic", "describe", *d],
        ["topic", "list", *d],
        ["topic", "delete", "users", *d],
        ["produce", "users", *d],
        ["consume", "users", *d],
        ["export", "users", *d, "--out", str(f / "out")],
        ["user", "create", "u", *d, "--password-stdin"],
        ["user", "delete", "u", *d],
        ["user", "list", *d],
    ]


def verb_of(args: list[str]) -> str:
    return " ".join(args[:2]) if args[0] in ("topic", "user") else args[0]


def test_every_data_dir_verb_refuses_a_folder_that_only_looks_like_one(folder: Path):
    before = snapshot(folder)
    for args in cases(folder):
        r = runner.invoke(app, args, input="k\tv\n")
        if args[1] == "create":  # these may make one, in an empty folder only
            assert_one_line_error(r, "is not empty and not a kompakt data dir")
        else:
            assert_one_line_error(r, NOT_A_DATA_DIR)
        assert changed(before, snapshot(folder)) == set(), args
    assert {verb_of(a) for a in cases(folder)} == data_dir_verbs()


@pytest.mark.parametrize(
    "args",
    [["compact", "--dry-run"], ["compact", "users", "--dry-run"], ["compact"]],
    ids=" ".join,
)
def test_the_reported_commands_are_refused_from_a_shell(folder: Path, args: list[str]):
    """The issue's commands as typed (default engine): one line, exit 1, nothing
    written; refused before Spark would start."""
    kompakt = Path(sys.executable).with_name("kompakt")
    before = snapshot(folder)
    r = subprocess.run(
        [str(kompakt), *args, "--data-dir", str(folder)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HYPOTHESIS_STORAGE_DIRECTORY": str(folder.parent / "hyp")},
    )
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.splitlines() == [
        f"error: '{folder}' {NOT_A_DATA_DIR} (every kompakt and Kafka data dir has one; "
        "'kompakt topic create' or 'kompakt serve' makes a data dir in a new or empty folder)"
    ]
    assert snapshot(folder) == before


# -- dry run: read-only -------------------------------------------------------------------


def _killed_broker_dir(root: Path) -> Path:
    """A data dir as a killed broker leaves it: more records in each compacted log
    after the last clean shutdown, the active segments' indexes preallocated, no
    clean-shutdown marker, and a torn last batch in users-1."""
    make_data_dir(root, corrupt=False)
    m = LogManager(root)
    for topic, part in (("users", 1), ("orders", 0)):
        plog = m.get_log(topic, part)
        for i in range(40):
            plog.append(build_simple_batch([(b"k%d" % (i % 3), b"late-%d" % i)], timestamp=i))
    torn = m.get_log("users", 1).active_segment
    m.flush_all()
    m._release_lock()  # killed: no close, no marker
    with open(torn.log_path, "r+b") as f:
        f.truncate(torn.size - 5)
    return root


def _dry_run(data: Path, *target: str):
    return runner.invoke(
        app, ["compact", *target, "--data-dir", str(data), "--dry-run", "--engine", "local"]
    )


@pytest.mark.parametrize("target", [(), ("users",), ("orders:0",)], ids=repr)
def test_dry_run_of_a_copied_live_data_dir_changes_no_byte(tmp_path: Path, target: tuple):
    live = _killed_broker_dir(tmp_path / "live")
    copy = tmp_path / "copy"
    shutil.copytree(live, copy)  # as the user did: a copy, .lock and all
    before = snapshot(copy)
    r = _dry_run(copy, *target, "--json")
    assert r.exit_code == 0, r.output
    assert changed(before, snapshot(copy)) == set()
    assert sorted(p.name for p in copy.rglob("*")) == sorted(p.name for p in live.rglob("*"))
    statuses = [e["status"] for e in json.loads(r.stdout)["results"]]
    assert "dry-run" in statuses and set(statuses) <= {"dry-run", "skipped"}


def test_dry_run_reports_what_the_clean_then_does(tmp_path: Path):
    """The read-only view (recovered in memory) is the one a writable open recovers:
    the dry run's counts are the real clean's."""
    live = _killed_broker_dir(tmp_path / "live")
    shutil.copytree(live, tmp_path / "other")
    dry = json.loads(_dry_run(live, "users:1", "--json").stdout)["results"]
    r = runner.invoke(
        app,
        ["compact", "users:1", "-d", str(tmp_path / "other"), "--engine", "local", "--json"],
    )
    real = json.loads(r.stdout)["results"]
    keys = ("records_read", "records_written", "bytes_read", "bytes_written", "end_offset")
    assert [[e["stats"][k] for k in keys] for e in dry] == [
        [e["stats"][k] for k in keys] for e in real
    ]


# -- the disk back before exit -------------------------------------------------------------


def test_offline_compact_leaves_no_deleted_files(tmp_path: Path):
    data = make_data_dir(tmp_path / "data", records=300, corrupt=False)
    size = sum(p.stat().st_size for p in data.rglob("*.log"))
    r = runner.invoke(app, ["compact", "--data-dir", str(data), "--engine", "local"])
    assert r.exit_code == 0, r.output
    assert leftovers(data) == []  # looked at before anything opens the dir again
    assert sum(p.stat().st_size for p in data.rglob("*")) < size
