"""Ctrl-C or SIGTERM during ``kompakt compact``: the clean is aborted at its next check
(Kafka's ``LogCleaningAbortedException`` via ``checkDone``; Spark: the job group is
cancelled), nothing is left behind, one line is printed and the exit code is 130.

The engines' test hook (``KOMPAKT_TEST_HOLD_CLEAN``) holds a group rewrite after its
``.cleaned`` file was created, so the signal lands mid-clean in a real engine (for
Spark: inside a running task).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

import pytest
from cli_kit import kompakt_cmd
from compact_kit import fold, leftovers, make_data_dir, snapshot
from shared_kit import wait_for

from kompakt.cleaner.segment_io import HOLD_ENV


def interrupt_mid_clean(
    data: Path, hold: Path, engine: str, sig: int, timeout: float = 600
) -> subprocess.CompletedProcess:
    """Signal the CLI as a terminal does: Ctrl-C goes to the whole foreground process
    group (the CLI leads one here), so every process the CLI started and left in it gets
    it too (Spark's Python workers printed BrokenPipeError tracebacks)."""
    env = {**os.environ, HOLD_ENV: str(hold)}
    proc = subprocess.Popen(
        [*kompakt_cmd(), "compact", "users:1", "--data-dir", str(data), "--engine", engine],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        process_group=0,
    )
    try:

        def held() -> bool:
            assert proc.poll() is None, proc.communicate()
            return any(hold.glob("held-*"))

        wait_for(held, "the clean to start", timeout)
        assert any(p.name.endswith(".cleaned") for p in (data / "users-1").iterdir())
        os.killpg(proc.pid, sig)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # whatever of its group outlived it
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_during_local_clean_cancels_it_and_changes_nothing(tmp_path: Path, sig: int):
    data = make_data_dir(tmp_path / "data", corrupt=False)
    hold = tmp_path / "hold"
    hold.mkdir()
    state = fold(data, "users", 1)
    before = snapshot(data)
    r = interrupt_mid_clean(data, hold, "local", sig)
    assert r.returncode == 130, (r.stdout, r.stderr)
    assert r.stderr.splitlines() == [
        "error: interrupted: compaction of users-1 cancelled, nothing changed"
    ]
    assert r.stdout == ""
    assert not leftovers(data)
    assert snapshot(data) == before
    assert fold(data, "users", 1) == state


def test_sigint_during_spark_clean_cancels_the_job_and_changes_nothing(tmp_path: Path):
    """Was: 77 lines of Python and Java tracebacks, then (Ctrl-C to the process group, as
    from a terminal) pyspark workers' BrokenPipeError tracebacks. Spark's own start-up
    banner may precede it; from the signal on, stderr is the one line."""
    data = make_data_dir(tmp_path / "data", corrupt=False)
    hold = tmp_path / "hold"
    hold.mkdir()
    state = fold(data, "users", 1)
    before = snapshot(data)
    r = interrupt_mid_clean(data, hold, "spark", signal.SIGINT)
    assert r.returncode == 130, (r.stdout, r.stderr)
    lines = r.stderr.splitlines()
    assert lines[-1] == "error: interrupted: compaction of users-1 cancelled, nothing changed"
    assert [ln for ln in lines if ln.startswith("error:")] == lines[-1:]
    for marker in ("Traceback", "Exception", "\tat ", "py4j", "ERROR"):
        assert not any(marker in ln for ln in lines), (marker, r.stderr)
    assert not leftovers(data)
    assert snapshot(data) == before
    assert fold(data, "users", 1) == state


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_sigint_while_the_data_dir_opens_cancels_the_offline_clean(tmp_path: Path, engine: str):
    """Ctrl-C before the clean begins (here: the CLI blocked reading the topics file, a
    named pipe; with Spark, while its session starts) raised past the clean's signal
    handler and printed the online path's 'the broker carries on with the compaction'.
    Offline there is no broker: the clean is cancelled, nothing changed."""
    from kompakt.log.manager import TOPICS_FILE

    data = make_data_dir(tmp_path / "data", corrupt=False)
    topics = data / TOPICS_FILE
    saved = topics.read_bytes()
    before = snapshot(data)
    topics.unlink()
    os.mkfifo(topics)
    proc = subprocess.Popen(
        [*kompakt_cmd(), "compact", "users:1", "--data-dir", str(data), "--engine", engine],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    writer = None
    try:

        def reading() -> bool:  # our open succeeds once the CLI has the pipe open to read
            nonlocal writer
            assert proc.poll() is None, proc.communicate()
            with contextlib.suppress(OSError):
                writer = os.open(topics, os.O_WRONLY | os.O_NONBLOCK)
            return writer is not None

        wait_for(reading, "the CLI to open the topics file", 120)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if writer is not None:
            os.close(writer)
        if proc.poll() is None:
            proc.kill()
    topics.unlink()
    topics.write_bytes(saved)
    assert proc.returncode == 130, (out, err)
    assert err.splitlines() == [
        "error: interrupted: compaction cancelled before it began, nothing changed; "
        "the next open of the data dir recovers"
    ]
    assert out == ""
    assert snapshot(data) == before


def test_sigint_while_spark_starts_gives_the_start_up_and_says_so_at_once(tmp_path: Path):
    """Ctrl-C while Spark was still starting (46-52 s on a loaded machine) only flagged
    the clean as aborted, which takes effect once a job runs: the CLI waited silently
    for the whole start. Now a line says at once that Spark is being stopped, the start
    is given up and the CLI exits 130 with nothing changed; the JVM dies with it, as
    when a broker stops during its warm-up. Spark's own start-up hook
    (``$SPARK_CONF_DIR/spark-env.sh``) holds the launch here until its stdin, kompakt's
    pipe, closes, and then quits, as Spark's gateway does on that EOF."""
    data = make_data_dir(tmp_path / "data", corrupt=False)
    before = snapshot(data)
    conf = tmp_path / "spark-conf"
    conf.mkdir()
    launcher = tmp_path / "launcher.pid"
    (conf / "spark-env.sh").write_text(f"echo $$ > {launcher}\ncat > /dev/null\nexit 1\n")
    env = {k: v for k, v in os.environ.items() if k != "SPARK_ENV_LOADED"}
    proc = subprocess.Popen(
        [*kompakt_cmd(), "compact", "users:1", "--data-dir", str(data), "--engine", "spark"],
        env={**env, "SPARK_CONF_DIR": str(conf)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        process_group=0,
    )
    pid = None
    try:

        def starting() -> bool:
            assert proc.poll() is None, proc.communicate()
            return launcher.is_file() and launcher.read_text().strip().isdigit()

        wait_for(starting, "Spark to start launching", 300)
        pid = int(launcher.read_text())
        os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C
        out, err = proc.communicate(timeout=60)  # was: until Spark had started
        wait_for(lambda: not Path(f"/proc/{pid}").exists(), "Spark's launcher to exit", 30)
    finally:
        if proc.poll() is None:
            proc.kill()
        for group in (proc.pid, pid):
            with contextlib.suppress(ProcessLookupError, TypeError):
                os.killpg(group, signal.SIGKILL)
    assert proc.returncode == 130, (out, err)
    assert err.splitlines() == [
        "interrupting: stopping Spark (Ctrl-C again to quit now)",
        "error: interrupted: compaction cancelled before it began, nothing changed; "
        "the next open of the data dir recovers",
    ]
    assert out == ""
    assert not leftovers(data)
    assert snapshot(data) == before
