"""A fetch below the local log start, served from the remote tier (Kafka's
``ReplicaManager`` remote fetch through ``RemoteLogManager.read``): the remote segment
holding the offset, the next one when a clean left none of its batches at or after it
(KAFKA-15388), and the aborted transactions of the tiered ``.txnindex`` files for
read_committed. :meth:`kompakt.broker.tiering.Tiering.source_for` hands it out.
"""

from __future__ import annotations

from typing import Protocol

from kompakt.broker.tiering_failures import FailureLog
from kompakt.log.partition_log import PartitionLog
from kompakt.log.txn_index import AbortedTxn
from kompakt.remote.manifest import PartitionManifest
from kompakt.remote.reads import RemoteSegmentReader
from kompakt.remote.store import ObjectNotFoundError, RemoteStorageError

READS = FailureLog()
"""Failed remote reads, by partition and offset: the client sees KAFKA_STORAGE_ERROR
and retries at once, the broker's log says why once."""


class Tier(Protocol):
    """What a remote read needs of the broker's tiering (its reader, and a fresh
    manifest when the cached one names a deleted object)."""

    reader: RemoteSegmentReader

    def forget(self, topic: str, partition: int) -> None: ...

    def source_for(self, plog: PartitionLog, offset: int) -> PartitionLog | RemoteSource: ...


class RemoteSource:
    """A fetch's view of the remote log, with the two methods a fetch calls on a
    :class:`PartitionLog` (``read`` and ``collect_aborted_transactions``)."""

    def __init__(self, tiering: Tier, plog: PartitionLog, manifest: PartitionManifest):
        self.tiering, self.plog, self.manifest = tiering, plog, manifest

    def read(self, offset: int, max_bytes: int, min_one_batch: bool = True) -> bytes:
        try:
            return self._read(offset, max_bytes, min_one_batch)
        except ObjectNotFoundError:
            # a newer manifest than the one cached dropped the segment (a writer in
            # another process): read the manifest again and retry once
            self.tiering.forget(self.plog.topic, self.plog.partition)
            source = self.tiering.source_for(self.plog, offset)  # OUT_OF_RANGE now?
            return source.read(offset, max_bytes, min_one_batch)
        except RemoteStorageError as exc:  # the client sees KAFKA_STORAGE_ERROR only
            where = (self.plog.name, offset)
            READS.failed(
                where, f"{where[0]}: a fetch at offset {offset} from the remote tier: {exc}"
            )
            raise

    def _read(self, offset: int, max_bytes: int, min_one_batch: bool) -> bytes:
        seg = self.manifest.segment_for(offset)
        while seg is not None:
            data = self.tiering.reader.read(seg, offset, max_bytes, min_one_batch)
            if data or not min_one_batch:
                return data
            # a clean left no batch here at or after offset: the next segment (KAFKA-15388)
            seg = self.manifest.segment_for(seg.last_offset + 1)
        # between the remote end and the local start: the next batch
        return self.plog.read(self.plog.log_start_offset, max_bytes, min_one_batch)

    def collect_aborted_transactions(self, start_offset: int, upper_bound: int) -> list[AbortedTxn]:
        segments = [s for s in self.manifest.segments if s.last_offset >= start_offset]
        found, complete = self.tiering.reader.aborted(segments, start_offset, upper_bound)
        local = self.plog.log_start_offset
        if not complete and upper_bound > local:
            found += self.plog.collect_aborted_transactions(max(start_offset, local), upper_bound)
        return found
