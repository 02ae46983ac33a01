"""One Kafka request over a fresh socket, with kio's schemas (no client library in between).

For answers that clients do not expose (a Produce answer's ``record_errors``) or requests
they refuse to build (the cluster-default BROKER config resource "").
"""

from __future__ import annotations

import io
import socket
import struct
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from kompakt.broker.protocol import build


def call(port: int, api_key: int, version: int, body: dict[str, Any]) -> Any:
    """Send one request to 127.0.0.1:``port`` and return the decoded response body."""
    req_cls = load_request_schema(api_key, version)
    hdr_cls = req_cls.__header_schema__
    buf = io.BytesIO()
    head = {
        "request_api_key": api_key,
        "request_api_version": version,
        "correlation_id": 7,
        "client_id": "raw",
    }
    entity_writer(hdr_cls)(buf, build(hdr_cls, head))
    entity_writer(req_cls)(buf, build(req_cls, body))
    data = buf.getvalue()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(struct.pack(">i", len(data)) + data)
        f = s.makefile("rb")
        (n,) = struct.unpack(">i", f.read(4))
        frame = f.read(n)
    resp_cls = load_response_schema(api_key, version)
    _hdr, used = entity_reader(resp_cls.__header_schema__)(frame, 0)
    return entity_reader(resp_cls)(frame, used)[0]
