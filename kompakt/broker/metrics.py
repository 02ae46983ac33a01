"""Prometheus metrics of one broker (its own CollectorRegistry, so tests can run several)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from kompakt.broker.seams import CleanerView, CoordinatorView, TransactionsView
from kompakt.cleaner.stats import CleanStats
from kompakt.cleaner.status import CleaningStatus
from kompakt.log.manager import LogManager

if TYPE_CHECKING:
    from kompakt.broker.tiering import Tiering


class _PartitionCollector:
    """``kompakt_partition_size_bytes{topic,partition,cleanup_policy}`` read at scrape time."""

    def __init__(self, logs: Callable[[], LogManager | None]):
        self._logs = logs

    def collect(self) -> Iterable[Metric]:
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
                with plog.lock:  # one consistent reading beside a roll, a clean's swap or a delete
                    policy = ",".join(plog.config.cleanup_policy)
                    size, end = plog.size_bytes(), plog.log_end_offset
                g.add_metric([plog.topic, str(plog.partition), policy], size)
                h.add_metric([plog.topic, str(plog.partition)], end)
        yield g
        yield h
        if logs is not None:
            yield from _log_dir_metrics(logs)


def _log_dir_metrics(logs: LogManager) -> Iterable[Metric]:
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
    from the broker's one :class:`~kompakt.cleaner.status.CleaningStatus`.

    The I/O throttle: ``kompakt_log_cleaner_backlog_bytes`` (cleanable bytes of the
    compacted partitions, what the backlog rule steers on),
    ``kompakt_log_cleaner_throttle_seconds_total``,
    ``kompakt_log_cleaner_io_limit_bytes_per_second`` (the limit in force, +Inf when
    unlimited) and ``kompakt_log_cleaner_io_bytes_total`` (Kafka's ``cleaner-io``
    Throttler meter). Kafka's own cleaner gauges under their names:
    ``kompakt_log_cleaner_max_dirty_percent``, ``..._max_clean_time_secs``,
    ``..._cleaner_recopy_percent``, ``..._time_since_last_run_ms``,
    ``..._uncleanable_partitions`` (``uncleanable-partitions-count``)."""

    def __init__(
        self,
        cleaner: Callable[[], CleanerView | None],
        status: Callable[[], CleaningStatus | None],
    ):
        self._cleaner = cleaner
        self._status = status

    def collect(self) -> Iterable[Metric]:
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
        backlog = 0
        max_dirty = 0.0
        last = None
        if status is not None:
            for _plog, st in status.partitions(tombstones=False):
                labels = [st.topic, str(st.partition)]
                bad += bool(st.uncleanable_reason)
                if st.compacted:
                    ratio.add_metric(labels, st.dirty_ratio)
                    if not st.uncleanable_reason:
                        backlog += st.cleanable_bytes or 0
                        max_dirty = max(max_dirty, st.dirty_ratio or 0.0)
                if st.last_clean is not None:
                    duration.add_metric(labels, st.last_clean.duration_s)
                    if last is None or st.last_clean.started_ms > last.started_ms:
                        last = st.last_clean
        uncleanable.add_metric([], bad)
        yield from (compactions, cleaned, duration, ratio, uncleanable)
        yield from self._throttle(cleaner, backlog)
        yield from self._kafka_gauges(cleaner, max_dirty, last)

    @staticmethod
    def _throttle(cleaner: CleanerView | None, backlog: int) -> Iterable[Metric]:
        g = GaugeMetricFamily(
            "kompakt_log_cleaner_backlog_bytes",
            "Dirty-bytes backlog: cleanable bytes of all compacted partitions",
        )
        g.add_metric([], backlog)
        throttle = cleaner.throttle if cleaner is not None else None
        slept = CounterMetricFamily(
            "kompakt_log_cleaner_throttle_seconds",
            "Seconds the cleaner slept to keep to log.cleaner.io.max.bytes.per.second",
        )
        slept.add_metric([], throttle.throttled_seconds_total if throttle else 0.0)
        io = CounterMetricFamily(
            "kompakt_log_cleaner_io_bytes",
            "Bytes the cleaner read and wrote, as its throttle counts them (Kafka cleaner-io)",
        )
        io.add_metric([], throttle.observed_total if throttle else 0.0)
        yield from (g, slept, io)
        if throttle is not None:
            rate = GaugeMetricFamily(
                "kompakt_log_cleaner_io_limit_bytes_per_second",
                "The cleaner's I/O limit in force (base limit raised by the backlog rule)",
            )
            value = throttle.effective_rate()
            rate.add_metric([], value if value < 1.7976931348623157e308 else float("inf"))
            yield rate

    @staticmethod
    def _kafka_gauges(
        cleaner: CleanerView | None, max_dirty: float, last: CleanStats | None
    ) -> Iterable[Metric]:
        """Kafka's ``kafka.log:type=LogCleaner`` / ``LogCleanerManager`` gauges."""
        dirty = GaugeMetricFamily(
            "kompakt_log_cleaner_max_dirty_percent",
            "Kafka max-dirty-percent: the highest dirty ratio of a cleanable log, in percent",
        )
        dirty.add_metric([], round(100 * max_dirty))
        yield dirty
        if last is not None:
            clean_time = GaugeMetricFamily(
                "kompakt_log_cleaner_max_clean_time_secs",
                "Kafka max-clean-time-secs (here: the latest clean's duration)",
            )
            clean_time.add_metric([], last.duration_s)
            recopy = GaugeMetricFamily(
                "kompakt_log_cleaner_cleaner_recopy_percent",
                "Kafka cleaner-recopy-percent: bytes written over bytes read by the latest "
                "clean, in percent",
            )
            read = last.bytes_read or 0
            recopy.add_metric([], round(100 * last.bytes_written / read) if read else 0)
            yield from (clean_time, recopy)
        if cleaner is not None and cleaner.last_run_ms is not None:
            since = GaugeMetricFamily(
                "kompakt_log_cleaner_time_since_last_run_ms",
                "Kafka time-since-last-run-ms: since the cleaner last looked for work",
            )
            since.add_metric([], max(0, cleaner.clock() - cleaner.last_run_ms))
            yield since


