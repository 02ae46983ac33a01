"""What keeps a browser from being turned against the admin listener (issue 26).

A logged-in admin's browser sends its cached Basic credentials (or, on a loopback
listener without auth, simply reaches it) for any page that asks, so:

- **Host allow-list** (DNS rebinding): a name that resolves to 127.0.0.1 for an attacker's
  page makes the browser call the listener "same-origin" with that name as Host. Only the
  listener's own names are served: its bound address, the address the connection came in
  on, ``localhost``/``127.0.0.1``/``[::1]``, the broker's advertised host names and
  ``kompakt.admin.allowed.hosts``; any other Host is answered 421 Misdirected Request.
- **Origin** (CSRF): a state-changing request (POST, PUT, PATCH, DELETE) whose ``Origin``
  (or, without one, ``Referer``) is not the listener's own, or that a browser marks
  ``Sec-Fetch-Site: cross-site``/``same-site`` (another port of localhost is same-site),
  is refused 403. A client that sends neither (curl, the CLI) is not a browser.
- **Content type**: the JSON routes take only ``application/json`` (a page of another
  origin can post ``text/plain`` or a form without a preflight, never JSON), the console's
  one form carries a per-principal token (:class:`kompakt.broker.http_gate.FormTokens`).
- **Headers** on every answer: a CSP with ``frame-ancestors 'none'`` (no clickjacking;
  the console's own script and styles only), ``X-Content-Type-Options: nosniff``,
  ``Referrer-Policy: same-origin``.
- **Failed logins** from one address wait longer each time (:class:`LoginThrottle`).
"""

from __future__ import annotations

import ipaddress
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from starlette.types import Message, Send

UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; form-action 'self'; base-uri 'none'; "
    "object-src 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS: list[tuple[bytes, bytes]] = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
]


def with_security_headers(send: Send) -> Send:
    """``send`` adding :data:`SECURITY_HEADERS` to the response's start."""

    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = list(message.get("headers", [])) + SECURITY_HEADERS
            message = {**message, "headers": headers}
        await send(message)

    return wrapped


# -- Host ---------------------------------------------------------------------------------


def host_name(value: str) -> str:
    """The name part of a Host value (``[::1]:9644`` -> ``::1``), lower case."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    name, sep, port = value.rpartition(":")
    return name if sep and port.isdigit() and ":" not in name else value


def allowed_hosts(listener_host: str, extra: Iterable[str]) -> frozenset[str]:
    """The names the listener answers to (see the module doc); a wildcard bind adds
    nothing by itself (the connection's local address is allowed per request)."""
    names = set(LOOPBACK_NAMES) | {host_name(x) for x in extra if x.strip()}
    if listener_host not in ("0.0.0.0", "::", ""):
        names.add(host_name(listener_host))
    return frozenset(names)


def host_refusal(host: str | None, scope: dict[str, Any], allowed: frozenset[str]) -> str | None:
    """Why this Host is not served (None: it is). No Host (HTTP/1.0, not a browser) is
    served; the address the connection arrived on is always one of ours."""
    if host is None:
        return None
    name = host_name(host)
    server = scope.get("server") or ("",)
    if name in allowed or name == str(server[0]).lower():
        return None
    try:
        if ipaddress.ip_address(name) == ipaddress.ip_address(server[0]):
            return None
    except ValueError:
        pass
    return (
        f"Host {name[:100]!r} is not a name of this listener; add it to "
        "kompakt.admin.allowed.hosts if clients use it"
    )


# -- Origin and content type ---------------------------------------------------------------


def _origin_of(url: str) -> tuple[str, str] | None:
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if not parts.scheme or not parts.netloc:
        return None
    return parts.scheme.lower(), parts.netloc.lower().rpartition("@")[2]


def origin_refusal(headers: dict[str, str], scope: dict[str, Any]) -> str | None:
    """Why a state-changing request looks cross-origin (None: it does not)."""
    site = headers.get("sec-fetch-site", "").lower()
    if site in ("cross-site", "same-site"):
        return f"refused a {site} request (Sec-Fetch-Site): the console only takes its own"
    given = headers.get("origin") or headers.get("referer")
    if given is None:
        return None  # not a browser: curl, the CLI, a script
    ours = (str(scope.get("scheme", "http")).lower(), headers.get("host", "").lower())
    theirs = _origin_of(given) if given != "null" else None
    if theirs is not None and _same_origin(theirs, ours):
        return None
    return f"refused a cross-origin request from {given[:100]!r}"


def _same_origin(theirs: tuple[str, str], ours: tuple[str, str]) -> bool:
    default = {"http": ":80", "https": ":443"}

    def norm(scheme: str, netloc: str) -> tuple[str, str]:
        if not netloc.endswith("]") and ":" in netloc.rpartition("]")[2]:
            return scheme, netloc
        return scheme, netloc + default.get(scheme, "")

    return norm(*theirs) == norm(*ours)


def content_refusal(content_type: str | None, body: str) -> str | None:
    """Why a state-changing request's body type is refused (415), by the route's
    ``body``: ``json`` takes application/json (or no Content-Type at all, which a
    browser never sends cross-origin without an Origin), ``form`` a urlencoded form."""
    media = (content_type or "").split(";")[0].strip().lower()
    if body == "json" and media not in ("", "application/json"):
        return f"Content-Type must be application/json, got {media[:60]!r}"
    if body == "form" and media != "application/x-www-form-urlencoded":
        return f"Content-Type must be application/x-www-form-urlencoded, got {media[:60]!r}"
    return None


# -- failed logins -------------------------------------------------------------------------


class LoginThrottle:
    """A growing wait before checking the credentials of an address that failed:
    ``base_ms`` (Kafka's ``connection.failed.authentication.delay.ms``) doubled per
    failure up to ``max_ms``, forgotten after a success or ``forget_s`` without one.
    The wait is before the check, so parallel guesses from one address wait too, and
    on the admin loop (asyncio.sleep), so others are not held up. Bounded: at most
    ``max_addresses`` remembered, the oldest dropped."""

    def __init__(
        self,
        base_ms: int,
        max_ms: int = 10_000,
        forget_s: float = 600.0,
        max_addresses: int = 10_000,
    ):
        self.base_ms = base_ms
        self.max_ms = max_ms
        self.forget_s = forget_s
        self.max_addresses = max_addresses
        self._lock = threading.Lock()
        self._failures: OrderedDict[str, tuple[int, float]] = OrderedDict()

    def delay_s(self, addr: str) -> float:
        with self._lock:
            n, last = self._failures.get(addr, (0, 0.0))
            if n == 0 or time.monotonic() - last > self.forget_s or self.base_ms <= 0:
                return 0.0
            return min(self.base_ms * 2 ** min(n - 1, 30), self.max_ms) / 1000

    def failure(self, addr: str) -> None:
        with self._lock:
            now = time.monotonic()
            n, last = self._failures.pop(addr, (0, 0.0))
            self._failures[addr] = (1 if now - last > self.forget_s else n + 1, now)
            while len(self._failures) > self.max_addresses:
                self._failures.popitem(last=False)

    def success(self, addr: str) -> None:
        with self._lock:
            self._failures.pop(addr, None)
