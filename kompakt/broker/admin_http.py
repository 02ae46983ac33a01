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
"""

from __future__ import annotations

import json
import logging
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
    if parsed.scheme != "http" or not parsed.hostname or parsed.port is None:
        raise ValueError(f"kompakt.admin.listener must look like http://HOST:PORT, got {url!r}")
    return parsed.hostname, parsed.port


class AdminServer:
    def __init__(self, api: AdminApi, host: str = "127.0.0.1", port: int = 9644):
        self.api = api
        handler = _make_handler(api)
        try:
            self.httpd = ThreadingHTTPServer((host, port), handler)
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
        log.info("admin endpoint listening on http://%s:%d", *self.httpd.server_address[:2])

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _make_handler(api: AdminApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "kompakt-admin"

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
