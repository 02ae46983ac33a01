"""A PySpark worker daemon made ready while the JVM starts, for a local master.

The JVM starts the Python worker daemon (:mod:`kompakt.pipeline.worker_daemon`) only
when the first Python task needs a worker, after the session's own start; the daemon
then imports PySpark and kompakt and loads the numba kernels (its preload) before the
task can run. Measured on the 2-core machine (load ~8), a cold first clean of a 3 KB
topic spent 3-6 s of its 8-14 s beyond the session start in that preload, the session
start itself being 13-60 s of a JVM that does not need us meanwhile.

So :func:`start`, called just before the JVM is launched, starts the daemon module as
a process of its own (``python -m kompakt.pipeline.worker_daemon --ready SOCKET``): it
does the daemon's preload at once, beside the JVM's start, and waits on a Unix socket
(:func:`listen`, :func:`wait_for_stand_in`). When the
JVM later runs ``python -m kompakt.pipeline.worker_daemon pyspark.worker`` with
:data:`ENV` pointing at that socket, that process hands its standard streams (the JVM's
pipes) and its environment (the factory's secret, ``PYTHONPATH``, ...) over
(``SCM_RIGHTS``), and the ready process becomes the daemon, PySpark's
``daemon.manager()`` on those streams; the JVM's process stays as a stand-in that
forwards ``SIGTERM`` (the JVM's way to stop its daemon) and ends with it (see
:func:`kompakt.pipeline.worker_daemon.main`). One hand-over per ready process; a
daemon started later (a new session, a restarted daemon) finds none and preloads
itself as before.

It is started with the hash seed the workers get (Spark's ``PYTHONHASHSEED``, the
driver's or 0: a worker's ``hash()`` of a string must agree with its peers'), in a
process group of its own as the JVM is (a terminal's Ctrl-C is the driver's), and
ends when the driver's pipe to it closes before a hand-over (the driver ended or
:func:`stop`).
"""

from __future__ import annotations

import array
import contextlib
import json
import os
import select
import socket
import subprocess
import sys
import tempfile
import threading

ENV = "KOMPAKT_WORKER_ZYGOTE"  # the socket of a ready daemon, in the daemon's environment
DAEMON = "kompakt.pipeline.worker_daemon"
READY = "--ready"  # ``python -m DAEMON --ready SOCKET``: preload, then wait to take over
_FDS = (0, 1, 2)

_lock = threading.Lock()
_proc: subprocess.Popen | None = None


def start(conf: dict[str, str]) -> None:
    """Start a ready daemon for the session about to be created from ``conf`` and point
    the JVM's daemon at it (``spark.executorEnv.`` :data:`ENV`); nothing on a cluster
    master (its daemons run elsewhere), without the daemon or with another daemon
    module, or when one is already waiting. One that an earlier session's JVM took
    over is that JVM's daemon now, ended by it: a new one is started."""
    global _proc
    if not conf.get("spark.master", "").startswith("local"):
        return
    if conf.get("spark.python.use.daemon", "true").lower() != "true":
        return
    if conf.get("spark.python.daemon.module") != DAEMON:
        return
    with _lock:
        waiting = _proc is not None and _proc.poll() is None
        if waiting and os.path.exists(_proc.args[-1]):  # not taken over yet (it unlinks)
            conf[f"spark.executorEnv.{ENV}"] = _proc.args[-1]
            return
        path = os.path.join(tempfile.mkdtemp(prefix="kompakt-zygote-"), "daemon.sock")
        env = {**os.environ, "PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED", "0")}
        # the user's executor environment is the daemon's from exec on, as when the JVM
        # starts it: variables read only at start (LD_PRELOAD, LD_LIBRARY_PATH) count
        prefix = "spark.executorEnv."
        env.update({k[len(prefix) :]: v for k, v in conf.items() if k.startswith(prefix)})
        env.pop(ENV, None)
        _proc = subprocess.Popen(
            [conf.get("spark.pyspark.python", sys.executable), "-m", DAEMON, READY, path],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            env=env,
            process_group=0,
        )
    conf[f"spark.executorEnv.{ENV}"] = path


def stop() -> None:
    """Let a ready daemon that no JVM took over end (it exits when its pipe closes)."""
    global _proc
    with _lock:
        if _proc is not None and _proc.stdin is not None:
            with contextlib.suppress(OSError):
                _proc.stdin.close()
        _proc = None


def hand_over(path: str) -> int | None:
    """In the daemon the JVM started: give this process's standard streams and
    environment to the ready daemon at ``path``; its pid, or None when there is none
    (gone, or already taken) and this process must be the daemon itself."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(path)
            env = json.dumps(dict(os.environ)).encode()
            fds = array.array("i", _FDS).tobytes()
            sock.sendmsg([env], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
            sock.shutdown(socket.SHUT_WR)
            answer = b""
            while chunk := sock.recv(64):
                answer += chunk
            return int(answer) if answer else None
    except (OSError, ValueError):
        return None


def _take_over(conn: socket.socket) -> bool:
    """Receive a stand-in's streams and environment and make them this process's."""
    data, fds = b"", []
    while True:
        msg, anc, _flags, _addr = conn.recvmsg(1 << 20, socket.CMSG_SPACE(len(_FDS) * 4))
        for level, kind, raw in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds += array.array("i", raw[: len(raw) - len(raw) % 4]).tolist()
        if not msg:
            break
        data += msg
    if len(fds) != len(_FDS):
        return False
    env = json.loads(data)
    for fd, target in zip(fds, _FDS, strict=True):
        os.dup2(fd, target)
        os.close(fd)
    os.environ.clear()
    os.environ.update(env)
    for entry in reversed(env.get("PYTHONPATH", "").split(os.pathsep)):
        if entry and entry not in sys.path:
            sys.path.insert(0, entry)
    conn.sendall(str(os.getpid()).encode())
    return True


def listen(path: str) -> socket.socket:
    """The ready daemon's socket, bound before its preload so a stand-in can queue."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    return listener


def wait_for_stand_in(listener: socket.socket, path: str) -> bool:
    """In the ready daemon, after its preload: True once a stand-in's streams and
    environment are this process's (serve as the daemon then), False when the
    driver's pipe closed first (the driver ended, or the session never used us)."""
    driver = sys.stdin.fileno()
    try:
        while True:
            ready, _w, _x = select.select([listener, driver], [], [])
            if driver in ready and not os.read(driver, 1 << 12):
                return False
            if listener in ready:
                conn, _addr = listener.accept()
                with conn:
                    if _take_over(conn):
                        return True
    finally:
        listener.close()
        os.unlink(path)
        with contextlib.suppress(OSError):
            os.rmdir(os.path.dirname(path))
