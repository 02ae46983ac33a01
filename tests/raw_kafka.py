"""Kafka requests and responses as bytes, with kio's schemas (no client library between).

For answers that clients do not expose (a Produce answer's ``record_errors``), requests
they refuse to build (the cluster-default BROKER config resource ""), and the sans-IO
protocol tests, which need frames without a socket.
"""

from __future__ import annotations

import io
import socket
import struct
from types import SimpleNamespace
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.index import api_key_map
from kio.serial import entity_reader, entity_writer

from kompakt.broker.protocol import build

# Kafka's API keys by name, from kio's table: ``API.produce``, ``API.api_versions``, ...
API = SimpleNamespace(**{name: key for key, name in api_key_map.items()})


def encode_request(
    api_key: int, version: int, body: dict[str, Any], correlation_id: int = 7, client_id="raw"
) -> bytes:
    """One size-prefixed request frame: header (the version's header schema) and body."""
    req_cls = load_request_schema(api_key, version)
    hdr_cls = req_cls.__header_schema__
    buf = io.BytesIO()
    head = {
        "request_api_key": api_key,
        "request_api_version": version,
        "correlation_id": correlation_id,
        "client_id": client_id,
    }
    entity_writer(hdr_cls)(buf, build(hdr_cls, head))
    entity_writer(req_cls)(buf, build(req_cls, body))
    data = buf.getvalue()
    return struct.pack(">i", len(data)) + data


def decode_response(api_key: int, version: int, frame: bytes) -> tuple[int, Any]:
    """(correlation id, body) of a response frame without its size prefix."""
    resp_cls = load_response_schema(api_key, version)
    hdr, used = entity_reader(resp_cls.__header_schema__)(frame, 0)
    return hdr.correlation_id, entity_reader(resp_cls)(frame, used)[0]


def call(port: int, api_key: int, version: int, body: dict[str, Any]) -> Any:
    """Send one request to 127.0.0.1:``port`` and return the decoded response body."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(encode_request(api_key, version, body))
        f = s.makefile("rb")
        (n,) = struct.unpack(">i", f.read(4))
        frame = f.read(n)
    return decode_response(api_key, version, frame)[1]
