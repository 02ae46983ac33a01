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
(:data:`kompakt.broker.console.pages_data.ROUTES`). In front of all of them is the gate
(:class:`kompakt.broker.http_gate.Gate`): the request's principal (HTTP Basic with
``kompakt.admin.auth=basic``, else User:ANONYMOUS) and the broker's authorizer asked for
each route's Kafka operation, with the browser checks of
:mod:`kompakt.broker.http_browser`.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from kompakt.broker.console import common, pages_compaction, pages_data
from kompakt.broker.console.actions import parse_json_body, run_compact
from kompakt.broker.http_gate import Gate, GateSettings, gate_of

log = logging.getLogger(__name__)


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
    """Each partition's state, topics the principal may not DESCRIBE left out."""
    rows = gate_of(request).visible(common.api_of(request).partitions(), lambda r: r["topic"])
    return common.json_response(200, {"partitions": rows})


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


def build_app(api: Any, *, gate: GateSettings | None = None) -> ASGIApp:
    """The whole admin listener as one ASGI app over ``api`` (an ``AdminApi``), behind
    the gate (``gate``: no auth and no authorizer when None: every request allowed)."""
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
    return ServerTiming(Gate(app, gate or GateSettings(), common.error_page))
