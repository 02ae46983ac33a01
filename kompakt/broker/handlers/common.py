"""Small helpers shared by the request handlers."""

from __future__ import annotations

import logging
import uuid
from typing import Any

from kompakt.broker.protocol import ZERO_UUID
from kompakt.broker.state import RequestContext
from kompakt.errors import KompaktError

log = logging.getLogger("kompakt.broker.handlers")

NONE = 0
UNKNOWN_SERVER_ERROR = -1
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_REQUIRED_ACKS = 21
INVALID_TOPIC_EXCEPTION = 17
UNSUPPORTED_VERSION = 35
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_CONFIG = 40
INVALID_REQUEST = 42
POLICY_VIOLATION = 44
INVALID_PRODUCER_EPOCH = 47
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
UNKNOWN_TOPIC_ID = 100
INT32_MIN = -(2**31)

# AclOperation codes (for *_authorized_operations bitfields)
TOPIC_OPERATIONS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))
CLUSTER_OPERATIONS = sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))


def error_of(exc: BaseException) -> tuple[int, str]:
    if isinstance(exc, KompaktError):
        code = exc.error_code if exc.error_code != -1 else UNKNOWN_SERVER_ERROR
        return code, str(exc)
    log.exception("unexpected error in a request handler", exc_info=exc)
    return UNKNOWN_SERVER_ERROR, f"{type(exc).__name__}: {exc}"


def resolve_topic(
    ctx: RequestContext, name: str | None, topic_id: uuid.UUID | None
) -> tuple[str | None, uuid.UUID]:
    """(topic name or None if unknown, topic id) for a request naming either."""
    if name:
        if ctx.logs.has_topic(name):
            return name, ctx.state.topic_id(name)
        return None, ZERO_UUID
    if topic_id is not None and topic_id != ZERO_UUID:
        return ctx.state.topic_by_id(topic_id), topic_id
    return None, topic_id or ZERO_UUID


def throttle(body: dict[str, Any]) -> dict[str, Any]:
    body.setdefault("throttle_time", 0)
    return body
