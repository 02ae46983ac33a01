"""Zig-zag varints (protobuf ``sint64``), the length and delta encoding of Kafka records.

Kafka's ``ByteUtils.readVarint``/``writeVarint``/``sizeOfVarint`` (and the ``long``
variants, which a record uses for its timestamp delta) written once. The three core
functions use only operations that mean the same on Python ints and on numba's int64, so
:mod:`kompakt.record.kernel` compiles these very bodies with ``numba.njit`` while the
pure-Python codec (batch headers, ``RecordBatch.records()``, the encoder) calls them
directly: one implementation, and the CLI can decode without importing numba.
"""

from __future__ import annotations

from kompakt.errors import CorruptRecordError

MAX_VARINT_BYTES = 10  # a 64-bit value in 7-bit groups
TRUNCATED = -1  # ``decode_varint`` position when the buffer ends inside the varint
TOO_LONG = -2  # ``decode_varint`` position when more than 64 bits are encoded
_LOW_57_BITS = (1 << 57) - 1  # what is left of 64 bits after a 7-bit logical shift
_LOW_63_BITS = (1 << 63) - 1  # ... and after a 1-bit one


def decode_varint(buf, pos: int, end: int) -> tuple[int, int]:
    """Read the zig-zag varint at ``buf[pos:end]``: (value, next position), or
    (0, TRUNCATED / TOO_LONG) on malformed input, so a numba caller can test ``pos < 0``."""
    if pos + 1 < end:  # one or two bytes, as most record fields are: no loop (in the
        b = int(buf[pos])  # record kernel this takes a third off a segment scan's walk)
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), pos + 1
        b = (b & 0x7F) | (int(buf[pos + 1]) << 7)
        if b < 0x4000:
            return (b >> 1) ^ -(b & 1), pos + 2
    result = 0
    shift = 0
    while True:
        if pos >= end:
            return 0, TRUNCATED
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if (b & 0x80) == 0:
            break
        shift += 7
        if shift > 63:
            return 0, TOO_LONG
    # un-zig-zag with a logical shift: on int64 an arithmetic one would sign-extend bit 63
    return ((result >> 1) & _LOW_63_BITS) ^ -(result & 1), pos


def encode_varint(out, o: int, value: int) -> int:
    """Write ``value`` as a zig-zag varint at ``out[o]`` (room for ``MAX_VARINT_BYTES``);
    return the position after it. The mask makes ``>>`` a logical shift of the 64-bit
    pattern, on Python ints as on int64."""
    u = (value << 1) ^ (value >> 63)
    while True:
        low = u & 0x7F
        u = (u >> 7) & _LOW_57_BITS
        if u == 0:
            out[o] = low
            return o + 1
        out[o] = low | 0x80
        o += 1


def varint_size(value: int) -> int:
    """Bytes ``encode_varint`` writes for ``value`` (Kafka's ``sizeOfVarlong``)."""
    u = (value << 1) ^ (value >> 63)
    n = 1
    u = (u >> 7) & _LOW_57_BITS
    while u != 0:
        u = (u >> 7) & _LOW_57_BITS
        n += 1
    return n


def read_varint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Read a zig-zag varint at ``pos``; return (value, next position) or raise
    :class:`CorruptRecordError`."""
    value, nxt = decode_varint(buf, pos, len(buf))
    if nxt == TRUNCATED:
        raise CorruptRecordError("truncated varint in record")
    if nxt == TOO_LONG:
        raise CorruptRecordError("varint too long")
    return value, nxt


def write_varint(out: bytearray, value: int) -> None:
    """Append a zig-zag varint to ``out``."""
    o = len(out)
    out.extend(bytes(MAX_VARINT_BYTES))
    del out[encode_varint(out, o, value) :]
