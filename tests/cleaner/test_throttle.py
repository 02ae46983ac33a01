"""The cleaner's I/O throttle: Kafka's ``Throttler`` rules (``ThrottlerTest``) on a
manual time, kompakt's backlog rule, and a real clean that has to sleep."""

from __future__ import annotations

import pytest
from cleaner_kit import append, fold

from kompakt.cleaner import Cleaner, LocalEngine
from kompakt.cleaner.throttle import (
    UNLIMITED,
    BacklogController,
    BacklogSettings,
    Throttler,
    backlog_rate,
)

MS = 1_000_000


class ManualTime:
    """Kafka's ``MockTime`` for the throttler: sleeping advances it; ``tick_ms`` is how
    far each look moves it (0: time stands still unless slept or advanced)."""

    def __init__(self, tick_ms: int = 0):
        self.ns = 0
        self.tick = tick_ms * MS
        self.slept: list[float] = []

    def nanoseconds(self) -> int:
        self.ns += self.tick
        return self.ns

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.ns += int(seconds * 1e9)

    def advance_ms(self, ms: int) -> None:
        self.ns += ms * MS

    @property
    def ms(self) -> int:
        return self.ns // MS


def test_throttler_keeps_the_rate_at_the_desired_one_kafka_testThrottleDesiredRate():
    """Kafka ``ThrottlerTest.testThrottleDesiredRate``: no sleep within a check interval;
    past it, sleep until the period's rate is the desired one."""
    interval, rate = 100, 1000.0
    per_interval = rate * interval / 1000
    t = ManualTime()
    th = Throttler(rate, interval, t)
    t1 = t.ms
    th.maybe_throttle(per_interval)
    assert t.ms == t1
    t.advance_ms(interval + 1)
    th.maybe_throttle(per_interval)
    t2 = t.ms
    assert t2 >= t1 + 2 * interval
    th.maybe_throttle(per_interval)
    assert t.ms == t2
    t.advance_ms(interval + 1)
    th.maybe_throttle(per_interval)
    t3 = t.ms
    assert t3 >= t2 + 2 * interval
    assert 4 * per_interval * 1000 / (t3 - t1) <= rate
    assert th.throttle_count == 2
    assert th.throttled_seconds_total == pytest.approx(sum(t.slept))


def test_sleep_is_observed_over_rate_minus_elapsed_kafka_maybeThrottle():
    """Kafka's sleep: round(observedSoFar / (rate per ms) - elapsed ms)."""
    t = ManualTime()
    th = Throttler(1000.0, 300, t)
    th.maybe_throttle(2000)  # within the interval: counted, no check
    t.advance_ms(400)
    assert th.maybe_throttle(1000) == pytest.approx(3.0 - 0.4)


def test_under_the_rate_no_sleep_and_a_new_period_begins():
    t = ManualTime()
    th = Throttler(1_000_000.0, 300, t)
    th.maybe_throttle(1000)
    t.advance_ms(301)
    assert th.maybe_throttle(1000) == 0
    assert t.slept == []
    assert th.observed_total == 2000


def test_unlimited_kafka_default_never_sleeps():
    t = ManualTime(tick_ms=1000)
    th = Throttler(UNLIMITED, 300, t)
    for _ in range(5):
        th.maybe_throttle(10**12)
    assert t.slept == [] and th.throttled_seconds_total == 0


def test_update_desired_rate_applies_at_the_next_check_kafka_updateDesiredRatePerSec():
    t = ManualTime()
    th = Throttler(1000.0, 100, t)
    th.update_desired_rate(2000.0)
    th.maybe_throttle(1000)
    t.advance_ms(101)
    assert th.maybe_throttle(1000) == pytest.approx(2000 / 2000 - 0.101)


def test_a_closed_throttler_does_not_sleep():
    t = ManualTime()
    th = Throttler(1.0, 0, t)
    th.close()
    t.advance_ms(1)
    assert th.maybe_throttle(10**6) == 0


def test_settle_ends_a_short_period_with_the_sleep_its_bytes_owe():
    """A Spark task's share reports its bytes in a call or two, well within a period:
    settling at its end sleeps what they owe at the rate."""
    t = ManualTime()
    th = Throttler(1000.0, 300, t)
    th.maybe_throttle(500)
    t.advance_ms(100)
    assert th.maybe_throttle(500) == 0  # within the period: no check
    assert th.settle() == pytest.approx(1.0 - 0.1)
    assert th.settle() == 0  # nothing observed since


def test_a_spark_share_splits_the_rate_in_force_over_concurrent_tasks():
    th = Throttler(1000.0, 300, ManualTime(), rate_source=lambda base: 4 * base)
    assert th.share(2).desired_rate == 2000.0
    assert Throttler(UNLIMITED).share(8).desired_rate == UNLIMITED


# -- the backlog rule (Redpanda's backlog controller, proportional) ----------------------

