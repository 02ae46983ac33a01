"""The partition page's remote tier section: which offsets live where, and the tier's
state, for a partition of a topic with ``remote.storage.enable=true``.

Read from the two owners of the facts, never kept here: the partition's segment list
(:meth:`PartitionLog.segments_snapshot`) and its manifest as the broker's remote log
manager knows it (:meth:`Tiering.manifest`). Each offset of the partition is in one
row: the manifest's segments (``remote``, or ``both`` while the local log still holds
some of their offsets: tiered, not yet removed by ``local.retention.*``), then the
local segments from the remote log's end on (``local``, and the ``active`` one that is
never tiered). A local segment that reaches below the remote end (a clean merged it
after part of it was tiered) is a ``local`` row from its own base offset.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kompakt.broker.tiering import Tiering, tiering_of
from kompakt.cleaner.remote_clean import RemoteCleanRecord
from kompakt.log.partition_log import PartitionLog
from kompakt.remote.manifest import PartitionManifest
from kompakt.remote.store import RemoteStorageError


@dataclass(frozen=True)
class TierRow:
    """One segment of the partition and where its bytes are."""

    where: str  # remote, both, local, active
    base: int
    last: int | None  # None: an empty (active) segment
    remote_size: int | None  # bytes of the remote .log
    local_size: int | None  # bytes of the local .log
    uploaded_ms: int | None


@dataclass(frozen=True)
class TierView:
    """What the partition page shows of the remote tier (``error``: the manifest could
    not be read; the rows are then the local segments only)."""

    url: str
    rows: list[TierRow]
    manifest: PartitionManifest | None
    lag_segments: int
    lag_bytes: int
    error: str | None = None
    cleans: tuple[RemoteCleanRecord, ...] = ()

    def count(self, where: str) -> int:
        return sum(1 for r in self.rows if r.where == where)


def tier_view(broker: Any, plog: PartitionLog) -> TierView | None:
    """The tier's view of ``plog``; None when the broker's tier is off or the topic is
    not tiered (the page then has no remote section)."""
    state = broker.state
    tiering = tiering_of(state) if state is not None else None
    if tiering is None or not plog.config.remote_storage_enable:
        return None
    url = tiering.tier.store.url
    cleans = tuple(tiering.remote_cleaner.history(plog.topic, plog.partition))
    try:
        m = tiering.manifest(plog)
    except RemoteStorageError as exc:
        return TierView(url, _rows(plog, None), None, 0, 0, error=str(exc), cleans=cleans)
    n, nbytes = tiering.copy_lag(plog, m)
    return TierView(url, _rows(plog, m), m, n, nbytes, cleans=cleans)


def _rows(plog: PartitionLog, m: PartitionManifest | None) -> list[TierRow]:
    segments = plog.segments_snapshot()
    local_start = plog.log_start_offset
    rolled = [(s.base_offset, s.last_offset, s.size) for s in segments[:-1]]
    rows = []
    remote_end = Tiering.first_untiered_offset(plog, m)
    for rs in m.segments if m is not None else ():
        where = "both" if rs.last_offset >= local_start else "remote"
        rows.append(
            TierRow(
                where,
                rs.base_offset,
                rs.last_offset,
                rs.size,
                _local_bytes(rolled, rs.base_offset, rs.last_offset) if where == "both" else None,
                rs.uploaded_ms,
            )
        )
    for i, seg in enumerate(segments):
        active = i == len(segments) - 1
        last = seg.last_offset
        if not active and last is not None and last < remote_end:
            continue  # its offsets are in a remote row above
        rows.append(
            TierRow("active" if active else "local", seg.base_offset, last, None, seg.size, None)
        )
    return rows


def _local_bytes(rolled: list[tuple[int, int | None, int]], base: int, last: int) -> int:
    """Bytes of the rolled local segments holding offsets of ``base..last``."""
    return sum(size for b, end, size in rolled if end is not None and end >= base and b <= last)
