"""Compression codecs of Kafka record batches, through cramjam (a maintained native package).

Codec ids are the low three bits of a batch's attributes. Framing follows the Java client:
snappy is written with the xerial stream framing (plain snappy blocks are also read, as
librdkafka may send them); lz4 is the standard LZ4 frame format; gzip and zstd are plain
streams.
"""

from __future__ import annotations

import struct

import cramjam

from kompakt.errors import CorruptRecordError

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
BY_NAME = {v: k for k, v in NAMES.items()}

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024  # Java's SnappyOutputStream default block size


def codec_id(name: str) -> int:
    """Map a Kafka ``compression.type`` name to a codec id (``producer`` is not a codec)."""
    try:
        return BY_NAME[name.lower()]
    except KeyError:
        raise ValueError(f"unknown compression codec {name!r}") from None


def compress(codec: int, data: bytes) -> bytes:
    if codec == NONE:
        return bytes(data)
    if codec == GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == SNAPPY:
        out = bytearray(_XERIAL_HEADER)
        view = memoryview(data)
        for start in range(0, len(view), _XERIAL_BLOCK):
            block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK]))
            out += struct.pack(">i", len(block))
            out += block
        return bytes(out)
    if codec == LZ4:
        return bytes(cramjam.lz4.compress(data))
    if codec == ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise CorruptRecordError(f"unknown compression codec id {codec}")


def decompress(codec: int, data: bytes | memoryview) -> bytes:
    try:
        if codec == NONE:
            return bytes(data)
        if codec == GZIP:
            return bytes(cramjam.gzip.decompress(data))
        if codec == SNAPPY:
            return _snappy_decompress(bytes(data))
        if codec == LZ4:
            return bytes(cramjam.lz4.decompress(data))
        if codec == ZSTD:
            return bytes(cramjam.zstd.decompress(data))
    except CorruptRecordError:
        raise
    except Exception as exc:  # codec libraries raise their own error types
        raise CorruptRecordError(
            f"cannot decompress {NAMES.get(codec, codec)} data: {exc}"
        ) from exc
    raise CorruptRecordError(f"unknown compression codec id {codec}")


def _snappy_decompress(data: bytes) -> bytes:
    if not data.startswith(_XERIAL_MAGIC):
        return bytes(cramjam.snappy.decompress_raw(data))
    out = bytearray()
    pos = 16
    while pos < len(data):
        if pos + 4 > len(data):
            raise CorruptRecordError("truncated xerial snappy block header")
        (n,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if n < 0 or pos + n > len(data):
            raise CorruptRecordError("truncated xerial snappy block")
        out += cramjam.snappy.decompress_raw(data[pos : pos + n])
        pos += n
    return bytes(out)
