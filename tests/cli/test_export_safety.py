"""``kompakt export`` never writes over what it was not aimed at, and refuses before
Spark starts (a tripwire replaces ``kompakt.pipeline.session``; the exports that do run
are in tests/pipeline/test_export.py).

Spark's ``overwrite`` mode deletes whatever path it is given; ``--out`` equal to
``--data-dir`` used to wipe every topic. Kafka's own rule for the data dir is that it
has one owner (its ``.lock``): an export of a dir a broker owns is refused.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_kit import assert_one_line_error
from tree_kit import snapshot
from typer.testing import CliRunner

import kompakt.pipeline
from kompakt.cli.main import app
from kompakt.log.manager import LogManager
from kompakt.record.encode import build_simple_batch

runner = CliRunner()
SPARK_UUID = "0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"


@pytest.fixture(autouse=True)
def no_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    def tripwire(*_a, **_k):
        raise AssertionError("Spark was started for an export that must be refused")

    monkeypatch.setattr(kompakt.pipeline, "session", tripwire)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """tmp/work/{data (a data dir with topic users), mine (a user's folder)}."""
    root = tmp_path / "work"
    with LogManager(root / "data") as logs:
        logs.create_topic("users", 1, {"cleanup.policy": "compact"})
        logs.get_log("users", 0).append(build_simple_batch([(b"k", b"v")], timestamp=1))
    (root / "mine").mkdir()
    (root / "mine" / "thesis.tex").write_text("years of work")
    return root


def export(tree: Path, out: Path | str, *extra: str, data: Path | None = None):
    args = ["export", "users", "--data-dir", str(data or tree / "data"), "--out", str(out)]
    return runner.invoke(app, [*args, *extra])


@pytest.mark.parametrize("overwrite", [(), ("--overwrite",)], ids=["plain", "overwrite"])
@pytest.mark.parametrize(
    ("out", "message"),
    [
        ("data", "is the data dir"),
        (".", "holds the data dir"),
        ("..", "holds the data dir"),
        ("data/users-0", "inside the data dir"),
        ("data/new-export", "inside the data dir"),
        ("mine/thesis.tex", "is a file"),
    ],
)
def test_export_never_replaces_the_data_dir_its_parents_its_insides_or_a_file(
    tree: Path, out: str, message: str, overwrite: tuple[str, ...]
):
    before = snapshot(tree.parent)
    assert_one_line_error(export(tree, tree / out, *overwrite), message)
    assert snapshot(tree.parent) == before


def test_export_refuses_a_non_empty_folder_without_overwrite(tree: Path):
    before = snapshot(tree)
    assert_one_line_error(export(tree, tree / "mine"), "is not empty", "--overwrite")
    assert snapshot(tree) == before


def test_overwrite_replaces_only_an_earlier_export(tree: Path):
    """--overwrite is consent to replace an earlier export, not any folder: one holding
    a file no export writes is refused even with it."""
    (tree / "mine" / f"part-00000-{SPARK_UUID}-c000.snappy.parquet").write_bytes(b"PAR1")
    before = snapshot(tree)
    assert_one_line_error(export(tree, tree / "mine", "--overwrite"), "'thesis.tex'")
    assert snapshot(tree) == before


def test_overwrite_refuses_a_users_file_that_only_starts_like_sparks(tree: Path):
    """Spark names a part by task and job (part-NNNNN-<uuid>-cNNN.<ext>); a user's
    part-00000-notes.csv beside a _SUCCESS was taken for one and deleted."""
    (tree / "mine" / "thesis.tex").unlink()
    (tree / "mine" / "part-00000-notes.csv").write_text("my precious")
    (tree / "mine" / "_SUCCESS").touch()
    before = snapshot(tree)
    assert_one_line_error(export(tree, tree / "mine", "--overwrite"), "'part-00000-notes.csv'")
    assert snapshot(tree) == before


def test_export_refuses_another_data_dir_as_output(tree: Path):
    with LogManager(tree / "other") as logs:
        logs.create_topic("keep", 1, {})
    before = snapshot(tree)
    assert_one_line_error(export(tree, tree / "other", "--overwrite"), "is a kompakt data dir")
    assert snapshot(tree) == before


def test_export_refuses_a_symlink_output(tree: Path):
    (tree / "link").symlink_to(tree / "data")
    before = snapshot(tree)
    assert_one_line_error(export(tree, tree / "link", "--overwrite"), "symbolic link")
    assert snapshot(tree) == before


def test_export_of_a_data_dir_in_use_is_refused_in_one_line(tree: Path):
    """A broker (here: a LogManager, which takes the same exclusive .lock) owns the dir."""
    with LogManager(tree / "data"):
        before = snapshot(tree)
        r = export(tree, tree / "out")
        after = snapshot(tree)
    assert_one_line_error(r, "locked by another process")
    assert after == before
    assert not (tree / "out").exists()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("mine", "not a kompakt data dir"),
        ("missing", "does not exist"),
        ("mine/thesis.tex", "not a directory"),
    ],
)
def test_export_from_a_folder_that_is_not_a_data_dir_touches_nothing(
    tree: Path, data: str, message: str
):
    before = snapshot(tree)
    assert_one_line_error(export(tree, tree / "out", data=tree / data), message)
    assert snapshot(tree) == before
