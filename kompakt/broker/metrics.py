"""Prometheus metrics of one broker (its own CollectorRegistry, so tests can run several)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from kompakt.log.manager import LogManager


class _PartitionCollector:
    """``kompakt_partition_size_bytes{topic,partition,cleanup_policy}`` read at scrape time."""

    def __init__(self, logs: Callable[[], LogManager | None]):
        self._logs = logs

    def collect(self) -> Iterable[Any]:
        g = GaugeMetricFamily(
            "kompakt_partition_size_bytes",
            "Bytes on disk of a partition's log segments",
            labels=["topic", "partition", "cleanup_policy"],
        )
        h = GaugeMetricFamily(
            "kompakt_partition_log_end_offset",
            "Log end offset of a partition",
            labels=["topic", "partition"],
        )
        logs = self._logs()
        if logs is not None:
            for plog in logs.logs():
                try:
                    policy = ",".join(plog.config.cleanup_policy)
                    g.add_metric([plog.topic, str(plog.partition), policy], plog.size_bytes())
                    h.add_metric([plog.topic, str(plog.partition)], plog.log_end_offset)
                except Exception:  # a partition deleted during the scrape
                    continue
        yield g
        yield h
        if logs is not None:
            yield from _log_dir_metrics(logs)


def _log_dir_metrics(logs: LogManager) -> Iterable[Any]:
    """Kafka's ``LogDirectoryOffline{logDirectory}`` and ``OfflineLogDirectoryCount``."""
    offline = logs.offline_dirs()
    per_dir = GaugeMetricFamily(
        "kompakt_log_dir_offline",
        "1 when a log dir went offline after an I/O error (restart once it is fixed)",
        labels=["dir"],
    )
    for d in logs.dirs:
        per_dir.add_metric([str(d.path)], 1 if d.path in offline else 0)
    yield per_dir
    count = GaugeMetricFamily("kompakt_log_dir_offline_count", "Offline log dirs")
    count.add_metric([], len(offline))
    yield count
    parts = GaugeMetricFamily(
        "kompakt_offline_partitions", "Partitions in offline log dirs (KAFKA_STORAGE_ERROR)"
    )
    parts.add_metric([], sum(1 for p in logs.all_logs() if p.offline is not None))
    yield parts


class _CleanerCollector:
    """``kompakt_log_cleaner_*``, read at scrape time: totals from the cleaner, the rest
    from the broker's one :class:`~kompakt.cleaner.status.CleaningStatus`."""

    def __init__(self, cleaner: Callable[[], Any], status: Callable[[], Any]):
        self._cleaner = cleaner
        self._status = status

    def collect(self) -> Iterable[Any]:
        cleaner = self._cleaner()
        status = self._status()
        compactions = CounterMetricFamily(
            "kompakt_log_cleaner_compactions", "Cleans finished (all partitions)"
        )
        cleaned = CounterMetricFamily(
            "kompakt_log_cleaner_cleaned_bytes", "Bytes read by finished cleans"
        )
        compactions.add_metric([], cleaner.compactions_total if cleaner else 0)
        cleaned.add_metric([], cleaner.cleaned_bytes_total if cleaner else 0)
        duration = GaugeMetricFamily(
            "kompakt_log_cleaner_duration_seconds",
            "Duration of the last clean of a partition",
            labels=["topic", "partition"],
        )
        ratio = GaugeMetricFamily(
            "kompakt_log_cleaner_dirty_ratio",
            "Cleanable bytes over all bytes of a compacted partition (Kafka's dirty ratio)",
            labels=["topic", "partition"],
        )
        uncleanable = GaugeMetricFamily(
            "kompakt_log_cleaner_uncleanable_partitions",
            "Partitions the cleaner skips after an error (see /v1/partitions for the reason)",
        )
        bad = 0
        if status is not None:
            for _plog, st in status.partitions(tombstones=False):
                labels = [st.topic, str(st.partition)]
                bad += bool(st.uncleanable_reason)
                if st.compacted:
                    ratio.add_metric(labels, st.dirty_ratio)
                if st.last_clean is not None:
                    duration.add_metric(labels, st.last_clean.duration_s)
        uncleanable.add_metric([], bad)
        yield from (compactions, cleaned, duration, ratio, uncleanable)


class _GroupCollector:
    """Consumer groups by state and offsets expired by retention (KIP-211)."""

    def __init__(self, coordinator: Callable[[], Any]):
        self.coordinator = coordinator

    def collect(self) -> Iterable[Any]:
        gc = self.coordinator()
        groups = GaugeMetricFamily(
            "kompakt_consumer_groups", "Consumer groups by state", labels=["state"]
        )
        expired = CounterMetricFamily(
            "kompakt_group_offsets_expired", "Committed offsets removed by offsets.retention"
        )
        if gc is not None:
            states: dict[str, int] = {}
            for g in list(gc.groups.values()):
                states[g.state] = states.get(g.state, 0) + 1
            for state, n in sorted(states.items()):
                groups.add_metric([state], n)
            expired.add_metric([], gc.offsets_expired)
        else:
            expired.add_metric([], 0)
        yield from (groups, expired)


