"""Small helpers shared by the request handlers."""

from __future__ import annotations

import logging
import uuid

from kio.schema.errors import ErrorCode

from kompakt.broker.acls import SUPPORTED_OPERATIONS, Op, ResourceType
from kompakt.broker.protocol import ZERO_UUID
from kompakt.broker.state import RequestContext
from kompakt.errors import KompaktError

log = logging.getLogger("kompakt.broker.handlers")

# MetadataResponse.AUTHORIZED_OPERATIONS_OMITTED: the client did not ask for them.
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)
# -1 where a response has no offset to give (Kafka's ListOffsetsResponse.UNKNOWN_OFFSET,
# FetchResponse.INVALID_HIGH_WATERMARK / INVALID_LOG_START_OFFSET, ...).
UNKNOWN_OFFSET = -1
LEADER_EPOCH = 0  # this single node has led every partition since epoch 0


# Kafka's org.apache.kafka.common.acl.AclOperation codes (kio has none), kept with the
# authorizer; bit ``1 << code`` of a ``*_authorized_operations`` field says "allowed"
AclOperation = Op

# Without an authorizer every operation is allowed: Kafka's AclEntry.supportedOperations
# for the TOPIC and CLUSTER resource types.
TOPIC_OPERATIONS = sum(1 << op for op in SUPPORTED_OPERATIONS[ResourceType.TOPIC])
CLUSTER_OPERATIONS = sum(1 << op for op in SUPPORTED_OPERATIONS[ResourceType.CLUSTER])


def authorized_operations(bits: int, asked: bool) -> int:
    """An ``*_authorized_operations`` field: ``bits`` if the request asked for them."""
    return bits if asked else AUTHORIZED_OPERATIONS_OMITTED


def error_of(exc: BaseException) -> tuple[ErrorCode, str]:
    """The Kafka error code and message to answer ``exc`` with; anything that is not a
    :class:`KompaktError` is our bug, logged with its traceback (UNKNOWN_SERVER_ERROR)."""
    if isinstance(exc, KompaktError):
        return ErrorCode(exc.error_code), str(exc)
    log.exception("unexpected error in a request handler", exc_info=exc)
    return ErrorCode.unknown_server_error, f"{type(exc).__name__}: {exc}"


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


def unknown_topic_code(by_id: bool) -> ErrorCode:
    """UNKNOWN_TOPIC_ID for a request that named the topic by id (KIP-516), else
    UNKNOWN_TOPIC_OR_PARTITION."""
    return ErrorCode.unknown_topic_id if by_id else ErrorCode.unknown_topic_or_partition
