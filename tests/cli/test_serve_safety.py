"""``kompakt serve`` reads server.properties as Kafka does and fails in one line.

Kafka loads the file with ``java.util.Properties.load(InputStream)``: ISO-8859-1 bytes,
``\\uXXXX`` escapes, ``\\`` line continuation, ``=``/``:``/whitespace separators,
``#``/``!`` comments. A broker that cannot bind an address names it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from cli_kit import assert_one_line_error
from tree_kit import snapshot
from typer.testing import CliRunner

from kompakt.broker.config import BrokerConfig
from kompakt.cli.main import app

runner = CliRunner()

# \xe9 and \xe4 are single ISO-8859-1 bytes (not valid UTF-8): how a Kafka install
# stores "é"/"ä" typed into its properties file.
LATIN1_PROPERTIES = (
    b"# Caf\xe9 cluster \xe4 comment\n"
    b"! another comment style\n"
    b"node.id = 7\n"
    b"log.dirs: DATA/d\xe4t\xe4\n"
    b"spark.app.description caf\xe9\n"
    b"spark.escaped=\\u2603 snow\\\n"
    b"    man\n"
    b"listeners=PLAINTEXT://127.0.0.1:0\n"
    b"kompakt.admin.listener=http://127.0.0.1:0\n"
)


def test_properties_are_read_as_iso_8859_1_like_java(tmp_path: Path):
    path = tmp_path / "server.properties"
    path.write_bytes(LATIN1_PROPERTIES.replace(b"DATA", str(tmp_path).encode()))
    config = BrokerConfig.load(path)
    assert config.node_id == 7
    assert config.data_dir == tmp_path / "d\u00e4t\u00e4"
    assert config.spark["spark.app.description"] == "caf\u00e9"
    assert config.spark["spark.escaped"] == "\u2603 snowman"


def stderr_until_started(args: list[str]) -> tuple[int, list[str]]:
    """Run a broker command; its exit code and stderr lines up to "listening on" (then
    it is stopped) or a traceback, or all of them when it exits by itself."""
    proc = subprocess.Popen(args, stderr=subprocess.PIPE, text=True, encoding="utf-8")
    try:
        seen = []
        for line in proc.stderr:
            seen.append(line)
            if "kompakt broker listening on" in line or "Traceback" in line:
                break
        proc.terminate()
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, seen


def test_serve_starts_on_an_iso_8859_1_properties_file(tmp_path: Path):
    """The whole command, as a process: it starts (no UnicodeDecodeError traceback)."""
    path = tmp_path / "server.properties"
    path.write_bytes(LATIN1_PROPERTIES.replace(b"DATA", str(tmp_path).encode()))
    script = Path(sys.executable).with_name("kompakt")
    _code, seen = stderr_until_started([str(script), "serve", str(path)])
    assert "kompakt broker listening on" in seen[-1], "".join(seen)
    assert (tmp_path / "d\u00e4t\u00e4" / "meta.properties").exists()


@pytest.mark.parametrize("kind", ["missing", "directory", "unreadable"])
def test_an_unreadable_properties_file_is_one_error_line(tmp_path: Path, kind: str):
    path = tmp_path / "server.properties"
    if kind == "directory":
        path.mkdir()
    elif kind == "unreadable":
        if os.geteuid() == 0:
            pytest.skip("root reads any file")
        path.write_text("node.id=1\n")
        path.chmod(0)
    before = snapshot(tmp_path)
    r = runner.invoke(app, ["serve", str(path)])
    assert_one_line_error(r, f"cannot read {path}")
    assert snapshot(tmp_path) == before


def test_serve_refuses_a_folder_that_is_not_a_data_dir(tmp_path: Path):
    """Kafka refuses a log dir holding folders that are not partitions; a LogManager
    would take 'photos-2019' for partition 2019 of 'photos' and create 2019 folders."""
    (tmp_path / "photos-2019").mkdir()
    (tmp_path / "notes.txt").write_text("x")
    before = snapshot(tmp_path)
    r = runner.invoke(app, ["serve", "--override", f"log.dirs={tmp_path}"])
    assert_one_line_error(r, "is not empty and not a kompakt data dir")
    assert snapshot(tmp_path) == before


def _taken_port() -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s


@pytest.mark.parametrize("which", ["listeners", "kompakt.admin.listener"])
def test_a_taken_port_is_named_in_the_one_error_line(tmp_path: Path, which: str):
    """As Kafka's "Socket server failed to bind to HOST:PORT", the line names the
    address, for the admin listener too (it used to say only "Address already in use")."""
    with _taken_port() as taken:
        port = taken.getsockname()[1]
        urls = {
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "kompakt.admin.listener": "http://127.0.0.1:0",
        }
        urls[which] = urls[which].replace(":0", f":{port}")
        script = Path(sys.executable).with_name("kompakt")
        args = [str(script), "serve", "--override", f"log.dirs={tmp_path / 'd'}"]
        for key, url in urls.items():
            args += ["--override", f"{key}={url}"]
        proc = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "ERROR" in line or "error" in line]
    assert len(errors) == 1, proc.stderr
    assert f"('127.0.0.1', {port})" in errors[0]
    assert "cannot start" in errors[0]


def test_python_m_kompakt_broker_refuses_a_folder_that_is_not_a_data_dir(tmp_path: Path):
    """Bug: ``python -m kompakt.broker`` was a second start-up beside ``kompakt serve``
    without its data-dir checks, so it turned a folder of other things into a data dir
    (meta.properties, .lock, partition 2019 of 'photos'). Both now run one start-up
    (kompakt.broker.__main__.serve) and refuse it in one line, leaving it untouched."""
    (tmp_path / "photos-2019").mkdir()
    (tmp_path / "notes.txt").write_text("x")
    before = snapshot(tmp_path)
    code, seen = stderr_until_started(
        [
            sys.executable,
            "-m",
            "kompakt.broker",
            "--override",
            f"log.dirs={tmp_path}",
            "--override",
            "listeners=PLAINTEXT://127.0.0.1:0",
            "--override",
            "kompakt.admin.listener=http://127.0.0.1:0",
        ]
    )
    assert code == 1, "".join(seen)
    assert len(seen) == 1 and seen[0].startswith("error: "), "".join(seen)
    assert "is not empty and not a kompakt data dir" in seen[0]
    assert snapshot(tmp_path) == before


def test_serve_leaves_no_hypothesis_folder_in_the_working_dir(tmp_path: Path):
    """With the test extras installed, kio imports Hypothesis, whose unicode cache went to
    ``./.hypothesis`` of wherever ``kompakt serve`` ran; it goes to the cache dir now."""
    work = tmp_path / "my-project"
    work.mkdir()
    notes = tmp_path / "notes"  # not a data dir: serve refuses it, after importing kio
    notes.mkdir()
    (notes / "todo.txt").write_text("keep me")
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
    env.pop("HYPOTHESIS_STORAGE_DIRECTORY", None)
    script = Path(sys.executable).with_name("kompakt")
    r = subprocess.run(
        [str(script), "serve", "--override", f"log.dirs={notes}"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 1, r.stderr
    assert "not a kompakt data dir" in r.stderr
    assert list(work.iterdir()) == []
    assert (tmp_path / "cache" / "kompakt" / "hypothesis").is_dir()
    assert (notes / "todo.txt").read_text() == "keep me"
