"""What the admin side of the broker may read of it: the console pages, ``/metrics`` and
the admin API run on the admin server's threads, not on the Kafka loop, and reach the
broker, its cleaner and its coordinators only through these Protocols.

Each Protocol names the fields and calls a reader may use, and who owns them, so a
change to the cleaner or a coordinator that drops one fails the seam test instead of
turning a page or a gauge silently empty (the ``getattr(obj, name, None)`` this replaces
read a missing field as "nothing to show"). The real objects satisfy them structurally:
:class:`~kompakt.cleaner.cleaner.Cleaner`, the group coordinator, the transaction
broker and :class:`~kompakt.broker.app.Broker`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

from kompakt.broker.background import BackgroundTasks
from kompakt.broker.config import BrokerConfig
from kompakt.broker.console.history import History
from kompakt.broker.coordinator.snapshot import CoordinatorSnapshot
from kompakt.broker.state import BrokerState
from kompakt.cleaner.engine import Engine
from kompakt.cleaner.report import CompactReport
from kompakt.cleaner.stats import CleanStats, RunningClean
from kompakt.cleaner.status import CleaningStatus
from kompakt.log.manager import LogManager


@runtime_checkable
class ThrottleView(Protocol):
    """The cleaner's I/O throttle (Kafka's ``Throttler``); the counters are written by
    the cleaning thread and read as plain floats (a torn read is one scrape off)."""

    observed_total: float
    throttled_seconds_total: float

    def effective_rate(self) -> float: ...


@runtime_checkable
class CleanerStatesView(Protocol):
    """The cleaner manager's partition states (guarded by its own lock)."""

    def in_progress(self) -> Mapping[Any, Any]: ...


@runtime_checkable
class CleanerView(Protocol):
    """What the broker reads of (and asks) its running cleaner. The totals are written
    by the thread holding the cleaner's lock; readers take them as they are."""

    compactions_total: int
    cleaned_bytes_total: int
    last_run_ms: int | None
    last_stats: Mapping[tuple[str, int], CleanStats]
    running: Mapping[tuple[str, int], RunningClean]  # read as a copy (list(...))
    listeners: list[Callable[[CleanStats], None]]  # told of each finished clean
    engine: Engine
    throttle: ThrottleView
    clock: Callable[[], int]

    @property
    def states(self) -> CleanerStatesView: ...

    def reconfigure(self, changed: Mapping[str, str]) -> None: ...

    def compact_now(
        self,
        topic: str | None = None,
        partition: int | None = None,
        *,
        dry_run: bool = False,
        engine: str | None = None,
    ) -> CompactReport: ...

    def abort_all(self, why: str) -> None: ...


@runtime_checkable
class CoordinatorView(Protocol):
    """The group coordinator, whose groups the Kafka loop owns: other threads read
    frozen copies built on the loop, never the live groups."""

    def snapshot(self) -> CoordinatorSnapshot: ...


@runtime_checkable
class TransactionCounts(Protocol):
    def open_transactions(self) -> tuple[int, int]: ...


@runtime_checkable
class TransactionsView(Protocol):
    """The transaction broker; ``coordinator`` answers the open-transaction gauges."""

    coordinator: TransactionCounts


@runtime_checkable
class AdminApiView(Protocol):
    """What the admin endpoint serves (:class:`~kompakt.broker.admin_http.AdminApi`):
    set once when the broker starts, read by every request."""

    metrics: Callable[[], bytes]
    partitions: Callable[[], list[dict[str, Any]]]
    compact: Callable[[str, int | None, bool, str | None], dict[str, Any]]
    broker: BrokerView | None  # None in a bare test app
    writes: bool  # kompakt.admin.console.writes


@runtime_checkable
class BrokerView(Protocol):
    """What the console and the admin API read of the broker. ``logs``, ``state`` and
    ``background`` are set once by ``start()`` (None before); ``config`` is shared and
    changed in place only by a dynamic config change (``BrokerConfig.adopt``)."""

    config: BrokerConfig
    logs: LogManager | None
    state: BrokerState | None
    background: BackgroundTasks | None
    history: History  # the console's charts; its own lock guards it

    def cleaner_if_started(self) -> CleanerView | None: ...

    def cleaning_status(self) -> CleaningStatus | None: ...

    def group_coordinator(self) -> CoordinatorView | None: ...

    async def dispatch(
        self,
        api_key: int,
        api_version: int,
        request: Any,
        *,
        principal: str = ...,
        peer: str = ...,
        client_id: str = ...,
    ) -> Any: ...
