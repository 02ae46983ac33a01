"""The Kafka server's worker threads (Kafka's request handler threads): where a handler
that may block on the log runs, off the event loop.

One hop is a submit and one callback back to the loop: asyncio.to_thread without its
context copy and the concurrent Future it chains to the asyncio one, a third less CPU
per hop, which nearly every request takes.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kompakt.broker.produce_pipeline import Frame, encode_answer
from kompakt.broker.registry import DelayedResponse, Handler
from kompakt.broker.state import RequestContext

# as many as asyncio's default executor has
HANDLER_THREADS = min(32, (os.cpu_count() or 1) + 4)


def _settle(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    """On the loop: a hop's outcome into its future, unless the waiter gave up."""
    if future.done():
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


def handle_and_encode(
    handler: Handler, ctx: RequestContext, body: Any, encode: Callable[[Any], Frame]
) -> tuple[Any, Frame | Exception | None]:
    """A plain handler's answer and its encoding, in one hop (a delayed answer is not
    encoded yet: it is completed on the loop)."""
    result = handler(ctx, body)
    if result is None or isinstance(result, DelayedResponse):
        return result, None
    return result, encode_answer(encode, result)


class Workers:
    """A pool of worker threads named ``kompakt-io_N``, started as they are needed."""

    def __init__(self, threads: int = HANDLER_THREADS):
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="kompakt-io")

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
            try:
                loop.call_soon_threadsafe(_settle, future, ok, value)
            except RuntimeError:  # the loop closed meanwhile: nobody waits
                pass

        self._pool.submit(run)
        return future

    def shutdown(self) -> None:
        """No more hops; the running ones finish on their own."""
        self._pool.shutdown(wait=False)
