"""Kafka API handlers, one module per domain; :func:`register_all` installs them."""

from __future__ import annotations

from kompakt.broker import coordinator
from kompakt.broker.handlers import (
    acls,
    configs,
    fetch,
    find_coordinator,
    log_dirs,
    metadata,
    produce,
    security,
    topics,
    txn,
)
from kompakt.broker.registry import ApiRegistry


def register_all(registry: ApiRegistry) -> ApiRegistry:
    for module in (metadata, produce, fetch, topics, configs, acls, security, log_dirs):
        module.register(registry)
    coordinator.register(registry)
    txn.register(registry)
    find_coordinator.register(registry)  # the one owner of FindCoordinator, all key types
    return registry
