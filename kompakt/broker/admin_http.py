"""The admin/metrics HTTP endpoint (``kompakt.admin.listener``, default 127.0.0.1:9644).

``GET /metrics`` is Prometheus text; ``GET /v1/partitions`` lists per-partition log and
compaction state as JSON; ``POST /v1/compact`` with ``{"topic": T, "partition": P,
"dry_run": bool, "engine": "spark"|"local"}`` cleans on demand (or reports what a clean
would do) through :meth:`~kompakt.cleaner.cleaner.Cleaner.compact_now`, the code
``kompakt compact --data-dir`` runs, and answers its document
(:mod:`kompakt.cleaner.report`). Bad JSON or a bad field (an unknown engine too) is a
400 with a JSON error, an unknown topic a 404, a clean aborted by a shutdown a 503.
``GET /`` is the web console (:mod:`kompakt.broker.console`), ``GET /v1`` (or ``/`` with
``Accept: application/json``) the endpoint list.

The routes are an ASGI application (:func:`kompakt.broker.console.app.build_app`,
Starlette) served by uvicorn's ``Server`` on its own thread and event loop
(:class:`AdminServer`): the endpoint must not share the Kafka event loop's latency, and
its blocking work (status walks, a clean) runs in the ASGI threadpool, so a slow page
never holds up another request either.

Security (issues 16, 26): ``https://HOST:PORT`` serves TLS with the broker's ssl.* keys
(overridable as ``listener.name.admin.ssl.*``). Every request passes the gate
(:mod:`kompakt.broker.http_gate`): its principal is found as a Kafka connection's
(``kompakt.admin.auth=basic``: HTTP Basic against the SCRAM users, for every route, GET
included; ``none``: User:ANONYMOUS, an Authorization header ignored, or on https with
``listener.name.admin.ssl.client.auth=required`` (or ``requested``) the client
certificate's subject through ``[listener.name.admin.]ssl.principal.mapping.rules``, as
on a Kafka SSL listener), and each route asks
the broker's authorizer for the Kafka operation it amounts to. Basic rather than a bearer
token: the users and their rotation already exist (``kompakt user``), and a token would be
one more secret in a config file. Browser safety (Host allow-list, Origin, JSON only,
security headers, failed-login delay) is :mod:`kompakt.broker.http_browser`; a client
gets :data:`HEADER_TIMEOUT_S` to send a request's headers (uvicorn has no such limit: its
keep-alive timer is reset by every byte, so one byte every few seconds held a connection
for ever). Without auth, or with Basic over plain http, the endpoint refuses a
non-loopback address unless ``kompakt.admin.allow.insecure=true``.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import threading
from collections.abc import Callable
from typing import Any

from kompakt.broker.listeners import is_loopback, is_tls, parse_listener
from kompakt.broker.seams import BrokerView

__all__ = ["AdminApi", "AdminServer", "is_loopback", "is_tls", "parse_listener"]

log = logging.getLogger(__name__)

MAX_BODY = 64 * 1024
TLS_HANDSHAKE_TIMEOUT_S = 10.0
HEADER_TIMEOUT_S = 10.0


class AdminApi:
    """What the endpoint serves; the broker wires these to its log manager and cleaner.

    ``broker`` is the :class:`~kompakt.broker.app.Broker` (None in a bare test app): the
    console pages read its logs, cleaner and coordinators through :class:`BrokerView`. ``writes`` is
    ``kompakt.admin.console.writes``: whether the console offers actions that change
    data (compact now, config edits); the JSON API keeps ``POST /v1/compact``.
    """

    def __init__(
        self,
        metrics: Callable[[], bytes],
        partitions: Callable[[], list[dict[str, Any]]],
        compact: Callable[[str, int | None, bool, str | None], Any],
        broker: BrokerView | None = None,
        writes: bool = False,
    ):
        self.metrics = metrics
        self.partitions = partitions
        self.compact = compact
        self.broker = broker
        self.writes = writes


def header_timeout_protocol(timeout_s: float) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol with a deadline for a request's headers: from the
    connection (or the end of the previous response) to the end of the headers; past
    it the connection is closed. A slow body is bounded by MAX_BODY and the handlers."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeaderDeadline(H11Protocol):
        header_timer: asyncio.TimerHandle | None = None

        def _arm(self) -> None:
            self._disarm()
            self.header_timer = self.loop.call_later(timeout_s, self._expired)

        def _disarm(self) -> None:
            if self.header_timer is not None:
                self.header_timer.cancel()
                self.header_timer = None

        def _expired(self) -> None:
            self.header_timer = None
            if self.conn.their_state in (h11.IDLE,) and not self.transport.is_closing():
                log.info(
                    "admin connection from %s closed: no request headers in %.0f s",
                    (self.client or ("?",))[0],
                    timeout_s,
                )
                self.transport.close()

        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def handle_events(self) -> None:
            super().handle_events()
            if self.conn.their_state is not h11.IDLE:  # a request's headers arrived
                self._disarm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

    return HeaderDeadline


def _tls_first_protocol(
    tls: ssl.SSLContext,
    on_failure: Callable[[str], None],
    pending: set[asyncio.Transport],
    inner: type[Any],
) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol behind a TLS handshake that this code runs itself.

    uvicorn hands TLS to ``loop.create_server(ssl=...)``, where a failed handshake (plain
    http to the https port, a bad client) is dropped without a word and a stalled one
    holds a connection for a minute; the endpoint counts failures
    (``kompakt_auth_failures{reason="ssl_handshake"}``) as Kafka counts its failed
    authentications, and gives a handshake 10 s. So the socket is served plain, and each
    connection is upgraded with ``loop.start_tls`` before uvicorn's protocol sees it.
    """

    from kompakt.broker.http_gate import PEER_CERT

    class CountingSSLObject(ssl.SSLObject):
        """Counts a failed handshake where it fails, before asyncio closes the socket,
        so a client that sees the refusal also sees it counted."""

        def do_handshake(self) -> None:
            try:
                super().do_handshake()
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                raise
            except (ssl.SSLError, OSError):
                on_failure("ssl_handshake")
                raise

    tls.sslobject_class = CountingSSLObject  # a documented hook (SSLContext.wrap_bio)

    class TlsFirst(asyncio.Protocol):
        """The app protocol ``start_tls`` is given: it holds what arrives between the
        handshake and uvicorn's ``connection_made`` (asyncio delivers decrypted data
        before ``start_tls`` returns), then passes everything through."""

        def __init__(self, config: Any, server_state: Any, app_state: Any, _loop: Any = None):
            self.inner = inner(config, server_state, app_state, _loop)
            self.loop = _loop or asyncio.get_event_loop()
            self.connected = False
            self.early: list[bytes] = []
            self.early_eof = False
            self.lost: tuple[Exception | None] | None = None

        def connection_made(self, transport: Any) -> None:
            if self.connected:
                return
            transport.pause_reading()
            pending.add(transport)
            self.loop.create_task(self._handshake(transport))

        async def _handshake(self, raw: Any) -> None:
            peer = (raw.get_extra_info("peername") or ("?",))[0]
            try:
                tls_transport = await self.loop.start_tls(
                    raw, self, tls, server_side=True, ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT_S
                )
            except (TimeoutError, ssl.SSLError, OSError, EOFError) as exc:
                log.info("admin TLS handshake from %s failed: %s", peer, exc)
                if isinstance(exc, TimeoutError):  # SSL errors were counted as they arose
                    on_failure("ssl_handshake")
                raw.close()
                return
            finally:
                pending.discard(raw)
            if tls_transport is None:  # closed meanwhile
                return
            self.connected = True
            sslobj = tls_transport.get_extra_info("ssl_object")
            der = sslobj.getpeercert(binary_form=True) if sslobj is not None else None
            if der:  # the client certificate, for the gate: each request's scope["state"]
                self.inner.app_state = {**self.inner.app_state, PEER_CERT: der}
            self.inner.connection_made(tls_transport)
            for data in self.early:
                self.inner.data_received(data)
            self.early.clear()
            if self.early_eof:
                self.inner.eof_received()
            if self.lost is not None:
                self.inner.connection_lost(self.lost[0])

        def data_received(self, data: bytes) -> None:
            if self.connected:
                self.inner.data_received(data)
            else:
                self.early.append(data)

        def eof_received(self) -> bool | None:
            if self.connected:
                return self.inner.eof_received()
            self.early_eof = True
            return None

        def connection_lost(self, exc: Exception | None) -> None:
            if self.connected:
                self.inner.connection_lost(exc)
            else:
                self.lost = (exc,)

        def pause_writing(self) -> None:
            if self.connected:
                self.inner.pause_writing()

        def resume_writing(self) -> None:
            if self.connected:
                self.inner.resume_writing()

    return TlsFirst


