"""The cleaner's I/O throttle (Kafka's ``Throttler``) and its backlog rule.

:class:`Throttler` is Kafka's ``kafka.utils.Throttler`` as ``LogCleaner`` builds it
(``new Throttler(maxIoBytesPerSecond, 300, throttleDown = true, "cleaner-io", "bytes")``):
every read and every write of a clean reports its byte count to
:meth:`Throttler.maybe_throttle`; once more than ``check_interval_ms`` (300 ms) has passed
since the period began and something was observed, the observed rate is compared with
the desired one and, if it is above, the caller sleeps ``observed / rate - elapsed`` so
that the period's rate comes down to the limit; then a new period begins. Reads and
writes share one budget, as Kafka's cleaner counts both (``buildOffsetMap`` the bytes it
reads, ``cleanInto`` the bytes it reads and writes).

:class:`BacklogController` is kompakt's extension, after Redpanda's backlog controller
(``backlog_controller``: a controller on the compaction backlog against a setpoint that
adjusts the cleaner's share of I/O): a proportional rule on the dirty-bytes backlog of
all compacted partitions (the sum of Kafka's ``LogToClean.cleanableBytes``). At or below
``kompakt.log.cleaner.backlog.setpoint.bytes`` the rate is
``log.cleaner.io.max.bytes.per.second``; above it the rate rises in proportion:
``base * (1 + p_coeff * (backlog - setpoint) / setpoint)``, up to
``kompakt.log.cleaner.backlog.max.bytes.per.second`` (unlimited by default). So when
producers dirty bytes faster than the throttled cleaner cleans them, the backlog grows
and the cleaner speeds up until it keeps up; when it has caught up it falls back to the
base limit. Redpanda's integral and derivative terms (zero and small by default there)
are left out. The backlog is sampled at most every
``kompakt.log.cleaner.backlog.update.interval.ms``.

Time is passed in (Kafka's ``Time``/``MockTime``): a :class:`ThrottleTime` gives
``nanoseconds()`` and ``sleep(seconds)``; tests hand in a manual one that advances when
"slept", so a throttled clean is counted, never timed.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

UNLIMITED = sys.float_info.max  # Kafka's default: Double.MaxValue, no limit
CHECK_INTERVAL_MS = 300  # LogCleaner's Throttler check interval
NS_PER_S = 1_000_000_000


class ThrottleTime(Protocol):
    """What the throttler reads and does with time (Kafka's ``Time``)."""

    def nanoseconds(self) -> int: ...

    def sleep(self, seconds: float) -> None: ...


class SystemTime:
    """The real clock (Kafka's ``Time.SYSTEM``): monotonic nanoseconds, real sleeps."""

    def nanoseconds(self) -> int:
        return time.monotonic_ns()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


SYSTEM_TIME = SystemTime()

# a task-side hook: (bytes observed, seconds slept) after each maybe_throttle
Report = Callable[[float, float], None]


def is_unlimited(rate: float) -> bool:
    return not math.isfinite(rate) or rate >= UNLIMITED


class Throttler:
    """Kafka's ``Throttler`` (``throttleDown``): sleeps so the observed rate stays at or
    under the desired one, checked every ``check_interval_ms``.

    ``rate_source`` (the backlog controller) gives the effective rate from the base
    :attr:`desired_rate`; without it the base rate is used. Counts what it observed and
    slept (the ``cleaner-io`` meter and ``kompakt_log_cleaner_throttle_seconds_total``).
    Picklable, so a Spark task can carry its share (:meth:`share`).
    """

    def __init__(
        self,
        desired_rate: float = UNLIMITED,
        check_interval_ms: int = CHECK_INTERVAL_MS,
        time: ThrottleTime = SYSTEM_TIME,
        rate_source: Callable[[float], float] | None = None,
        report: Report | None = None,
    ):
        self.desired_rate = float(desired_rate)
        self.check_interval_ns = check_interval_ms * 1_000_000
        self.time = time
        self.rate_source = rate_source
        self.report = report
        self.observed_total = 0.0  # bytes seen (Kafka's meter)
        self.throttled_seconds_total = 0.0
        self.throttle_count = 0
        self._init_state()

    def _init_state(self) -> None:
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._period_start_ns = self.time.nanoseconds()
        self._observed_so_far = 0.0

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for k in ("_lock", "_closed", "_period_start_ns", "_observed_so_far", "rate_source"):
            state.pop(k, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.rate_source = None
        self._init_state()

    def effective_rate(self) -> float:
        """The rate in force now: the base rate through the backlog rule, if any."""
        if self.rate_source is None:
            return self.desired_rate
        return self.rate_source(self.desired_rate)

    def update_desired_rate(self, rate: float) -> None:
        """Kafka ``updateDesiredRatePerSec`` (a dynamic config change)."""
        self.desired_rate = float(rate)

    def share(self, tasks: int, report: Report | None = None) -> Throttler:
        """A throttler for one of ``tasks`` concurrent tasks (Spark): the effective rate
        now, split evenly, on the system clock."""
        rate = self.effective_rate()
        if not is_unlimited(rate):
            rate = rate / max(1, tasks)
        return Throttler(rate, self.check_interval_ns // 1_000_000, SYSTEM_TIME, None, report)

    def add(self, observed: float, slept: float) -> None:
        """Count I/O and sleep done elsewhere on this throttler's behalf (Spark tasks)."""
        with self._lock:
            self.observed_total += observed
            self.throttled_seconds_total += slept

    def close(self) -> None:
        """Cut short a sleep under way and skip later ones (shutdown, abort)."""
        self._closed.set()

    def reopen(self) -> None:
        self._closed.clear()

    def maybe_throttle(self, observed: float) -> float:
        """Kafka ``maybeThrottle``: count ``observed`` bytes; at the end of a check
        interval sleep as long as brings the period's rate down to the limit. Returns
        the seconds slept."""
        rate = self.effective_rate()
        slept = 0.0
        with self._lock:
            self.observed_total += observed
            self._observed_so_far += observed
            now = self.time.nanoseconds()
            elapsed_ns = now - self._period_start_ns
            if elapsed_ns > self.check_interval_ns and self._observed_so_far > 0:
                observed_rate = self._observed_so_far * NS_PER_S / elapsed_ns
                if not is_unlimited(rate) and observed_rate > rate:
                    # solve for the sleep that makes the period's rate the desired one
                    elapsed_ms = elapsed_ns // 1_000_000
                    sleep_ms = round(self._observed_so_far / (rate / 1000) - elapsed_ms)
                    if sleep_ms > 0:
                        slept = self._sleep(sleep_ms / 1000)
                        self.throttled_seconds_total += slept
                        self.throttle_count += 1
                self._period_start_ns = self.time.nanoseconds()
                self._observed_so_far = 0.0
        if self.report is not None:
            self.report(observed, slept)
        return slept

    def settle(self) -> float:
        """End the current period now, however short, sleeping what its bytes still owe
        at the rate (``maybe_throttle``'s rule without the interval condition). For a
        short-lived share (one Spark task): Kafka's throttler lives as long as the
        cleaner, but a task that reports its bytes in one or two calls well within a
        period would otherwise never be checked. Returns the seconds slept."""
        rate = self.effective_rate()
        slept = 0.0
        with self._lock:
            elapsed_ns = self.time.nanoseconds() - self._period_start_ns
            if self._observed_so_far > 0 and not is_unlimited(rate):
                sleep_ms = round(self._observed_so_far / (rate / 1000) - elapsed_ns // 1_000_000)
                if sleep_ms > 0:
                    slept = self._sleep(sleep_ms / 1000)
                    self.throttled_seconds_total += slept
                    self.throttle_count += 1
            self._period_start_ns = self.time.nanoseconds()
            self._observed_so_far = 0.0
        if self.report is not None and slept:
            self.report(0.0, slept)
        return slept

    def _sleep(self, seconds: float) -> float:
        if self._closed.is_set():
            return 0.0
        if self.time is SYSTEM_TIME or isinstance(self.time, SystemTime):
            t0 = time.monotonic()
            self._closed.wait(seconds)  # a close() cuts it short
            return time.monotonic() - t0
        self.time.sleep(seconds)
        return seconds


# -- the backlog rule ---------------------------------------------------------------------

IO_MAX_KEY = "log.cleaner.io.max.bytes.per.second"
SETPOINT_KEY = "kompakt.log.cleaner.backlog.setpoint.bytes"
P_COEFF_KEY = "kompakt.log.cleaner.backlog.p.coeff"
MAX_RATE_KEY = "kompakt.log.cleaner.backlog.max.bytes.per.second"
INTERVAL_KEY = "kompakt.log.cleaner.backlog.update.interval.ms"


@dataclass(frozen=True)
class BacklogSettings:
    """The backlog rule's settings (``kompakt.log.cleaner.backlog.*``)."""

    setpoint_bytes: int
    p_coeff: float
    max_rate: float
    update_interval_ms: int

    @classmethod
    def from_config(cls, config: Mapping[str, str]) -> BacklogSettings:
        from kompakt.cleaner.config import (
            BACKLOG_INTERVAL_DEFAULT,
            BACKLOG_MAX_RATE_DEFAULT,
            BACKLOG_P_COEFF_DEFAULT,
            BACKLOG_SETPOINT_DEFAULT,
        )

        return cls(
            int(config.get(SETPOINT_KEY, BACKLOG_SETPOINT_DEFAULT)),
            float(config.get(P_COEFF_KEY, BACKLOG_P_COEFF_DEFAULT)),
            float(config.get(MAX_RATE_KEY, BACKLOG_MAX_RATE_DEFAULT)),
            int(config.get(INTERVAL_KEY, BACKLOG_INTERVAL_DEFAULT)),
        )


def backlog_rate(base: float, backlog: int, s: BacklogSettings) -> float:
    """The proportional rule: ``base`` at or under the setpoint, then
    ``base * (1 + p * (backlog - setpoint) / setpoint)``, capped at ``max_rate``."""
    if is_unlimited(base):
        return base
    error = backlog - s.setpoint_bytes
    if error <= 0 or s.p_coeff <= 0:
        return base
    rate = base * (1 + s.p_coeff * error / max(1, s.setpoint_bytes))
    return max(base, min(rate, s.max_rate))


class BacklogController:
    """Samples the dirty-bytes backlog (``sample()``) at most every
    ``update_interval_ms`` of ``clock`` (ms) and turns a base rate into the effective
    one (:func:`backlog_rate`). Thread-safe enough for one cleaner thread and scrapes."""

    def __init__(
        self, settings: BacklogSettings, sample: Callable[[], int], clock: Callable[[], int]
    ):
        self.settings = settings
        self.sample = sample
        self.clock = clock
        self.backlog_bytes = 0
        self.last_rate: float = UNLIMITED
        self._sampled_at: int | None = None

    def update(self, force: bool = False) -> int:
        now = self.clock()
        due = self._sampled_at is None or now - self._sampled_at >= self.settings.update_interval_ms
        if force or due:
            self._sampled_at = now
            try:
                self.backlog_bytes = int(self.sample())
            except Exception:  # a partition deleted mid-walk: keep the last sample
                pass
        return self.backlog_bytes

    def __call__(self, base: float) -> float:
        """The effective rate for ``base`` (the throttler's ``rate_source``)."""
        self.update()
        self.last_rate = backlog_rate(base, self.backlog_bytes, self.settings)
        return self.last_rate
