"""The survive/discard rule of Kafka's log cleaner, in one place.

Both engines call these functions: the in-process engine with offsets from its offset
map, the Spark engine with offsets from a shuffle. They are pure (no I/O, no clock) and
work on numpy columns, so a segment's records are decided in a few vectorised steps.

Sources: ``Cleaner.shouldRetainRecord``, ``checkBatchRetention`` and ``MemoryRecords
.filterTo`` in Apache Kafka (``storage/.../internals/log/Cleaner.java``).
"""

from __future__ import annotations

import enum

import numpy as np


class BatchRetention(enum.Enum):
    """Kafka's ``RecordFilter.BatchRetention``."""

    DELETE = "delete"  # drop the batch and its records
    DELETE_EMPTY = "delete_empty"  # keep retained records; drop the batch if none remain
    RETAIN_EMPTY = "retain_empty"  # keep at least a header-only batch


def retain_records(
    offset: np.ndarray,
    latest_for_key: np.ndarray,
    key_null: np.ndarray,
    value_null: np.ndarray,
    horizon: np.ndarray,
    *,
    map_latest_offset: int,
    now: int,
) -> np.ndarray:
    """Which data records survive (Kafka ``shouldRetainRecord``), as a bool mask.

    - a record past the last offset the map covers is kept (partial clean);
    - an unkeyed record is dropped (it cannot be compacted);
    - otherwise it is kept iff it is the latest offset of its key
      (``offset >= latest_for_key``; -1 when the key is not in the map) and it has a
      value or its batch's delete horizon (KIP-534, -1 = not set) has not passed.
    """
    past_map = offset > map_latest_offset
    latest = offset >= latest_for_key
    keep_delete = (horizon < 0) | (now < horizon)
    return past_map | (~key_null & latest & (~value_null | keep_delete))


def batch_retention(
    *,
    is_last_of_producer: bool,
    ends_cleaning_round: bool,
    discard_records: bool,
) -> BatchRetention:
    """Kafka ``checkBatchRetention``: what happens to a batch as a whole.

    A producer's last batch stays (maybe empty) so its sequence and epoch survive; so
    does the batch ending the cleaning round (``nextOffset == upper bound``) so the log
    end offset is not lost; a batch whose records may all be discarded (aborted data, an
    expired transaction marker) is deleted outright.
    """
    if is_last_of_producer or ends_cleaning_round:
        return BatchRetention.RETAIN_EMPTY
    if discard_records:
        return BatchRetention.DELETE
    return BatchRetention.DELETE_EMPTY


def control_batch_discardable(can_discard: bool, horizon: int, now: int) -> bool:
    """A discardable transaction marker goes only once its own delete horizon passed."""
    return can_discard and horizon >= 0 and horizon <= now


def needs_delete_horizon(
    *, has_horizon: bool, retained_tombstone: bool, discardable_marker: bool
) -> bool:
    """KIP-534: the first clean that keeps a tombstone or a discardable marker stamps
    the batch with ``now + delete.retention.ms``."""
    return not has_horizon and (retained_tombstone or discardable_marker)
