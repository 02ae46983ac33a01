"""The clock every log-level decision takes: milliseconds since the epoch, passed in.

Kafka passes a ``Time`` (``MockTime`` in tests) rather than reading the system clock
inside logic; kompakt passes a ``Clock`` callable the same way, so retention, rolling,
timestamps and the cleaner's lags run on a manual clock in tests.
"""

from __future__ import annotations

import time
from collections.abc import Callable

Clock = Callable[[], int]


def system_clock() -> int:
    """Wall-clock milliseconds (Kafka's ``Time.SYSTEM.milliseconds()``)."""
    return int(time.time() * 1000)
