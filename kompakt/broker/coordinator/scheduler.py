"""Time and timers for the coordinator, injected (Kafka's ``Time`` and ``Scheduler``).

The group coordinator never reads the wall clock nor touches the event loop for its
timeouts: it asks a :class:`Scheduler` for ``now()`` and ``call_later(delay_ms, fn)``.
The broker passes a :class:`LoopScheduler` (timers on its asyncio loop, time from the
broker's clock); tests pass a manual one (``tests/manual_clock.py``, Kafka's
``MockScheduler`` / ``MockTime``) and move time by hand, so session and rebalance
timeouts are checked without sockets or sleeps.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol


class TimerHandle(Protocol):
    """What ``call_later`` returns: a timer that can be called off before it fires."""

    def cancel(self) -> None: ...


class Scheduler(Protocol):
    """Kafka's ``Time.milliseconds`` plus ``Scheduler.scheduleOnce``, in milliseconds."""

    def now(self) -> int: ...

    def call_later(self, delay_ms: float, fn: Callable[..., Any], *args: Any) -> TimerHandle: ...


class LoopScheduler:
    """The broker's scheduler: timers on the asyncio loop the coordinator runs on (so a
    timer never races a request handler), time read from ``clock`` in ms. ``clock`` is
    public so a test may move the coordinator's time alone on a live broker."""

    def __init__(self, loop: asyncio.AbstractEventLoop, clock: Callable[[], int]):
        self.loop = loop
        self.clock = clock

    def now(self) -> int:
        return int(self.clock())

    def call_later(self, delay_ms: float, fn: Callable[..., Any], *args: Any) -> TimerHandle:
        return self.loop.call_later(max(0.0, delay_ms) / 1000, fn, *args)
