"""Producer ids, and the broker's handle on each partition's producer state.

Hands out producer ids (Kafka's ``ProducerIdManager``). The per-partition idempotence
and transaction state (Kafka's ``ProducerStateManager``: each producer's epoch and
last 5 batches, open transactions, snapshots) is owned by the partition's log
(:mod:`kompakt.log.producer_state`); :meth:`ProducerIdManager.for_log` hands it to the
produce and marker handlers.

- InitProducerId without a transactional id always hands out a fresh producer id with
  epoch 0 (Kafka does the same; librdkafka's epoch bump after a fatal sequence error is
  thereby a new id).
- A batch equal to one of a producer's last 5 is a retried duplicate: not appended again,
  answered with the original's base offset (DUPLICATE_SEQUENCE handled as success, like
  Kafka); an older epoch is INVALID_PRODUCER_EPOCH, a gap OUT_OF_ORDER_SEQUENCE_NUMBER
  (:meth:`kompakt.log.producer_state.ProducerStateManager.check`).
- The state is built lazily per partition, the first time an idempotent producer writes
  to it after start (or retention or a clean is about to remove batches, or the cleaner
  asks for the producers' last records), from the latest ``<offset>.snapshot`` and the
  batches after it; the log then writes a snapshot at each roll, before head segments
  go and at a clean shutdown, so the state outlives the batches it was built from
  (KIP-360).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from kompakt.log.partition_log import PartitionLog
from kompakt.log.producer_state import (
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
)
from kompakt.log.producer_state import (
    ProducerStateManager as PartitionProducers,
)

__all__ = [
    "PRODUCER_ID_BLOCK_FILE",
    "InvalidProducerEpochError",
    "OutOfOrderSequenceError",
    "PartitionProducers",
    "ProducerIdManager",
    "ProducerStateManager",
]


PRODUCER_ID_BLOCK_SIZE = 1000
"""Ids reserved on disk at a time (Kafka's ``ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE``)."""

PRODUCER_ID_BLOCK_FILE = "kompakt-producer-id-block"
"""In the data dir: the end of the last reserved block of producer ids."""


class ProducerIdManager:
    """Producer ids, and each partition's producer state through its log.

    With a ``data_dir``, ids are handed out from blocks reserved on disk before use, as
    Kafka's ``ProducerIdManager`` reserves ``ProducerIdsBlock``s through the controller:
    an id is never handed out twice, across restarts too, even if the clock went back.
    A transactional id keeps its producer id in ``__transaction_state``; a restarted
    broker handing it to another producer would let the two fence each other."""

    def __init__(self, data_dir: str | os.PathLike[str] | None = None) -> None:
        self._block_path = Path(data_dir) / PRODUCER_ID_BLOCK_FILE if data_dir else None
        start = int(time.time() * 1000) * 1000
        if self._block_path is not None:
            start = max(start, _read_block_end(self._block_path))
        self._next = start
        self._block_end = start if self._block_path is not None else None
        self._lock = threading.Lock()

    def new_producer_id(self) -> int:
        with self._lock:
            if self._block_end is not None and self._next >= self._block_end:
                self._reserve(self._next + PRODUCER_ID_BLOCK_SIZE)
            pid = self._next
            self._next += 1
            return pid

    def ensure_above(self, producer_id: int) -> None:
        """Never hand out ``producer_id`` or a smaller one (ids loaded from
        ``__transaction_state`` at start)."""
        with self._lock:
            self._next = max(self._next, producer_id + 1)

    def _reserve(self, end: int) -> None:
        """Write the new block end, fsynced, before any id of it is used."""
        assert self._block_path is not None
        tmp = self._block_path.with_name(self._block_path.name + ".tmp")
        with open(tmp, "w") as f:
            f.write(f"{end}\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._block_path)
        self._block_end = end

    def for_log(self, plog: PartitionLog) -> PartitionProducers:
        """The partition's producer state, owned by its log and built on first use
        (call under ``plog.lock``)."""
        return plog.producers


def _read_block_end(path: Path) -> int:
    """The reserved block end written by :meth:`ProducerStateManager._reserve`; 0 if
    none was written yet."""
    try:
        return int(path.read_text().strip())
    except FileNotFoundError:
        return 0


ProducerStateManager = ProducerIdManager
"""The name the broker's app and handlers import."""
