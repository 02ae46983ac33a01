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
import collections
import functools
import inspect
import logging
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kompakt.broker.connection import CLOSED, NEED_DATA, Answer, KafkaConnection, Request
from kompakt.broker.flush import DurableResponse, GroupCommit
from kompakt.broker.metrics import BrokerMetrics, has_error
from kompakt.broker.protocol import ProtocolError
from kompakt.broker.registry import ApiRegistry, DelayedResponse, Handler, Result
from kompakt.broker.security.principal import NoMatchingRule, PrincipalMapper, cert_principal
from kompakt.broker.security.sasl import SaslAuthenticator
from kompakt.broker.state import BrokerState, RequestContext
from kompakt.errors import KompaktError

log = logging.getLogger(__name__)

READ_SIZE = 1 << 16
# requests up to this size decode on the loop (fast); larger ones on a worker thread,
# which only this connection's task uses the protocol object from, one call at a time
DECODE_ON_LOOP_BYTES = 1 << 20
TLS_HANDSHAKE_TIMEOUT = 10.0
ANONYMOUS = "User:ANONYMOUS"
PRODUCE = 0  # API key: a Produce may be handled while earlier ones wait for their fsync
# acks=all answers one connection may have waiting for their fsync before the server
# stops reading its next requests (librdkafka's max.in.flight for idempotence is 5)
MAX_AWAITING_FLUSH = 16
# an acks=all answer naming up to this many partitions is encoded on the loop (no hop)
ENCODE_ON_LOOP_PARTITIONS = 64


@dataclass
class ListenerSpec:
    """One listener as the server binds it: name, security protocol, address, and what
    its protocol needs (a TLS context; a SASL authenticator per connection)."""

    name: str
    protocol: str
    host: str
    port: int
    ssl: ssl.SSLContext | None = None
    sasl: Callable[[], SaslAuthenticator] | None = None
    mapper: PrincipalMapper | None = None
    sasl_max_receive: int = 524288


def _encode(encode: Callable[[Any], bytes], result: Any) -> bytes | Exception:
    try:
        return encode(result)
    except Exception as exc:  # reported by the caller, with the request named
        return exc


def _handle(
    handler: Handler, ctx: RequestContext, body: Any, encode: Callable[[Any], bytes]
) -> tuple[Any, bytes | Exception | None]:
    """A plain handler's answer and its encoding, on one worker thread (a delayed answer
    is not encoded yet: it is completed on the loop)."""
    result = handler(ctx, body)
    if result is None or isinstance(result, DelayedResponse | DurableResponse):
        return result, None
    return result, _encode(encode, result)


def _forget(awaiting: collections.deque, task: asyncio.Task) -> None:
    try:
        awaiting.remove(task)
    except ValueError:
        pass


class _Connection:
    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, spec: ListenerSpec
    ):
        self.reader = reader
        self.writer = writer
        self.spec = spec
        self.busy = False
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.principal = ANONYMOUS
        self.sasl: SaslAuthenticator | None = None
        # answers waiting for an fsync, oldest first, each written after the one before
        self.awaiting: collections.deque[asyncio.Task[bool]] = collections.deque()


