"""A connection's byte stream with a way to read a large request frame's rest straight
into the frame's own buffer.

asyncio's stream reader takes each socket read into a bytes object, copies it onto
its buffer, and wakes the reading task for every read; ``readexactly`` then copies the
frame's rest out again and the protocol object copies it once more onto its own
buffer. For a 1 MiB Produce that is three copies and five wake-ups (the socket gives
about 256 KiB a read). :class:`FrameStreamProtocol` is the stream reader's protocol as
a buffered one (``get_buffer``/``buffer_updated``, which asyncio's socket and TLS
transports fill with ``recv_into``): reads go through one scratch buffer (per thread) onto
the stream reader as before, except while :func:`fill` has handed it a view of a frame's
missing bytes, which the transport then reads into directly, waking the task once,
when the view is full or the stream ended.

Everything else (small requests, the SASL handshake, the gathering of pipelined
Produce requests) still reads through the stream reader, so the two never race: a fill
first takes what the stream reader already holds, and only then points the transport
at the view, with no await in between.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from kompakt.broker.connection import MIN_REST_BYTES, KafkaConnection

# bytes taken from the stream reader at a time (when no large frame's rest is due)
READ_SIZE = 1 << 20
# the scratch buffer a socket read lands in outside a fill (asyncio's own read size)
SCRATCH_BYTES = 1 << 18
# one scratch buffer per thread, shared by the connections of its event loop: a
# transport calls get_buffer, reads and calls buffer_updated in one go, and
# buffer_updated hands the bytes on (a copy) before it returns. One per connection
# would hold 256 KiB for every open connection, and a closed one's until the garbage
# collector breaks its cycles (a fuzz run of short connections grew by 1.6 GB so).
_scratch = threading.local()


def _scratch_buffer() -> memoryview:
    view = getattr(_scratch, "view", None)
    if view is None:
        view = _scratch.view = memoryview(bytearray(SCRATCH_BYTES))
    return view


class FrameStreamProtocol(asyncio.StreamReaderProtocol, asyncio.BufferedProtocol):
    """``StreamReaderProtocol`` whose transport reads into a buffer it offers: its
    scratch buffer, fed to the stream reader, or the view a :func:`fill` waits on."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        client_connected_cb: Callable[..., Any],
        loop: asyncio.AbstractEventLoop,
    ):
        super().__init__(reader, client_connected_cb, loop=loop)
        self._into: memoryview | None = None  # the view a fill waits on
        self._filled = 0
        self._full: asyncio.Future[None] | None = None

    # -- BufferedProtocol ------------------------------------------------------------------
    def get_buffer(self, sizehint: int) -> memoryview:
        if self._into is not None:
            return self._into[self._filled :]
        return _scratch_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        if self._into is not None:
            self._filled += nbytes
            if self._filled >= len(self._into):
                # full: the next read goes to the scratch buffer at once. A transport
                # may read again before the waiting task runs (TLS schedules one as
                # soon as a read filled the buffer it was given), and an empty buffer
                # is an error to the socket transport and the peer's close to TLS.
                self._into = None
                self._wake()
            return
        self.data_received(_scratch_buffer()[:nbytes])  # the stream reader copies it

    # -- the end of the stream ends a fill too ---------------------------------------------
    def eof_received(self) -> bool:
        self._wake()
        return super().eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._wake()
        super().connection_lost(exc)

    def _wake(self) -> None:
        if self._full is not None and not self._full.done():
            self._full.set_result(None)

    async def _fill_from_socket(self, view: memoryview) -> int:
        """Point the transport at ``view`` and wait until it is full or the stream
        ended; the bytes that arrived."""
        self._into, self._filled = view, 0
        self._full = self._loop.create_future()
        try:
            await self._full
            return self._filled
        finally:
            self._into = self._full = None


async def fill(
    reader: asyncio.StreamReader, transport: asyncio.BaseTransport, view: memoryview
) -> int:
    """Fill ``view`` from the stream: first from what ``reader`` holds, then straight
    from the socket when ``transport``'s protocol (the writer's transport: after
    ``start_tls`` the TLS one) is a :class:`FrameStreamProtocol`, through the reader
    otherwise; the bytes filled, fewer than ``len(view)`` only when the stream ended.
    A connection lost with an error raises it, as the reader's ``readexactly`` would."""
    want = len(view)
    filled = await _from_reader(reader, view, 0, wait=False)
    if filled == want or reader.at_eof():
        return filled
    protocol = transport.get_protocol()
    if isinstance(protocol, FrameStreamProtocol) and not transport.is_closing():
        filled += await protocol._fill_from_socket(view[filled:])  # noqa: SLF001
    else:
        filled = await _from_reader(reader, view, filled, wait=True)
    if filled < want and reader.exception() is not None:
        raise reader.exception()
    return filled


async def _from_reader(
    reader: asyncio.StreamReader, view: memoryview, filled: int, wait: bool
) -> int:
    """Copy the stream reader's bytes into ``view`` from ``filled`` on: what it holds
    already, or (``wait``) until ``view`` is full or the stream ended; where the bytes
    now end. A ``read`` returns at most what the reader holds when it holds any."""
    while filled < len(view) and (wait or stream_buffered(reader)):
        chunk = await reader.read(len(view) - filled)
        if not chunk:
            break
        view[filled : filled + len(chunk)] = chunk
        filled += len(chunk)
    return filled


async def read_rest(
    reader: asyncio.StreamReader, transport: asyncio.BaseTransport, protocol: KafkaConnection
) -> None:
    """Read the rest of the large frame ``protocol`` is receiving straight into the
    frame's buffer (:meth:`KafkaConnection.rest_view`): one wake-up, no copy on the
    way."""
    view = protocol.rest_view()
    got = 0
    try:
        got = await fill(reader, transport, view)
    finally:
        view.release()
        protocol.rest_filled(got)


async def receive_more(
    reader: asyncio.StreamReader, transport: asyncio.BaseTransport, protocol: KafkaConnection
) -> None:
    """Give ``protocol`` the stream's next bytes: a large frame's rest straight into
    its buffer (:func:`read_rest`), else whatever has arrived, up to
    :data:`READ_SIZE` (``b""`` at the end of the stream). How a connection reads, for
    the server and the bench's protocol sink alike."""
    if protocol.missing >= MIN_REST_BYTES:
        await read_rest(reader, transport, protocol)
    else:
        protocol.receive_data(await reader.read(READ_SIZE))


def stream_buffered(reader: asyncio.StreamReader) -> int:
    """Bytes the stream holds already (a ``read`` returns them without waiting), so
    the server can gather the requests a client pipelined and a fill takes them
    first: the stream keeps them in its ``_buffer`` (CPython's asyncio since 3.4; 0
    where it is absent)."""
    return len(getattr(reader, "_buffer", b""))


async def start_frame_server(
    client_connected_cb: Callable[..., Any], host: str | None, port: int, limit: int, **kwds: Any
) -> asyncio.base_events.Server:
    """``asyncio.start_server`` with :class:`FrameStreamProtocol` as each connection's
    protocol."""
    loop = asyncio.get_running_loop()

    def factory() -> FrameStreamProtocol:
        reader = asyncio.StreamReader(limit=limit, loop=loop)
        return FrameStreamProtocol(reader, client_connected_cb, loop)

    return await loop.create_server(factory, host, port, **kwds)
