"""Retention of a tiered partition, as Kafka's remote log manager applies it: what to
delete, decided from the local segments and the durable manifest (the caller deletes).

- **Local retention** (``local.retention.bytes`` / ``.ms``, -2 = ``retention.*``): the
  oldest local segments that the manifest already holds go while the local log exceeds
  the limit or they are older than it (``UnifiedLog.deleteOldSegments`` with local
  retention, deleting only uploaded segments); with ``remote.log.copy.disable`` on a
  ``delete`` topic, uploaded or not (KIP-950).
- **Remote retention** (``retention.bytes`` / ``.ms`` with ``delete`` in
  ``cleanup.policy``; Kafka's ``RLMExpirationTask``): the oldest remote segments go while
  the whole log (the remote segments plus the local ones not yet tiered) exceeds
  ``retention.bytes``, or their newest record is older than ``retention.ms``; the log
  start moves to the first segment kept.
"""

from __future__ import annotations

from kompakt.log.partition_log import PartitionLog
from kompakt.remote.config import effective_local_retention
from kompakt.remote.manifest import PartitionManifest


def local_retention_offset(plog: PartitionLog, m: PartitionManifest | None, now: int) -> int | None:
    """Where the local log should start after local retention, None: where it is."""
    cfg = plog.config
    limit_bytes = effective_local_retention(cfg.local_retention_bytes, cfg.retention_bytes)
    limit_ms = effective_local_retention(cfg.local_retention_ms, cfg.retention_ms)
    segments = plog.segments_snapshot()
    size = sum(s.size for s in segments)
    # with copies disabled (KIP-950) a delete topic's retention.* applies to every local
    # segment, as on an untiered log (Kafka's UnifiedLog with remote copy off)
    untiered_too = cfg.remote_log_copy_disable and cfg.delete
    tiered_end = m.end_offset if m is not None else plog.log_start_offset
    keep_from = None
    for seg, nxt in zip(segments, segments[1:], strict=False):
        if nxt.base_offset > tiered_end and not untiered_too:
            break  # not (wholly) tiered: local retention never deletes it
        by_size = limit_bytes >= 0 and size - seg.size >= limit_bytes
        by_time = limit_ms >= 0 and now - seg.largest_timestamp > limit_ms
        if not (by_size or by_time):
            break
        size -= seg.size
        keep_from = nxt.base_offset
    return keep_from if keep_from is not None and keep_from > plog.log_start_offset else None


def remote_retention_offset(plog: PartitionLog, m: PartitionManifest, now: int) -> int | None:
    """Where the log should start after ``retention.*`` expired remote segments, None:
    nothing expires (or the topic does not delete)."""
    cfg = plog.config
    if not cfg.delete or not m.segments:
        return None
    only_local = sum(s.size for s in plog.segments_snapshot() if s.base_offset >= m.end_offset)
    size = m.size + only_local
    start = None
    for i, seg in enumerate(m.segments):
        by_size = cfg.retention_bytes >= 0 and size - seg.size >= cfg.retention_bytes
        by_time = cfg.retention_ms >= 0 and now - seg.max_timestamp_ms > cfg.retention_ms
        if not (by_size or by_time):
            break
        size -= seg.size
        nxt = m.segments[i + 1] if i + 1 < len(m.segments) else None
        start = nxt.base_offset if nxt is not None else m.end_offset
    return start if start is not None and start > m.log_start_offset else None
