"""A large frame's rest read straight into its buffer (``kompakt.broker.frame_stream``),
over a real loopback socket, plain and TLS.

The server side is the module's own: ``start_frame_server`` and ``fill``, driven by a
handler that reads a 4-byte size, fills a buffer of that size and answers with how many
bytes arrived and their SHA-256, then reads the 8 bytes the client sent right behind
the payload (the next request of a pipelining client) and echoes them. The client is
asyncio's plain stream, writing the payload whole or in pieces, so the fill meets
bytes already in the stream reader's buffer as well as bytes still on their way.
"""

from __future__ import annotations

import asyncio
import hashlib
import ssl
import struct

import pytest
import trustme

from kompakt.broker.frame_stream import FrameStreamProtocol, fill, start_frame_server

ANSWER = struct.Struct(">q32s8s")
TRAILER = b"TRAILER!"


async def _handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    buf = bytearray(size)
    view = memoryview(buf)
    try:
        got = await fill(reader, writer.transport, view)
    finally:
        view.release()
    assert isinstance(writer.transport.get_protocol(), FrameStreamProtocol)
    trailer = await reader.readexactly(len(TRAILER)) if got == size else b""
    writer.write(ANSWER.pack(got, hashlib.sha256(buf[:got]).digest(), trailer))
    await writer.drain()
    writer.close()


@pytest.fixture(scope="module")
def tls():
    """(server context, client context) from a CA made here."""
    ca = trustme.CA()
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server)
    client = ssl.create_default_context()
    ca.configure_trust(client)
    return server, client


async def _exchange(payload: bytes, pieces: int, tls_pair, half_close_after: int | None = None):
    server_ctx, client_ctx = tls_pair if tls_pair else (None, None)
    server = await start_frame_server(_handler, "127.0.0.1", 0, limit=1 << 20, ssl=server_ctx)
    port = server.sockets[0].getsockname()[1]
    try:
        kw = {"ssl": client_ctx, "server_hostname": "127.0.0.1"} if client_ctx else {}
        reader, writer = await asyncio.open_connection("127.0.0.1", port, **kw)
        body = payload if half_close_after is None else payload[:half_close_after]
        step = -(-len(body) // pieces)
        writer.write(struct.pack(">i", len(payload)) + body[:step])
        await writer.drain()
        for at in range(step, len(body), step):
            await asyncio.sleep(0.002)  # a gap: the server's fill waits on the socket
            writer.write(body[at : at + step])
            await writer.drain()
        if half_close_after is not None:
            writer.write_eof()  # the peer ends its side inside the payload
        else:
            writer.write(TRAILER)  # what a pipelining client sends next, at once
        got, digest, trailer = ANSWER.unpack(await reader.readexactly(ANSWER.size))
        writer.close()
        return got, digest, trailer
    finally:
        server.close()
        await server.wait_closed()


@pytest.mark.parametrize("pieces", [1, 3, 48], ids=["whole", "three", "many"])
@pytest.mark.parametrize("secure", [False, True], ids=["plain", "tls"])
def test_a_payload_read_into_its_buffer_arrives_whole_and_unchanged(pieces, secure, tls):
    payload = bytes(range(256)) * (3 * 4096 + 17)  # 3 MiB and a bit, not a round size
    got, digest, trailer = asyncio.run(_exchange(payload, pieces, tls if secure else None))
    assert got == len(payload)
    assert digest == hashlib.sha256(payload).digest()
    assert trailer == TRAILER  # the bytes after the filled view went on to the stream


def test_the_peer_ending_its_side_inside_the_payload_gives_what_arrived():
    payload = b"abcdefgh" * (1 << 17)  # 1 MiB
    half = 300_001
    got, digest, _ = asyncio.run(_exchange(payload, 4, None, half_close_after=half))
    assert got == half
    assert digest == hashlib.sha256(payload[:half]).digest()
