"""The Kafka protocol server: asyncio TCP, one task per connection.

A frame is an int32 size and a request. Requests on one connection are handled one at
a time, in order (as Kafka does by muting a channel while a request is in flight), so
pipelined requests are answered in order; a long-polling fetch only holds its own
connection. A frame larger than ``socket.request.max.bytes``, a truncated frame, an
unknown API key or an undecodable request closes that connection with a log line; the
server carries on.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from kompakt.broker.metrics import BrokerMetrics, has_error
from kompakt.broker.protocol import (
    INT32,
    FrameError,
    encode_response,
    parse_request,
    peek_header,
    request_class,
    response_class,
)
from kompakt.broker.registry import ApiRegistry, api_name
from kompakt.broker.state import BrokerState, RequestContext

log = logging.getLogger(__name__)

API_VERSIONS = 18
UNSUPPORTED_VERSION = 35
MIN_FRAME = 8  # api_key, api_version, correlation_id


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader = reader
        self.writer = writer
        self.busy = False
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)


class KafkaServer:
    def __init__(
        self,
        state: BrokerState,
        registry: ApiRegistry,
        metrics: BrokerMetrics | None = None,
        host: str = "127.0.0.1",
        port: int = 9092,
    ):
        self.state = state
        self.registry = registry
        self.metrics = metrics
        self.host = host
        self.port = port
        self.max_request_bytes = int(state.config.get("socket.request.max.bytes"))
        self._server: asyncio.base_events.Server | None = None
        self._conns: dict[asyncio.Task, _Connection] = {}
        self._closing = False

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._on_connect, self.host or None, self.port, reuse_address=True
        )
        sock = self._server.sockets[0]
        self.port = sock.getsockname()[1]

    @property
    def bound_port(self) -> int:
        return self.port

    async def stop(self, timeout: float = 10.0) -> None:
        """Stop accepting, let in-flight requests finish, close every connection."""
        self._closing = True
        if self._server is not None:
            self._server.close()
        if self.state.notifier is not None:
            self.state.notifier.wake_all()
        for conn in list(self._conns.values()):
            if not conn.busy:
                conn.writer.close()
        tasks = list(self._conns)
        if tasks:
            done, pending = await asyncio.wait(tasks, timeout=timeout)
            for t in pending:
                t.cancel()
            if pending:
                await asyncio.wait(pending, timeout=1.0)
        if self._server is not None:
            try:
                await asyncio.wait_for(self._server.wait_closed(), timeout=1.0)
            except TimeoutError:
                pass

    # -- connections -----------------------------------------------------------------------
    async def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        conn = _Connection(reader, writer)
        if self._closing:
            writer.close()
            return
        assert task is not None
        self._conns[task] = conn
        try:
            await self._serve(conn)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("connection %s failed", conn.peer)
        finally:
            self._conns.pop(task, None)
            try:
                writer.close()
            except Exception:
                pass

    async def _serve(self, conn: _Connection) -> None:
        while not self._closing:
            try:
                head = await conn.reader.readexactly(4)
            except asyncio.IncompleteReadError as exc:
                if exc.partial:
                    log.info("closing %s: truncated size prefix", conn.peer)
                return
            (size,) = INT32.unpack(head)
            if size < MIN_FRAME or size > self.max_request_bytes:
                log.warning(
                    "closing %s: request size %d outside [%d, socket.request.max.bytes=%d]",
                    conn.peer,
                    size,
                    MIN_FRAME,
                    self.max_request_bytes,
                )
                return
            try:
                frame = await conn.reader.readexactly(size)
            except asyncio.IncompleteReadError:
                log.info("closing %s: connection ended inside a %d-byte request", conn.peer, size)
                return
            conn.busy = True
            try:
                out = await self._handle(conn, frame)
                if out is None:
                    return
                if out:
                    conn.writer.write(out)
                    await conn.writer.drain()
            finally:
                conn.busy = False

    async def _handle(self, conn: _Connection, frame: bytes) -> bytes | None:
        """The response bytes, b'' for no response, or None to close the connection."""
        t0 = time.monotonic()
        try:
            api_key, version, correlation_id = peek_header(frame)
        except FrameError as exc:
            log.warning("closing %s: %s", conn.peer, exc)
            return None
        api = self.registry.get(api_key)
        name = api_name(api_key)
        if api is None:
            log.warning("closing %s: unsupported API key %d", conn.peer, api_key)
            self._observe(name, t0, True)
            return None
        if not api.supports(version):
            self._observe(name, t0, True)
            return self._unsupported_version(conn, api_key, version, correlation_id, frame)
        req_cls = request_class(api_key, version)
        resp_cls = response_class(api_key, version)
        if req_cls is None or resp_cls is None:
            log.warning("closing %s: no schema for %s v%d", conn.peer, name, version)
            return None
        try:
            header, body = parse_request(frame, req_cls)
        except FrameError as exc:
            log.warning("closing %s: %s", conn.peer, exc)
            self._observe(name, t0, True)
            return None
        ctx = RequestContext(
            self.state,
            api_key,
            version,
            correlation_id,
            getattr(header, "client_id", None),
            conn.peer,
        )
        try:
            result = await api.handler(ctx, body)
        except Exception:
            log.exception("%s v%d from %s failed; closing the connection", name, version, conn.peer)
            self._observe(name, t0, True)
            return None
        if result is None:
            self._observe(name, t0, False)
            return b""
        try:
            out = encode_response(resp_cls, correlation_id, result)
        except Exception:
            log.exception("cannot encode %s v%d response; closing %s", name, version, conn.peer)
            self._observe(name, t0, True)
            return None
        self._observe(name, t0, has_error(result))
        return out

    def _unsupported_version(
        self, conn: _Connection, api_key: int, version: int, correlation_id: int, frame: bytes
    ) -> bytes | None:
        if api_key == API_VERSIONS:
            # Kafka answers an ApiVersions it cannot parse with v0 + UNSUPPORTED_VERSION and
            # its version list, so the client can retry with a version both know.
            body = {
                "error_code": UNSUPPORTED_VERSION,
                "api_keys": self.registry.advertised(),
            }
            return encode_response(response_class(API_VERSIONS, 0), correlation_id, body)
        resp_cls = response_class(api_key, version)
        req_cls = request_class(api_key, version)
        if resp_cls is not None and req_cls is not None:
            body: dict[str, Any] = {"error_code": UNSUPPORTED_VERSION}
            log.info(
                "%s: %s v%d is not supported; answering UNSUPPORTED_VERSION",
                conn.peer,
                api_name(api_key),
                version,
            )
            try:
                return encode_response(resp_cls, correlation_id, body)
            except Exception:
                pass
        log.warning("closing %s: %s v%d is not supported", conn.peer, api_name(api_key), version)
        return None

    def _observe(self, api: str, t0: float, error: bool) -> None:
        if self.metrics is not None:
            self.metrics.observe(api, time.monotonic() - t0, error)
