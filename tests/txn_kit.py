"""Transactional batches for log-level tests: a producer's data batch and its markers."""

from __future__ import annotations

from kompakt.record.encode import build_control_batch, build_simple_batch

TS = 1_700_000_000_000


def data(pid: int, *values: bytes, key: bytes = b"k", transactional: bool = True) -> bytes:
    """One batch of ``values`` under ``key`` from producer ``pid`` (transactional unless
    told otherwise; ``pid=-1`` with ``transactional=False`` is a plain batch)."""
    return build_simple_batch(
        [(key, v) for v in values],
        timestamp=TS,
        producer_id=pid,
        producer_epoch=0,
        base_sequence=0,
        transactional=transactional,
    )


def marker(pid: int, kind: int) -> bytes:
    """Producer ``pid``'s COMMIT or ABORT control batch."""
    return build_control_batch(kind, producer_id=pid, producer_epoch=0, timestamp=TS)
