"""Helpers every test package shares, written once: waiting on a condition, free ports,
unique names, data-dir snapshots, loading a script as a module, running a command whose
every process is killed with it.

Tests wait for evidence, never for a fixed time (Kafka's ``TestUtils.waitUntilTrue``):
a sleep that hopes something happened either slows every run or fails on a loaded
machine, and an assertion after it may hold even if the awaited thing never happened.
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import itertools
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

# the suite's one SparkSession (tests/conftest.py's ``spark``); a broker on the spark
# engine in a test starts with these too, or the session it starts first would be
# every later test's
SPARK_TEST_CONFIG = {
    "kompakt.spark.master": "local[2]",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.driver.memory": "1g",
    "spark.sql.execution.arrow.maxRecordsPerBatch": "10000",
}

T = TypeVar("T")

STEP = 0.02  # seconds between two looks at the condition: short against every timeout


def poll_until(predicate: Callable[[], T], timeout: float = 30.0, step: float = STEP) -> T | None:
    """``predicate()``'s first truthy value within ``timeout`` s, else None: the one
    deadline loop of the suite. ``step`` is finer than ``STEP`` only for evidence that
    lives milliseconds (a clean's ``.cleaned`` file)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            return None
        time.sleep(step)


def wait_for(predicate: Callable[[], T], what: str = "the condition", timeout: float = 30.0) -> T:
    """Return ``predicate()``'s first truthy value; fail naming ``what`` after ``timeout`` s.

    Kafka ``TestUtils.waitUntilTrue(condition, msg, waitTimeMs)``: the only pause in a
    test is between two looks at the thing it waits for.
    """
    value = poll_until(predicate, timeout)
    if not value:
        raise AssertionError(f"timed out after {timeout} s waiting for {what}")
    return value


def consume_until(
    consumer: Any,
    done: Callable[[list[Any]], bool] | None = None,
    timeout: float = 30.0,
    what: str = "the records",
    batch: int = 500,
) -> list[Any]:
    """Messages a confluent-kafka ``consumer`` (already assigned or subscribed) returns
    until ``done(messages)`` holds, or, with ``done`` None, until every assigned
    partition reached its end (``enable.partition.eof`` must be on). A message with an
    error other than partition EOF fails the test; so does ``timeout``. ``batch=1`` looks
    at ``done`` after every message, for a ``done`` that reads the consumer's position.
    (Kafka's ``TestUtils.consumeRecords``: consume until the expected records came.)"""
    from confluent_kafka import KafkaError

    out: list[Any] = []
    at_end: set[tuple[str, int]] = set()

    def step() -> bool:
        for m in consumer.consume(batch, timeout=STEP * 10):
            err = m.error()
            if err is not None and err.code() == KafkaError._PARTITION_EOF:
                at_end.add((m.topic(), m.partition()))
            elif err is not None:
                raise AssertionError(f"consume error: {err}")
            else:
                at_end.discard((m.topic(), m.partition()))
                out.append(m)
        if done is not None:
            return done(out)
        assigned = {(tp.topic, tp.partition) for tp in consumer.assignment()}
        return bool(assigned) and assigned <= at_end

    wait_for(step, what, timeout)
    return out


def free_port() -> int:
    """A 127.0.0.1 TCP port nobody listens on now, for a broker that needs a fixed port
    across restarts (a client reconnects to the same address)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def accepts_connections(port: int) -> bool:
    """Whether something listens on 127.0.0.1:``port`` (the broker is up)."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
    except OSError:
        return False
    return True


def wait_for_port(port: int, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    """Wait until the process ``proc`` listens on ``port``; fail at once if it exits."""

    def up() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"process exited with {proc.returncode} before listening")
        return accepts_connections(port)

    wait_for(up, f"127.0.0.1:{port} to accept connections", timeout)


def condition_wait_frame(thread: threading.Thread) -> FrameType | None:
    """The ``threading.Condition.wait`` frame ``thread`` is blocked in, else None.

    Evidence that a thread has reached its wait (Kafka tests check
    ``thread.getState == WAITING``); the frame's ``timeout`` local says how long it waits.
    """
    frame = sys._current_frames().get(thread.ident or -1)
    if frame is not None and frame.f_code is threading.Condition.wait.__code__:
        return frame  # the innermost Python frame: the lock it blocks on is C code
    return None


def record_results(obj: object, name: str) -> list[Any]:
    """Wrap the method ``obj.name`` (plain or ``async``) on this one object; the returned
    list gets each finished call's result.

    Evidence that a background loop made a pass: "nothing happened" is only worth
    asserting once the loop has looked (e.g. two expiry passes at the new time).
    """
    original = getattr(obj, name)
    results: list[Any] = []
    if inspect.iscoroutinefunction(original):

        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            result = await original(*args, **kwargs)
            results.append(result)
            return result

    else:

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            results.append(result)
            return result

    setattr(obj, name, wrapper)
    return results


_names = itertools.count()


def unique(prefix: str) -> str:
    """A topic or group name no other test of this session uses (tests share a broker)."""
    return f"{prefix}-{next(_names)}-{time.monotonic_ns() % 100000}"


# -- data dirs --------------------------------------------------------------------------------


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under a data dir (segments, indexes, checkpoints) by relative path,
    ``.lock`` aside: equal snapshots mean a refused or cancelled command changed nothing."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


def corrupt_first_batch(directory: Path) -> Path:
    """Flip a bit of the stored CRC of the first batch of the first non-empty segment."""
    path = min(p for p in directory.glob("*.log") if p.stat().st_size)
    data = bytearray(path.read_bytes())
    data[18] ^= 0xFF  # in the stored CRC (bytes 17-20): it no longer matches the batch
    path.write_bytes(bytes(data))
    return path


async def until_parked(task: asyncio.Task[Any], timeout: float = 10.0) -> None:
    """Run the event loop until ``task`` has started and is suspended at an await (or is
    done): asserting "still waiting" before that would also hold for a task that never
    ran. Uses only the loop's own steps, no sleep."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while inspect.getcoroutinestate(task.get_coro()) == inspect.CORO_CREATED:
        if loop.time() > deadline:
            raise AssertionError(f"{task!r} never started")
        await asyncio.sleep(0)  # one loop step: lets the task run to its first await


def load_script(name: str, path: Path) -> Any:
    """A benchmark or script file (not a package module) imported as module ``name``."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up while the class is made
    spec.loader.exec_module(mod)
    return mod


# -- commands in a session of their own ---------------------------------------------------------


def session_pids(sid: int) -> list[int]:
    """The live processes of session ``sid`` (zombies aside: they are gone, only not yet
    reaped by a parent that may itself be gone)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue  # it ended meanwhile
        state, _ppid, _pgrp, session = stat.rsplit(")", 1)[1].split()[:4]
        if int(session) == sid and state != "Z":
            pids.append(int(entry))
    return pids


def kill_session(sid: int, timeout: float = 10.0) -> None:
    """SIGKILL every process of session ``sid`` until none is left: a process group of
    its own inside the session (a build's make, a broker, a test-runner) goes too."""

    def gone() -> bool:
        pids = session_pids(sid)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return not pids

    wait_for(gone, f"every process of session {sid} to end", timeout)


def start_session(cmd: list[str], **popen: Any) -> subprocess.Popen:
    """Start ``cmd`` as the leader of a new session (its id is the process's pid), its
    output captured as text; finish it with :func:`finish_session`."""
    return subprocess.Popen(
        cmd,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **popen,
    )


def finish_session(proc: subprocess.Popen, timeout: float) -> subprocess.CompletedProcess:
    """Wait up to ``timeout`` s for ``proc``'s output and exit, then kill whatever of its
    session still runs, also when the wait ends in ``TimeoutExpired``, Ctrl-C or
    pytest-timeout's ``Failed`` (its signal method raises in this thread). A command
    killed by a timeout leaves no orphan broker, build or test process behind.
    """
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        kill_session(proc.pid)
        if proc.returncode is None:
            proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def run_in_session(cmd: list[str], timeout: float, **popen: Any) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, capture_output=True, text=True, timeout=...)`` whose every
    process, down to grandchildren in process groups of their own, ends with it."""
    return finish_session(start_session(cmd, **popen), timeout)
