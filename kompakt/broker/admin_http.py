"""The admin/metrics HTTP endpoint (``kompakt.admin.listener``, default 127.0.0.1:9644).

``GET /metrics`` is Prometheus text; ``GET /v1/partitions`` lists per-partition log and
compaction state as JSON; ``POST /v1/compact`` with ``{"topic": T, "partition": P,
"dry_run": bool, "engine": "spark"|"local"}`` cleans on demand (or reports what a clean
would do) through :meth:`~kompakt.cleaner.cleaner.Cleaner.compact_now`, the code
``kompakt compact --data-dir`` runs, and answers its document
(:mod:`kompakt.cleaner.report`). Bad JSON or a bad field (an unknown engine too) is a
400 with a JSON error, an unknown topic a 404, a clean aborted by a shutdown a 503.
It runs on a daemon
thread with the standard library's HTTP server: the endpoint is low-traffic and must
not share the protocol event loop's latency.

Security (issue 16): ``https://HOST:PORT`` serves TLS with the broker's ssl.* keys
(overridable as ``listener.name.admin.ssl.*``). ``kompakt.admin.auth=basic`` asks for HTTP
Basic credentials checked against the SCRAM users (the password is run through the
stored salt and iterations and compared with the stored key: no second secret store to
keep), for POST always and for GET when ``kompakt.admin.auth.get=true`` (so a Prometheus
scraper may stay anonymous). Basic rather than a bearer token: the users and their
rotation already exist (``kompakt user``), and a token would be one more secret in a
config file. Without auth, or with Basic over plain http, the endpoint refuses a
non-loopback address unless ``kompakt.admin.allow.insecure=true``.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import json
import logging
import ssl
import sys
import threading
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlparse

from kompakt.errors import InvalidConfigError, InvalidTopicError, KompaktError, UnknownTopicError

log = logging.getLogger(__name__)

MAX_BODY = 64 * 1024


class AdminApi:
    """What the endpoint serves; the broker wires these to its log manager and cleaner."""

    def __init__(
        self,
        metrics: Callable[[], bytes],
        partitions: Callable[[], list[dict[str, Any]]],
        compact: Callable[[str, int | None, bool, str | None], Any],
    ):
        self.metrics = metrics
        self.partitions = partitions
        self.compact = compact


def parse_listener(url: str) -> tuple[str, int]:
    parsed = urlparse(url if "://" in url else f"http://{url}")
    if parsed.scheme not in ("http", "https") or not parsed.hostname or parsed.port is None:
        raise ValueError(f"kompakt.admin.listener must look like http://HOST:PORT, got {url!r}")
    return parsed.hostname, parsed.port


def is_tls(url: str) -> bool:
    return url.startswith("https://")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# checks a Basic user:password; returns a failure reason or None
Authenticator = Callable[[str, str], str | None]


class _HTTPServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A failed TLS handshake was logged and counted already; others get a log line
        (the standard library would print a traceback to stderr)."""
        exc = sys.exc_info()[1]
        if not isinstance(exc, (ssl.SSLError, OSError)):
            log.exception("admin request from %s failed", client_address[0])


