"""One Kafka request over one plaintext socket, built and read with kio's schemas.

For the admin calls confluent-kafka's AdminClient lacks (DescribeTransactions,
ListTransactions, DescribeProducers) or answers in a shape that loses fields the CLI
prints (DescribeAcls): kompakt is a single node, every partition's leader and every
coordinator, so the bootstrap address is the one to ask.
"""

from __future__ import annotations

from typing import Any

from .backend import CliError

TIMEOUT = 10.0


def send(
    bootstrap: str, api_key: int, version: int, body: dict[str, Any], client_id: str = "kompakt-cli"
) -> bytes:
    """Send one request; the whole response frame (header, then body)."""
    import io
    import socket
    import struct

    from kio.index import load_request_schema
    from kio.serial import entity_writer

    from kompakt.broker.protocol import build

    from .broker_backend import parse_bootstrap

    req_cls = load_request_schema(api_key, version)
    hdr_cls = req_cls.__header_schema__
    buf = io.BytesIO()
    head = {
        "request_api_key": api_key,
        "request_api_version": version,
        "correlation_id": 1,
        "client_id": client_id,
    }
    entity_writer(hdr_cls)(buf, build(hdr_cls, head))
    entity_writer(req_cls)(buf, build(req_cls, body))
    data = buf.getvalue()
    host, port = parse_bootstrap(bootstrap)[0]
    try:
        with socket.create_connection((host, port), timeout=TIMEOUT) as s:
            s.sendall(struct.pack(">i", len(data)) + data)
            f = s.makefile("rb")
            size = f.read(4)
            if len(size) < 4:
                raise CliError(f"broker at {bootstrap} closed the connection")
            (n,) = struct.unpack(">i", size)
            frame = f.read(n)
    except OSError as exc:
        why = exc.strerror or str(exc) or type(exc).__name__
        raise CliError(f"broker {host}:{port} not reachable: {why}") from exc
    if len(frame) < n:
        raise CliError(f"broker at {bootstrap} closed the connection mid-response")
    return frame


def decode(api_key: int, version: int, frame: bytes) -> Any:
    """The response body of ``frame`` (kio's entity)."""
    from kio.index import load_response_schema
    from kio.serial import entity_reader

    resp_cls = load_response_schema(api_key, version)
    _hdr, used = entity_reader(resp_cls.__header_schema__)(frame, 0)
    return entity_reader(resp_cls)(frame, used)[0]


def request(bootstrap: str, api_key: int, version: int, body: dict[str, Any]) -> Any:
    """:func:`send`, then :func:`decode`."""
    return decode(api_key, version, send(bootstrap, api_key, version, body))