class KafkaServer:
    def __init__(
        self,
        state: BrokerState,
        registry: ApiRegistry,
        metrics: BrokerMetrics | None = None,
        host: str = "127.0.0.1",
        port: int = 9092,
        listeners: list[ListenerSpec] | None = None,
    ):
        self.state = state
        self.registry = registry
        self.metrics = metrics
        self.listeners = listeners or [ListenerSpec("PLAINTEXT", "PLAINTEXT", host, port)]
        self.host = self.listeners[0].host
        self.port = self.listeners[0].port
        self.ports: dict[str, int] = {}
        self.max_request_bytes = int(state.config.get("socket.request.max.bytes"))
        delay_ms = int(state.config.get("connection.failed.authentication.delay.ms"))
        self.failed_auth_delay = delay_ms / 1000
        self._server: asyncio.base_events.Server | None = None
        self._servers: list[asyncio.base_events.Server] = []
        self._conns: dict[asyncio.Task, _Connection] = {}
        self._closing = False
        self.flushes = GroupCommit()

    async def start(self) -> None:
        try:
            for spec in self.listeners:
                server = await asyncio.start_server(
                    functools.partial(self._on_connect, spec),
                    spec.host or None,
                    spec.port,
                    reuse_address=True,
                )
                self._servers.append(server)
                self.ports[spec.name] = server.sockets[0].getsockname()[1]
        except BaseException:
            for server in self._servers:
                server.close()
            raise
        self._server = self._servers[0]
        self.port = self.ports[self.listeners[0].name]

    @property
    def bound_port(self) -> int:
        return self.port

    async def stop(self, timeout: float = 10.0) -> None:
        """Stop accepting, let in-flight requests finish, close every connection."""
        self._closing = True
        for server in self._servers:
            server.close()
        if self.state.notifier is not None:
            self.state.notifier.wake_all()
        for conn in list(self._conns.values()):
            if not conn.busy and not conn.awaiting:
                conn.writer.close()
        tasks = list(self._conns)
        if tasks:
            done, pending = await asyncio.wait(tasks, timeout=timeout)
            for t in pending:
                t.cancel()
            if pending:
                await asyncio.wait(pending, timeout=1.0)
        for server in self._servers:
            try:
                await asyncio.wait_for(server.wait_closed(), timeout=1.0)
            except TimeoutError:
                pass

    # -- connections -----------------------------------------------------------------------
    async def _on_connect(
        self, spec: ListenerSpec, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        conn = _Connection(reader, writer, spec)
        if self._closing:
            writer.close()
            return
        assert task is not None
        self._conns[task] = conn
        try:
            if spec.ssl is not None and not await self._start_tls(conn):
                return
            if spec.sasl is not None:
                conn.sasl = spec.sasl()
            try:
                await self._serve(conn)
            finally:
                await self._settle(conn)
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

    async def _start_tls(self, conn: _Connection) -> bool:
        """The TLS handshake, then the principal from the client certificate (if any):
        False (counted, logged, connection to close) when either fails."""
        spec = conn.spec
        assert spec.ssl is not None
        try:
            await conn.writer.start_tls(spec.ssl, ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT)
        except (ssl.SSLError, ConnectionError, TimeoutError, OSError) as exc:
            self._auth_failed(conn, "SSL", "ssl_handshake", f"TLS handshake failed: {exc}")
            return False
        sslobj = conn.writer.get_extra_info("ssl_object")
        der = sslobj.getpeercert(binary_form=True) if sslobj is not None else None
        if der and spec.mapper is not None:
            try:
                conn.principal = cert_principal(spec.mapper, der)
            except NoMatchingRule as exc:
                self._auth_failed(conn, "SSL", "no_matching_rule", str(exc))
                return False
        return True

    def _auth_failed(self, conn: _Connection, mechanism: str, reason: str, text: str) -> None:
        log.info(
            "authentication failed on listener %s from %s (%s, %s): %s",
            conn.spec.name,
            conn.peer,
            mechanism,
            reason,
            text,
        )
        if self.metrics is not None:
            self.metrics.auth_failed(mechanism, reason)

    def _sasl_step(self, conn: _Connection, protocol: KafkaConnection, req: Request) -> Any:
        """A request on a SASL connection not yet authenticated: the authenticator's
        answer as (bytes, close, delayed) or None to let the handler answer."""
        assert conn.sasl is not None
        outcome = conn.sasl.on_request(req.api.api_key, req.api_version, req.body)
        if outcome.passthrough:
            return None
        if outcome.failure is not None:
            text = (
                f"{req.name} before authentication"
                if outcome.body is None
                else str(outcome.body.get("error_message") or outcome.body.get("error_code"))
            )
            self._auth_failed(conn, conn.sasl.mechanism or "-", outcome.failure, text)
        out = protocol.send(req, outcome.body) if outcome.body is not None else b""
        if conn.sasl.complete:
            conn.principal = conn.sasl.principal or ANONYMOUS
            protocol.max_request_bytes = self.max_request_bytes
            log.debug("%s authenticated as %s on %s", conn.peer, conn.principal, conn.spec.name)
        return out, outcome.close, outcome.delayed

    async def _serve(self, conn: _Connection) -> None:
        max_bytes = self.max_request_bytes
        if conn.sasl is not None:  # Kafka's sasl.server.max.receive.size, until authenticated
            max_bytes = min(max_bytes, conn.spec.sasl_max_receive)
        protocol = KafkaConnection(self.registry, max_bytes)
        while not self._closing:
            t0 = time.monotonic()
            try:
                if protocol.buffered < DECODE_ON_LOOP_BYTES:
                    event = protocol.next_event()
                else:  # a large request decodes for a second: not on the loop of everyone
                    event = await asyncio.to_thread(protocol.next_event)
            except ProtocolError as exc:
                log.log(exc.level, "closing %s: %s", conn.peer, exc)
                if exc.api is not None:
                    self._observe(exc.api, t0, True)
                if conn.sasl is not None and not conn.sasl.complete:
                    self._auth_failed(conn, conn.sasl.mechanism or "-", "bad_frame", str(exc))
                return
            if event is NEED_DATA:
                protocol.receive_data(await conn.reader.read(READ_SIZE))
                continue
            if event is CLOSED:
                return
            conn.busy = True
            try:
                produce = isinstance(event, Request) and event.api.api_key == PRODUCE
                # only a Produce overtakes answers waiting for their fsync, and only so many
                if conn.awaiting and not await self._wait_awaiting(conn, everything=not produce):
                    return
                if isinstance(event, Answer):
                    if event.note:
                        log.info("%s: %s", conn.peer, event.note)
                    self._observe(event.api, t0, True)
                    out: Any = event.data
                else:
                    assert isinstance(event, Request)
                    step = None
                    if conn.sasl is not None and not conn.sasl.complete:
                        step = self._sasl_step(conn, protocol, event)
                    if step is not None:
                        out, close, delayed = step
                        if delayed:  # the answer and the close wait, the other connections not
                            await asyncio.sleep(self.failed_auth_delay)
                        self._observe(event.name, t0, close)
                        if out:
                            conn.writer.write(out)
                            await conn.writer.drain()
                        if close:
                            return
                        continue
                    out = await self._respond(conn, protocol, event, t0)
                if inspect.iscoroutine(out) or (out is not None and conn.awaiting):
                    self._answer_later(conn, out)  # after the answers before it
                    continue
                if out is None:
                    return
                if out:
                    conn.writer.write(out)
                    await conn.writer.drain()
            finally:
                conn.busy = False

    # -- answers waiting for an fsync (acks=all) -------------------------------------------
    def _answer_later(self, conn: _Connection, out: Any) -> None:
        """Write ``out`` (bytes, or a coroutine giving them: an acks=all answer waiting
        for its fsync) once the connection's earlier answers are written: Kafka answers
        a connection's requests in order. Meanwhile the connection's next Produce is
        read and appended, so its fsync can cover both (group commit)."""
        prev = conn.awaiting[-1] if conn.awaiting else None
        task = asyncio.create_task(self._write_after(conn, prev, out))
        conn.awaiting.append(task)
        task.add_done_callback(functools.partial(_forget, conn.awaiting))

    async def _write_after(self, conn: _Connection, prev: asyncio.Task | None, out: Any) -> bool:
        """False once the connection is to close (its answer failed, or the peer left)."""
        try:
            if inspect.iscoroutine(out):
                out = await out
            if prev is not None and not await prev:
                return False
            if out is None:
                conn.writer.close()
                return False
            if out:
                conn.writer.write(out)
                await conn.writer.drain()
            if self._closing and not conn.busy and len(conn.awaiting) <= 1:
                conn.writer.close()  # the server stops: this was the connection's last answer
            return True
        except (ConnectionError, OSError):
            conn.writer.close()
            return False

    async def _wait_awaiting(self, conn: _Connection, everything: bool) -> bool:
        """Wait until no answer awaits its fsync (``everything``) or fewer than
        MAX_AWAITING_FLUSH do; False if the connection is to close."""
        while conn.awaiting and (everything or len(conn.awaiting) >= MAX_AWAITING_FLUSH):
            task = conn.awaiting[-1] if everything else conn.awaiting[0]
            if not await task:
                return False
            _forget(conn.awaiting, task)
        return True

    async def _settle(self, conn: _Connection) -> None:
        """At the connection's end: its answers waiting for an fsync are written (or
        given up with the connection), none left behind as stray tasks."""
        if conn.awaiting:
            await asyncio.gather(*conn.awaiting, return_exceptions=True)

    async def _respond(
        self, conn: _Connection, protocol: KafkaConnection, req: Request, t0: float
    ) -> Any:
        """The response bytes, b'' for no response, None to close the connection, or a
        coroutine giving one of those once the request's appends are fsynced (acks=all)."""
        ctx = RequestContext(
            self.state,
            req.api.api_key,
            req.api_version,
            req.correlation_id,
            req.client_id,
            conn.peer,
            conn.principal,
            conn.spec.name,
        )
        encode = functools.partial(protocol.send, req)  # pure: any thread may run it
        try:
            result, out = await self._call(req.api.handler, ctx, req.body, encode)
        except Exception:
            return self._failed(conn, req, t0)
        if isinstance(result, DurableResponse):
            return self._durable(conn, req, result, encode, t0)
        return self._encoded(conn, req, result, out, t0)

    async def _durable(
        self,
        conn: _Connection,
        req: Request,
        durable: DurableResponse,
        encode: Callable[[Any], bytes],
        t0: float,
    ) -> bytes | None:
        """An acks=all answer, once the group commit has fsynced its appends."""
        try:
            result = await self.flushes.complete(durable)
        except Exception:
            return self._failed(conn, req, t0)
        if len(durable.waits) <= ENCODE_ON_LOOP_PARTITIONS:
            out = _encode(encode, result)
        else:
            out = await asyncio.to_thread(_encode, encode, result)
        return self._encoded(conn, req, result, out, t0)

    def _failed(self, conn: _Connection, req: Request, t0: float) -> None:
        log.exception(
            "%s v%d from %s failed; closing the connection",
            req.name,
            req.api_version,
            conn.peer,
        )
        self._observe(req.name, t0, True)
        return None

    def _encoded(
        self, conn: _Connection, req: Request, result: Any, out: Any, t0: float
    ) -> bytes | None:
        """What to send for ``result`` encoded as ``out`` (see :meth:`_respond`)."""
        if result is None:
            self._observe(req.name, t0, False)
            return b""
        if isinstance(out, Exception):
            log.error(
                "cannot encode %s v%d response; closing %s",
                req.name,
                req.api_version,
                conn.peer,
                exc_info=out,
            )
            self._observe(req.name, t0, True)
            return None
        self._observe(req.name, t0, has_error(result))
        return out

    async def _call(
        self, handler: Handler, ctx: RequestContext, body: Any, encode: Callable[[Any], bytes]
    ) -> tuple[Any, bytes | Exception | None]:
        """(the handler's answer, its encoded frame or the encoding's exception). A handler
        runs where it belongs: a coroutine on the loop, a plain function on a worker thread
        (it may block on the log); a delayed answer is waited out; an answer waiting for
        an fsync is returned as it is (see :meth:`_durable`). The answer is encoded
        off the loop (with a plain handler, on its thread): a response naming 100,000
        partitions takes seconds to encode, which on the loop stalled every other
        connection (Kafka's network threads do not wait on one another's responses)."""
        if inspect.iscoroutinefunction(handler):
            result: Result = await handler(ctx, body)
        else:
            result, out = await asyncio.to_thread(_handle, handler, ctx, body, encode)
            if not isinstance(result, DelayedResponse):
                return result, out
        if isinstance(result, DelayedResponse):
            result = await self._complete(result)
        if result is None:
            return None, None
        return result, await asyncio.to_thread(_encode, encode, result)

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
