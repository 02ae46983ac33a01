"""Ctrl-C during a long verb: one ``interrupted`` line, exit code 130, nothing lost.

130 is 128 + SIGINT, what a shell reports and what the JVM running Kafka exits with on
Ctrl-C. Kafka's console producer closes its producer on Ctrl-C, which sends what it had
read; ``kompakt produce`` likewise writes the lines read before the interrupt. Each
verb runs as a real process and gets a real SIGINT.
"""

from __future__ import annotations

import fcntl
import signal
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest
from shared_kit import wait_for
from tree_kit import snapshot

from kompakt.errors import LogDirLockedError
from kompakt.log.manager import LogManager, shared_dir_lock
from kompakt.record.encode import build_simple_batch


def _sigint_default() -> None:
    """A command started in the background by a non-interactive shell (``cmd &``, as a CI
    runner may start the suite) inherits SIGINT ignored, and Python then installs no
    KeyboardInterrupt handler; a terminal's Ctrl-C, which these tests stand for, reaches
    a process with SIGINT at its default."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def kompakt(*args: str | Path, **popen) -> subprocess.Popen:
    script = Path(sys.executable).with_name("kompakt")
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "kompakt.cli.main"]
    return subprocess.Popen([*cmd, *map(str, args)], preexec_fn=_sigint_default, **popen)


def unread_bytes(fd: int) -> int:
    """Bytes waiting in a pipe (FIONREAD works on either end on Linux)."""
    return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]


def holds_lock(data_dir: Path) -> bool:
    try:
        with shared_dir_lock(data_dir):
            return False
    except LogDirLockedError:
        return True


def assert_interrupted(proc: subprocess.Popen, stderr: str, first: str = "interrupted") -> None:
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(first), stderr


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    d = tmp_path / "data"
    with LogManager(d) as logs:
        logs.create_topic("t", 1, {"cleanup.policy": "compact"})
    return d


def _records(data_dir: Path) -> list[tuple[bytes | None, bytes | None]]:
    with LogManager(data_dir) as logs:
        assert logs.was_clean_shutdown  # the interrupted verb closed the data dir cleanly
        return [(r.key, r.value) for b in logs.get_log("t", 0).iter_batches() for r in b.records()]


def test_ctrl_c_while_produce_waits_for_stdin_keeps_what_was_written(data_dir: Path):
    """--batch-size 1 writes each line at once: the test sees 3 records land, then
    interrupts produce while it waits for the next line."""
    from kompakt.pipeline.layout import segment_next_offset

    proc = kompakt(
        "produce", "t", "--data-dir", data_dir, "--batch-size", "1",
        stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        proc.stdin.write("a\t1\nb\t2\nc\t3\n")
        proc.stdin.flush()
        wait_for(lambda: segment_next_offset(data_dir / "t-0", 0) == 3, "3 records written")
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert_interrupted(proc, err, "interrupted: produced the 3 record(s) read before it to t")
    assert _records(data_dir) == [(b"a", b"1"), (b"b", b"2"), (b"c", b"3")]


def test_ctrl_c_while_produce_works_writes_every_record_it_reports(data_dir: Path):
    """The interrupt lands while records are read, routed or batched (not yet written):
    produce stops reading, writes the records it holds, and reports exactly those."""
    proc = kompakt(
        "produce", "t", "--data-dir", data_dir,
        stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    lines = [(f"k{i}".encode(), f"v{i}".encode()) for i in range(2000)]
    try:
        wait_for(lambda: holds_lock(data_dir), "produce to open the data dir")
        proc.stdin.write("".join(f"{k.decode()}\t{v.decode()}\n" for k, v in lines))
        proc.stdin.flush()
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert_interrupted(proc, err)
    # "interrupted" alone: the signal came before produce began reading stdin
    reported = int(err.split("produced the ")[1].split(" ")[0]) if ":" in err else 0
    assert _records(data_dir) == lines[:reported]


def test_ctrl_c_while_consume_writes_stops_and_changes_nothing(data_dir: Path):
    with LogManager(data_dir) as logs:
        plog = logs.get_log("t", 0)
        for i in range(0, 20_000, 500):
            plog.append(
                build_simple_batch(
                    [(b"key-%d" % j, b"value-%d" % j) for j in range(i, i + 500)], timestamp=1
                )
            )
    before = snapshot(data_dir)
    proc = kompakt(
        "consume", "t", "--data-dir", data_dir, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        # nobody reads stdout: once the pipe is full, consume is blocked writing
        wait_for(lambda: unread_bytes(proc.stdout.fileno()) >= 60_000, "a full stdout pipe")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert_interrupted(proc, err.decode())
    assert 0 < out.count(b"\n") < 20_000
    assert snapshot(data_dir) == before
    assert not holds_lock(data_dir)


def test_ctrl_c_stops_serve_cleanly_with_130(tmp_path: Path):
    data = tmp_path / "broker"
    proc = kompakt(
        "serve",
        "--override", "listeners=PLAINTEXT://127.0.0.1:0",
        "--override", "kompakt.admin.listener=http://127.0.0.1:0",
        "--override", f"log.dirs={data}",
        "--override", "kompakt.cleaner.engine=local",
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    lines = []
    try:
        for line in proc.stderr:
            lines.append(line)
            if "kompakt broker listening on" in line:
                break
        proc.send_signal(signal.SIGINT)
        rest = proc.communicate(timeout=60)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
    err = "".join(lines) + (rest or "")
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == "interrupted: the broker stopped cleanly"
    assert (data / ".kafka_cleanshutdown").exists()


@pytest.mark.slow
def test_ctrl_c_during_export_keeps_the_earlier_export_whole(data_dir: Path, tmp_path: Path):
    """SIGINT while Spark writes (PySpark cancels its jobs and raises KeyboardInterrupt):
    --out stays the earlier export, or is the new one complete; never a mix, never
    gone, and no temporary folder is left beside it."""
    with LogManager(data_dir) as logs:
        logs.get_log("t", 0).append(
            build_simple_batch([(b"k%d" % i, b"v%d" % i) for i in range(2000)], timestamp=1)
        )
    out = tmp_path / "out"
    out.mkdir()
    (out / "part-00000-0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b-c000.json").write_text(
        '{"old": true}\n'
    )
    (out / "_SUCCESS").write_text("")
    old = snapshot(out, mtimes=False)
    proc = kompakt(
        "export", "t", "--data-dir", data_dir, "--out", out, "--format", "json", "--overwrite",
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip

    def temp_folders() -> list[Path]:
        return [p for p in tmp_path.iterdir() if p.name.startswith(".out.kompakt-export-")]

    try:
        wait_for(lambda: temp_folders() or proc.poll() is not None, "Spark to write", 300)
        proc.send_signal(signal.SIGINT)
        _stdout, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "Traceback" not in err
    assert temp_folders() == []
    assert not [p for p in tmp_path.iterdir() if ".kompakt-replaced-" in p.name]
    if proc.returncode == 130:
        assert err.strip().splitlines()[-1] == "interrupted"
        assert snapshot(out, mtimes=False) == old
    else:  # the signal came after the export was in place
        assert proc.returncode == 0, err
        parts = "".join(p.read_text() for p in out.glob("part-*.json"))
        assert parts.count("\n") == 2000 and "old" not in parts
    assert not holds_lock(data_dir)
