"""Compression codecs of Kafka record batches, through cramjam (a maintained native package).

Codec ids are the low three bits of a batch's attributes. Framing follows the Java client:
snappy is written with the xerial stream framing (plain snappy blocks are also read, as
librdkafka may send them); lz4 is the standard LZ4 frame format; gzip and zstd are plain
streams.

:func:`decompress` holds a payload's whole expansion; :func:`decompress_chunks` yields it
in bounded pieces (zstandard, lz4.frame and zlib's streaming decoders, snappy block by
block), for the Produce validation of a batch whose expansion may be large: a 32 KiB
zstd payload can hold 1 GiB of zeros. :data:`MAX_RATIO` bounds what each codec's format
can expand to, so a small gzip, lz4 or snappy payload is known to be small unread.
"""

from __future__ import annotations

import struct
import threading
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import cramjam
import lz4.frame
import zstandard

from kompakt.errors import CorruptRecordError

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
BY_NAME = {v: k for k, v in NAMES.items()}

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024  # Java's SnappyOutputStream default block size

# The largest expansion each format allows per compressed byte: deflate 1032:1 (a
# 258-byte match per 2 bits), LZ4 255:1 (a 255-byte length extension per byte), snappy
# 64 bytes per 3-byte copy. zstd has no useful bound (a 3-byte RLE block is 128 KiB).
MAX_RATIO = {NONE: 1, GZIP: 1032, LZ4: 255, SNAPPY: 22, ZSTD: None}
_GZIP_WBITS = 16 + zlib.MAX_WBITS  # gzip header and trailer, as cramjam.gzip writes them
_local = threading.local()  # one zstd decompression context per thread: ~30 µs to make


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
        return _XERIAL_HEADER + b"".join(_xerial_blocks(memoryview(data)))
    if codec == LZ4:
        return bytes(cramjam.lz4.compress(data))
    if codec == ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise CorruptRecordError(f"unknown compression codec id {codec}")


def compress_chunks(codec: int, pieces: Iterable[bytes]) -> Iterator[bytes]:
    """:func:`compress` of the concatenated ``pieces``, compressed bytes given out as
    each piece goes in (the same framing, so :func:`decompress` reads it): a batch is
    recompressed without holding its expansion."""
    if codec == NONE:
        yield from pieces
    elif codec == SNAPPY:
        yield _XERIAL_HEADER
        pending = b""
        for piece in pieces:
            pending += piece
            whole = len(pending) - len(pending) % _XERIAL_BLOCK
            yield from _xerial_blocks(memoryview(pending)[:whole])
            pending = pending[whole:]
        yield from _xerial_blocks(memoryview(pending))
    else:
        streams = {GZIP: cramjam.gzip, LZ4: cramjam.lz4, ZSTD: cramjam.zstd}
        if codec not in streams:
            raise CorruptRecordError(f"unknown compression codec id {codec}")
        comp = streams[codec].Compressor()
        for piece in pieces:
            comp.compress(piece)
            out = bytes(comp.flush())
            if out:
                yield out
        yield bytes(comp.finish())


def _xerial_blocks(view: memoryview) -> Iterator[bytes]:
    for start in range(0, len(view), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK]))
        yield struct.pack(">i", len(block)) + block


@contextmanager
def _codec_errors(codec: int) -> Iterator[None]:
    """A codec library's own error as a :class:`CorruptRecordError`."""
    try:
        yield
    except CorruptRecordError:
        raise
    except Exception as exc:  # codec libraries raise their own error types
        raise CorruptRecordError(
            f"cannot decompress {NAMES.get(codec, codec)} data: {exc}"
        ) from exc


def decompress(codec: int, data: bytes | memoryview) -> bytes:
    with _codec_errors(codec):
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
    raise CorruptRecordError(f"unknown compression codec id {codec}")


def decompress_bounded(codec: int, data: bytes | memoryview, limit: int) -> bytes | None:
    """The decompressed ``data`` if it is at most ``limit`` bytes, else None (having
    decompressed no more than ``limit`` bytes of it)."""
    ratio = MAX_RATIO.get(codec)
    if ratio is not None and len(data) * ratio <= limit:
        return decompress(codec, data)  # the format cannot expand it past the limit
    pieces: list[bytes] = []
    total = 0
    for piece in decompress_chunks(codec, data, min(limit + 1, 1 << 20)):
        total += len(piece)
        if total > limit:
            return None
        pieces.append(piece)
    return pieces[0] if len(pieces) == 1 else b"".join(pieces)


