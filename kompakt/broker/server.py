"""The Kafka protocol server: the asyncio layer around the sans-IO protocol.

This module alone does I/O: it accepts connections, reads bytes into a
:class:`~kompakt.broker.connection.KafkaConnection` (which does the framing and
decoding), runs each request's handler (a plain function on a worker thread, a
coroutine on the loop), waits out delayed answers (a long-polling Fetch: Kafka's
purgatory) and writes the response bytes back. One task per connection; requests on
one connection are handled one at a time, in order (as Kafka does by muting a channel
while a request is in flight), so pipelined requests are answered in order and a
long-polling fetch only holds its own connection. Whatever the protocol object refuses
(a frame larger than ``socket.request.max.bytes``, a truncated frame, an unknown API
key, an undecodable request) closes that connection with a log line; the server
carries on.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from typing import Any

from kompakt.broker.connection import CLOSED, NEED_DATA, Answer, KafkaConnection, Request
from kompakt.broker.metrics import BrokerMetrics, has_error
from kompakt.broker.protocol import ProtocolError
from kompakt.broker.registry import ApiRegistry, DelayedResponse, Handler, Result
from kompakt.broker.state import BrokerState, RequestContext
from kompakt.errors import KompaktError

log = logging.getLogger(__name__)

READ_SIZE = 1 << 16


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
        except ConnectionError:
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
        protocol = KafkaConnection(self.registry, self.max_request_bytes)
        while not self._closing:
            t0 = time.monotonic()
            try:
                event = protocol.next_event()
            except ProtocolError as exc:
                log.log(exc.level, "closing %s: %s", conn.peer, exc)
                if exc.api is not None:
                    self._observe(exc.api, t0, True)
                return
            if event is NEED_DATA:
                protocol.receive_data(await conn.reader.read(READ_SIZE))
                continue
            if event is CLOSED:
                return
            conn.busy = True
            try:
                if isinstance(event, Answer):
                    if event.note:
                        log.info("%s: %s", conn.peer, event.note)
                    self._observe(event.api, t0, True)
                    out: bytes | None = event.data
                else:
                    assert isinstance(event, Request)
                    out = await self._respond(conn, protocol, event, t0)
                if out is None:
                    return
                if out:
                    conn.writer.write(out)
                    await conn.writer.drain()
            finally:
                conn.busy = False

    async def _respond(
        self, conn: _Connection, protocol: KafkaConnection, req: Request, t0: float
    ) -> bytes | None:
        """The response bytes, b'' for no response, or None to close the connection."""
        ctx = RequestContext(
            self.state,
            req.api.api_key,
            req.api_version,
            req.correlation_id,
            req.client_id,
            conn.peer,
        )
        try:
            result = await self._call(req.api.handler, ctx, req.body)
        except Exception:
            log.exception(
                "%s v%d from %s failed; closing the connection",
                req.name,
                req.api_version,
                conn.peer,
            )
            self._observe(req.name, t0, True)
            return None
        if result is None:
            self._observe(req.name, t0, False)
            return b""
        try:
            out = protocol.send(req, result)
        except Exception:
            log.exception(
                "cannot encode %s v%d response; closing %s", req.name, req.api_version, conn.peer
            )
            self._observe(req.name, t0, True)
            return None
        self._observe(req.name, t0, has_error(result))
        return out

    async def _call(self, handler: Handler, ctx: RequestContext, body: Any) -> Any:
        """Run a handler where it belongs: a coroutine on the loop, a plain function on a
        worker thread (it may block on the log); then wait out a delayed answer."""
        if inspect.iscoroutinefunction(handler):
            result: Result = await handler(ctx, body)
        else:
            result = await asyncio.to_thread(handler, ctx, body)  # type: ignore[arg-type]
        if isinstance(result, DelayedResponse):
            return await self._complete(result)
        return result

    async def _complete(self, delayed: DelayedResponse) -> Any:
        """Kafka's ``DelayedOperationPurgatory.tryCompleteElseWatch`` for one operation:
        watch its partitions, then poll once more, so an append since the handler's read
        is not missed; poll again after every append and once at the timeout."""
        notifier = self.state.notifier
        if notifier is None:
            return (await asyncio.to_thread(delayed.poll))[0]
        deadline = time.monotonic() + max(0.0, delayed.timeout)
        woken = notifier.register(delayed.keys)
        try:
            first = True
            while True:
                woken.clear()
                response, complete = await asyncio.to_thread(self._poll, delayed, first)
                first = False
                remaining = deadline - time.monotonic()
                if complete or remaining <= 0 or self.state.closing:
                    return response
                try:
                    await asyncio.wait_for(woken.wait(), timeout=remaining)
                except TimeoutError:
                    return (await asyncio.to_thread(delayed.poll))[0]
        finally:
            notifier.unregister(woken, delayed.keys)

    def _poll(self, delayed: DelayedResponse, first: bool) -> tuple[Any, bool]:
        """``delayed.poll()`` on a worker thread; the first time, after having the watched
        partitions' logs announce their appends to the notifier."""
        assert self.state.notifier is not None
        for topic, partition in delayed.keys if first else ():
            try:
                plog = self.state.logs.get_log(topic, partition)
            except KompaktError:  # deleted meanwhile: the poll answers for it
                continue
            self.state.notifier.hook(plog)
        return delayed.poll()

    def _observe(self, api: str, t0: float, error: bool) -> None:
        if self.metrics is not None:
            self.metrics.observe(api, time.monotonic() - t0, error)