class _GroupCollector:
    """Consumer groups by state and offsets expired by retention (KIP-211)."""

    def __init__(self, coordinator: Callable[[], CoordinatorView | None]):
        self.coordinator = coordinator

    def collect(self) -> Iterable[Metric]:
        gc = self.coordinator()
        groups = GaugeMetricFamily(
            "kompakt_consumer_groups", "Consumer groups by state", labels=["state"]
        )
        expired = CounterMetricFamily(
            "kompakt_group_offsets_expired", "Committed offsets removed by offsets.retention"
        )
        if gc is not None:
            snapshot = gc.snapshot()  # the loop owns the groups: a frozen copy from it
            states: dict[str, int] = {}
            for g in snapshot.groups.values():
                states[g.state] = states.get(g.state, 0) + 1
            for state, n in sorted(states.items()):
                groups.add_metric([state], n)
            expired.add_metric([], snapshot.offsets_expired)
        else:
            expired.add_metric([], 0)
        yield from (groups, expired)


class _GroupLagCollector:
    """``kompakt_consumer_group_lag{group,topic,partition}``, computed at scrape: the
    high watermark minus the group's committed offset, as ``kafka-consumer-groups.sh
    --describe`` reports LAG (and as the console's groups page shows it); one sample per
    committed offset of every live group."""

    def __init__(
        self,
        logs: Callable[[], LogManager | None],
        coordinator: Callable[[], CoordinatorView | None],
    ):
        self._logs = logs
        self.coordinator = coordinator

    def collect(self) -> Iterable[Metric]:
        from kompakt.broker.console.browse import lag_samples

        lag = GaugeMetricFamily(
            "kompakt_consumer_group_lag",
            "Log end offset minus the committed offset of a consumer group's partition",
            labels=["group", "topic", "partition"],
        )
        gc = self.coordinator()
        snapshot = gc.snapshot() if gc is not None else None
        for group, topic, partition, n in lag_samples(self._logs(), snapshot):
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

    def __init__(self, transactions: Callable[[], TransactionsView | None]):
        self.transactions = transactions

    def collect(self) -> Iterable[Metric]:
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


