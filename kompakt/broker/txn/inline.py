"""The coordinator called from a request handler thread, as Kafka's ``KafkaApis`` calls
its ``TransactionCoordinator`` (decisions under the transaction's lock, the log append
from the same thread, the answer sent once the append is durable).

AddPartitionsToTxn and EndTxn, one each per transaction on the client's path, run on
the server's worker thread: the decision and its ``__transaction_state`` append under
:attr:`TransactionBroker.lock`, the fsync after it without the lock (a group commit
with other handlers'), then the record adopted under the lock again and the answer
encoded on the same thread. Each costs one thread round trip instead of three (the loop,
the log thread and back, then an encoding thread and back). Everything else that calls
the coordinator (the loop's handlers and timers, the marker writer) holds the lock too,
and its appends' fsyncs go to the log thread as before.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from kompakt.broker.coordinator.scheduler import LoopScheduler, TimerHandle
from kompakt.broker.handlers.common import error_of
from kompakt.broker.txn.state import Completion
from kompakt.broker.workers import answer_waits_elsewhere

T = TypeVar("T")

ANSWER_WAIT_S = 60.0
"""How long a handler thread waits for an answer completed elsewhere (a request parked
until the id's previous transaction completes, at most
``add.partitions.to.txn.retry.backoff.max.ms``); only a bug waits that long."""

_owed = threading.local()
"""This thread's fsyncs owed by appends made inside :func:`run_inline`."""

Owed = list[tuple[Callable[[], None], Completion[ErrorCode]]]


def owe_fsync(flush: Callable[[], None], out: Completion[ErrorCode]) -> bool:
    """Inside :func:`run_inline` on this thread: note that ``out`` completes once
    ``flush`` ran (done by the thread after it lets go of the lock) and return True;
    elsewhere False (the caller hands the fsync to the log thread)."""
    owed: Owed | None = getattr(_owed, "list", None)
    if owed is None:
        return False
    owed.append((flush, out))
    return True


def run_inline(lock: threading.RLock, call: Callable[[], Completion[T]]) -> T:
    """``call()`` (a coordinator method) under ``lock`` on this thread, its fsyncs then
    run here without the lock and their appends adopted under it; the answer, waited
    for if someone else completes it (a parked request)."""
    owed: Owed = []
    _owed.list = owed
    try:
        with lock:
            out = call()
    finally:
        _owed.list = None
    for flush, appended in owed:
        code = ErrorCode.none
        try:
            flush()
        except Exception as exc:
            code = ErrorCode(error_of(exc)[0])
        with lock:
            appended.complete(code)
    with lock:  # whoever completes it holds the lock
        if out.done():  # answered on this thread: the common case, no wait
            return out.result()
        answered = threading.Event()
        out.add_done_callback(lambda _value: answered.set())
    answer_waits_elsewhere()  # a job kept for after the answer may be what completes it
    if not answered.wait(ANSWER_WAIT_S):
        raise TimeoutError("the transaction coordinator did not answer")
    return out.result()


class LockedScheduler(LoopScheduler):
    """The coordinator's timers on the broker's loop, each run under ``lock``; set and
    cancelled from any thread (a handler thread parks a request with a timer)."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, clock: Callable[[], int], lock: threading.RLock
    ):
        super().__init__(loop, clock)
        self.lock = lock  # immutable

    def call_later(self, delay_ms: float, fn: Callable[..., Any], *args: Any) -> TimerHandle:
        def run() -> None:
            with self.lock:
                fn(*args)

        timer = _Timer(self.loop)
        timer.start_soon(max(0.0, delay_ms) / 1000, run)
        return timer


class _Timer:
    """A loop timer that any thread may set and cancel."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop  # immutable
        self._handle: asyncio.TimerHandle | None = None  # owned by the loop
        self._cancelled = False  # set once, by any thread

    def start_soon(self, delay_s: float, fn: Callable[[], None]) -> None:
        def start() -> None:
            if not self._cancelled:
                self._handle = self.loop.call_later(delay_s, fn)

        self._on_loop(start)

    def cancel(self) -> None:
        self._cancelled = True
        self._on_loop(lambda: self._handle is not None and self._handle.cancel())

    def _on_loop(self, fn: Callable[[], object]) -> None:
        if on_loop(self.loop):
            fn()
            return
        try:
            self.loop.call_soon_threadsafe(fn)
        except RuntimeError:  # the loop is closed: no timer runs any more
            pass


def on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether this thread runs ``loop``."""
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False
