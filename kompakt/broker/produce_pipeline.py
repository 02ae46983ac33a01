"""A connection's Produce requests between the socket and the log: read, appended on a
worker thread in order, answered once the fsync that acks=all owes returned, in order.

The server (:mod:`kompakt.broker.server`) hands each batch of a connection's pipelined
Produce requests to a task that, once the batch before it is appended, appends it and
runs the fsyncs its acks=all requests owe (a group commit, :mod:`kompakt.broker.flush`)
in one worker-thread hop (:func:`handle_produces`; the next batch may append as soon as
this one's appends are done) and writes its answers after the answers before it
(:class:`PendingAnswers`). The
connection's next requests are read and gathered meanwhile: a client's pipeline waits
neither for one answer nor for one fsync per request, as a Kafka leader appends the
next request before the ones before it are replicated. Nothing is answered before an
fsync covers it.
"""

from __future__ import annotations

import asyncio
import collections
import threading
from collections.abc import Callable
from typing import Any

from kompakt.broker.flush import Pending, collected_flushes, run_flushes
from kompakt.broker.protocol import Buffer
from kompakt.broker.registry import Handler
from kompakt.broker.state import RequestContext

Frame = bytes | list[Buffer]  # an encoded response: one bytes object or parts in order
Calls = list[tuple[Handler, RequestContext, Any, Callable[[Any], Frame]]]
Answered = list[tuple[Any, Frame | Exception | None]]

# a large response part is written in pieces of this size (:func:`send_frame`)
WRITE_PIECE = 1 << 20
# a connection's Produce batches being appended or waiting for their fsync while its
# next requests are read, and the records bytes they hold (more: the reading waits for
# the oldest answers). Each such batch may hold a worker thread (an fsync, or a wait for
# the one in flight): three let one fsync cover what was appended while the one before
# ran without one connection taking every worker.
PIPELINE_BATCHES = 3
PIPELINE_BYTES = 8 << 20


def write_frame(writer: asyncio.StreamWriter, out: Frame) -> None:
    """Send a frame; one in parts is written part by part (3.11's ``writelines`` would
    join them: a copy of a Fetch's records)."""
    if isinstance(out, list):
        for part in out:
            writer.write(part)
    else:
        writer.write(out)


async def send_frame(writer: asyncio.StreamWriter, out: Frame) -> None:
    """Send a frame and wait until the transport may take more (``drain``). A part
    larger than :data:`WRITE_PIECE` (a Fetch's records) goes in pieces, each written
    once the transport's buffer is empty, so the socket takes it straight from the
    part: asyncio's transport copies what a write leaves unsent (3.11: a slice of it,
    then into its buffer, then again each time that buffer halves, about three copies
    of a 16 MiB part), here at most one piece's rest."""
    for part in out if isinstance(out, list) else (out,):
        if len(part) <= WRITE_PIECE:
            writer.write(part)
            continue
        view = memoryview(part)
        for start in range(0, len(view), WRITE_PIECE):
            if writer.transport.get_write_buffer_size():
                await _emptied(writer)
            writer.write(view[start : start + WRITE_PIECE])
    await writer.drain()


async def _emptied(writer: asyncio.StreamWriter) -> None:
    """Wait until the transport's buffer is empty: limits of 0 pause the writer while
    anything is buffered, then the transport's own limits again."""
    transport = writer.transport
    low, high = transport.get_write_buffer_limits()
    transport.set_write_buffer_limits(0, 0)
    try:
        await writer.drain()
    finally:
        transport.set_write_buffer_limits(high, low)


def resolve(future: asyncio.Future[bool], value: bool) -> None:
    """Set ``future`` unless it is already (told twice, or given up on)."""
    if not future.done():
        future.set_result(value)


