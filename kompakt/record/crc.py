"""CRC-32C (Castagnoli) inside compiled code: a v2 batch's checksum from numba.

The ``crc32c`` package is the checksum for Python callers (:data:`kompakt.record.header.
crc32c`), but a compiled pass over many batches (the produce quick pass, a fetch's walk
over the batches it serves) cannot call it without going back to Python once per batch.
So the same function is written here for numba: the SSE4.2 ``crc32`` instruction (LLVM's
``llvm.x86.sse42.crc32.64.64``) where the host has it, on three interleaved streams so
its 3-cycle latency does not bound it, joined by tables that shift a CRC over a block of
zeros; and a table-driven CRC (slicing by 8) where it does not, so the code runs
anywhere. Both are tested bit for bit against the package.
"""

from __future__ import annotations

import llvmlite.binding as llvm
import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

_JIT = {"cache": True, "nogil": True}
POLY = 0x82F63B78  # the Castagnoli polynomial, bit-reflected
HARDWARE = bool(llvm.get_host_cpu_features().get("sse4.2", False))
# bytes of each of the three streams per round: the larger, the fewer joins; the
# smaller, the less is left to the single stream at the end
_BLOCKS = (2048, 128)


def _byte_tables() -> np.ndarray:
    """Slicing-by-8 tables: ``t[k][b]`` is byte ``b``'s CRC followed by ``k`` zero bytes."""
    t = np.zeros((8, 256), np.uint32)
    for b in range(256):
        c = b
        for _ in range(8):
            c = (c >> 1) ^ (POLY if c & 1 else 0)
        t[0, b] = c
    for k in range(1, 8):
        for b in range(256):
            prev = int(t[k - 1, b])
            t[k, b] = (prev >> 8) ^ int(t[0, prev & 0xFF])
    return t


def _mult(a: int, b: int) -> int:
    """``a * b`` modulo the polynomial, both bit-reflected (Mark Adler's multmodp)."""
    m, p = 1 << 31, 0
    while m:
        if a & m:
            p ^= b
        m >>= 1
        b = (b >> 1) ^ POLY if b & 1 else b >> 1
    return p


def _x_power(n: int) -> int:
    """``x^n`` modulo the polynomial, bit-reflected, by squaring."""
    result, square = 1 << 31, 1 << 30  # x^0, x^1
    while n:
        if n & 1:
            result = _mult(result, square)
        square = _mult(square, square)
        n >>= 1
    return result


def _shift_tables() -> np.ndarray:
    """``s[i, j, k][b]``: byte ``k`` of a CRC state (value ``b``) moved over ``(j + 1)``
    times ``_BLOCKS[i]`` zero bytes, so a state is shifted with four lookups. Shifting
    is linear: each entry is the XOR of its bits' shifts."""
    out = np.zeros((len(_BLOCKS), 2, 4, 256), np.uint32)
    byte = np.arange(256)
    for i, block in enumerate(_BLOCKS):
        for j in range(2):
            x = _x_power(8 * block * (j + 1))
            for k in range(4):
                for bit in range(8):
                    moved = _mult(x, 1 << (8 * k + bit))
                    out[i, j, k] ^= np.where((byte >> bit) & 1, moved, 0).astype(np.uint32)
    return out


_TABLES = _byte_tables()
_SHIFTS = _shift_tables()
_BLOCK_SIZES = np.array(_BLOCKS, np.int64)


@intrinsic
def _hw_crc64(typingctx, crc, word):
    """The SSE4.2 ``crc32`` instruction on 8 bytes (state and result in the low 32 bits)."""

    def codegen(context, builder, signature, args):
        fnty = ir.FunctionType(ir.IntType(64), [ir.IntType(64), ir.IntType(64)])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.x86.sse42.crc32.64.64")
        return builder.call(fn, args)

    return types.uint64(types.uint64, types.uint64), codegen


@intrinsic
def _hw_crc8(typingctx, crc, byte):
    """The SSE4.2 ``crc32`` instruction on one byte."""

    def codegen(context, builder, signature, args):
        i32, i8 = ir.IntType(32), ir.IntType(8)
        fnty = ir.FunctionType(i32, [i32, i8])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.x86.sse42.crc32.32.8")
        return builder.call(fn, [builder.trunc(args[0], i32), builder.trunc(args[1], i8)])

    return types.uint32(types.uint32, types.uint8), codegen


@intrinsic
def _load64(typingctx, buf, pos):
    """The 8 bytes of ``buf`` at ``pos`` as one little-endian word (unaligned load; the
    caller bounds ``pos``)."""

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        ptr = builder.gep(ary.data, [args[1]])
        return builder.load(builder.bitcast(ptr, ir.IntType(64).as_pointer()), align=1)

    return types.uint64(buf, types.intp), codegen


