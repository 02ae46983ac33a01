"""The hand-over between a Produce batch's worker and the connection's next batch
(:class:`kompakt.broker.produce_pipeline.Appended`): told early, the answer waits for
the next batch; told late, it wakes the loop; either way the next batch learns it."""

from __future__ import annotations

import asyncio
import threading

from kompakt.broker.produce_pipeline import Appended


def _wakes(loop: asyncio.AbstractEventLoop) -> list[int]:
    """Count the loop's wakes from other threads (``call_soon_threadsafe``)."""
    count = [0]
    original = loop.call_soon_threadsafe

    def counted(*args, **kwargs):
        count[0] += 1
        return original(*args, **kwargs)

    loop.call_soon_threadsafe = counted  # type: ignore[method-assign]
    return count


def test_told_before_anyone_waits_costs_no_wake_and_the_next_batch_finds_it() -> None:
    async def run() -> tuple[bool, int]:
        loop = asyncio.get_running_loop()
        wakes = _wakes(loop)
        appended = Appended(loop)
        worker = threading.Thread(target=appended.tell, args=(True,))
        worker.start()
        worker.join()
        return await appended.wait(), wakes[0]

    assert asyncio.run(run()) == (True, 0)


def test_told_while_the_next_batch_waits_wakes_the_loop() -> None:
    async def run() -> tuple[bool, int]:
        loop = asyncio.get_running_loop()
        wakes = _wakes(loop)
        appended = Appended(loop)
        waiting = asyncio.ensure_future(appended.wait())
        await asyncio.sleep(0)  # not a wait: one loop step, the next batch now waits
        worker = threading.Thread(target=appended.tell, args=(True,))
        worker.start()
        result = await asyncio.wait_for(waiting, 10)
        worker.join()
        return result, wakes[0]

    assert asyncio.run(run()) == (True, 1)


def test_a_failed_append_told_early_stops_the_next_batch() -> None:
    async def run() -> bool:
        appended = Appended(asyncio.get_running_loop())
        appended.tell(False)
        appended.settle(True)  # the hop's own end does not overrule what was told
        return await appended.wait()

    assert asyncio.run(run()) is False


def test_settled_by_the_hop_without_a_tell() -> None:
    async def run() -> bool:
        appended = Appended(asyncio.get_running_loop())
        waiting = asyncio.ensure_future(appended.wait())
        await asyncio.sleep(0)  # not a wait: one loop step, the next batch now waits
        appended.settle(False)  # the handler raised before its appends were done
        return await waiting

    assert asyncio.run(run()) is False
