"""One client connection's Kafka protocol, sans-IO: bytes in, requests out, responses
to bytes.

Shaped like h11's ``Connection``: :meth:`KafkaConnection.receive_data` takes whatever
the socket read (``b""`` for end of stream), :meth:`KafkaConnection.next_event` hands
back the next complete :class:`Request` (or :data:`NEED_DATA`, or :data:`CLOSED` once
the peer hung up between requests), and :meth:`KafkaConnection.send` turns a handler's
answer into the response frame. Nothing here touches a socket, a thread or a clock; the
asyncio layer (:mod:`kompakt.broker.server`) does those.

Framing is Kafka's (``NetworkReceive``): an int32 size, then that many bytes holding a
request header (API key, version, correlation id, ...) and body. A size below a header's
or above ``socket.request.max.bytes`` is refused as soon as the 4 size bytes are in,
before any of the body is buffered (Kafka's ``InvalidReceiveException``). What the peer
gets wrong raises :class:`~kompakt.broker.protocol.ProtocolError` and the connection is
done; an API version we do not serve is answered, not closed, as Kafka's
``RequestContext``/``ApiVersionsRequest`` do (:class:`Answer`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from kio.schema.api_versions.v0.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode

from kompakt.broker.protocol import (
    API_HEADER,
    INT32,
    Buffer,
    ProtocolError,
    encode_response,
    encode_response_parts,
    parse_request,
    peek_header,
    schemas,
)
from kompakt.broker.registry import ApiHandler, ApiRegistry, api_name

MIN_FRAME = API_HEADER.size  # api_key, api_version, correlation_id
# a frame's rest at least this long is read in one piece (:attr:`KafkaConnection.missing`)
MIN_REST_BYTES = 1 << 16
# the most a frame's buffer grows by ahead of its bytes (:meth:`KafkaConnection.rest_view`)
REST_STEP = 1 << 20
_ZEROS = memoryview(bytes(REST_STEP))


class _Sentinel:
    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


NEED_DATA = _Sentinel("NEED_DATA")
"""No complete request buffered: feed :meth:`KafkaConnection.receive_data` more bytes."""

CLOSED = _Sentinel("CLOSED")
"""The peer ended the stream cleanly, between two requests."""


@dataclass(frozen=True)
class Request:
    """A complete, decoded request for ``api``'s handler."""

    api: ApiHandler
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any
    response_class: type

    @property
    def name(self) -> str:
        return self.api.name


@dataclass(frozen=True)
class Answer:
    """A response the protocol gives by itself, no handler involved: UNSUPPORTED_VERSION
    for a version outside the served range. ``note`` is worth a log line, if set."""

    api: str
    data: bytes
    note: str | None = None


Event = Request | Answer | _Sentinel


