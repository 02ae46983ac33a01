"""Kafka wire codec on top of kio: request headers and bodies, response frames.

Pure functions over bytes (no sockets): :mod:`kompakt.broker.connection` uses them to
turn a connection's bytes into requests and handlers' answers into bytes. Handlers
describe responses as plain dicts/lists with Kafka field names (kio's snake
case); :func:`build` turns them into kio entities of whatever version the client asked
for, dropping fields that version lacks and filling missing ones with zero values. That
keeps one handler for every version of an API.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import logging
import struct
import uuid
from collections.abc import Mapping
from functools import cache
from typing import Any

from kio.index import KioIndexError, load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    is_optional,
)

from kompakt.broker.bounds import check_request

_UTC = datetime.UTC
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=_UTC)
ZERO_UUID = uuid.UUID(int=0)
INT32 = struct.Struct(">i")
API_HEADER = struct.Struct(">hhi")


class ProtocolError(Exception):
    """The peer broke the protocol: the bytes on its connection are not a Kafka request
    we can answer, so the connection is closed (h11's ``RemoteProtocolError``; Kafka's
    ``InvalidRequestException``/``InvalidReceiveException`` close the channel too).

    ``api`` names the API when the request got far enough to say which (it is counted
    as that API's error); ``level`` is how loudly the close is logged: a peer that
    hangs up mid-request is routine, garbage is worth a warning.
    """

    def __init__(self, message: str, *, api: str | None = None, level: int = logging.WARNING):
        super().__init__(message)
        self.api = api
        self.level = level


# -- topic ids ---------------------------------------------------------------------------


def topic_uuid(topic_id: str) -> uuid.UUID:
    """A LogManager topic id (urlsafe base64 of 16 bytes, or hex) as a UUID."""
    try:
        if len(topic_id) in (32, 36):
            return uuid.UUID(topic_id)
        raw = base64.urlsafe_b64decode(topic_id + "=" * (-len(topic_id) % 4))
        if len(raw) == 16:
            return uuid.UUID(bytes=raw)
    except ValueError:
        pass
    return uuid.UUID(bytes=uuid.uuid5(uuid.NAMESPACE_URL, topic_id).bytes)


# -- building entities from plain data ----------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class _FieldInfo:
    name: str
    kafka_type: str
    kind: type
    nested: type | None
    required: bool
    optional: bool


@cache
def _fields(cls: type) -> tuple[_FieldInfo, ...]:
    out = []
    for f in dataclasses.fields(cls):
        c = classify_field(f)
        nested = c.type_ if isinstance(c, EntityField | EntityTupleField) else None
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        out.append(
            _FieldInfo(
                f.name,
                f.metadata.get("kafka_type", ""),
                type(c),
                nested,
                required,
                is_optional(f),
            )
        )
    return tuple(out)


def _scalar(kafka_type: str, value: Any, optional: bool) -> Any:
    if value is None:
        return None
    if kafka_type == "error_code":
        return value if isinstance(value, ErrorCode) else ErrorCode(int(value))
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        if isinstance(value, datetime.timedelta):
            return value
        return datetime.timedelta(milliseconds=int(value))
    if kafka_type == "datetime_i64":
        if isinstance(value, datetime.datetime):
            return value
        if int(value) < 0 and optional:
            return None
        return _EPOCH + datetime.timedelta(milliseconds=int(value))
    if kafka_type == "uuid":
        return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
    if kafka_type in ("records", "bytes"):
        return bytes(value)
    return value


def _zero(info: _FieldInfo) -> Any:
    if info.kind in (EntityTupleField, PrimitiveTupleField):
        return ()
    if info.optional:
        return None
    if info.kind is EntityField:
        return build(info.nested, {})  # type: ignore[arg-type]
    kt = info.kafka_type
    if kt == "string":
        return ""
    if kt == "bool":
        return False
    if kt == "uuid":
        return ZERO_UUID
    if kt in ("records", "bytes"):
        return b""
    if kt == "float64":
        return 0.0
    return _scalar(kt, 0, False)


def build(cls: type, data: Any) -> Any:
    """A kio entity of ``cls`` from a mapping (extra keys ignored, missing ones zeroed)."""
    if dataclasses.is_dataclass(data) and type(data) is cls:
        return data
    if not isinstance(data, Mapping):
        raise TypeError(f"cannot build {cls.__name__} from {type(data).__name__}")
    kwargs: dict[str, Any] = {}
    for info in _fields(cls):
        if info.name in data:
            v = data[info.name]
            if info.kind is EntityTupleField:
                if v is None:
                    kwargs[info.name] = None if info.optional else ()
                else:
                    kwargs[info.name] = tuple(build(info.nested, x) for x in v)  # type: ignore[arg-type]
            elif info.kind is EntityField:
                kwargs[info.name] = None if v is None else build(info.nested, v)  # type: ignore[arg-type]
            elif info.kind is PrimitiveTupleField:
                if v is None:
                    kwargs[info.name] = None if info.optional else ()
                else:
                    kwargs[info.name] = tuple(_scalar(info.kafka_type, x, False) for x in v)
            else:
                kwargs[info.name] = _scalar(info.kafka_type, v, info.optional)
        elif info.required:
            kwargs[info.name] = _zero(info)
    return cls(**kwargs)


def has_field(cls: type, name: str) -> bool:
    return any(f.name == name for f in _fields(cls))


def ms(value: Any) -> int:
    """A kio timedelta/datetime field as milliseconds."""
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    if isinstance(value, datetime.datetime):
        return round(value.timestamp() * 1000)
    return int(value)


# -- requests and responses ---------------------------------------------------------------


@cache
def schemas(api_key: int, version: int) -> tuple[type, type] | None:
    """kio's (request class, response class) for ``api_key`` at ``version``, or None
    when kio has no schema for that version."""
    try:
        return load_request_schema(api_key, version), load_response_schema(api_key, version)
    except KioIndexError:  # kio's UnknownAPIKey / UnknownEntity
        return None


@cache
def _reader(cls: type):
    return entity_reader(cls)


@cache
def _writer(cls: type):
    return entity_writer(cls)


def peek_header(frame: bytes) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) from the fixed start of every request."""
    if len(frame) < API_HEADER.size:
        raise ProtocolError(f"request of {len(frame)} bytes is shorter than a request header")
    return API_HEADER.unpack_from(frame, 0)


def parse_request(frame: bytes, req_cls: type) -> tuple[Any, Any]:
    """(header, body) of ``frame``; raises ProtocolError on anything undecodable."""
    try:
        check_request(frame, req_cls)  # kio would allocate what a count declares
        header, used = _reader(req_cls.__header_schema__)(frame, 0)
        body, used2 = _reader(req_cls)(frame, used)
    except Exception as exc:  # DecodeError, BufferUnderflow, ValueError, ...
        raise ProtocolError(
            f"cannot decode {req_cls.__name__}: {type(exc).__name__}: {exc}"
        ) from exc
    # Trailing bytes are tolerated, as Kafka does: librdkafka's Metadata v13 request
    # carries a few (seen with librdkafka 2.x).
    return header, body


KEEP_BYTES = 1 << 16
"""A write at least this long (a Fetch response's records) stays a part of its own in
:func:`encode_response_parts`, never copied into the frame's buffer."""

Buffer = bytes | bytearray | memoryview


class _Frame:
    """The kio ``Writable`` a response is encoded into: small writes go into one
    buffer, large ones are kept by reference (a Fetch's records: read once from the
    segment, copied again only by the socket)."""

    __slots__ = ("parts", "size", "_buf")

    def __init__(self) -> None:
        self._buf = bytearray(b"\0\0\0\0")  # the size prefix, set by finish()
        self.parts: list[Buffer] = [self._buf]
        self.size = 4

    def write(self, data: Buffer) -> int:
        n = len(data)
        if n >= KEEP_BYTES:
            self._buf = bytearray()
            self.parts += (data, self._buf)
        else:
            self._buf += data
        self.size += n
        return n

    def finish(self) -> list[Buffer]:
        INT32.pack_into(self.parts[0], 0, self.size - 4)
        return [p for p in self.parts if len(p)]


def encode_response_parts(resp_cls: type, correlation_id: int, body: Any) -> list[Buffer]:
    """The length-prefixed response frame (header, v0 or v1 as the class says, and
    body) as parts to send one after the other, large fields by reference."""
    entity = build(resp_cls, body)
    frame = _Frame()
    frame.write(response_header(resp_cls, correlation_id))
    _writer(resp_cls)(frame, entity)
    return frame.finish()


def response_header(resp_cls: type, correlation_id: int) -> bytes:
    """The response header as Kafka's ``ResponseHeader`` writes it, without kio's entity
    writer (a fifth of a small answer's encoding): v0 is the correlation id, v1 adds an
    empty tagged-field section. The version is the class's (ApiVersions answers with v0
    whatever its own version, KIP-511)."""
    flexible = resp_cls.__header_schema__.__flexible__
    return INT32.pack(correlation_id) + (b"\0" if flexible else b"")


def encode_response(resp_cls: type, correlation_id: int, body: Any) -> bytes:
    """The length-prefixed response frame as one bytes object."""
    parts = encode_response_parts(resp_cls, correlation_id, body)
    return bytes(parts[0]) if len(parts) == 1 else b"".join(parts)
