"""The server's worker threads (Kafka's request handler threads, broker/workers.py): a
hop's result or exception reaches the coroutine awaiting it, hops beyond the thread
count wait their turn, the thread idle last takes the next hop, and none runs after
shutdown."""

from __future__ import annotations

import asyncio
import threading

import pytest
from shared_kit import wait_for

from kompakt.broker.workers import Workers


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
        wait_for(lambda: len(workers._idle) == 2, "both threads idle")
        return [idle_last] + [await workers.hop(name) for _ in range(3)]

    names = asyncio.run(main())
    assert names == ["kompakt-io_1"] * 4
    workers.shutdown()

    async def after() -> None:
        workers.hop(int)

    with pytest.raises(RuntimeError):
        asyncio.run(after())
