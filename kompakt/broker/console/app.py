"""The admin listener's ASGI application: JSON API, Prometheus text and console.

Starlette + Jinja2 on uvicorn, chosen because each is small, typed, widely used and
maintained (Starlette is the core under FastAPI; uvicorn its reference server), runs
fully offline (templates and static files ship in the wheel, no CDN, no JavaScript build
step), and gives routing, request parsing, a threadpool for blocking endpoints and
static files without any hand-written HTTP. A single-page app would need a Node build
and a bundle to ship; server-rendered pages with a few lines of plain JavaScript (the
"compact now" progress) keep one language and are testable over HTTP as well as in a
browser.

Routes: the JSON API of :mod:`kompakt.broker.admin_http` (same URLs and JSON as its
``http.server`` predecessor), the compaction pages
(:data:`kompakt.broker.console.pages_compaction.ROUTES`) and the data pages
(:data:`kompakt.broker.console.pages_data.ROUTES`). HTTP Basic (``kompakt.admin.auth``)
is a middleware in front of all of them: POST always, GET with ``kompakt.admin.auth.get``.
"""

from __future__ import annotations

import base64
import binascii
import logging
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from kompakt.broker.console import common, pages_compaction, pages_data
from kompakt.errors import InvalidConfigError, InvalidTopicError, KompaktError, UnknownTopicError

log = logging.getLogger(__name__)

MAX_BODY = 64 * 1024
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")


class BasicAuth:
    """HTTP Basic in front of every route (ASGI middleware): non-GET requests always,
    GET/HEAD too when ``auth_get``; ``authenticate(user, password)`` answers a failure
    reason or None and runs on the threadpool (it derives a SCRAM key: not for the loop)."""

    def __init__(
        self,
        app: ASGIApp,
        authenticate: Callable[[str, str], str | None],
        auth_get: bool,
        on_failure: Callable[[str], None],
    ):
        self.app = app
        self.authenticate = authenticate
        self.auth_get = auth_get
        self.on_failure = on_failure

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (scope["method"] in SAFE_METHODS and not self.auth_get):
            await self.app(scope, receive, send)
            return
        header = ""
        for k, v in scope.get("headers", []):
            if k == b"authorization":
                header = v.decode("latin-1")
        reason = "no_credentials"
        if header.startswith("Basic "):
            try:
                user, sep, password = (
                    base64.b64decode(header[6:], validate=True).decode().partition(":")
                )
                failed = (
                    await run_in_threadpool(self.authenticate, user, password)
                    if sep
                    else "malformed"
                )
            except (binascii.Error, UnicodeDecodeError):
                failed = "malformed"
            if failed is None:
                await self.app(scope, receive, send)
                return
            reason = failed
        client = (scope.get("client") or ("?",))[0]
        log.info("admin request from %s refused: %s", client, reason)
        self.on_failure(reason)
        response = common.json_response(
            HTTPStatus.UNAUTHORIZED, {"error": "authentication required"}
        )
        response.headers["WWW-Authenticate"] = 'Basic realm="kompakt", charset="UTF-8"'
        await response(scope, receive, send)


# -- the JSON / text API -----------------------------------------------------------------
def metrics(request: Request) -> Response:
    return Response(
        common.api_of(request).metrics(),
        media_type="text/plain; version=0.0.4; charset=utf-8",
    )


def partitions(request: Request) -> Response:
    return common.json_response(200, {"partitions": common.api_of(request).partitions()})


def endpoints(request: Request) -> Response:
    return common.endpoint_list()


async def read_body(request: Request, limit: int = MAX_BODY) -> bytes:
    """The request body, at most ``limit`` bytes (:class:`ValueError` past it)."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        raise ValueError(f"body must be at most {limit} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise ValueError(f"body must be at most {limit} bytes")
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
        log.exception("admin compact failed")
        return common.json_response(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": str(exc)})


async def parse_json_body(request: Request) -> tuple[Any, Response | None]:
    import json

    try:
        body = await read_body(request)
    except ValueError as exc:
        return None, common.json_response(HTTPStatus.BAD_REQUEST, {"error": str(exc)})
    try:
        return json.loads(body or b"{}"), None
    except (ValueError, RecursionError) as exc:  # bad JSON, bad UTF-8, deep nesting
        return None, common.json_response(
            HTTPStatus.BAD_REQUEST, {"error": f"invalid JSON: {type(exc).__name__}: {exc}"}
        )


async def compact(request: Request) -> Response:
    req, bad = await parse_json_body(request)
    if bad is not None:
        return bad
    return await run_compact(request, req)


API_ROUTES: list[BaseRoute] = [
    Route("/metrics", metrics, methods=["GET"]),
    Route("/v1", endpoints, methods=["GET"]),
    Route("/v1/partitions", partitions, methods=["GET"]),
    Route("/v1/compact", compact, methods=["POST"]),
]


# -- errors: JSON for the API, a page for a browser, never a traceback --------------------
async def http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        message = f"no such endpoint {request.url.path}"
    elif exc.status_code == 405:
        message = f"{request.method} is not allowed on {request.url.path}"
    else:
        message = str(exc.detail)
    return common.error_page(request, exc.status_code, message)


async def server_error(request: Request, exc: Exception) -> Response:
    log.error("admin %s %s failed: %r", request.method, request.url.path, exc)
    return common.error_page(request, 500, f"internal error: {type(exc).__name__}: {exc}")


def build_app(
    api: Any,
    *,
    authenticate: Callable[[str, str], str | None] | None = None,
    auth_get: bool = False,
    on_failure: Callable[[str], None] = lambda reason: None,
) -> ASGIApp:
    """The whole admin listener as one ASGI app over ``api`` (an ``AdminApi``)."""
    routes: list[BaseRoute] = list(API_ROUTES)
    routes += pages_compaction.ROUTES
    routes += pages_data.ROUTES
    routes.append(
        Mount(
            "/static",
            StaticFiles(packages=[("kompakt.broker.console", "static")]),
            name="static",
        )
    )
    app = Starlette(
        routes=routes,
        exception_handlers={HTTPException: http_error, Exception: server_error},
    )
    app.state.api = api
    if authenticate is None:
        return app
    return BasicAuth(app, authenticate, auth_get, on_failure)
