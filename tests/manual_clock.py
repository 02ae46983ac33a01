"""Controlled time for tests: the clock handed to LogManager and the cleaner (Kafka's
``MockTime``) and the scheduler handed to the group coordinator (Kafka's
``MockScheduler``): timers fire only when the test advances the clock."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import Any

T0 = 1_700_000_000_000


class ManualClock:
    """A controlled clock in ms."""

    def __init__(self, now: int = T0):
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


class ManualTimer:
    """A timer of :class:`ManualScheduler`; ``cancel`` keeps it from firing."""

    def __init__(self, due: int, fn: Callable[..., Any], args: tuple[Any, ...]):
        self.due, self.fn, self.args = due, fn, args
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualScheduler:
    """Kafka's ``MockScheduler`` over a :class:`ManualClock`: ``call_later`` timers run
    in due order (ties in scheduling order) when :meth:`advance` passes their due time,
    with the clock set to that time while each runs, so a timer one runs may schedule
    another that fires in the same advance."""

    def __init__(self, clock: ManualClock | None = None):
        self.clock = clock or ManualClock()
        self._timers: list[tuple[int, int, ManualTimer]] = []
        self._seq = itertools.count()

    def now(self) -> int:
        return self.clock.now

    def call_later(self, delay_ms: float, fn: Callable[..., Any], *args: Any) -> ManualTimer:
        timer = ManualTimer(self.clock.now + max(0, int(delay_ms)), fn, args)
        heapq.heappush(self._timers, (timer.due, next(self._seq), timer))
        return timer

    def pending(self) -> list[ManualTimer]:
        """Timers not yet fired nor cancelled, soonest first."""
        return [t for _due, _seq, t in sorted(self._timers) if not t.cancelled]

    def advance(self, ms: int) -> None:
        target = self.clock.now + ms
        while self._timers and self._timers[0][0] <= target:
            _due, _seq, timer = heapq.heappop(self._timers)
            if timer.cancelled:
                continue
            self.clock.now = max(self.clock.now, timer.due)
            timer.fn(*timer.args)
        self.clock.now = target
