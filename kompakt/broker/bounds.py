"""Declared sizes in a request, checked against its bytes before kio parses it.

kio's native reader sizes an array from its declared element count before reading the
elements, so a 23-byte request declaring 26 billion topic names makes it ask for 200 GB
and the allocator aborts the whole broker process (found by
``tests/reliability/test_fuzz_requests.py``). Kafka's readers refuse such a request
("Tried to allocate a collection of size N, but there are only M bytes remaining",
``MessageUtil``/generated ``read`` methods): every element takes at least one byte, so
a count, string or bytes length larger than the bytes left cannot be honest. This module
walks a request with kio's schema, without building anything, and raises
:class:`DeclaredSizeError` at the first such field; the server then closes that
connection as it does for any undecodable request.
"""

from __future__ import annotations

import dataclasses
from functools import cache
from typing import Any

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    is_optional,
)


class DeclaredSizeError(ValueError):
    """A length or count in the request exceeds the bytes that follow it."""


FIXED = {
    "int8": 1,
    "bool": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "uuid": 16,
}

# op kinds
_FIXED, _STRING, _BYTES, _ENTITY, _ARRAY, _VARINT = range(6)

Op = tuple[int, Any, bool]  # (kind, argument, nullable)


def _scalar_op(kafka_type: str) -> Op:
    if kafka_type in FIXED:
        return (_FIXED, FIXED[kafka_type], False)
    if kafka_type == "string":
        return (_STRING, None, False)
    if kafka_type in ("bytes", "records"):
        return (_BYTES, None, False)
    if kafka_type in ("varint", "varlong"):
        return (_VARINT, None, False)
    raise DeclaredSizeError(f"unknown kafka type {kafka_type!r}")


@cache
def _plan(cls: type) -> tuple[bool, tuple[Op, ...], dict[int, Op]]:
    """(flexible, positional ops, tagged ops by tag) of a kio entity class."""
    flexible = bool(getattr(cls, "__flexible__", False))
    ops: list[Op] = []
    tagged: dict[int, Op] = {}
    for f in dataclasses.fields(cls):
        c = classify_field(f)
        kafka_type = f.metadata.get("kafka_type", "")
        nullable = is_optional(f)
        if isinstance(c, EntityTupleField):
            op: Op = (_ARRAY, (_ENTITY, c.type_, False), nullable)
        elif isinstance(c, EntityField):
            op = (_ENTITY, c.type_, nullable)
        elif isinstance(c, PrimitiveTupleField):
            op = (_ARRAY, _scalar_op(kafka_type), nullable)
        elif f.name == "client_id" and cls.__module__.startswith("kio.schema.request_header"):
            op = (_STRING, "legacy", True)  # an int16-length string even in header v2
        else:
            kind, arg, _ = _scalar_op(kafka_type)
            op = (kind, arg, nullable)
        if op[0] == _ENTITY and not nullable:
            size = _static_size(op[1])
            if size is not None:  # a struct of fixed-size fields is one skip
                op = (_FIXED, size, False)
        tag = get_field_tag(f)
        if tag is not None:
            tagged[int(tag)] = op
        elif op[0] == _FIXED and ops and ops[-1][0] == _FIXED:
            ops[-1] = (_FIXED, ops[-1][1] + op[1], False)  # merge neighbours: one skip
        else:
            ops.append(op)
    return flexible, tuple(ops), tagged


def _static_size(cls: type) -> int | None:
    """Wire size of a non-flexible entity made only of fixed-size fields, else None."""
    flexible, ops, tagged = _plan(cls)
    if flexible or tagged or len(ops) != 1 or ops[0][0] != _FIXED:
        return None
    return ops[0][1]


