"""The console's and the JSON API's one way to run a compact request: validate it as
``POST /v1/compact`` always did, then call ``AdminApi.compact`` (the cleaner's
``compact_now``, shared with ``kompakt compact``) on the threadpool."""

from __future__ import annotations

import asyncio
import json
import logging
from http import HTTPStatus
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from kompakt.broker.console import common
from kompakt.broker.http_gate import gate_of
from kompakt.errors import InvalidConfigError, InvalidTopicError, KompaktError, UnknownTopicError
from kompakt.log.dir_failure import find_disk_error

log = logging.getLogger(__name__)

MAX_BODY = 64 * 1024
BODY_TIMEOUT_S = 10.0
"""How long a request's body may take to arrive, as its headers may (the admin
listener's header timeout): a body dripped a byte at a time held its connection."""


class BodyError(ValueError):
    """A request body refused: ``status`` 400 (a bad Content-Length), 413 (too large) or
    408 (too slow)."""

    def __init__(self, status: HTTPStatus, message: str):
        super().__init__(message)
        self.status = status


async def read_body(request: Request, limit: int = MAX_BODY) -> bytes:
    """The request body, at most ``limit`` bytes within :data:`BODY_TIMEOUT_S`
    (:class:`BodyError` otherwise); the one reader of every body the admin listener
    takes."""
    timeout_s = BODY_TIMEOUT_S
    declared = request.headers.get("content-length")
    too_big = BodyError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"body must be at most {limit} bytes")
    if declared is not None and not declared.isdigit():
        raise BodyError(HTTPStatus.BAD_REQUEST, f"Content-Length {declared[:40]!r} is not a size")
    if declared is not None and int(declared) > limit:
        raise too_big
    body = bytearray()
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.stream():  # bounded even without a Content-Length
                body += chunk
                if len(body) > limit:
                    raise too_big
    except TimeoutError:
        raise BodyError(
            HTTPStatus.REQUEST_TIMEOUT, f"the body did not arrive within {timeout_s:g} s"
        ) from None
    return bytes(body)


def check_compact_request(req: Any) -> tuple[str, int | None, bool, str | None]:
    """(topic, partition, dry_run, engine) of a compact request, or :class:`ValueError`
    with the message the 400 carries."""
    from kompakt.engines import check_engine

    if not isinstance(req, dict) or not isinstance(req.get("topic"), str):
        raise ValueError('expected {"topic": str, "partition": int?, "dry_run": bool?}')
    part = req.get("partition")
    dry = req.get("dry_run", False)
    engine = req.get("engine")
    if engine is not None:
        try:
            check_engine(engine if isinstance(engine, str) else repr(engine))
        except InvalidConfigError as exc:
            raise ValueError(str(exc)) from None
    if (
        part is not None and (not isinstance(part, int) or isinstance(part, bool) or part < 0)
    ) or not isinstance(dry, bool):
        raise ValueError("partition must be a non-negative integer and dry_run a boolean")
    return req["topic"], part, dry, engine


async def run_compact(request: Request, req: Any) -> Response:
    """Validate and run one compact request through ``AdminApi.compact`` (the
    cleaner's ``compact_now``, on the threadpool); the JSON API's statuses."""
    from kompakt.cleaner.manager import CleaningAbortedError

    try:
        topic, part, dry, engine = check_compact_request(req)
    except ValueError as exc:
        return common.json_response(HTTPStatus.BAD_REQUEST, {"error": str(exc)})
    denied = gate_of(request).refusal(topic)  # ALTER (a clean) or READ (the dry run page)
    if denied is not None:
        return common.json_response(HTTPStatus.FORBIDDEN, denied)
    api = common.api_of(request)
    try:
        doc = await run_in_threadpool(api.compact, topic, part, dry, engine)
        return common.json_response(HTTPStatus.OK, doc)
    except (UnknownTopicError, InvalidTopicError) as exc:
        return common.json_response(HTTPStatus.NOT_FOUND, {"error": str(exc)})
    except CleaningAbortedError as exc:
        return common.json_response(HTTPStatus.SERVICE_UNAVAILABLE, {"error": str(exc)})
    except KompaktError as exc:
        return common.json_response(HTTPStatus.CONFLICT, {"error": str(exc)})
    except Exception as exc:
        disk = find_disk_error(exc)
        if disk is not None:  # the log dir went offline (its ERROR is logged once there)
            return common.json_response(
                HTTPStatus.SERVICE_UNAVAILABLE,
                {
                    "error": f"KAFKA_STORAGE_ERROR: the clean failed reading or writing the log "
                    f"dir: {disk.strerror or disk}"
                },
            )
        log.exception("admin compact failed")
        return common.json_response(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": str(exc)})


async def parse_json_body(request: Request) -> tuple[Any, Response | None]:
    try:
        body = await read_body(request)
    except BodyError as exc:
        return None, common.json_response(exc.status, {"error": str(exc)})
    try:
        return json.loads(body or b"{}"), None
    except (ValueError, RecursionError) as exc:  # bad JSON, bad UTF-8, deep nesting
        return None, common.json_response(
            HTTPStatus.BAD_REQUEST, {"error": f"invalid JSON: {type(exc).__name__}: {exc}"}
        )
