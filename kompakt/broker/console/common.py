"""What every console page shares: the template environment, the request's
:class:`~kompakt.broker.admin_http.AdminApi`, content negotiation and the error page.

Pages render on the ASGI threadpool (plain ``def`` endpoints), never on the loop.
"""

from __future__ import annotations

import json
from typing import Any

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.templating import Jinja2Templates

from kompakt.broker.http_gate import form_token
from kompakt.broker.seams import AdminApiView, BrokerView

# (method, path, what) of the JSON/text API: GET /v1 and GET / with Accept: application/json
ENDPOINTS = [
    ("GET", "/metrics", "Prometheus text exposition"),
    ("GET", "/v1", "this list"),
    ("GET", "/v1/partitions", "per-partition log and compaction state"),
    ("POST", "/v1/compact", 'compact now: {"topic", "partition"?, "dry_run"?, "engine"?}'),
    ("GET", "/", "web console: overview (HTML)"),
    ("GET", "/topics/{topic}/{partition}", "web console: partition page (HTML)"),
    ("GET", "/console/progress", "web console: running cleans and queue (JSON)"),
    ("POST", "/console/compact", "web console: compact now or dry run (JSON)"),
    ("GET", "/keys", "web console: key inspector (HTML)"),
    ("GET", "/messages", "web console: message browser (HTML)"),
    ("GET", "/groups", "web console: consumer groups with lag (HTML)"),
    ("GET", "/groups/{group}", "web console: one group's members, offsets and lag (HTML)"),
    ("GET", "/configs/{topic}", "web console: a topic's configs and their source (HTML)"),
    ("POST", "/configs/{topic}", "web console: set or reset one topic config (form)"),
]

API_PREFIXES = ("/v1", "/metrics")

NAV = [
    ("/", "Overview"),
    ("/keys", "Keys"),
    ("/messages", "Messages"),
    ("/groups", "Groups"),
    ("/configs", "Configs"),
]

_env = jinja2.Environment(
    loader=jinja2.PackageLoader("kompakt.broker.console", "templates"),
    autoescape=jinja2.select_autoescape(default=True),
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
templates = Jinja2Templates(env=_env)


def _bytes(n: Any) -> str:
    if n is None:
        return "–"
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)  # pragma: no cover


def _ms_time(ms: Any) -> str:
    import datetime as dt

    if not ms:
        return "never"
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _pct(x: Any) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


def _segment(x: Any) -> str:
    """One URL path segment: a group id may hold ``/`` or ``..``, which Jinja's
    ``urlencode`` keeps, so a browser would resolve ``/groups/../../x`` to ``/x``."""
    from urllib.parse import quote

    return quote(str(x), safe="")


_env.filters["bytes"] = _bytes
_env.filters["segment"] = _segment
_env.filters["ms_time"] = _ms_time
_env.filters["pct"] = _pct
_env.globals["NAV"] = NAV


def api_of(request: Request) -> AdminApiView:
    """The :class:`~kompakt.broker.admin_http.AdminApi` this app serves."""
    return request.app.state.api


def broker_of(request: Request) -> BrokerView | None:
    """The :class:`~kompakt.broker.app.Broker` behind the app (None in a bare app)."""
    return api_of(request).broker


def wants_json(request: Request) -> bool:
    accept = request.headers.get("accept", "")
    return "application/json" in accept and "text/html" not in accept


def json_response(status: int, obj: Any) -> Response:
    """The admin API's JSON (indented, anything else as str), as it always was."""
    return Response(
        json.dumps(obj, indent=1, default=str).encode(),
        status_code=status,
        media_type="application/json",
    )


def endpoint_list() -> Response:
    return JSONResponse(
        {"endpoints": [{"method": m, "path": p, "description": d} for m, p, d in ENDPOINTS]}
    )


def render(request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
    context.setdefault("title", "kompakt")
    context.setdefault("writes", api_of(request).writes)
    context.setdefault("csrf", form_token(request))
    return templates.TemplateResponse(request, name, context, status_code=status)


def error_page(request: Request, status: int, message: str) -> Response:
    """A readable message instead of a traceback: HTML for a browser, JSON otherwise."""
    html = "text/html" in request.headers.get("accept", "")
    if not html or request.url.path.startswith(API_PREFIXES):
        return json_response(status, {"error": message})
    return render(request, "error.html", status, title=f"kompakt · {status}", message=message)


class BadInput(ValueError):
    """Hostile or malformed input in a console URL or form: shown as a 400 page."""


def parse_int(raw: str | None, what: str, *, minimum: int = 0, default: int | None = None) -> int:
    """A non-negative (or ``minimum``) integer from a query or path, or :class:`BadInput`."""
    if raw is None or raw == "":
        if default is not None:
            return default
        raise BadInput(f"{what} is required")
    raw = raw.strip()
    if len(raw) > 19 or not raw.lstrip("-").isdigit() or not raw.isascii():
        raise BadInput(f"{what} must be an integer, got {raw[:40]!r}")
    value = int(raw)
    if value < minimum:
        raise BadInput(f"{what} must be at least {minimum}, got {value}")
    return value
