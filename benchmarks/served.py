"""The broker and the protocol sink each in a process of its own, for
``bench_broker.py --separate-processes``.

By default bench_broker runs the broker and the sink as threads of its own process, so
the client's Python (confluent-kafka's ``produce`` loop) and the server's take turns on
one interpreter lock: every microsecond of the server's Python is a microsecond the
client waits. No user meets a broker that way: ``kompakt serve`` is a process of its
own, as a Kafka broker is. Here both sides are processes (the broker is the reliability
kit's :class:`BrokerProcess`, as in bench_partitions), so ``kompakt ÷ sink`` compares
the two servers as a client meets them; each side's CPU is counted from its own process
(all its threads) beside the client's.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))  # the broker process and port kits

from reliability.kit import BrokerProcess  # noqa: E402
from shared_kit import free_port, wait_for_port  # noqa: E402


def _cpu_seconds(pid: int) -> float:
    """User + system CPU of a process, every thread of it."""
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


class ServedBroker:
    """``kompakt serve`` with ``overrides`` in a new data dir, stopped and removed on
    exit."""

    def __init__(self, overrides: dict[str, str]):
        self._tmp = Path(tempfile.mkdtemp(prefix="kompakt-bench-served-"))
        self.broker = BrokerProcess(self._tmp / "data", overrides).start()

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap

    def cpu_seconds(self) -> float:
        return _cpu_seconds(self.broker.pid)

    def __enter__(self) -> ServedBroker:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.broker.stop()
        finally:
            shutil.rmtree(self._tmp, ignore_errors=True)


class ServedSink:
    """The protocol sink (:mod:`protocol_sink`) as a process, its topics given up front
    as (name, record size): ``add_topic`` of a name it was given does nothing."""

    def __init__(self, topics: list[tuple[str, int]]):
        self.port = free_port()
        spec = ",".join(f"{name}:{size}" for name, size in topics)
        argv = [sys.executable, str(HERE / "protocol_sink.py"), str(self.port), spec]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.topics = {name for name, _size in topics}
        try:
            wait_for_port(self.port, self.proc)
        except BaseException:
            self.proc.kill()
            raise

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def cpu_seconds(self) -> float:
        return _cpu_seconds(self.proc.pid)

    def add_topic(self, name: str, partitions: int = 1, record_size: int = 100) -> None:
        if name not in self.topics:
            raise ValueError(f"the sink process was not given topic {name}")

    def __enter__(self) -> ServedSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.stdin.close()  # the sink's main returns when its stdin ends
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def cpu_of(server: object) -> float:
    """A server's own CPU seconds if it is a process of its own; 0 for one in this
    process (whose CPU the caller's process time already holds)."""
    return server.cpu_seconds() if isinstance(server, ServedBroker | ServedSink) else 0.0
