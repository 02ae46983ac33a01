"""The controlled clock the tests hand to LogManager and the cleaner (Kafka's MockTime)."""

from __future__ import annotations

T0 = 1_700_000_000_000


class ManualClock:
    """A controlled clock in ms."""

    def __init__(self, now: int = T0):
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms
