"""kompakt's PySpark worker daemon (:mod:`kompakt.pipeline.worker_daemon`), started and
spoken to as Spark's ``PythonWorkerFactory`` does: the daemon writes its port on stdout,
each connection forks a worker that sends its pid, checks the factory's secret and
then serves a task over the socket.
"""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
from pathlib import Path

from shared_kit import wait_for

SECRET = "kompakt-test-secret"


def _read_int(sock: socket.socket) -> int:
    data = b""
    while len(data) < 4:
        chunk = sock.recv(4 - len(data))
        assert chunk, "the daemon closed the connection"
        data += chunk
    return struct.unpack("!i", data)[0]


def _start_daemon(env: dict[str, str]) -> subprocess.Popen:
    """The task workers' daemon, started as Spark's ``PythonWorkerFactory`` does."""
    return subprocess.Popen(
        [sys.executable, "-m", "kompakt.pipeline.worker_daemon", "pyspark.worker"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )


def test_a_worker_whose_jvm_hung_up_ends_without_a_traceback():
    """Ctrl-C in a Spark clean cancels its tasks: the JVM closes each worker's socket,
    and the worker's last flush met a broken pipe. PySpark's daemon printed that as a
    ``BrokenPipeError`` traceback (with ``killWorkerOnFlushFailure``, Spark's default),
    which reached the user's terminal through the driver. The daemon serves on."""
    env = {
        **os.environ,
        "PYTHON_WORKER_FACTORY_SECRET": SECRET,
        "PYTHON_DAEMON_KILL_WORKER_ON_FLUSH_FAILURE": "1",
    }
    proc = _start_daemon(env)
    try:
        port = struct.unpack("!i", proc.stdout.read(4))[0]
        workers = []
        for _ in range(3):  # a task each, every one cancelled as it starts; served on
            with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
                workers.append(_read_int(sock))  # the forked worker's pid
                sock.sendall(struct.pack("!i", len(SECRET)) + SECRET.encode())
                assert sock.recv(6) == struct.pack("!i", 2) + b"ok"
                # the JVM side goes away: a reset, as for a killed task
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        for pid in workers:  # ended of themselves (the daemon does not reap: SIG_IGN)
            wait_for(lambda pid=pid: not Path(f"/proc/{pid}").exists(), f"worker {pid}", 60)
    finally:
        proc.stdin.close()  # Spark's way of stopping the daemon
        try:
            proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    err = proc.stderr.read().decode()
    assert "Traceback" not in err and "BrokenPipeError" not in err, err


def _ppid(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def test_the_daemon_ready_beside_the_jvm_takes_the_jvms_daemon_over():
    """A local session starts a ready daemon (:mod:`kompakt.pipeline.zygote`) before the
    JVM; the daemon the JVM starts later hands it its pipes and environment (the
    factory's secret comes only with them), so the workers fork from the process that
    preloaded while the JVM started. The JVM's process stays, and its ``SIGTERM`` (how
    Spark's ``PythonWorkerFactory`` stops its daemon) ends the ready daemon too."""
    from kompakt.pipeline import zygote

    conf = {
        "spark.master": "local[2]",
        "spark.python.daemon.module": "kompakt.pipeline.worker_daemon",
        "spark.pyspark.python": sys.executable,
    }
    zygote.start(conf)
    ready = zygote._proc
    assert ready is not None
    path = conf[f"spark.executorEnv.{zygote.ENV}"]
    wait_for(lambda: os.path.exists(path) or ready.poll() is not None, "the ready daemon", 60)
    env = {**os.environ, "PYTHON_WORKER_FACTORY_SECRET": SECRET, zygote.ENV: path}
    proc = _start_daemon(env)
    try:
        port = struct.unpack("!i", proc.stdout.read(4))[0]
        with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
            worker = _read_int(sock)
            assert _ppid(worker) == ready.pid  # forked by the ready daemon
            sock.sendall(struct.pack("!i", len(SECRET)) + SECRET.encode())
            assert sock.recv(6) == struct.pack("!i", 2) + b"ok"  # the secret it was handed
        assert proc.poll() is None  # the JVM's process stands in
        # a later session (the first one stopped without pipeline.stop) gets a ready
        # daemon of its own, not the one this JVM took over
        later = dict(conf)
        zygote.start(later)
        second = zygote._proc
        assert second is not ready and later[f"spark.executorEnv.{zygote.ENV}"] != path
        proc.terminate()
        assert ready.wait(30) is not None
        proc.wait(30)
    finally:
        zygote.stop()
        for p in (proc, ready, zygote._proc, locals().get("second")):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()


def test_without_a_ready_daemon_the_jvms_daemon_preloads_itself(tmp_path):
    """No ready daemon at the path (gone, or taken by an earlier daemon): the JVM's
    daemon serves itself, as before."""
    from kompakt.pipeline import zygote

    env = {**os.environ, "PYTHON_WORKER_FACTORY_SECRET": SECRET, zygote.ENV: str(tmp_path / "x")}
    proc = _start_daemon(env)
    try:
        port = struct.unpack("!i", proc.stdout.read(4))[0]
        with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
            assert _ppid(_read_int(sock)) == proc.pid
        proc.stdin.close()
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
