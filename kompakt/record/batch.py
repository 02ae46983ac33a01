"""The record layer's public face for the embedded Python API (README, docs/internals.md).

The format lives in :mod:`~kompakt.record.header` (layout, attribute bits, in-place
patches), :mod:`~kompakt.record.decode` and :mod:`~kompakt.record.encode`; kompakt's own
modules import from those. This module only re-exports the names the documented API
promises, so programs written against ``kompakt.record.batch`` keep working.
"""

from __future__ import annotations

from kompakt.record.decode import ControlRecord, Record, RecordBatch, iter_batches
from kompakt.record.encode import (
    build_batch,
    build_batch_like,
    build_control_batch,
    build_empty_batch,
    build_simple_batch,
)
from kompakt.record.header import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    CREATE_TIME,
    LOG_APPEND_TIME,
    Header,
    read_header,
    set_base_offset,
)

__all__ = [
    "CONTROL_ABORT",
    "CONTROL_COMMIT",
    "CREATE_TIME",
    "LOG_APPEND_TIME",
    "ControlRecord",
    "Header",
    "Record",
    "RecordBatch",
    "build_batch",
    "build_batch_like",
    "build_control_batch",
    "build_empty_batch",
    "build_simple_batch",
    "iter_batches",
    "read_header",
    "set_base_offset",
]