class AdminServer:
    def __init__(
        self,
        api: AdminApi,
        host: str = "127.0.0.1",
        port: int = 9644,
        *,
        tls: ssl.SSLContext | None = None,
        authenticate: Authenticator | None = None,
        auth_get: bool = False,
        on_failure: Callable[[str], None] = lambda reason: None,
    ):
        self.api = api
        self.scheme = "https" if tls is not None else "http"
        handler = _make_handler(api, authenticate, auth_get, on_failure)
        try:
            self.httpd = _HTTPServer((host, port), handler, bind_and_activate=False)
            if tls is not None:  # the handshake runs in the request's thread, lazily
                self.httpd.socket = tls.wrap_socket(
                    self.httpd.socket, server_side=True, do_handshake_on_connect=False
                )
            self.httpd.server_bind()
            self.httpd.server_activate()
        except OSError as exc:  # name the address, as asyncio does for the Kafka port
            raise OSError(
                exc.errno,
                f"error while attempting to bind the admin listener (kompakt.admin.listener) "
                f"on address ('{host}', {port}): {exc.strerror or exc}",
            ) from exc
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, name="kompakt-admin", daemon=True
        )

    @property
    def port(self) -> int:
        return self.httpd.server_address[1]

    def start(self) -> None:
        self.thread.start()
        log.info(
            "admin endpoint listening on %s://%s:%d", self.scheme, *self.httpd.server_address[:2]
        )

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _make_handler(
    api: AdminApi,
    authenticate: Authenticator | None,
    auth_get: bool,
    on_failure: Callable[[str], None],
) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "kompakt-admin"

        def setup(self) -> None:
            if isinstance(self.request, ssl.SSLSocket):
                self.request.settimeout(10)
                try:
                    self.request.do_handshake()
                except (ssl.SSLError, OSError) as exc:
                    log.info("admin TLS handshake from %s failed: %s", self.client_address[0], exc)
                    on_failure("ssl_handshake")
                    raise
            super().setup()

        def _authorized(self) -> bool:
            """HTTP Basic against the SCRAM users; answers 401 itself when not."""
            if authenticate is None:
                return True
            header = self.headers.get("Authorization") or ""
            reason = "no_credentials"
            if header.startswith("Basic "):
                try:
                    user, sep, password = (
                        base64.b64decode(header[6:], validate=True).decode().partition(":")
                    )
                    failed = authenticate(user, password) if sep else "malformed"
                except (binascii.Error, UnicodeDecodeError):
                    failed = "malformed"
                if failed is None:
                    return True
                reason = failed
            log.info("admin request from %s refused: %s", self.client_address[0], reason)
            on_failure(reason)
            body = json.dumps({"error": "authentication required"}).encode()
            self.send_response(HTTPStatus.UNAUTHORIZED)
            self.send_header("WWW-Authenticate", 'Basic realm="kompakt", charset="UTF-8"')
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return False

        def log_message(self, fmt: str, *args: Any) -> None:
            log.debug("admin %s - " + fmt, self.client_address[0], *args)

        def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _json(self, status: int, obj: Any) -> None:
            self._send(status, json.dumps(obj, indent=1, default=str).encode())

        def do_GET(self) -> None:  # noqa: N802 (http.server naming)
            path = urlparse(self.path).path
            if auth_get and not self._authorized():
                return
            try:
                if path == "/metrics":
                    self._send(
                        HTTPStatus.OK, api.metrics(), "text/plain; version=0.0.4; charset=utf-8"
                    )
                elif path == "/v1/partitions":
                    self._json(HTTPStatus.OK, {"partitions": api.partitions()})
                else:
                    self._json(HTTPStatus.NOT_FOUND, {"error": f"no such endpoint {path}"})
            except Exception as exc:  # an admin request must never take the broker down
                log.exception("admin GET %s failed", path)
                self._json(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": str(exc)})

        def do_POST(self) -> None:  # noqa: N802
            path = urlparse(self.path).path
            if not self._authorized():
                return
            if path != "/v1/compact":
                self._json(HTTPStatus.NOT_FOUND, {"error": f"no such endpoint {path}"})
                return
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                self._json(HTTPStatus.BAD_REQUEST, {"error": "bad Content-Length"})
                return
            if length < 0 or length > MAX_BODY:
                self._json(
                    HTTPStatus.BAD_REQUEST, {"error": f"body must be at most {MAX_BODY} bytes"}
                )
                return
            try:
                req = json.loads(self.rfile.read(length) or b"{}")
            except (ValueError, RecursionError) as exc:  # bad JSON, bad UTF-8, deep nesting
                self._json(
                    HTTPStatus.BAD_REQUEST, {"error": f"invalid JSON: {type(exc).__name__}: {exc}"}
                )
                return
            if not isinstance(req, dict) or not isinstance(req.get("topic"), str):
                self._json(
                    HTTPStatus.BAD_REQUEST,
                    {"error": 'expected {"topic": str, "partition": int?, "dry_run": bool?}'},
                )
                return
            # imported here: the cleaner (numba, numpy) loads on the first compaction
            from kompakt.cleaner.manager import CleaningAbortedError
            from kompakt.engines import check_engine

            part = req.get("partition")
            dry = req.get("dry_run", False)
            engine = req.get("engine")
            try:
                if engine is not None:
                    check_engine(engine if isinstance(engine, str) else repr(engine))
            except InvalidConfigError as exc:
                self._json(HTTPStatus.BAD_REQUEST, {"error": str(exc)})
                return
            if (
                part is not None
                and (not isinstance(part, int) or isinstance(part, bool) or part < 0)
            ) or not isinstance(dry, bool):
                self._json(
                    HTTPStatus.BAD_REQUEST,
                    {"error": "partition must be a non-negative integer and dry_run a boolean"},
                )
                return
            try:
                self._json(HTTPStatus.OK, api.compact(req["topic"], part, dry, engine))
            except (UnknownTopicError, InvalidTopicError) as exc:
                self._json(HTTPStatus.NOT_FOUND, {"error": str(exc)})
            except CleaningAbortedError as exc:
                self._json(HTTPStatus.SERVICE_UNAVAILABLE, {"error": str(exc)})
            except KompaktError as exc:
                self._json(HTTPStatus.CONFLICT, {"error": str(exc)})
            except Exception as exc:
                log.exception("admin compact failed")
                self._json(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": str(exc)})

    return Handler