def _uvarint(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    for i in range(5):
        if pos >= end:
            raise DeclaredSizeError("request ends inside a varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if i == 4:
            break
    raise DeclaredSizeError("varint longer than 5 bytes")


def _int(buf: memoryview, pos: int, size: int, end: int) -> tuple[int, int]:
    if pos + size > end:
        raise DeclaredSizeError("request ends inside a length field")
    return int.from_bytes(buf[pos : pos + size], "big", signed=True), pos + size


def _length(
    buf: memoryview, pos: int, end: int, flexible: bool, legacy_size: int
) -> tuple[int, int]:
    """A declared length or count: -1 for null, checked against the bytes left."""
    if flexible:
        if pos < end and buf[pos] < 0x80:  # a one-byte varint, the usual length
            n = buf[pos] - 1
            pos += 1
        else:
            n, pos = _uvarint(buf, pos, end)
            n -= 1
    else:
        n, pos = _int(buf, pos, legacy_size, end)
    if n < -1:
        raise DeclaredSizeError(f"negative length {n}")
    if n > end - pos:
        raise DeclaredSizeError(f"declared size {n} is larger than the {end - pos} bytes remaining")
    return n, pos


def _null(nullable: bool) -> None:
    """Kafka's generated readers refuse -1 for a non-nullable field ("non-nullable field
    ... was serialized as null"); kio would hand handlers a None they cannot iterate."""
    if not nullable:
        raise DeclaredSizeError("a non-nullable field was serialized as null")


def _walk(buf: memoryview, pos: int, end: int, op: Op, flexible: bool) -> int:
    kind, arg, nullable = op
    if kind == _FIXED:
        pos += arg
    elif kind == _VARINT:
        _v, pos = _uvarint(buf, pos, end)
    elif kind == _STRING:
        n, pos = _length(buf, pos, end, flexible and arg != "legacy", 2)
        if n < 0:
            _null(nullable)
        else:
            pos += n
    elif kind == _BYTES:
        n, pos = _length(buf, pos, end, flexible, 4)
        if n < 0:
            _null(nullable)
        else:
            pos += n
    elif kind == _ENTITY:
        if nullable:  # Kafka's nullable struct: int8 -1 for null, 1 for present
            marker, pos = _int(buf, pos, 1, end)
            if marker < 0:
                return pos
        pos = check_entity(buf, pos, end, arg)
    else:  # array
        n, pos = _length(buf, pos, end, flexible, 4)
        if n < 0:
            _null(nullable)  # a null array: nothing follows it
        elif arg[0] == _FIXED:
            pos += n * arg[1]
        else:
            for _ in range(n):
                pos = _walk(buf, pos, end, arg, flexible)
    if pos > end:
        raise DeclaredSizeError("request ends inside a field")
    return pos


def check_entity(buf: memoryview, pos: int, end: int, cls: type) -> int:
    """Walk one ``cls`` entity at ``pos``; the position after it."""
    flexible, ops, tagged = _plan(cls)
    for op in ops:
        if op[0] == _FIXED:
            pos += op[1]
        else:
            pos = _walk(buf, pos, end, op, flexible)
    if pos > end:
        raise DeclaredSizeError("request ends inside a field")
    if flexible:
        if pos < end and buf[pos] == 0:  # no tagged fields, the usual case
            return pos + 1
        count, pos = _uvarint(buf, pos, end)
        if count > end - pos:
            raise DeclaredSizeError(f"{count} tagged fields in {end - pos} bytes")
        for _ in range(count):
            tag, pos = _uvarint(buf, pos, end)
            size, pos = _uvarint(buf, pos, end)
            if size > end - pos:
                raise DeclaredSizeError(f"tagged field of {size} bytes in {end - pos} bytes")
            op = tagged.get(tag)
            if op is not None:
                _walk(buf, pos, pos + size, op, flexible)
            pos += size
    return pos


def check_request(frame: bytes | bytearray | memoryview, req_cls: type) -> None:
    """Raise DeclaredSizeError if any declared size in ``frame`` (header and body)
    exceeds the bytes after it."""
    buf = memoryview(frame)
    end = len(buf)
    pos = check_entity(buf, 0, end, req_cls.__header_schema__)
    check_entity(buf, pos, end, req_cls)
