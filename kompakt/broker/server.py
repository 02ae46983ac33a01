"""The Kafka protocol server: the asyncio layer around the sans-IO protocol.

This module alone does I/O: it accepts connections, reads bytes into a
:class:`~kompakt.broker.connection.KafkaConnection` (which does the framing and
decoding), runs each request's handler (a plain function on a worker thread, a
coroutine on the loop), waits out delayed answers (a long-polling Fetch: Kafka's
purgatory) and writes the response bytes back. One task per connection; requests on
one connection are handled one at a time, in order (as Kafka does by muting a channel
while a request is in flight), so pipelined requests are answered in order and a
long-polling fetch only holds its own connection. Produce requests are the exception:
their appends and fsyncs run in order behind the connection's reading
(:mod:`kompakt.broker.produce_pipeline`), their answers still in order and before any
later request's. Whatever the protocol object refuses
(a frame larger than ``socket.request.max.bytes``, a truncated frame, an unknown API
key, an undecodable request) closes that connection with a log line; the server
carries on.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kompakt.broker.connection import (
    CLOSED,
    NEED_DATA,
    Answer,
    Event,
    KafkaConnection,
    Request,
)
from kompakt.broker.frame_stream import (
    READ_SIZE,
    receive_more,
    start_frame_server,
    stream_buffered,
)
from kompakt.broker.heap import freeze_startup_heap
from kompakt.broker.metrics import BrokerMetrics, has_error
from kompakt.broker.produce_pipeline import (
    PIPELINE_BATCHES,
    PIPELINE_BYTES,
    Answered,
    Appended,
    Calls,
    Frame,
    PendingAnswers,
    encode_answer,
    handle_produces,
    records_bytes,
    send_frame,
    write_frame,
)
from kompakt.broker.protocol import Buffer, ProtocolError
from kompakt.broker.registry import ApiHandler, ApiRegistry, DelayedResponse, Result
from kompakt.broker.security.principal import NoMatchingRule, PrincipalMapper, cert_principal
from kompakt.broker.security.sasl import SaslAuthenticator
from kompakt.broker.state import BrokerState, RequestContext
from kompakt.broker.workers import Workers, handle_and_encode
from kompakt.errors import KompaktError

log = logging.getLogger(__name__)

# what the socket's stream buffers before it stops reading the socket (asyncio's
# default, 64 KiB, paused and resumed reading, two epoll calls, several times per 1 MiB
# produce batch)
STREAM_LIMIT = 1 << 20
# requests up to this size decode on the loop (fast: a 1 MiB Produce's records are one
# field); larger ones on a worker thread, which only this connection's task uses the
# protocol object from, one call at a time
DECODE_ON_LOOP_BYTES = 1 << 20
TLS_HANDSHAKE_TIMEOUT = 10.0
PRODUCE = 0  # API key
# pipelined Produce requests of one connection handled in one worker-thread hop, with
# one fsync per partition for their acks=all appends (librdkafka pipelines up to 5 for
# an idempotent producer, more for others)
MAX_PRODUCE_BATCH = 16
ANONYMOUS = "User:ANONYMOUS"


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


class _Connection:
    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, spec: ListenerSpec
    ):
        self.reader = reader
        self.writer = writer
        self.spec = spec
        self._busy = False
        self.answers = PendingAnswers()
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.principal = ANONYMOUS
        self.sasl: SaslAuthenticator | None = None

    @property
    def busy(self) -> bool:
        """A request in hand or an answer not yet written (stop() lets those finish)."""
        return self._busy or self.answers.waiting()

    @busy.setter
    def busy(self, value: bool) -> None:
        self._busy = value


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
        self._workers = Workers()
        self._hop = self._workers.hop

    async def start(self) -> None:
        try:
            for spec in self.listeners:
                server = await start_frame_server(
                    functools.partial(self._on_connect, spec),
                    spec.host or None,
                    spec.port,
                    limit=STREAM_LIMIT,
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
            if not conn.busy:
                conn.writer.close()
        tasks = list(self._conns)
        if tasks:
            done, pending = await asyncio.wait(tasks, timeout=timeout)
            for t in pending:
                t.cancel()
            if pending:
                await asyncio.wait(pending, timeout=1.0)
        self._workers.shutdown()
        for server in self._servers:
            try:
                await asyncio.wait_for(server.wait_closed(), timeout=1.0)
            except TimeoutError:
                pass

    # -- connections -----------------------------------------------------------------------
    async def _on_connect(
        self, spec: ListenerSpec, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        freeze_startup_heap()
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
            await self._serve(conn)
        except ConnectionError:
            pass
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("connection %s failed", conn.peer)
        finally:
            conn.answers.abandon()
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
        """Serve the connection's requests until it is to close, then write the answers
        still waiting for their fsync (a bad frame after them closes the connection
        once they are out, as Kafka answers a request before reading the next)."""
        await self._serve_requests(conn)
        await conn.answers.settle()

    async def _serve_requests(self, conn: _Connection) -> None:
        max_bytes = self.max_request_bytes
        if conn.sasl is not None:  # Kafka's sasl.server.max.receive.size, until authenticated
            max_bytes = min(max_bytes, conn.spec.sasl_max_receive)
        protocol = KafkaConnection(self.registry, max_bytes)
        held: Event | None = None  # decoded while gathering Produce requests, not yet served
        while not self._closing:
            t0 = time.monotonic()
            try:
                if held is not None:
                    event, held = held, None
                elif protocol.next_frame_size() <= DECODE_ON_LOOP_BYTES:
                    event = protocol.next_event()
                else:  # a large request decodes for a second: not on the loop of everyone
                    event = await self._hop(protocol.next_event)
            except ProtocolError as exc:
                log.log(exc.level, "closing %s: %s", conn.peer, exc)
                if exc.api is not None:
                    self._observe(exc.api, t0, True)
                if conn.sasl is not None and not conn.sasl.complete:
                    self._auth_failed(conn, conn.sasl.mechanism or "-", "bad_frame", str(exc))
                return
            if event is NEED_DATA:
                if not await conn.answers.settle(PIPELINE_BYTES, PIPELINE_BATCHES):
                    return
                await receive_more(conn.reader, conn.writer.transport, protocol)
                continue
            if event is CLOSED:
                return
            if self._batchable(conn, event):
                batch, held = await self._gather(conn.reader, protocol, event)
                conn.busy = True
                try:
                    if not await self._serve_produces(conn, protocol, batch, t0):
                        return
                finally:
                    conn.busy = False
                continue
            if not await conn.answers.settle():  # answered in order: the Produce ones first
                return
            conn.busy = True
            try:
                if isinstance(event, Answer):
                    if event.note:
                        log.info("%s: %s", conn.peer, event.note)
                    self._observe(event.api, t0, True)
                    out: Frame | None = event.data
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
                if out is None:
                    return
                if out:
                    await send_frame(conn.writer, out)
            finally:
                conn.busy = False

    def _batchable(self, conn: _Connection, event: Event) -> bool:
        """A Produce that may be handled together with the next ones buffered."""
        return (
            isinstance(event, Request)
            and event.api.api_key == PRODUCE
            and not event.api.on_loop
            and (conn.sasl is None or conn.sasl.complete)
        )

    async def _gather(
        self, reader: asyncio.StreamReader, protocol: KafkaConnection, first: Request
    ) -> tuple[list[Request], Any]:
        """``first`` and the Produce requests that arrived right behind it (a client
        pipelines them), in the protocol's buffer or the stream's, and the event after
        them, if one was decoded."""
        batch = [first]
        while len(batch) < MAX_PRODUCE_BATCH:
            if protocol.next_frame_size() > DECODE_ON_LOOP_BYTES:
                break
            try:
                event = protocol.next_event()
            except ProtocolError:  # raised again by the next next_event(), after the batch
                break
            if event is NEED_DATA:
                if not stream_buffered(reader):
                    break
                protocol.receive_data(await reader.read(READ_SIZE))  # there: no waiting
                continue
            if not isinstance(event, Request) or event.api.handler is not first.api.handler:
                return batch, None if event is CLOSED else event
            batch.append(event)
        return batch, None

    async def _serve_produces(
        self, conn: _Connection, protocol: KafkaConnection, batch: list[Request], t0: float
    ) -> bool:
        """Hand a batch of pipelined Produce requests to a task that appends them after
        the batch before it (one worker-thread hop), runs the fsyncs acks=all owes (one
        per partition, a group commit) and answers them after the answers before; the
        connection's next requests are read meanwhile, as a Kafka leader appends the
        next request before the ones before it are replicated. False once the
        connection is to close."""
        calls = [
            (
                req.api.handler,
                self._context(conn, req),
                req.body,
                functools.partial(protocol.send_parts, req),
            )
            for req in batch
        ]
        # room for this batch (and the written ones collected)
        if not await conn.answers.settle(PIPELINE_BYTES, PIPELINE_BATCHES - 1):
            return False
        appended = Appended(asyncio.get_running_loop())
        answer = self._append_and_answer(conn, batch, calls, t0, appended, *conn.answers.last())
        nbytes = sum(records_bytes(req.body) for req in batch)
        conn.answers.add(asyncio.ensure_future(answer), appended, nbytes)
        return True

    async def _append_and_answer(
        self,
        conn: _Connection,
        batch: list[Request],
        calls: Calls,
        t0: float,
        appended: Appended,
        answer_before: asyncio.Future[bool] | None,
        appended_before: Appended | None,
    ) -> bool:
        """Append ``batch`` once the batch before it is appended (``appended`` says if
        it went through: none is appended after a handler that raised), then answer it
        once its fsyncs returned and the answers before it went out. The append's hop
        is submitted here, once the loop got to this task, not as soon as the batch was
        read: a worker woken while the loop still reads waits for the interpreter lock
        (more CPU per request, measured)."""
        try:
            if appended_before is not None and not await appended_before.wait():
                return False  # ``appended`` told False below
            done = await self._hop(handle_produces, calls, appended.tell)
            appended.settle(not any(isinstance(r, Exception) for r, _out in done))
        finally:
            appended.settle(False)
        if answer_before is not None and not await answer_before:
            return False
        return await self._write_produces(conn, batch, done, t0)

    async def _write_produces(
        self, conn: _Connection, batch: list[Request], done: Answered, t0: float
    ) -> bool:
        """Write a batch's answers in one write (one send for the pipelined requests a
        client sent together, not one each); those before a failed one still go out."""
        frames: list[Buffer] = []
        ok = len(done) == len(batch)  # else a handler failed: the rest are not answered
        for req, (result, out) in zip(batch, done, strict=False):
            if isinstance(result, Exception):
                self._failed(conn, req, t0, result)
                ok = False
                break
            answer = self._encoded(conn, req, result, out, t0)
            if answer is None:
                ok = False
                break
            if answer:
                frames += answer if isinstance(answer, list) else (answer,)
        if frames:
            write_frame(conn.writer, b"".join(frames) if len(frames) > 1 else frames[0])
        if not ok:
            return False
        await conn.writer.drain()
        return True

    def _context(self, conn: _Connection, req: Request) -> RequestContext:
        return RequestContext(
            self.state,
            req.api.api_key,
            req.api_version,
            req.correlation_id,
            req.client_id,
            conn.peer,
            conn.principal,
            conn.spec.name,
        )

    async def _respond(
        self, conn: _Connection, protocol: KafkaConnection, req: Request, t0: float
    ) -> Frame | None:
        """The response bytes, b'' for no response, or None to close the connection."""
        ctx = self._context(conn, req)
        encode = functools.partial(protocol.send_parts, req)  # pure: any thread may run it
        try:
            result, out = await self._call(req.api, ctx, req.body, encode)
        except Exception as exc:
            self._failed(conn, req, t0, exc)
            return None
        return self._encoded(conn, req, result, out, t0)

    def _failed(self, conn: _Connection, req: Request, t0: float, exc: Exception) -> None:
        log.error(
            "%s v%d from %s failed; closing the connection",
            req.name,
            req.api_version,
            conn.peer,
            exc_info=exc,
        )
        self._observe(req.name, t0, True)

    def _encoded(
        self, conn: _Connection, req: Request, result: Any, out: Any, t0: float
    ) -> Frame | None:
        """What to send for a handler's ``result`` encoded as ``out`` (see _respond)."""
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
        if self.metrics is not None:
            self._observe(req.name, t0, has_error(result))
        return out

    async def _call(
        self, api: ApiHandler, ctx: RequestContext, body: Any, encode: Callable[[Any], Frame]
    ) -> tuple[Any, Frame | Exception | None]:
        """(the handler's answer, its encoded frame or the encoding's exception). A handler
        runs where it belongs: a coroutine on the loop, a plain function on a worker thread
        (it may block on the log); a delayed answer is waited out. The answer is encoded
        off the loop (with a plain handler, on its thread): a response naming 100,000
        partitions takes seconds to encode, which on the loop stalled every other
        connection (Kafka's network threads do not wait on one another's responses)."""
        if api.on_loop:
            result: Result = await api.handler(ctx, body)  # type: ignore[misc]
        else:
            result, out = await self._hop(handle_and_encode, api.handler, ctx, body, encode)
            if not isinstance(result, DelayedResponse):
                return result, out
        if isinstance(result, DelayedResponse):
            result = await self._complete(result)
        if result is None:
            return None, None
        return result, await self._hop(encode_answer, encode, result)

    async def _complete(self, delayed: DelayedResponse) -> Any:
        """Kafka's ``DelayedOperationPurgatory.tryCompleteElseWatch`` for one operation:
        watch its partitions, then poll once more, so an append since the handler's read
        is not missed; poll again after every append and once at the timeout."""
        notifier = self.state.notifier
        if notifier is None:
            return (await self._hop(delayed.poll))[0]
        deadline = time.monotonic() + max(0.0, delayed.timeout)
        woken = notifier.register(delayed.keys)
        try:
            first = True
            while True:
                woken.clear()
                response, complete = await self._hop(self._poll, delayed, first)
                first = False
                remaining = deadline - time.monotonic()
                if complete or remaining <= 0 or self.state.closing:
                    return response
                try:
                    await asyncio.wait_for(woken.wait(), timeout=remaining)
                except TimeoutError:
                    return (await self._hop(delayed.poll))[0]
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
