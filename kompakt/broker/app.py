"""The broker process: log manager + Kafka server + admin HTTP + background tasks.

``Broker.start()`` opens the data dir, binds the Kafka listener (port 0 picks a free
port; clients are then told the bound port) and the admin endpoint, and starts the
retention/checkpoint (and, with a cleaner factory, cleaner) threads. ``stop()`` stops
accepting connections, lets in-flight requests finish, stops the background threads and
closes the log manager, which flushes every partition and writes the clean-shutdown
marker. :func:`run` is what ``kompakt serve`` calls; it stops gracefully on SIGTERM and
SIGINT. :class:`BrokerThread` runs a broker on its own event loop in a background
thread, for tests and embedding.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import signal
import socket
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from kompakt.broker import authz, remote_groups, tiering
from kompakt.broker.acls import build_authorizer
from kompakt.broker.admin_http import AdminApi, AdminServer, parse_listener
from kompakt.broker.background import BackgroundTasks, PeriodicThread
from kompakt.broker.broker_keys import CLEANER_DYNAMIC_KEYS
from kompakt.broker.config import BrokerConfig
from kompakt.broker.coordinator.faults import NO_FAULTS, CoordinatorFaults
from kompakt.broker.coordinator.handlers import (
    coordinator_if_started,
    load_coordinator,
    start_coordinator,
)
from kompakt.broker.coordinator.storage import OFFSETS_TOPIC
from kompakt.broker.handlers import register_all
from kompakt.broker.handlers.txn import (
    TRANSACTION_STATE_TOPIC,
    load_txn_coordinator,
    start_txn_coordinator,
    txn_broker_if_started,
)
from kompakt.broker.metrics import BrokerMetrics
from kompakt.broker.producers import ProducerStateManager
from kompakt.broker.registry import ApiRegistry
from kompakt.broker.seams import CleanerView, CoordinatorView
from kompakt.broker.security.listeners import admin_security, listener_specs
from kompakt.broker.server import KafkaServer
from kompakt.broker.state import AppendNotifier, BrokerState, RequestContext
from kompakt.errors import KompaktError
from kompakt.log.config import to_string
from kompakt.log.manager import LogManager, check_first_log_dir
from kompakt.log.open_segments import raise_open_files_limit

if TYPE_CHECKING:
    from kompakt.cleaner.cleaner import Cleaner
    from kompakt.cleaner.stats import CleanStats
    from kompakt.cleaner.status import CleaningStatus

log = logging.getLogger("kompakt.broker")


class CleanerUnavailableError(KompaktError):
    error_code = ErrorCode.unknown_server_error


class Broker:
    def __init__(
        self,
        config: BrokerConfig,
        cleaner_factory: Callable[[], Cleaner] | None = None,
        registry: ApiRegistry | None = None,
        clock: Callable[[], int] | None = None,
        faults: CoordinatorFaults = NO_FAULTS,
    ):
        """``clock`` (ms) is the time the log manager and the group coordinator read
        (Kafka's ``Time`` handed to ``KafkaServer``); None: the system clock. ``faults``:
        a test's crash or error points in the coordinators' writes."""
        self.config = config
        self.faults = faults
        self.clock = clock
        self.cleaner_factory = cleaner_factory
        self.registry = register_all(registry or ApiRegistry())
        self.logs: LogManager | None = None
        self.state: BrokerState | None = None
        self.server: KafkaServer | None = None
        self.admin: AdminServer | None = None
        self.background: BackgroundTasks | None = None
        self.metrics = BrokerMetrics(
            lambda: self.logs,
            self.cleaner_if_started,
            self.group_coordinator,
            self.cleaning_status,
            lambda: txn_broker_if_started(self.state) if self.state is not None else None,
            lambda: tiering.tiering_of(self.state) if self.state is not None else None,
        )
        self._stopped: asyncio.Event | None = None
        self._stopping = False
        self.stop_error: BaseException | None = None  # why the last stop was unclean
        self._status: CleaningStatus | None = None  # set by start(), before the admin side
        self._coordinator_load: asyncio.Task | None = None
        self._txn_load: asyncio.Task | None = None
        self._spark_warm: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        from kompakt.broker.console.history import History, HistoryRecorder

        # the console's bounded per-partition history (size, dirty ratio, cleans)
        self.history = History()
        self.history_recorder = HistoryRecorder(
            self.history, self.cleaning_status, lambda: self.logs
        )

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        self._stopped = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        cfg = self.config
        # the first log dir holds the dynamic configs: refuse a broken one in one line
        check_first_log_dir(cfg.data_dirs)
        await asyncio.to_thread(cfg.load_dynamic)  # dynamic broker configs, before the logs
        raise_open_files_limit(cfg.get("kompakt.log.max.open.segments"))
        self.logs = await asyncio.to_thread(
            LogManager,
            cfg.data_dirs,
            cfg.log_config,
            self.clock,
            cfg.get("kompakt.log.max.open.segments"),
        )
        from kompakt.cleaner.status import CleaningStatus

        self._status = CleaningStatus(self.logs, self._last_stats)
        self.logs.failures.listeners.append(self._on_log_dir_failure)
        try:
            self.state = BrokerState(cfg, self.logs, self.registry)
            authz.install(self.registry, self.state, build_authorizer(cfg, self.logs.dir))
            self.state.notifier = AppendNotifier(asyncio.get_running_loop())
            self.state.producers = ProducerStateManager(self.logs.dir)
            # a retried batch whose original retention or a clean removed since the start
            # must still be found a duplicate: build the state before such a removal
            self.logs.batch_removal_listeners.append(self.state.producers.for_log)
            # loaded below or on first use
            start_coordinator(self.state, self.logs.clock, self.faults)
            start_txn_coordinator(self.state, self.logs.clock, self.faults)
            specs = await asyncio.to_thread(listener_specs, cfg, self.state)
            self.server = KafkaServer(self.state, self.registry, self.metrics, listeners=specs)
            await self.server.start()
            for name, adv in cfg.advertised_listeners.items():
                host = adv.host
                if not host or host in ("0.0.0.0", "::"):
                    host = socket.getfqdn()
                self.state.endpoints[name] = (host, adv.port or self.server.ports[name])
            self.state.host, self.state.port = self.state.endpoints[specs[0].name]
            ahost, aport = parse_listener(cfg.admin_listener)
            self.admin = AdminServer(
                AdminApi(
                    self.metrics.render,
                    self._partitions,
                    self._compact,
                    broker=self,
                    writes=bool(cfg.get("kompakt.admin.console.writes")),
                ),
                ahost,
                aport,
                **admin_security(cfg, self.state, self.metrics),
            )
            self.admin.start()
            flush_ms = cfg.log_config.get("log.flush.interval.ms")
            if self.cleaner_factory is None:
                self.cleaner_factory = self._default_cleaner
            self.background = BackgroundTasks(
                self.logs,
                self.cleaner_factory,
                cleaner_enabled=bool(cfg.get("log.cleaner.enable")),
                cleaner_backoff_ms=int(cfg.get("log.cleaner.backoff.ms")),
                retention_check_interval_ms=int(cfg.get("log.retention.check.interval.ms")),
                flush_interval_ms=int(flush_ms) if flush_ms else None,
                checkpoint_interval_ms=int(cfg.get("log.flush.offset.checkpoint.interval.ms")),
                on_cleaner=self.history_recorder.subscribe,
            )
            self.background.threads.append(
                PeriodicThread(
                    "kompakt-console-history",
                    int(cfg.get("kompakt.admin.console.history.interval.ms")),
                    self.history_recorder.sample_all,
                )
            )
            tiering.install(self)  # the remote log manager's task, when the tier is on
            remote_groups.install(cfg, self.state, self.background, tiering.tiering_of(self.state))
            self.background.start()
            cfg.listeners_on_change.append(self._reconfigure)
            if self.logs.has_topic(OFFSETS_TOPIC):
                self._coordinator_load = asyncio.create_task(self._load_coordinator())
            if self.logs.has_topic(TRANSACTION_STATE_TOPIC):  # finishes cut-off commits
                self._txn_load = asyncio.create_task(load_txn_coordinator(self.state))
        except BaseException:
            await self._close_all()
            raise
        self._start_spark()
        log.info(
            "kompakt broker listening on %s (advertised %s), node.id=%d, "
            "cluster.id=%s, log.dirs=%s, admin on %s",
            ", ".join(
                f"{s.name}://{s.host}:{self.server.ports[s.name]}" for s in self.server.listeners
            ),
            ", ".join(f"{n}://{h}:{p}" for n, (h, p) in self.state.endpoints.items()),
            cfg.node_id,
            self.logs.cluster_id,
            ",".join(str(d) for d in cfg.data_dirs),
            self.admin.url,
        )

    def _on_log_dir_failure(self, path: Path, reason: str) -> None:
        """A log dir went offline (any thread). Kafka's ``LogDirFailureHandler``: the
        broker keeps serving the other dirs; when none is left it halts."""
        logs = self.logs
        if logs is None or self._stopping:
            return
        if len(logs.offline_dirs()) < len(logs.dirs):
            return
        dirs = ", ".join(str(d.path) for d in logs.dirs)
        log.critical("Shutdown broker because all log dirs in %s have failed", dirs)
        self.stop_error = OSError(f"all log dirs in {dirs} have failed")
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(lambda: asyncio.ensure_future(self.stop()))

    async def _load_coordinator(self) -> None:
        try:
            await load_coordinator(self.state)
        except Exception:  # requests retry the load; a start must not fail on it
            log.exception("loading the group coordinator from %s failed", OFFSETS_TOPIC)

    @property
    def port(self) -> int:
        assert self.server is not None
        return self.server.port

    @property
    def admin_port(self) -> int:
        assert self.admin is not None
        return self.admin.port

    @property
    def bootstrap(self) -> str:
        assert self.state is not None
        return f"{self.state.host}:{self.state.port}"

    async def serve_forever(self) -> None:
        assert self._stopped is not None, "call start() first"
        await self._stopped.wait()

    async def stop(self) -> None:
        if self._stopping:
            if self._stopped is not None:
                await self._stopped.wait()
            return
        self._stopping = True
        log.info("kompakt broker shutting down")
        try:
            await self._close_all()
        except Exception as exc:  # e.g. a full disk: stop anyway, never hang on SIGTERM
            self.stop_error = exc
            log.error("kompakt broker stopped uncleanly: %s", exc)
        else:
            log.info("kompakt broker stopped")
        finally:
            if self._stopped is not None:
                self._stopped.set()

    async def _close_all(self) -> None:
        if self._reconfigure in self.config.listeners_on_change:
            self.config.listeners_on_change.remove(self._reconfigure)
        if self.state is not None:
            self.state.closing = True
        loads = [t for t in (self._coordinator_load, self._txn_load) if t and not t.done()]
        if loads:
            await asyncio.wait(loads, timeout=30)
        if self.server is not None:
            await self.server.stop()
        cleaner = self.cleaner_if_started()
        if cleaner is not None:
            # first, so an in-flight "compact now" ends (503) while the admin endpoint
            # drains its requests, instead of being cut off by the endpoint's stop
            cleaner.abort_all("broker shutting down")
        if self.admin is not None:
            try:
                await asyncio.to_thread(self.admin.stop)
            except Exception:
                log.exception("stopping the admin endpoint failed")
        try:
            if self.background is not None:
                await asyncio.to_thread(self.background.stop)
        finally:
            if self.logs is not None:
                await asyncio.to_thread(self.logs.close)

    def _reconfigure(self, changed: set[str]) -> None:
        """A dynamic broker config changed (Kafka's ``BrokerReconfigurable``): the cleaner
        thread's backoff at once; the cleaner itself, if it offers ``reconfigure``, gets
        its new settings (else they apply when it is next built)."""
        cfg = self.config
        thread = self.background.cleaner_thread if self.background is not None else None
        if thread is not None and "log.cleaner.backoff.ms" in changed:
            thread.interval_ms = int(cfg.get("log.cleaner.backoff.ms"))
            thread.wake()
        cleaner_keys = {k for k in changed & CLEANER_DYNAMIC_KEYS if k in cfg.values}
        cleaner = self.cleaner_if_started()
        if cleaner is not None and cleaner_keys:
            cleaner.reconfigure({k: to_string(cfg.values[k]) for k in cleaner_keys})

    # -- the cleaner (built on first use; Spark warmed at start-up unless lazy) -----------
    def _cleaner_settings(self) -> dict[str, str]:
        cfg = self.config
        return {
            "kompakt.cleaner.engine": str(cfg.get("kompakt.cleaner.engine")),
            "kompakt.spark.master": str(cfg.get("kompakt.spark.master")),
            "kompakt.spark.log.level": str(cfg.get("kompakt.spark.log.level")),
            "log.cleaner.dedupe.buffer.size": str(cfg.get("log.cleaner.dedupe.buffer.size")),
            "log.cleaner.io.buffer.load.factor": str(cfg.get("log.cleaner.io.buffer.load.factor")),
            **{
                k: to_string(cfg.get(k))
                for k in (
                    "log.cleaner.io.max.bytes.per.second",
                    "kompakt.log.cleaner.io.check.interval.ms",
                    "kompakt.log.cleaner.backlog.setpoint.bytes",
                    "kompakt.log.cleaner.backlog.p.coeff",
                    "kompakt.log.cleaner.backlog.max.bytes.per.second",
                    "kompakt.log.cleaner.backlog.update.interval.ms",
                )
            },
            **cfg.spark,
        }

    def _default_cleaner(self) -> Cleaner:
        from kompakt.engines import build_cleaner

        return build_cleaner(self.logs, self._cleaner_settings())

    def _start_spark(self) -> None:
        """``kompakt.spark.start=eager`` (the default) with the Spark engine: create the
        SparkSession in a daemon thread now and run one throwaway clean on it
        (:func:`kompakt.engines.warm_up_spark`), so the first clean finds it warm. Nothing
        waits for it: start-up and the Kafka port go on, a clean that comes first waits
        on the session's lock, and a stop during the warm-up does not wait (the JVM dies
        with the process)."""
        cfg = self.config
        if (
            cfg.get("kompakt.cleaner.engine") != "spark"
            or cfg.get("kompakt.spark.start") != "eager"
        ):
            return
        if self.cleaner_factory != self._default_cleaner:
            return  # an injected cleaner brings its own engine
        settings = self._cleaner_settings()

        def warm() -> None:
            from kompakt.engines import warm_up_spark

            try:
                # a clean waiting for the session warms Spark itself
                started, first_job = warm_up_spark(settings, busy=self._cleaning)
            except Exception as exc:  # the first clean tries again and reports it
                if not self._stopping:
                    log.warning("Spark did not start (the first clean retries): %s", exc)
                return
            if not self._stopping:
                log.info(
                    "Spark ready in %.1f s (session %.1f s, warm-up clean %.1f s; master %s)",
                    started + first_job,
                    started,
                    first_job,
                    settings["kompakt.spark.master"],
                )

        self._spark_warm = threading.Thread(target=warm, name="kompakt-spark-start", daemon=True)
        self._spark_warm.start()

    def _cleaning(self) -> bool:
        """Is a clean under way (the background cleaner's or a "compact now")?"""
        cleaner = self.cleaner_if_started()
        return cleaner is not None and bool(cleaner.states.in_progress())

    # -- what the admin side reads (kompakt.broker.seams.BrokerView) ------------------------
    def cleaner_if_started(self) -> CleanerView | None:
        """The cleaner once built (a clean or "compact now" builds it), else None."""
        return self.background.cleaner_if_started() if self.background is not None else None

    def cleaning_status(self) -> CleaningStatus | None:
        """The one :class:`~kompakt.cleaner.status.CleaningStatus` of this broker's logs,
        behind ``/v1/partitions`` and ``/metrics`` (None before the logs are open)."""
        return self._status

    def _last_stats(self) -> Mapping[tuple[str, int], CleanStats]:
        cleaner = self.cleaner_if_started()
        return cleaner.last_stats if cleaner is not None else {}

    def _partitions(self) -> list[dict[str, Any]]:
        """``GET /v1/partitions``: each log's offsets and size, and its cleaning status."""
        assert self.logs is not None
        logs = self.logs
        cleaning = self.cleaning_status()
        assert cleaning is not None  # the logs are open
        out = [
            {
                "topic": plog.topic,
                "partition": plog.partition,
                "cleanup_policy": ",".join(plog.config.cleanup_policy),
                "log_start_offset": plog.log_start_offset,
                "log_end_offset": plog.log_end_offset,
                "size_bytes": plog.size_bytes(),
                "segments": len(plog.segments),
                "log_dir": str(plog.dir.parent),
                "offline": False,
                **status.to_json(),
            }
            for plog, status in cleaning.partitions()
        ]
        # a failed dir's partitions: only what is known without touching its disk
        out += [
            {
                "topic": plog.topic,
                "partition": plog.partition,
                "cleanup_policy": ",".join(plog.config.cleanup_policy),
                "log_dir": str(plog.dir.parent),
                "offline": True,
                "error": f"KAFKA_STORAGE_ERROR: {plog.offline}",
            }
            for plog in logs.all_logs()
            if plog.offline is not None
        ]
        return out

    def _compact(
        self, topic: str, partition: int | None, dry_run: bool, engine: str | None = None
    ) -> dict[str, Any]:
        """``POST /v1/compact``: the cleaner's one "compact now" (``Cleaner.compact_now``),
        sharing its in-progress partitions with the background cleaner."""
        assert self.logs is not None
        self.logs.topic_meta(topic)  # UnknownTopicError -> 404
        if self.background is None or self.cleaner_factory is None:
            raise CleanerUnavailableError("cleaner not available")
        cleaner = self.background.cleaner()
        if cleaner is None:  # a factory that builds none
            raise CleanerUnavailableError("cleaner not available")
        return cleaner.compact_now(topic, partition, dry_run=dry_run, engine=engine).to_json()

    # -- for the console's data pages (kompakt.broker.console.browse) ---------------------
    def group_coordinator(self) -> CoordinatorView | None:
        """The group coordinator, if a group request or the start-up load made it."""
        return coordinator_if_started(self.state) if self.state is not None else None

    async def dispatch(
        self,
        api_key: int,
        api_version: int,
        request: Any,
        *,
        principal: str = "User:ANONYMOUS",
        peer: str = "admin:0",
        client_id: str = "kompakt-console",
    ) -> Any:
        """One decoded Kafka API request through the broker's API table, as a client's
        goes (the authorizer's guard included), without the wire: the console's config
        edit is an IncrementalAlterConfigs request sent here, so it is validated and
        answered by the very handler a Kafka client reaches. A coroutine handler is
        awaited; a plain one runs in the caller's thread (call it from a worker)."""
        assert self.state is not None
        api = self.registry.get(api_key)
        if api is None or not api.supports(api_version):
            raise ValueError(f"API {api_key} v{api_version} is not served")
        ctx = RequestContext(
            self.state, api_key, api_version, 0, client_id, peer, principal=principal
        )
        response = api.handler(ctx, request)
        if inspect.isawaitable(response):
            response = await response
        return response


def run(
    config: BrokerConfig,
    cleaner_factory: Callable[[], Cleaner] | None = None,
    faults: CoordinatorFaults = NO_FAULTS,
) -> int:
    """Run a broker until SIGTERM/SIGINT; 0 after a clean stop (130 when SIGINT asked
    for it, as a JVM running Kafka exits), 1 if it cannot start or could not stop
    cleanly (then the next start recovers the logs)."""

    async def main() -> int:
        broker = Broker(config, cleaner_factory, faults=faults)
        loop = asyncio.get_running_loop()
        signals: list[int] = []
        started = False

        def on_signal(sig: int) -> None:
            signals.append(sig)
            if started:
                asyncio.ensure_future(broker.stop())

        # Installed before start: a signal during start is kept and the broker stops
        # cleanly once started, instead of dying without its clean-shutdown marker.
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, on_signal, sig)
            except (NotImplementedError, RuntimeError):
                pass
        try:
            await broker.start()
        except (KompaktError, OSError) as exc:
            log.error("kompakt broker cannot start: %s", exc)
            return 1
        started = True
        if signals:
            asyncio.ensure_future(broker.stop())
        await broker.serve_forever()
        if broker.stop_error is not None:
            return 1
        return 130 if signals[:1] == [signal.SIGINT] else 0

    return asyncio.run(main())


class BrokerThread:
    """A broker on its own event loop in a daemon thread (tests, notebooks)."""

    def __init__(self, config: BrokerConfig, cleaner_factory: Callable[[], Cleaner] | None = None):
        self.broker = Broker(config, cleaner_factory)
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="kompakt-broker", daemon=True)
        self._started = threading.Event()
        self._error: BaseException | None = None

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self.broker.start())
        except BaseException as exc:
            self._error = exc
            self._started.set()
            return
        self._started.set()
        self.loop.run_until_complete(self.broker.serve_forever())
        self.loop.run_until_complete(self.loop.shutdown_default_executor())

    def start(self, timeout: float = 30.0) -> BrokerThread:
        self._thread.start()
        if not self._started.wait(timeout):
            raise TimeoutError("broker did not start")
        if self._error is not None:
            raise self._error
        return self

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap

    @property
    def port(self) -> int:
        return self.broker.port

    @property
    def admin_port(self) -> int:
        return self.broker.admin_port

    @property
    def logs(self) -> LogManager:
        assert self.broker.logs is not None
        return self.broker.logs

    def stop(self, timeout: float = 30.0) -> None:
        if not self._thread.is_alive():
            return
        fut = asyncio.run_coroutine_threadsafe(self.broker.stop(), self.loop)
        fut.result(timeout)
        self._thread.join(timeout)

    def __enter__(self) -> BrokerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_test_broker(data_dir: str, **overrides: Any) -> BrokerThread:
    """A broker on free 127.0.0.1 ports (Kafka and admin) with ``data_dir``."""
    props = {
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "kompakt.admin.listener": "http://127.0.0.1:0",
        "log.dirs": str(data_dir),
        "kompakt.cleaner.engine": "local",
    }
    props.update({k.replace("_", "."): str(v) for k, v in overrides.items()})
    return BrokerThread(BrokerConfig.from_mapping(props)).start()
