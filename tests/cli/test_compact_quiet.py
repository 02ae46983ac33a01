"""``kompakt compact --engine spark`` at default verbosity: Spark prints nothing (no
log4j line, no JVM notice, no ``[Stage`` bar); stderr is empty on success."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from compact_kit import make_data_dir


def kompakt_cmd() -> list[str]:
    script = Path(sys.executable).with_name("kompakt")
    return [str(script)] if script.exists() else [sys.executable, "-m", "kompakt.cli.main"]


def test_spark_compact_prints_nothing_from_spark(tmp_path: Path):
    data = make_data_dir(tmp_path / "data", corrupt=False)
    r = subprocess.run(
        [*kompakt_cmd(), "compact", "users:1", "--engine", "spark", "--data-dir", str(data)]
        + ["--json"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert r.stderr == ""
    doc = json.loads(r.stdout)
    assert [res["status"] for res in doc["results"]] == ["cleaned"]


def test_verbose_compact_shows_the_cleaners_log_lines(tmp_path: Path):
    data = make_data_dir(tmp_path / "data", corrupt=False)
    r = subprocess.run(
        [*kompakt_cmd(), "compact", "users:1", "--engine", "local", "--data-dir", str(data)]
        + ["--verbose"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert any(ln.startswith("INFO kompakt.") for ln in r.stderr.splitlines()), r.stderr


def test_spark_compact_of_a_corrupt_partition_prints_only_the_verdict(tmp_path: Path):
    """A corrupt batch fails the clean's task with CorruptRecordError, as Kafka's cleaner
    thread fails on a corrupt record (``CorruptRecordException``) and marks the partition
    uncleanable. The user gets kompakt's one-line verdict; Spark's ``ERROR Executor``
    block with the worker's traceback and ``ERROR TaskSetManager ... aborting job`` came
    before it."""
    data = make_data_dir(tmp_path / "data", corrupt=True)
    r = subprocess.run(
        [*kompakt_cmd(), "compact", "users:0", "--engine", "spark", "--data-dir", str(data)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 1, (r.stdout, r.stderr)
    [line] = r.stderr.splitlines()
    assert line.startswith("error: users-0 is uncleanable: corrupt batch in "), r.stderr
