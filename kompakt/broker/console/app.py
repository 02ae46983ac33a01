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
import time
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
from kompakt.broker.console.actions import parse_json_body, run_compact

log = logging.getLogger(__name__)

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


class ServerTiming:
    """``Server-Timing: app;dur=MS`` on every response (ASGI middleware): the time from
    the request to the response's start, what ``benchmarks/bench_console.py`` reports
    and a browser's developer tools show."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()

        async def timed_send(message: Any) -> None:
            if message["type"] == "http.response.start":
                dur = (time.perf_counter() - t0) * 1000
                headers = list(message.get("headers", []))
                headers.append((b"server-timing", f"app;dur={dur:.1f}".encode()))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, timed_send)


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
        return ServerTiming(app)
    return ServerTiming(BasicAuth(app, authenticate, auth_get, on_failure))
