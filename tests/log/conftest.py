from __future__ import annotations

import pytest

from kompakt.log.manager import LogManager


class ManualClock:
    """A controlled clock in ms (Kafka's MockTime)."""

    def __init__(self, now: int = 1_700_000_000_000):
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def manager(tmp_path, clock):
    m = LogManager(tmp_path / "data", clock=clock)
    yield m
    m.close()
