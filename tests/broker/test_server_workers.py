"""The server's worker threads (Kafka's request handler threads, broker/workers.py): a
hop's result or exception reaches the coroutine awaiting it, hops beyond the thread
count wait their turn, the thread idle last takes the next hop, and none runs after
shutdown."""

from __future__ import annotations

import asyncio
import threading

import pytest
from shared_kit import wait_for

from kompakt.broker.workers import Workers, after_answer, handle_and_encode


def test_results_and_errors_come_back_and_a_backlog_drains():
    workers = Workers(threads=2)

    async def main() -> None:
        assert await workers.hop(lambda a, b: a + b, 2, 3) == 5
        with pytest.raises(ZeroDivisionError):
            await workers.hop(lambda: 1 / 0)
        gate = threading.Event()
        blocked = [workers.hop(gate.wait, 10) for _ in range(2)]  # every thread busy
        queued = [workers.hop(lambda i=i: i * i) for i in range(5)]
        gate.set()
        assert await asyncio.gather(*blocked) == [True, True]
        assert await asyncio.gather(*queued) == [0, 1, 4, 9, 16]

    try:
        asyncio.run(main())
    finally:
        workers.shutdown()


def test_the_thread_idle_last_takes_the_next_hop_and_none_after_shutdown():
    workers = Workers(threads=4)
    first, second = threading.Event(), threading.Event()

    def name() -> str:
        return threading.current_thread().name

    async def main() -> list[str]:
        a = workers.hop(lambda: first.wait(10) and name())
        b = workers.hop(lambda: second.wait(10) and name())
        first.set()
        await a
        wait_for(lambda: len(workers._idle) == 1, "the first thread idle")
        second.set()
        idle_last = await b
        names = [idle_last]
        for _ in range(3):
            # a hop's answer reaches the loop before its thread is back in the idle
            # list: on a busy machine the next hop came first and went to the other
            wait_for(lambda: len(workers._idle) == 2, "both threads idle")
            names.append(await workers.hop(name))
        return names

    names = asyncio.run(main())
    assert names == ["kompakt-io_1"] * 4
    workers.shutdown()

    async def after() -> None:
        workers.hop(int)

    with pytest.raises(RuntimeError):
        asyncio.run(after())


def _keeping(order: list, done: threading.Event, fail: bool = False):
    """A plain handler that keeps a job for after its answer (as EndTxn keeps its
    markers' submission), noting where and after what the job ran."""

    def handler(_ctx: object, _body: object) -> dict:
        kept = after_answer(
            lambda: (order.append(("job", threading.current_thread().name)), done.set())
        )
        order.append(("kept", kept))
        if fail:
            raise ValueError("the handler failed")
        return {"answer": 1}

    return handler


def test_a_job_kept_by_a_handler_runs_on_the_loop_after_the_step_that_writes_its_answer():
    """The job goes behind the awaiting coroutine's step (where the server writes the
    answer), on the loop's thread; outside a handler nothing is kept."""
    workers = Workers(threads=2)
    order: list = []
    done = threading.Event()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        near_end = threading.Event()

        def handler(ctx: object, body: object) -> dict:
            try:
                return _keeping(order, done)(ctx, body)
            finally:
                near_end.set()

        hop = workers.hop(handle_and_encode, handler, None, None, lambda r: b"A")
        # the loop held while the worker hands back the answer and the job: both are
        # queued before the loop looks again, the order that would put the job first
        near_end.wait(10)
        wait_for(lambda: len(workers._idle) == 1, "the worker done handing both back")
        result, out = await hop
        order.append(("answered", result, out))  # the server writes the answer in this step
        await asyncio.wait_for(loop.run_in_executor(None, done.wait, 10), 10)

    try:
        asyncio.run(main())
    finally:
        workers.shutdown()
    assert order == [
        ("kept", True),
        ("answered", {"answer": 1}, b"A"),
        ("job", "MainThread"),  # asyncio.run's loop runs on this thread
    ]
    assert after_answer(lambda: None) is False  # no handler on this thread


def test_a_kept_job_still_runs_when_the_waiter_gave_up_or_the_handler_raised():
    """A cancelled waiter (a connection closed meanwhile) does not lose the job, nor does
    a handler that raises after keeping it (it runs at once, on the worker): a
    transaction's markers are never left unsubmitted."""
    workers = Workers(threads=2)
    order: list = []
    done = threading.Event()
    gate = threading.Event()

    def slow(ctx: object, body: object) -> dict:
        result = _keeping(order, done)(ctx, body)
        gate.wait(10)
        return result

    async def main() -> None:
        loop = asyncio.get_running_loop()
        hop = workers.hop(handle_and_encode, slow, None, None, lambda r: b"A")
        hop.cancel()  # the waiter gives up before the handler ends
        gate.set()
        await asyncio.wait_for(loop.run_in_executor(None, done.wait, 10), 10)
        done.clear()
        with pytest.raises(ValueError):
            await workers.hop(
                handle_and_encode, _keeping(order, done, fail=True), None, None, bytes
            )
        assert done.wait(10)

    try:
        asyncio.run(main())
    finally:
        workers.shutdown()
    assert order[0] == ("kept", True) and order[1] == ("job", "MainThread")
    assert order[2] == ("kept", True) and order[3][0] == "job"
    assert order[3][1].startswith("kompakt-io_")  # run by the worker, before the raise
