"""FindCoordinator: one handler for every key type, dispatching by ``key_type`` as
Kafka's ``KafkaApis.getCoordinator`` does: GROUP keys to the group coordinator
(:mod:`kompakt.broker.coordinator.handlers`), TRANSACTION keys to the transaction
coordinator (:mod:`kompakt.broker.handlers.txn`). SHARE keys (KIP-932, v6+) get
COORDINATOR_NOT_AVAILABLE: this node runs no share coordinator, as a Kafka node without
share groups answers (clients retry until their timeout); below v6 Kafka's
``getCoordinator`` refuses the SHARE type, and any other key type, with INVALID_REQUEST.

v0 has no ``key_type`` (a group key); v4+ batch ``coordinator_keys`` of one type.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v0.request import FindCoordinatorRequest

from kompakt.broker.coordinator import handlers as group_handlers
from kompakt.broker.handlers import txn
from kompakt.broker.registry import ApiRegistry
from kompakt.broker.state import RequestContext

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1
KEY_TYPE_SHARE = 2
"""Kafka's ``CoordinatorType`` values."""
MIN_SHARE_VERSION = 6


def coordinators() -> dict[int, Callable[[RequestContext, Any], Awaitable[dict[str, Any]]]]:
    """Kafka's ``CoordinatorType`` → the coordinator that answers its keys (looked up at
    call time: the group coordinator's module imports this package)."""
    return {
        KEY_TYPE_GROUP: group_handlers.find_group_coordinator,
        KEY_TYPE_TRANSACTION: txn.find_transaction_coordinator,
    }


async def handle_find_coordinator(ctx: RequestContext, req: Any) -> dict[str, Any]:
    key_type = int(getattr(req, "key_type", KEY_TYPE_GROUP))
    find = coordinators().get(key_type)
    if key_type == KEY_TYPE_SHARE and ctx.api_version >= MIN_SHARE_VERSION:
        return group_handlers.coordinator_response(
            ctx, req, ErrorCode.coordinator_not_available, "no share coordinator on this node"
        )
    if find is None:
        return group_handlers.coordinator_response(
            ctx,
            req,
            ErrorCode.invalid_request,
            f"Unknown coordinator type {key_type} in FindCoordinator request",
        )
    return await find(ctx, req)


def register(registry: ApiRegistry) -> None:
    registry.register(FindCoordinatorRequest.__api_key__, 0, 6, handle_find_coordinator)