@numba.njit(inline="always", **_JIT)
def _step8(crc, buf, p, hw):
    """The state after the 8 bytes at ``p``: the instruction, or slicing by 8 (byte by
    byte, any endianness)."""
    if hw:
        return np.uint32(_hw_crc64(np.uint64(crc), _load64(buf, p)))
    t = _TABLES
    c = np.uint32(crc)
    c0 = (c ^ np.uint32(buf[p])) & 0xFF
    c1 = ((c >> 8) ^ np.uint32(buf[p + 1])) & 0xFF
    c2 = ((c >> 16) ^ np.uint32(buf[p + 2])) & 0xFF
    c3 = ((c >> 24) ^ np.uint32(buf[p + 3])) & 0xFF
    return (
        t[7, c0] ^ t[6, c1] ^ t[5, c2] ^ t[4, c3]
        ^ t[3, buf[p + 4]] ^ t[2, buf[p + 5]] ^ t[1, buf[p + 6]] ^ t[0, buf[p + 7]]
    )  # fmt: skip


@numba.njit(inline="always", **_JIT)
def _step1(crc, buf, p, hw):
    """The state after the byte at ``p``."""
    if hw:
        return _hw_crc8(np.uint32(crc), buf[p])
    return np.uint32((crc >> 8) ^ _TABLES[0, (crc ^ np.uint32(buf[p])) & 0xFF])


@numba.njit(inline="always", **_JIT)
def _shift(crc, level, twice):
    """The state ``crc`` moved over one or two blocks of zeros of ``_BLOCKS[level]``."""
    s = _SHIFTS
    c = np.uint32(crc)
    return (
        s[level, twice, 0, c & 0xFF] ^ s[level, twice, 1, (c >> 8) & 0xFF]
        ^ s[level, twice, 2, (c >> 16) & 0xFF] ^ s[level, twice, 3, c >> 24]
    )  # fmt: skip


@numba.njit(inline="always", **_JIT)
def _update(crc, buf, start, end, hw):
    """:func:`crc_update` by the instruction (``hw``) or the tables."""
    c = np.uint32(crc)
    p = start
    for level in range(len(_BLOCK_SIZES)):
        block = _BLOCK_SIZES[level]
        while end - p >= 3 * block:
            a = c
            b = np.uint32(0)
            d = np.uint32(0)
            for i in range(0, block, 8):  # three chains the core runs side by side
                a = _step8(a, buf, p + i, hw)
                b = _step8(b, buf, p + block + i, hw)
                d = _step8(d, buf, p + 2 * block + i, hw)
            c = _shift(a, level, 1) ^ _shift(b, level, 0) ^ d
            p += 3 * block
    while end - p >= 8:
        c = _step8(c, buf, p, hw)
        p += 8
    while p < end:
        c = _step1(c, buf, p, hw)
        p += 1
    return c


@numba.njit(inline="always", **_JIT)
def update_hw(crc, buf, start, end):
    """:func:`crc_update` by the SSE4.2 instruction (only where :data:`HARDWARE`)."""
    return _update(crc, buf, start, end, True)


@numba.njit(inline="always", **_JIT)
def update_sw(crc, buf, start, end):
    """:func:`crc_update` by the tables, on any host."""
    return _update(crc, buf, start, end, False)


crc_update = update_hw if HARDWARE else update_sw
"""``crc_update(crc, buf, start, end)``: the raw CRC-32C state ``crc`` (no inversion)
carried over ``buf[start:end]``, by the host's best code. Chosen once at import, so
the compiled callers (cached per host CPU) hold no test of it."""


@numba.njit(**_JIT)
def crc32c_of(buf, start, end):
    """The CRC-32C of ``buf[start:end]`` (as a v2 batch's ``crc`` field holds it). A
    call, not inlined: once per batch costs nothing, and each caller's variants
    compiled with their own copy took half a minute more to compile from cold."""
    return np.uint32(~crc_update(np.uint32(0xFFFFFFFF), buf, start, end))


@numba.njit(**_JIT)
def _crc32c(buf, hw):
    if hw:
        return np.uint32(~update_hw(np.uint32(0xFFFFFFFF), buf, 0, len(buf)))
    return np.uint32(~update_sw(np.uint32(0xFFFFFFFF), buf, 0, len(buf)))


def crc32c(data: bytes | bytearray | memoryview, hardware: bool = HARDWARE) -> int:
    """CRC-32C of ``data`` by the compiled code (what the compiled passes compute);
    ``hardware=False`` runs the tables even where the instruction exists."""
    return int(_crc32c(np.frombuffer(data, np.uint8), hardware and HARDWARE))