class _GroupLagCollector:
    """``kompakt_consumer_group_lag{group,topic,partition}``, computed at scrape: the
    high watermark minus the group's committed offset, as ``kafka-consumer-groups.sh
    --describe`` reports LAG (and as the console's groups page shows it); one sample per
    committed offset of every live group."""

    def __init__(self, logs: Callable[[], LogManager | None], coordinator: Callable[[], Any]):
        self._logs = logs
        self.coordinator = coordinator

    def collect(self) -> Iterable[Any]:
        from kompakt.broker.console.browse import lag_samples

        lag = GaugeMetricFamily(
            "kompakt_consumer_group_lag",
            "Log end offset minus the committed offset of a consumer group's partition",
            labels=["group", "topic", "partition"],
        )
        for group, topic, partition, n in lag_samples(self._logs(), self.coordinator()):
            lag.add_metric([group, topic, str(partition)], n)
        yield lag


class _TransactionCollector:
    """Open transactions and the oldest one's age, from the transaction coordinator.

    Kafka has no broker gauge of exactly these; KIP-664 (the ``kafka-transactions.sh``
    KIP) added ``PartitionsWithLateTransactionsCount`` for hanging transactions, and
    the coordinator's state is what ``kafka-transactions.sh list`` reads. The names
    follow Kafka's ``kafka.coordinator.transaction`` group:
    ``kompakt_transaction_coordinator_open_transactions`` (Ongoing, PrepareCommit or
    PrepareAbort) and ``kompakt_transaction_coordinator_oldest_open_transaction_age_seconds``
    (0 when none is open)."""

    def __init__(self, transactions: Callable[[], Any]):
        self.transactions = transactions

    def collect(self) -> Iterable[Any]:
        tb = self.transactions()
        count, age_ms = tb.coordinator.open_transactions() if tb is not None else (0, 0)
        opened = GaugeMetricFamily(
            "kompakt_transaction_coordinator_open_transactions",
            "Transactions open (Ongoing, PrepareCommit, PrepareAbort)",
        )
        opened.add_metric([], count)
        oldest = GaugeMetricFamily(
            "kompakt_transaction_coordinator_oldest_open_transaction_age_seconds",
            "Age of the oldest open transaction (0 if none)",
        )
        oldest.add_metric([], max(age_ms, 0) / 1000)
        yield from (opened, oldest)


class BrokerMetrics:
    def __init__(
        self,
        logs: Callable[[], LogManager | None],
        cleaner: Callable[[], Any] = lambda: None,
        coordinator: Callable[[], Any] = lambda: None,
        cleaning_status: Callable[[], Any] = lambda: None,
        transactions: Callable[[], Any] = lambda: None,
    ):
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "kompakt_requests", "Kafka requests handled", ["api"], registry=self.registry
        )
        self.errors = Counter(
            "kompakt_request_errors",
            "Kafka requests answered with an error code, or failed",
            ["api"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "kompakt_request_latency_seconds",
            "Time from a request's arrival to its response",
            ["api"],
            registry=self.registry,
            buckets=(
                0.0005,
                0.001,
                0.0025,
                0.005,
                0.01,
                0.025,
                0.05,
                0.1,
                0.25,
                0.5,
                1,
                2.5,
                5,
                10,
                30,
            ),
        )
        self.auth_failures = Counter(
            "kompakt_auth_failures",
            "Failed authentications (TLS handshake, SASL), by mechanism and reason",
            ["mechanism", "reason"],
            registry=self.registry,
        )
        self.registry.register(_PartitionCollector(logs))
        self.registry.register(_CleanerCollector(cleaner, cleaning_status))
        self.registry.register(_GroupCollector(coordinator))
        self.registry.register(_GroupLagCollector(logs, coordinator))
        self.registry.register(_TransactionCollector(transactions))

    def observe(self, api: str, seconds: float, error: bool) -> None:
        self.requests.labels(api).inc()
        self.latency.labels(api).observe(seconds)
        if error:
            self.errors.labels(api).inc()

    def auth_failed(self, mechanism: str, reason: str) -> None:
        self.auth_failures.labels(mechanism, reason).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)


def has_error(body: Any, depth: int = 0) -> bool:
    """Whether a handler's response data carries a non-zero error code anywhere."""
    if depth > 5:
        return False
    if isinstance(body, dict):
        code = body.get("error_code")
        if code:
            return True
        return any(
            has_error(v, depth + 1) for k, v in body.items() if isinstance(v, list | tuple | dict)
        )
    if isinstance(body, list | tuple):
        return any(has_error(x, depth + 1) for x in body if isinstance(x, dict))
    return False
