"""Full-record columnar decode: key, value and headers as Arrow-style columns.

``kompakt.record.scan`` gives the cleaner what it needs (offsets, keys, value-is-null),
but a DataFrame needs the value bytes and headers too. This module adds that without a
Python object per record: Python visits each *batch* (header, CRC, decompression), one
numba kernel records where every field sits in the (decompressed) payload, and a second
gathers those slices into contiguous buffers that become Arrow arrays without copying.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kompakt.record import codecs
from kompakt.record.decode import RecordBatch
from kompakt.record.header import HEADER_SIZE
from kompakt.record.kernel import (
    HEADERS,
    KEYS,
    VALUES,
    gather_slices,
    locate_records,
    slice_offsets,
)


@dataclass
class Slices:
    """Binary column as Arrow parts: item i is ``data[offsets[i]:offsets[i+1]]``."""

    offsets: np.ndarray  # int32, len n+1
    data: np.ndarray  # uint8
    null: np.ndarray  # bool, len n


@dataclass
class RecordColumns:
    """Row i is one record, in log order."""

    offset: np.ndarray  # int64
    timestamp: np.ndarray  # int64 (ms)
    timestamp_type: np.ndarray  # int32 (0 CreateTime, 1 LogAppendTime)
    batch: np.ndarray  # int32 index into the batch list given to decode_batches
    key: Slices
    value: Slices
    header_offsets: np.ndarray  # int32, len n+1: headers of row i are entries [a, b)
    header_key: Slices
    header_value: Slices

    def __len__(self) -> int:
        return len(self.offset)


def _slices(src: np.ndarray, pos: np.ndarray, lens: np.ndarray) -> Slices:
    """Arrow's binary layout needs int32 offsets, so a chunk holds at most 2 GiB."""
    offsets = slice_offsets(lens)
    if offsets[-1] >= 2**31:
        raise ValueError("a binary column chunk exceeds 2 GiB; decode fewer batches at once")
    return Slices(offsets.astype(np.int32), gather_slices(src, pos, offsets), lens < 0)


def decode_batches(batches: list[RecordBatch]) -> RecordColumns:
    """Decode the records of data batches (the caller drops control batches) into columns.

    Batches must be CRC-checked by the caller when that matters. Compressed batches are
    decompressed and concatenated into one scratch buffer so a single kernel call covers
    every batch.
    """
    payloads: list[bytes | memoryview] = []
    for b in batches:
        raw = b.buffer[HEADER_SIZE:]
        if b.header.compression == codecs.NONE:
            payloads.append(raw)
        else:
            payloads.append(codecs.decompress(b.header.compression, raw))
    lens = np.fromiter((len(p) for p in payloads), np.int64, len(payloads))
    ends = np.cumsum(lens)
    starts = ends - lens
    src = np.frombuffer(b"".join(payloads), np.uint8)
    loc = locate_records(
        src, starts, ends, batches, np.arange(len(batches)), KEYS | VALUES | HEADERS
    )
    n = len(loc)
    ts_type = np.fromiter((b.header.timestamp_type for b in batches), np.int32, len(batches))
    header_offsets = np.zeros(n + 1, np.int32)
    np.cumsum(loc.header_count, out=header_offsets[1:])
    return RecordColumns(
        offset=loc.offset,
        timestamp=loc.timestamp,
        timestamp_type=ts_type[loc.batch] if n else np.empty(0, np.int32),
        batch=loc.batch,
        key=_slices(src, loc.key_pos, loc.key_len),
        value=_slices(src, loc.value_pos, loc.value_len),
        header_offsets=header_offsets,
        header_key=_slices(src, loc.hk_pos, loc.hk_len),
        header_value=_slices(src, loc.hv_pos, loc.hv_len),
    )
