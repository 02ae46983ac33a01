"""The Kafka server's worker threads (Kafka's request handler threads): where a handler
that may block on the log runs, off the event loop.

One hop is a hand-over to a waiting thread and one callback back to the loop:
asyncio.to_thread without its context copy and the concurrent Future it chains to the
asyncio one (a third less CPU per hop, which nearly every request takes), and the
thread that went idle last takes the next hop, where a ThreadPoolExecutor wakes its
idle threads in turn (a tenth less broker CPU per small Produce in paired runs).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

from kompakt.broker.produce_pipeline import Frame, encode_answer
from kompakt.broker.registry import DelayedResponse, Handler
from kompakt.broker.state import RequestContext

log = logging.getLogger(__name__)

# as many as asyncio's default executor has
HANDLER_THREADS = min(32, (os.cpu_count() or 1) + 4)


Jobs = list[Callable[[], None]]


def _settle(future: asyncio.Future[Any], ok: bool, value: Any, jobs: Jobs | None = None) -> None:
    """On the loop: a hop's outcome into its future, unless the waiter gave up; then
    the ``jobs`` its handler kept for after the answer, queued behind the waiter's step
    (which writes the answer), in the same wake of the loop."""
    if not future.done():
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)
    if jobs:
        future.get_loop().call_soon(run_jobs, jobs)


_after = threading.local()
"""``jobs``: what the request this handler thread serves left for after its answer."""


def after_answer(job: Callable[[], None]) -> bool:
    """Inside a plain handler (:func:`handle_and_encode`) on this thread: ``job`` is
    run on the loop once the request's answer is written, and True; elsewhere False
    (the caller runs it now). For work the answer does not wait for that would
    otherwise take the interpreter lock from the loop just as it writes the answer (a
    transaction's markers, submitted as EndTxn's PrepareCommit is durable)."""
    jobs: Jobs | None = getattr(_after, "jobs", None)
    if jobs is None:
        return False
    jobs.append(job)
    return True


def run_jobs(jobs: Jobs) -> None:
    """Run kept jobs, each on its own (one that raises is logged, the rest still run)."""
    for job in jobs:
        try:
            job()
        except Exception:
            log.exception("a job run after an answer failed")


def answer_waits_elsewhere() -> None:
    """Run this thread's kept jobs now: its handler is about to wait for an answer that
    one of them may complete."""
    jobs: Jobs | None = getattr(_after, "jobs", None)
    if jobs:
        kept = jobs[:]
        jobs.clear()
        run_jobs(kept)


def _take_jobs() -> Jobs:
    jobs: Jobs = getattr(_after, "jobs", None) or []
    _after.jobs = None
    return jobs


def handle_and_encode(
    handler: Handler, ctx: RequestContext, body: Any, encode: Callable[[Any], Frame]
) -> tuple[Any, Frame | Exception | None]:
    """A plain handler's answer and its encoding, in one hop (a delayed answer is not
    encoded yet: it is completed on the loop). The jobs it keeps for after its answer
    (:func:`after_answer`) are handed to the loop by the hop, behind the answer."""
    _after.jobs = []
    try:
        result = handler(ctx, body)
    except BaseException:
        run_jobs(_take_jobs())
        raise
    if result is None or isinstance(result, DelayedResponse):
        return result, None
    return result, encode_answer(encode, result)


class _Worker(threading.Thread):
    """One worker thread: runs the job it is given, then waits on its own lock."""

    def __init__(self, pool: Workers, name: str, job: Callable[[], None]):
        super().__init__(name=name, daemon=True)
        self._pool = pool
        self._job: Callable[[], None] | None = job
        self._wake = threading.Lock()
        self._wake.acquire()

    def give(self, job: Callable[[], None] | None) -> None:
        self._job = job
        self._wake.release()

    def run(self) -> None:
        job = self._job
        while job is not None:
            try:
                job()
            except BaseException:  # a hop hands its own errors on: this is a bug
                log.exception("worker job failed")
            job = self._pool._next(self)
            if job is None and not self._pool._closed:
                self._wake.acquire()
                job = self._job


class Workers:
    """A pool of worker threads named ``kompakt-io_N``, started as they are needed. The
    thread that became idle last takes the next hop (its caches are the warm ones, and
    one busy connection keeps using one thread instead of waking each in turn)."""

    def __init__(self, threads: int = HANDLER_THREADS):
        self._max = threads
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []
        self._backlog: collections.deque[Callable[[], None]] = collections.deque()
        self._started = 0
        self._closed = False

    def _submit(self, job: Callable[[], None]) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("cannot hop after shutdown")
            if self._idle:
                self._idle.pop().give(job)
                return
            if self._started >= self._max:
                self._backlog.append(job)
                return
            self._started += 1
            name = f"kompakt-io_{self._started - 1}"
        _Worker(self, name, job).start()

    def _next(self, worker: _Worker) -> Callable[[], None] | None:
        """The job a worker that finished one runs next, or None (it waits idle)."""
        with self._lock:
            if self._backlog:
                return self._backlog.popleft()
            worker._job = None
            if not self._closed:
                self._idle.append(worker)
            return None

    def hop(self, fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        """``fn(*args)`` on a worker thread, its result (or exception) awaited on the
        running loop."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()

        def run() -> None:
            try:
                value, ok = fn(*args), True
            except BaseException as exc:  # handed to the waiter, as to_thread does
                value, ok = exc, False
            jobs = _take_jobs()
            try:
                loop.call_soon_threadsafe(_settle, future, ok, value, jobs)
            except RuntimeError:  # the loop closed meanwhile: nobody waits
                run_jobs(jobs)

        self._submit(run)
        return future

    def shutdown(self) -> None:
        """No more hops; the running ones finish on their own, idle threads end."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.give(None)