SETTINGS = BacklogSettings(
    setpoint_bytes=1000, p_coeff=1.0, max_rate=10_000.0, update_interval_ms=10
)


@pytest.mark.parametrize(
    ("backlog", "rate"),
    [(0, 100.0), (1000, 100.0), (2000, 200.0), (5000, 500.0), (10**9, 10_000.0)],
)
def test_backlog_above_setpoint_raises_the_rate_in_proportion_up_to_the_cap(backlog, rate):
    assert backlog_rate(100.0, backlog, SETTINGS) == rate


def test_backlog_rule_off_with_zero_gain_and_unlimited_stays_unlimited():
    off = BacklogSettings(1000, 0.0, UNLIMITED, 10)
    assert backlog_rate(100.0, 10**9, off) == 100.0
    assert backlog_rate(UNLIMITED, 10**9, SETTINGS) == UNLIMITED


def test_controller_samples_the_backlog_once_per_interval(clock):
    samples = iter([5000, 1000, 0])
    c = BacklogController(SETTINGS, lambda: next(samples), clock)
    assert c(100.0) == 500.0
    clock.advance(5)
    assert c(100.0) == 500.0  # not sampled again within the interval
    clock.advance(5)
    assert c(100.0) == 100.0 and c.backlog_bytes == 1000


# -- a real clean -------------------------------------------------------------------------


def _dirty_log(manager, segments: int = 6):
    manager.create_topic(
        "t",
        1,
        {"cleanup.policy": "compact", "segment.bytes": "4096", "min.cleanable.dirty.ratio": "0.01"},
    )
    plog = manager.get_log("t", 0)
    for i in range(segments * 12):
        append(plog, [(b"k%d" % (i % 5), b"v%d-" % i + b"x" * 300)])
    plog.roll()
    return plog


def test_a_clean_under_a_low_limit_sleeps_and_still_cleans_everything(manager):
    """log.cleaner.io.max.bytes.per.second: the local engine reports its reads (offset
    map) and its reads and writes (rewrite) to the throttle, which sleeps: counted on a
    manual time, never timed."""
    plog = _dirty_log(manager)
    before = fold(plog)
    t = ManualTime(tick_ms=1)
    cleaner = Cleaner(
        manager,
        engine=LocalEngine(),
        config={"log.cleaner.io.max.bytes.per.second": "1000"},
        throttle=Throttler(check_interval_ms=10, time=t),
    )
    assert cleaner.throttle.desired_rate == 1000.0
    stats = cleaner.clean_partition(plog)
    assert stats is not None and stats.bytes_read > 0
    th = cleaner.throttle
    assert th.throttle_count > 0 and t.slept
    assert th.throttled_seconds_total == pytest.approx(sum(t.slept))
    # reads of the map pass and of the rewrite, plus what was written
    assert th.observed_total >= 2 * stats.bytes_read
    # Kafka's arithmetic: at 1000 B/s every checked period lasts as long as its bytes
    # need; only the last period (less than a check interval of looks) goes unchecked
    assert t.ns / 1e9 >= th.observed_total / 1000 / 2
    assert fold(plog) == before


def test_without_the_key_a_cleaner_is_unlimited_like_kafka(manager):
    plog = _dirty_log(manager, segments=2)
    cleaner = Cleaner(manager, engine=LocalEngine(), throttle=Throttler(time=ManualTime(1)))
    assert cleaner.throttle.desired_rate == UNLIMITED
    cleaner.clean_partition(plog)
    assert cleaner.throttle.throttled_seconds_total == 0
    assert cleaner.throttle.observed_total > 0


def test_the_backlog_rule_raises_the_limit_while_dirty_bytes_exceed_the_setpoint(manager):
    plog = _dirty_log(manager)
    cleaner = Cleaner(
        manager,
        engine=LocalEngine(),
        config={
            "log.cleaner.io.max.bytes.per.second": "1000",
            "kompakt.log.cleaner.backlog.setpoint.bytes": "4096",
            "kompakt.log.cleaner.backlog.p.coeff": "1.0",
        },
        throttle=Throttler(time=ManualTime(1)),
    )
    backlog = cleaner.backlog_bytes()
    assert backlog > 4096
    assert cleaner.throttle.effective_rate() == pytest.approx(1000 * backlog / 4096)
    cleaner.reconfigure({"log.cleaner.io.max.bytes.per.second": "2000"})
    assert cleaner.throttle.desired_rate == 2000.0
    cleaner.clean_partition(plog)
    cleaner.backlog.update(force=True)
    assert cleaner.backlog.backlog_bytes < 4096  # caught up: back to the base limit
    assert cleaner.throttle.effective_rate() == 2000.0


def test_the_check_interval_key_sets_the_throttle_period(manager):
    cleaner = Cleaner(manager, config={"kompakt.log.cleaner.io.check.interval.ms": "50"})
    assert cleaner.throttle.check_interval_ns == 50_000_000
    assert Cleaner(manager).throttle.check_interval_ns == 300_000_000  # Kafka's 300 ms
