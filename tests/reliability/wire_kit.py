"""Raw Kafka protocol helpers for the hostile-input, fuzz and corrupt-file scenarios.

Requests are built from kio's schema classes and sent on a plain socket, so a test can
say exactly what goes on the wire (including what no real client would send).
Importable as ``reliability.wire_kit`` (``tests/`` is in pytest's ``pythonpath``).
"""

from __future__ import annotations

import io
import os
import socket
import struct
from pathlib import Path
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from kompakt.broker.protocol import build

# Names that Kafka's Topic.validate refuses and that would escape or alias the data dir
# if used as a path: traversal, the dir itself, separators, NUL, too long, empty.
HOSTILE_NAMES = [
    "../x",
    "../../x",
    ".",
    "..",
    "a" * 250,
    "a/b",
    "a\\b",
    "",
    "x/../../y",
    "/tmp/abs",
    "a\x00b",
    "ü",
    "a b",
]


def header_bytes(api_key: int, version: int, corr: int, client_id: str | None = "raw") -> bytes:
    req_cls = load_request_schema(api_key, version)
    hdr_cls = req_cls.__header_schema__
    buf = io.BytesIO()
    fields = {
        "request_api_key": api_key,
        "request_api_version": version,
        "correlation_id": corr,
        "client_id": client_id,
    }
    entity_writer(hdr_cls)(buf, build(hdr_cls, fields))
    return buf.getvalue()


def encode_entity(api_key: int, version: int, corr: int, entity: Any) -> bytes:
    """A length-prefixed request frame for a ready kio request entity."""
    req_cls = load_request_schema(api_key, version)
    buf = io.BytesIO()
    buf.write(header_bytes(api_key, version, corr))
    entity_writer(req_cls)(buf, entity)
    data = buf.getvalue()
    return struct.pack(">i", len(data)) + data


def encode(api_key: int, version: int, corr: int, body: dict[str, Any]) -> bytes:
    """A request frame from plain data (missing fields zeroed, see ``protocol.build``)."""
    req_cls = load_request_schema(api_key, version)
    return encode_entity(api_key, version, corr, build(req_cls, body))


def recv_exact(s: socket.socket, n: int) -> bytes | None:
    out = bytearray()
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            return None
        out += chunk
    return bytes(out)


def recv_frame(s: socket.socket) -> bytes | None:
    head = recv_exact(s, 4)
    if head is None:
        return None
    (n,) = struct.unpack(">i", head)
    return recv_exact(s, n)


def decode(api_key: int, version: int, frame: bytes) -> tuple[int, Any]:
    resp_cls = load_response_schema(api_key, version)
    hdr, used = entity_reader(resp_cls.__header_schema__)(frame, 0)
    body, _ = entity_reader(resp_cls)(frame, used)
    return hdr.correlation_id, body


def connect(port: int, timeout: float = 10.0) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=timeout)


def call(s: socket.socket, api_key: int, version: int, body: dict[str, Any], corr: int = 1) -> Any:
    """Send one request and decode its response (raises if the broker closed on us)."""
    s.sendall(encode(api_key, version, corr, body))
    frame = recv_frame(s)
    assert frame is not None, f"broker closed the connection on api {api_key} v{version}"
    got, resp = decode(api_key, version, frame)
    assert got == corr
    return resp


def tree(root: Path, skip: Path | None = None) -> set[str]:
    """Every path under ``root`` (relative), leaving out ``skip`` and what is below it."""
    out: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(root):
        d = Path(dirpath)
        if skip is not None and d == skip:
            dirnames[:] = []
            out.add(str(d.relative_to(root)))
            continue
        for name in dirnames + filenames:
            out.add(str((d / name).relative_to(root)))
    return out


def rss_bytes() -> int:
    """Resident set size of this process now (Linux /proc)."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")
