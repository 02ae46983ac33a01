"""What every request handler sees: the broker's config, logs and shared helpers."""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kompakt.broker.config import BrokerConfig
from kompakt.broker.protocol import topic_uuid
from kompakt.broker.registry import ApiRegistry
from kompakt.errors import UnknownTopicError
from kompakt.log.manager import LogManager
from kompakt.log.partition_log import PartitionLog

log = logging.getLogger(__name__)


class AppendNotifier:
    """Wakes long-polling fetches when a partition gets new data (no polling loop).

    Each PartitionLog gets one append listener; it runs on whatever thread appended and
    hands the wake-up to the event loop with ``call_soon_threadsafe``.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self._waiters: dict[tuple[str, int], set[asyncio.Event]] = {}
        self._all: set[asyncio.Event] = set()
        self._hooked: weakref.WeakSet[PartitionLog] = weakref.WeakSet()
        self._lock = threading.Lock()

    def hook(self, plog: PartitionLog) -> None:
        with self._lock:
            if plog in self._hooked:
                return
            self._hooked.add(plog)
            plog.append_listeners.append(self._on_append)

    def _on_append(self, plog: PartitionLog) -> None:
        key = (plog.topic, plog.partition)
        try:
            self.loop.call_soon_threadsafe(self._wake, key)
        except RuntimeError:  # loop closed during shutdown
            pass

    def _wake(self, key: tuple[str, int]) -> None:
        for ev in self._waiters.get(key, ()):
            ev.set()

    def register(self, keys: Iterable[tuple[str, int]]) -> asyncio.Event:
        ev = asyncio.Event()
        for k in keys:
            self._waiters.setdefault(k, set()).add(ev)
        self._all.add(ev)
        return ev

    def unregister(self, ev: asyncio.Event, keys: Iterable[tuple[str, int]]) -> None:
        for k in keys:
            s = self._waiters.get(k)
            if s is not None:
                s.discard(ev)
                if not s:
                    del self._waiters[k]
        self._all.discard(ev)

    def wake_all(self) -> None:
        for ev in list(self._all):
            ev.set()


@dataclass
class BrokerState:
    config: BrokerConfig
    logs: LogManager
    registry: ApiRegistry
    host: str = "127.0.0.1"
    port: int = 9092
    notifier: AppendNotifier | None = None
    producers: Any = None  # ProducerStateManager
    closing: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    # advertised (host, port) per listener name; Metadata answers each client with the
    # address of the listener it came in on, as Kafka does
    endpoints: dict[str, tuple[str, int]] = field(default_factory=dict)

    @property
    def node_id(self) -> int:
        return self.config.node_id

    @property
    def cluster_id(self) -> str:
        return self.logs.cluster_id

    def topic_id(self, name: str) -> uuid.UUID:
        return topic_uuid(self.logs.topic_meta(name).topic_id)

    def topic_by_id(self, tid: uuid.UUID) -> str | None:
        for name in self.logs.topics():
            try:
                if topic_uuid(self.logs.topic_meta(name).topic_id) == tid:
                    return name
            except UnknownTopicError:  # deleted since topics() listed it
                continue
        return None

    def broker_endpoint(self, listener: str | None = None) -> dict[str, Any]:
        host, port = self.endpoints.get(listener or "", (self.host, self.port))
        return {"node_id": self.node_id, "host": host, "port": port, "rack": None}


@dataclass
class RequestContext:
    state: BrokerState
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    peer: str
    # Kafka's KafkaPrincipal as "type:name" (User:ANONYMOUS before/without SASL or mTLS),
    # set by the listener that authenticated the connection; the authorizer checks it
    principal: str = "User:ANONYMOUS"
    listener: str = "PLAINTEXT"

    @property
    def logs(self) -> LogManager:
        return self.state.logs

    @property
    def config(self) -> BrokerConfig:
        return self.state.config