class _RemoteCollector:
    """``kompakt_remote_*``: the remote tier (KIP-405), read at scrape time without a
    remote call. Kafka's ``kafka.server:type=BrokerTopicMetrics`` meters as counters:
    ``RemoteCopyBytesPerSec`` -> ``kompakt_remote_copy_bytes_total``,
    ``RemoteFetchBytesPerSec`` -> ``kompakt_remote_fetch_bytes_total``, plus the bytes
    deleted; the store requests by kind (``put``, ``get``, ``list``, ``delete``: what an
    object store bills, manifests and topic records included; Kafka's
    ``Remote*RequestsPerSec`` count segments, these count objects); the chunk cache's hits and
    misses (Kafka has no such cache: ``kompakt_remote_cache_*``); and per partition
    KIP-963's ``RemoteCopyLagBytes`` / ``RemoteCopyLagSegments`` (rolled segments not
    tiered yet), ``RemoteLogSizeBytes`` and the remote segment count."""

    def __init__(self, tiering: Callable[[], Tiering | None]):
        self._tiering = tiering

    def collect(self) -> Iterable[Metric]:
        t = self._tiering()
        if t is None:
            return
        stats = t.tier.segments.stats.snapshot()
        for name, what, value in (
            (
                "copy_bytes",
                "Bytes uploaded to the remote tier (Kafka RemoteCopyBytesPerSec)",
                stats.bytes_uploaded,
            ),
            (
                "fetch_bytes",
                "Bytes read from the remote tier (Kafka RemoteFetchBytesPerSec)",
                stats.bytes_fetched,
            ),
            ("delete_bytes", "Bytes of remote objects deleted", stats.bytes_deleted),
        ):
            c = CounterMetricFamily(f"kompakt_remote_{name}", what)
            c.add_metric([], value)
            yield c
        requests = CounterMetricFamily(
            "kompakt_remote_requests",
            "Object store requests, by kind (put, get, list, delete)",
            labels=["kind"],
        )
        for kind in ("put", "get", "list", "delete"):
            requests.add_metric([kind], stats.by_kind.get(kind, 0))
        yield requests
        yield from self._cache(t)
        yield from self._partitions(t)

    @staticmethod
    def _cache(t: Tiering) -> Iterable[Metric]:
        cs = t.tier.cache.stats()
        for name, what, value in (
            ("hits", "Remote chunk reads answered by the cache", cs.hits),
            ("misses", "Remote chunk reads that went to the store", cs.misses),
            ("evictions", "Chunks evicted from the cache to stay within its size", cs.evictions),
        ):
            c = CounterMetricFamily(f"kompakt_remote_cache_{name}", what)
            c.add_metric([], value)
            yield c
        for name, what, value in (
            (
                "hit_ratio",
                "Hits over hits and misses since the start (0 before any read)",
                cs.hit_ratio,
            ),
            ("bytes", "Bytes the chunk cache holds", cs.bytes),
            ("max_bytes", "The chunk cache's size limit", cs.max_bytes),
        ):
            g = GaugeMetricFamily(f"kompakt_remote_cache_{name}", what)
            g.add_metric([], value)
            yield g

    @staticmethod
    def _partitions(t: Tiering) -> Iterable[Metric]:
        labels = ["topic", "partition"]
        lag_bytes = GaugeMetricFamily(
            "kompakt_remote_copy_lag_bytes",
            "Bytes of rolled segments not tiered yet (Kafka RemoteCopyLagBytes, KIP-963)",
            labels=labels,
        )
        lag_segments = GaugeMetricFamily(
            "kompakt_remote_copy_lag_segments",
            "Rolled segments not tiered yet (Kafka RemoteCopyLagSegments, KIP-963)",
            labels=labels,
        )
        size = GaugeMetricFamily(
            "kompakt_remote_log_size_bytes",
            "Bytes of the partition's remote log segments (Kafka RemoteLogSizeBytes)",
            labels=labels,
        )
        count = GaugeMetricFamily(
            "kompakt_remote_log_segments", "Segments the partition's manifest names", labels=labels
        )
        known = t.known_manifests()
        for plog in t.logs.logs():
            key = (plog.topic, plog.partition)
            if not plog.config.remote_storage_enable or key not in known:
                continue  # not tiered, or the task has not read its manifest yet
            m = known[key]
            n, nbytes = t.copy_lag(plog, m)
            tp = [plog.topic, str(plog.partition)]
            lag_segments.add_metric(tp, n)
            lag_bytes.add_metric(tp, nbytes)
            size.add_metric(tp, m.size if m is not None else 0)
            count.add_metric(tp, len(m.segments) if m is not None else 0)
        yield from (lag_bytes, lag_segments, size, count)


class BrokerMetrics:
    def __init__(
        self,
        logs: Callable[[], LogManager | None],
        cleaner: Callable[[], CleanerView | None] = lambda: None,
        coordinator: Callable[[], CoordinatorView | None] = lambda: None,
        cleaning_status: Callable[[], CleaningStatus | None] = lambda: None,
        transactions: Callable[[], TransactionsView | None] = lambda: None,
        tiering: Callable[[], Tiering | None] = lambda: None,
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
        # api -> (requests child, latency child): see observe()
        self._children: dict[str, tuple[Any, Any]] = {}
        self.registry.register(_PartitionCollector(logs))
        self.registry.register(_CleanerCollector(cleaner, cleaning_status))
        self.registry.register(_GroupCollector(coordinator))
        self.registry.register(_GroupLagCollector(logs, coordinator))
        self.registry.register(_TransactionCollector(transactions))
        self.registry.register(_RemoteCollector(tiering))

    def observe(self, api: str, seconds: float, error: bool) -> None:
        """Count one request of ``api``. The labelled children are looked up once per
        API (``labels()`` builds a key and takes a lock on every call); the errors one
        only at the first error, so an API without errors has no errors series."""
        children = self._children.get(api)
        if children is None:
            children = self._children[api] = (self.requests.labels(api), self.latency.labels(api))
        children[0].inc()
        children[1].observe(seconds)
        if error:
            self.errors.labels(api).inc()

    def auth_failed(self, mechanism: str, reason: str) -> None:
        self.auth_failures.labels(mechanism, reason).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)


def has_error(body: Any, depth: int = 0) -> bool:
    """Whether a handler's response data carries a non-zero error code anywhere (loops,
    not generators: it runs on every answered request)."""
    if depth > 5:
        return False
    if isinstance(body, dict):
        if body.get("error_code"):
            return True
        for v in body.values():
            if isinstance(v, _NESTED) and has_error(v, depth + 1):
                return True
    elif isinstance(body, list | tuple):
        for x in body:
            if isinstance(x, dict) and has_error(x, depth + 1):
                return True
    return False


_NESTED = (list, tuple, dict)