class KafkaConnection:
    """The protocol state of one connection (see the module doc).

    Requests come out one at a time in arrival order, so a server that answers each
    before asking for the next answers pipelined requests in order, as Kafka does by
    muting a channel while a request is in flight.
    """

    def __init__(self, registry: ApiRegistry, max_request_bytes: int):
        self.registry = registry
        self.max_request_bytes = max_request_bytes
        self._buffer = bytearray()
        self._frame_size: int | None = None  # of the frame being received, once known
        self._reserved = 0  # bytes at the buffer's end handed out by rest_view, not yet in
        self._eof = False
        self._error: ProtocolError | None = None

    def receive_data(self, data: bytes) -> None:
        """Add bytes read from the peer; ``b""`` means the peer ended the stream."""
        if self._eof:
            raise RuntimeError("receive_data after end of stream")
        if self._reserved:
            raise RuntimeError("receive_data while a frame's rest is being read")
        if data:
            self._buffer += data
        else:
            self._eof = True

    @property
    def buffered(self) -> int:
        """Bytes received and not yet taken as a request."""
        return len(self._buffer) - self._reserved

    def rest_view(self) -> memoryview:
        """Missing bytes of the frame being received (:attr:`missing` > 0), as a view
        of the frame's buffer to read them into: read in place, not copied through the
        stream's buffer and onto this one. A step at a time, each at most as long as
        what the frame brought so far (:data:`MIN_REST_BYTES` at least,
        :data:`REST_STEP` at most): a peer that declares a large frame and sends little
        makes the buffer no larger than twice what it sent and 64 KiB. Say with
        :meth:`rest_filled` how many arrived, after releasing the view."""
        if not self.missing or self._reserved:
            raise RuntimeError("rest_view without a frame's rest to read")
        head = len(self._buffer)
        step = min(self.missing, REST_STEP, max(head, MIN_REST_BYTES))
        # grown with zeros in place (heap memory the allocator reuses): a new
        # bytearray(n) of a MiB is a fresh mapping whose every page faults on the
        # first write, 0.77 ms a MiB on this machine against 0.04 ms so
        self._buffer += _ZEROS[:step]
        self._reserved = step
        return memoryview(self._buffer)[head:]

    def rest_filled(self, nbytes: int) -> None:
        """``nbytes`` of :meth:`rest_view` arrived; fewer than it asked for means the
        stream ended inside the frame (the next event says so)."""
        short, self._reserved = self._reserved - nbytes, 0
        if short:
            try:
                del self._buffer[len(self._buffer) - short :]
            except BufferError:  # a view of it still held: a copy without the tail
                self._buffer = bytearray(memoryview(self._buffer)[: len(self._buffer) - short])
            self._eof = True

    @property
    def missing(self) -> int:
        """Bytes still to come for the frame whose size prefix is in (0 while its size
        is unknown): a server reads a large frame's rest in one piece (``readexactly``),
        not in one wake-up per socket read."""
        if self._frame_size is None:
            return 0
        return max(0, self._frame_size - self.buffered)

    def next_frame_size(self) -> int:
        """The size of the next frame if its 4 size bytes are in, else 0 (the server
        decodes a large request off its event loop)."""
        if self._frame_size is not None:
            return self._frame_size
        if len(self._buffer) < INT32.size:
            return 0
        return INT32.unpack_from(self._buffer, 0)[0]

    def next_event(self) -> Event:
        """The next request, NEED_DATA or CLOSED; raises ProtocolError (for good: the
        connection is unusable after it, as h11's is after a RemoteProtocolError)."""
        if self._error is not None:
            raise self._error
        try:
            frame = self._next_frame()
            if isinstance(frame, _Sentinel):
                return frame
            return self._decode_in_place(frame)
        except ProtocolError as exc:
            self._error = exc
            raise

    def send(self, request: Request, body: Any) -> bytes:
        """The response frame for ``request`` from a handler's answer (plain data as
        :func:`~kompakt.broker.protocol.build` takes, or a kio entity)."""
        return encode_response(request.response_class, request.correlation_id, body)

    def send_parts(self, request: Request, body: Any) -> list[Buffer]:
        """:meth:`send` as parts to write one after the other: a Fetch response's
        records are not copied into the frame."""
        return encode_response_parts(request.response_class, request.correlation_id, body)

    # -- framing ---------------------------------------------------------------------------
    def _next_frame(self) -> int | _Sentinel:
        """The size of the complete frame at the buffer's start, NEED_DATA or CLOSED."""
        buf = self._buffer
        if self._frame_size is None:
            if len(buf) < INT32.size:
                if not self._eof:
                    return NEED_DATA
                if buf:
                    raise ProtocolError("truncated size prefix", level=logging.INFO)
                return CLOSED
            (size,) = INT32.unpack_from(buf, 0)
            if size < MIN_FRAME or size > self.max_request_bytes:
                raise ProtocolError(
                    f"request size {size} outside "
                    f"[{MIN_FRAME}, socket.request.max.bytes={self.max_request_bytes}]"
                )
            del buf[: INT32.size]
            self._frame_size = size
        size = self._frame_size
        if len(buf) - self._reserved < size:
            if self._eof:
                raise ProtocolError(
                    f"connection ended inside a {size}-byte request", level=logging.INFO
                )
            return NEED_DATA
        self._frame_size = None
        return size  # the buffer's first bytes: decoded where they are

    def _decode_in_place(self, size: int) -> Request | Answer:
        """Decode the frame that is the buffer's first ``size`` bytes without copying
        it out (the decoded request holds copies of what it keeps), then drop it."""
        whole = memoryview(self._buffer)
        view = whole[:size].toreadonly()  # kio reads read-only buffers only
        try:
            return self._decode(view)
        finally:
            view.release()
            whole.release()
            try:
                del self._buffer[:size]
            except BufferError:  # something kept a view of the frame: leave it that buffer
                self._buffer = bytearray(memoryview(self._buffer)[size:])

    # -- decoding --------------------------------------------------------------------------
    def _decode(self, frame: bytes | memoryview) -> Request | Answer:
        api_key, version, correlation_id = peek_header(frame)
        name = api_name(api_key)
        api = self.registry.get(api_key)
        if api is None:
            raise ProtocolError(f"unsupported API key {api_key}", api=name)
        if not api.supports(version):
            return self._unsupported_version(api_key, version, correlation_id)
        found = schemas(api_key, version)
        if found is None:
            raise ProtocolError(f"no schema for {name} v{version}")
        req_cls, resp_cls = found
        try:
            header, body = parse_request(frame, req_cls)
        except ProtocolError as exc:
            exc.api = name
            raise
        client_id = getattr(header, "client_id", None)
        return Request(api, version, correlation_id, client_id, body, resp_cls)

    def _unsupported_version(self, api_key: int, version: int, correlation_id: int) -> Answer:
        name = api_name(api_key)
        if api_key == ApiVersionsRequest.__api_key__:
            # Kafka answers an ApiVersions it cannot parse with v0 + UNSUPPORTED_VERSION and
            # its version list, so the client can retry with a version both know.
            body = {
                "error_code": ErrorCode.unsupported_version,
                "api_keys": self.registry.advertised(),
            }
            _req, resp_cls = schemas(api_key, 0)  # type: ignore[misc]
            return Answer(name, encode_response(resp_cls, correlation_id, body))
        found = schemas(api_key, version)
        if found is not None:
            try:
                data = encode_response(
                    found[1], correlation_id, {"error_code": ErrorCode.unsupported_version}
                )
            except Exception:
                pass  # a response without a top-level error code: nothing to say it with
            else:
                note = f"{name} v{version} is not supported; answering UNSUPPORTED_VERSION"
                return Answer(name, data, note)
        raise ProtocolError(f"{name} v{version} is not supported", api=name)