class Appended:
    """Whether a batch's appends went through, told by its worker once they are done
    and before its fsync, so the connection's next batch appends meanwhile. The worker
    wakes the loop for it only when that next batch already waits; otherwise the
    answer is kept here for the next batch to find when it comes. A Produce that is
    not pipelined (a transaction's, a latency probe's) thereby costs no wake of the
    loop for it: a wake is a futex and the loop's pipe, 25-65 us of CPU here."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop  # immutable
        self.future: asyncio.Future[bool] = loop.create_future()  # owned by the loop
        self._lock = threading.Lock()  # guards _waited and _early
        self._waited = False  # guarded by _lock: the next batch waits (the loop sets it)
        self._early: bool | None = None  # guarded by _lock: told while nobody waited

    def tell(self, ok: bool) -> None:
        """From the worker: the appends are done (``ok``: none raised)."""
        with self._lock:
            if not self._waited:
                self._early = ok
                return
        try:
            self.loop.call_soon_threadsafe(resolve, self.future, ok)
        except RuntimeError:  # the loop closed: no next batch to let go
            pass

    def settle(self, ok: bool) -> None:
        """On the loop, once the batch's hop is over: ``ok`` unless told already (what
        the worker told wins, as its wake would have reached the loop first)."""
        with self._lock:
            if self._early is not None:
                ok = self._early
        resolve(self.future, ok)

    async def wait(self) -> bool:
        """On the loop, by the next batch: whether this one's appends went through."""
        with self._lock:
            self._waited = True
            early = self._early
        if early is not None:
            resolve(self.future, early)
        return await self.future


def records_bytes(body: Any) -> int:
    """The records bytes a Produce request carries."""
    return sum(len(p.records or b"") for t in body.topic_data for p in t.partition_data)


def encode_answer(encode: Callable[[Any], Frame], result: Any) -> Frame | Exception:
    try:
        return encode(result)
    except Exception as exc:  # reported by the caller, with the request named
        return exc


def append_produces(calls: Calls) -> tuple[list[Any], Pending]:
    """Several Produce requests in order on one worker thread: their answers and the
    acks=all fsyncs those still wait for (one per partition, shared); stops at a
    handler that raises (its exception in place of the answer)."""
    results: list[Any] = []
    with collected_flushes() as pending:
        for handler, ctx, body, _encode_it in calls:
            try:
                results.append(handler(ctx, body))
            except Exception as exc:
                results.append(exc)
                break
    return results, pending


def flush_and_encode(calls: Calls, results: list[Any], pending: Pending) -> Answered:
    """The fsyncs ``pending`` names (a failed one turns its answers into errors), then
    every answer encoded: nothing is encoded before the fsync that covers it."""
    run_flushes(pending)
    return [
        (r, None if r is None or isinstance(r, Exception) else encode_answer(encode, r))
        for r, (_h, _c, _b, encode) in zip(results, calls, strict=False)
    ]


def handle_produces(calls: Calls, appended: Callable[[bool], None]) -> Answered:
    """:func:`append_produces`, then the fsyncs acks=all owes and the answers encoded,
    in one worker-thread hop. Before an fsync, ``appended`` is told whether the appends
    went through (no handler raised), so the connection's next batch appends on another
    worker meanwhile instead of waiting for the fsync."""
    results, pending = append_produces(calls)
    if pending:
        appended(not any(isinstance(r, Exception) for r in results))
    return flush_and_encode(calls, results, pending)


class PendingAnswers:
    """A connection's Produce batches not answered yet, oldest first: for each, the task
    that appends it after the one before and writes its answers after theirs (True, or
    False once it or one before failed: the connection is to close), the future saying
    whether its append went through, and the records bytes it holds."""

    def __init__(self) -> None:
        self._entries: collections.deque[tuple[asyncio.Task[bool], Appended, int]] = (
            collections.deque()
        )

    def __bool__(self) -> bool:
        return bool(self._entries)

    def last(self) -> tuple[asyncio.Future[bool] | None, Appended | None]:
        """The newest batch's (answer task, whether it appended), or Nones."""
        if not self._entries:
            return None, None
        task, appended, _n = self._entries[-1]
        return task, appended

    def add(self, task: asyncio.Task[bool], appended: Appended, nbytes: int) -> None:
        self._entries.append((task, appended, nbytes))

    def waiting(self) -> bool:
        """An answer not written yet."""
        return any(not task.done() for task, _a, _n in self._entries)

    async def settle(self, keep_bytes: int = 0, keep: int = 0) -> bool:
        """Wait for the oldest answers until at most ``keep`` are left, holding at most
        ``keep_bytes`` of records (0, 0: all written), collecting the done ones; False
        once one failed."""
        entries = self._entries
        while entries and (
            entries[0][0].done()
            or len(entries) > keep
            or sum(n for _t, _a, n in entries) > keep_bytes
        ):
            task, _a, _n = entries.popleft()
            if not await task:
                return False
        return True

    def abandon(self) -> None:
        """The connection ends: answers not yet written are dropped."""
        for task, _a, _n in self._entries:
            if task.done() and not task.cancelled():
                task.exception()  # seen: not logged as never retrieved
            task.cancel()
        self._entries.clear()