def decompress_chunks(codec: int, data: bytes | memoryview, chunk: int) -> Iterator[bytes]:
    """The decompressed ``data`` in non-empty pieces of at most ``chunk`` bytes (snappy:
    one block, at most 22 times its compressed size), never the whole expansion at once.
    Errors as :func:`decompress` raises them."""
    with _codec_errors(codec):
        if codec == NONE:
            view = memoryview(data)
            for start in range(0, len(view), chunk):
                yield bytes(view[start : start + chunk])
        elif codec == ZSTD:
            yield from _zstd_chunks(data, chunk)
        elif codec == LZ4:
            yield from _lz4_chunks(data, chunk)
        elif codec == GZIP:
            yield from _gzip_chunks(data, chunk)
        elif codec == SNAPPY:
            yield from _snappy_blocks(bytes(data))
        else:
            raise CorruptRecordError(f"unknown compression codec id {codec}")


def _zstd_chunks(data: bytes | memoryview, chunk: int) -> Iterator[bytes]:
    dctx = getattr(_local, "zstd", None)
    if dctx is None:
        dctx = _local.zstd = zstandard.ZstdDecompressor()
    # read_across_frames: a payload of several frames decodes whole, as cramjam does it
    with dctx.stream_reader(data, read_across_frames=True) as reader:
        while piece := reader.read(chunk):
            yield piece
    if not _zstd_frames_complete(memoryview(data)):  # the reader ends a cut frame quietly
        raise CorruptRecordError("cannot decompress zstd data: incomplete frame")


_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_SKIPPABLE = 0x184D2A50  # ... to 0x184D2A5F (RFC 8878, 3.1.2)


def _zstd_frames_complete(data: memoryview) -> bool:
    """Whether ``data`` is whole zstd frames (RFC 8878): walks the 3-byte block headers,
    one per up to 128 KiB of output, without decoding."""
    pos = 0
    while pos < len(data):
        if pos + 8 > len(data):
            return False
        (magic,) = struct.unpack_from("<I", data, pos)
        if magic & 0xFFFFFFF0 == _ZSTD_SKIPPABLE:
            pos += 8 + struct.unpack_from("<I", data, pos + 4)[0]
            continue
        if magic != _ZSTD_MAGIC:
            return False
        head = bytes(data[pos : pos + 18])
        params = zstandard.get_frame_parameters(head)
        pos += zstandard.frame_header_size(head)
        while True:
            if pos + 3 > len(data):
                return False
            block = int.from_bytes(data[pos : pos + 3], "little")
            kind, size = (block >> 1) & 3, block >> 3
            pos += 3 + (1 if kind == 1 else size)
            if block & 1:
                break
        pos += 4 if params.has_checksum else 0
    return pos == len(data)


def _lz4_chunks(data: bytes | memoryview, chunk: int) -> Iterator[bytes]:
    dec = lz4.frame.LZ4FrameDecompressor()
    rest = bytes(data)
    while True:
        piece = dec.decompress(rest, max_length=chunk)
        rest = b""
        if piece:
            yield piece
        if dec.eof:
            if not dec.unused_data:
                return
            dec, rest = lz4.frame.LZ4FrameDecompressor(), dec.unused_data  # next frame
            continue
        if not piece and dec.needs_input:
            raise CorruptRecordError("truncated lz4 frame")


def _gzip_chunks(data: bytes | memoryview, chunk: int) -> Iterator[bytes]:
    dec = zlib.decompressobj(_GZIP_WBITS)
    rest = bytes(data)
    while True:
        piece = dec.decompress(rest, chunk)
        rest = dec.unconsumed_tail
        if piece:
            yield piece
        if dec.eof:
            if dec.unused_data:  # concatenated gzip members, as a gzip stream may have
                dec, rest = zlib.decompressobj(_GZIP_WBITS), dec.unused_data
                continue
            return
        if not piece and not rest:
            raise CorruptRecordError("truncated gzip stream")


def _snappy_blocks(data: bytes) -> Iterator[bytes]:
    if not data.startswith(_XERIAL_MAGIC):
        yield bytes(cramjam.snappy.decompress_raw(data))
        return
    pos = 16
    while pos < len(data):
        if pos + 4 > len(data):
            raise CorruptRecordError("truncated xerial snappy block header")
        (n,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if n < 0 or pos + n > len(data):
            raise CorruptRecordError("truncated xerial snappy block")
        piece = bytes(cramjam.snappy.decompress_raw(data[pos : pos + n]))
        pos += n
        if piece:
            yield piece


def _snappy_decompress(data: bytes) -> bytes:
    return b"".join(_snappy_blocks(data))