class AdminServer:
    """uvicorn's ``Server`` for the admin ASGI app, on a daemon thread with its own loop.

    The socket is bound here, before the thread starts, so a taken port fails the
    broker's start with the address named (as asyncio does for the Kafka port), port 0
    works, and connections made before the loop runs wait in the listen backlog.
    """

    def __init__(
        self,
        api: AdminApi,
        host: str = "127.0.0.1",
        port: int = 9644,
        *,
        tls: ssl.SSLContext | None = None,
        gate: Any = None,
        header_timeout_s: float = HEADER_TIMEOUT_S,
    ):
        import uvicorn

        from kompakt.broker.console.app import build_app
        from kompakt.broker.http_gate import GateSettings

        self.api = api
        self.scheme = "https" if tls is not None else "http"
        gate = gate or GateSettings()
        self.app = build_app(api, gate=gate)
        try:
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            self.sock = socket.socket(family, socket.SOCK_STREAM)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.sock.bind((host, port))
            self.sock.listen(128)
            self.sock.setblocking(False)
        except OSError as exc:  # name the address, as asyncio does for the Kafka port
            self.sock.close()
            raise OSError(
                exc.errno,
                f"error while attempting to bind the admin listener (kompakt.admin.listener) "
                f"on address ('{host}', {port}): {exc.strerror or exc}",
            ) from exc
        self._pending: set[asyncio.Transport] = set()
        protocol = header_timeout_protocol(header_timeout_s)
        if tls is not None:
            protocol = _tls_first_protocol(tls, gate.on_failure, self._pending, protocol)
        self.config = uvicorn.Config(
            self.app,
            http=protocol,
            lifespan="off",
            log_config=None,
            access_log=False,
            server_header=False,
            # the peer is the socket's address, never a client's header: uvicorn
            # otherwise takes X-Forwarded-For from loopback peers, and an ACL's host
            # and the failed-login delay would go by what the client wrote (Kafka's
            # RequestContext.clientAddress is the connection's)
            proxy_headers=False,
            timeout_graceful_shutdown=5,
            h11_max_incomplete_event_size=MAX_BODY,
        )
        self.server = uvicorn.Server(self.config)
        quiet = logging.getLogger("uvicorn.error")  # its start/stop lines repeat ours
        if quiet.level == logging.NOTSET:
            quiet.setLevel(logging.WARNING)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread = threading.Thread(target=self._run, name="kompakt-admin", daemon=True)

    def _run(self) -> None:
        self.loop = asyncio.new_event_loop()
        try:
            self.loop.run_until_complete(self.server.serve(sockets=[self.sock]))
        except Exception:
            log.exception("admin endpoint stopped with an error")
        finally:
            self.loop.close()

    @property
    def port(self) -> int:
        return self.sock.getsockname()[1]

    @property
    def url(self) -> str:
        """Where a client reaches the endpoint: https when it serves TLS, the port bound."""
        host = self.sock.getsockname()[0]
        return f"{self.scheme}://{f'[{host}]' if ':' in host else host}:{self.port}"

    def start(self) -> None:
        self.thread.start()
        log.info("admin endpoint listening on %s", self.url)

    def stop(self) -> None:
        self.server.should_exit = True
        loop = self.loop
        if loop is not None and not loop.is_closed():
            try:  # connections still in their TLS handshake are not uvicorn's yet
                loop.call_soon_threadsafe(lambda: [t.close() for t in list(self._pending)])
            except RuntimeError:
                pass
        if self.thread.is_alive():
            self.thread.join(8)
        if self.thread.is_alive():
            self.server.force_exit = True
            self.thread.join(5)
        self.sock.close()
