"""The cleaner's own settings and their defaults, once.

Kafka keeps these in ``org.apache.kafka.storage.internals.log.CleanerConfig``
(``LOG_CLEANER_DEDUPE_BUFFER_SIZE_DEFAULT`` and friends) and the broker's config
definition refers to them; here the broker's key table (:mod:`kompakt.broker.broker_keys`)
does the same, so a default is written in one place and the cleaner, which sits below
the broker, never imports it.
"""

from __future__ import annotations

from collections.abc import Mapping

DEDUPE_BUFFER_SIZE_KEY = "log.cleaner.dedupe.buffer.size"
DEDUPE_BUFFER_SIZE_DEFAULT = 128 << 20  # Kafka: 128 MiB for all cleaner threads
LOAD_FACTOR_KEY = "log.cleaner.io.buffer.load.factor"
IO_BUFFER_LOAD_FACTOR_DEFAULT = 0.9  # Kafka: how full the offset map may get
IO_BUFFER_SIZE_DEFAULT = 512 << 10  # Kafka: log.cleaner.io.buffer.size
ENGINE_KEY = "kompakt.cleaner.engine"
ENGINE_DEFAULT = "spark"


def dedupe_buffer_size(settings: Mapping[str, str]) -> int:
    """``log.cleaner.dedupe.buffer.size`` from broker-style settings, else Kafka's default."""
    return int(settings.get(DEDUPE_BUFFER_SIZE_KEY, DEDUPE_BUFFER_SIZE_DEFAULT))


def load_factor(settings: Mapping[str, str]) -> float:
    """``log.cleaner.io.buffer.load.factor``: how full the local engine's offset map may
    get before a pass stops (Kafka's ``SkimpyOffsetMap`` slots x this factor)."""
    return float(settings.get(LOAD_FACTOR_KEY, IO_BUFFER_LOAD_FACTOR_DEFAULT))


# The I/O throttle (Kafka's ``log.cleaner.io.max.bytes.per.second``; Kafka's default is
# Double.MaxValue, unlimited) and kompakt's backlog rule (kompakt.cleaner.throttle).
IO_MAX_BYTES_PER_SECOND_KEY = "log.cleaner.io.max.bytes.per.second"
KAFKA_IO_MAX_BYTES_PER_SECOND = 1.7976931348623157e308
# the broker's default, chosen from benchmarks/bench_broker.py --cleaner-throttle (README);
# a Cleaner built without the key (offline ``kompakt compact``, the embedded API: no
# producers to protect) is unlimited, as Kafka's default
IO_MAX_BYTES_PER_SECOND_DEFAULT = float(32 << 20)
# kompakt.log.cleaner.io.check.interval.ms: the throttle's period (Kafka's LogCleaner
# builds its Throttler with 300 ms, not configurable there)
IO_CHECK_INTERVAL_KEY = "kompakt.log.cleaner.io.check.interval.ms"
IO_CHECK_INTERVAL_DEFAULT = 300
BACKLOG_SETPOINT_DEFAULT = 256 << 20  # kompakt.log.cleaner.backlog.setpoint.bytes
BACKLOG_P_COEFF_DEFAULT = 1.0  # kompakt.log.cleaner.backlog.p.coeff
BACKLOG_MAX_RATE_DEFAULT = KAFKA_IO_MAX_BYTES_PER_SECOND  # ...backlog.max.bytes.per.second
BACKLOG_INTERVAL_DEFAULT = 2000  # kompakt.log.cleaner.backlog.update.interval.ms


def io_max_bytes_per_second(settings: Mapping[str, str]) -> float:
    """``log.cleaner.io.max.bytes.per.second`` from broker-style settings, else Kafka's
    default, unlimited (the broker always passes it: its default is
    :data:`IO_MAX_BYTES_PER_SECOND_DEFAULT`)."""
    return float(settings.get(IO_MAX_BYTES_PER_SECOND_KEY, KAFKA_IO_MAX_BYTES_PER_SECOND))
