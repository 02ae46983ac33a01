"""How the server sends a response (broker/produce_pipeline.py ``send_frame``): a part
larger than a write piece (a Fetch's records) goes in pieces, each once the socket
took the one before, and arrives whole and in order behind the small parts, as Kafka's
``NetworkSend`` writes a response's buffers one after the other."""

from __future__ import annotations

import asyncio
import os
import socket

from kompakt.broker.produce_pipeline import WRITE_PIECE, send_frame


def test_a_large_part_arrives_whole_in_order_and_the_limits_are_asyncios_again():
    head = b"head" * 3
    records = os.urandom(3 * WRITE_PIECE + 12345)  # three full pieces and a short one
    tail = b"tail"
    got = bytearray()

    async def main() -> tuple[int, int]:
        limits: list[tuple[int, int]] = []

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            # small socket buffers: a piece is not taken at once, the next one waits
            writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 16)
            await send_frame(writer, [head, records, tail])
            limits.append(writer.transport.get_write_buffer_limits())
            writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = socket.socket()
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)
        client.setblocking(False)
        loop = asyncio.get_running_loop()
        await loop.sock_connect(client, ("127.0.0.1", port))
        while chunk := await loop.sock_recv(client, 1 << 16):
            got.extend(chunk)
        client.close()
        server.close()
        await server.wait_closed()
        return limits[0]

    limits = asyncio.run(main())
    assert bytes(got) == head + records + tail
    assert limits == (16384, 65536)  # asyncio's (low, high): the pause at 0 was lifted
