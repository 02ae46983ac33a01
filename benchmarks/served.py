"""The broker and the protocol sink each in a process of its own, for
``bench_broker.py --separate-processes``.

By default bench_broker runs the broker and the sink as threads of its own process, so
the client's Python (confluent-kafka's ``produce`` loop) and the server's take turns on
one interpreter lock: every microsecond of the server's Python is a microsecond the
client waits. No user meets a broker that way: ``kompakt serve`` is a process of its
own, as a Kafka broker is. Here both sides are processes, started the same way (a
Python process of the repository's virtualenv on a free port), so ``kompakt ÷ sink``
compares the two servers as a client meets them; each side's CPU is counted from its
own process (all its threads) beside the client's.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
START_BUDGET_S = 60.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_listening(proc: subprocess.Popen, port: int, what: str) -> None:
    """Until ``port`` accepts a connection; the process's exit or the budget raises."""
    deadline = time.monotonic() + START_BUDGET_S
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before listening")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{what} did not listen on {port} in {START_BUDGET_S} s"
                ) from None
            time.sleep(0.1)


class _Served:
    """A server process on 127.0.0.1: its bootstrap, its CPU seconds, its stop."""

    def __init__(self, argv: list[str], port: int, what: str):
        self.port = port
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self._ps = psutil.Process(self.proc.pid)
        _wait_listening(self.proc, port, what)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def cpu_seconds(self) -> float:
        """User + system CPU of the process, every thread of it."""
        t = self._ps.cpu_times()
        return t.user + t.system

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ServedBroker(_Served):
    """``kompakt serve`` with ``overrides`` on a free port and a new data dir."""

    def __init__(self, overrides: dict[str, str]):
        self.data_dir = tempfile.mkdtemp(prefix="kompakt-bench-served-")
        port = _free_port()
        props = {
            "listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "kompakt.admin.listener": "http://127.0.0.1:0",
            "log.dirs": self.data_dir,
            **overrides,
        }
        argv = [str(Path(sys.executable).with_name("kompakt")), "serve"]
        for k, v in props.items():
            argv += ["--override", f"{k}={v}"]
        super().__init__(argv, port, "kompakt serve")

    def stop(self) -> None:
        super().stop()
        shutil.rmtree(self.data_dir, ignore_errors=True)


class ServedSink(_Served):
    """The protocol sink (:mod:`protocol_sink`) as a process, its topics given up front
    as (name, record size): ``add_topic`` of a name it was given does nothing."""

    def __init__(self, topics: list[tuple[str, int]]):
        port = _free_port()
        spec = ",".join(f"{name}:{size}" for name, size in topics)
        argv = [sys.executable, str(HERE / "protocol_sink.py"), str(port), spec]
        super().__init__(argv, port, "the protocol sink")
        self.topics = {name for name, _size in topics}

    def add_topic(self, name: str, partitions: int = 1, record_size: int = 100) -> None:
        if name not in self.topics:
            raise ValueError(f"the sink process was not given topic {name}")


def cpu_of(server: object) -> float:
    """A server's own CPU seconds if it is a process of its own; 0 for one in this
    process (whose CPU the caller's process time already holds)."""
    return server.cpu_seconds() if isinstance(server, _Served) else 0.0
