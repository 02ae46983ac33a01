"""What a clean reports: :class:`CleanStats` (Kafka's ``CleanerStats`` and the summary
line its ``Cleaner`` logs) and :class:`DirtyRange` (what an engine's key map covered).

Value objects only, shared by the engines (mechanism) and the :class:`Cleaner` (policy).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from kompakt.cleaner.rewrite import GroupStats, LatestLookup


@dataclass
class CleanStats:
    """One clean of one partition: what Kafka's cleaner log line reports, and more."""

    topic: str
    partition: int
    engine: str
    dry_run: bool = False
    first_dirty_offset: int = 0
    first_uncleanable_offset: int = 0
    end_offset: int = 0  # the new first dirty offset (checkpoint)
    records_read: int = 0
    bytes_read: int = 0
    records_written: int = 0
    bytes_written: int = 0
    tombstones_removed: int = 0
    unkeyed_removed: int = 0
    batches_copied: int = 0
    map_records_read: int = 0
    map_bytes_read: int = 0
    map_utilization: float | None = None  # None: the engine keeps no offset map (Spark)
    map_entries: int = 0
    partial: bool = False
    segments_before: int = 0
    segments_after: int = 0
    started_ms: int = 0
    duration_s: float = 0.0
    dirty_ratio: float = 0.0

    @property
    def mb_per_s(self) -> float:
        return self.bytes_read / 1e6 / self.duration_s if self.duration_s > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["mb_per_s"] = round(self.mb_per_s, 2)
        return out

    def log_line(self) -> str:
        """Like Kafka's ``Cleaner`` summary."""
        kind = "Dry run of clean" if self.dry_run else "Cleaned"
        reduction = 100 * (1 - self.bytes_written / self.bytes_read) if self.bytes_read else 0
        # Kafka's "Buffer utilization": only an engine with an offset map has one to report
        fill = (
            "" if self.map_utilization is None else f"; map {100 * self.map_utilization:.1f}% full"
        )
        return (
            f"{kind} {self.topic}-{self.partition} offsets [{self.first_dirty_offset}, "
            f"{self.end_offset}) with engine {self.engine}: {self.bytes_read / 1e6:.1f} MB, "
            f"{self.records_read} records read, {self.bytes_written / 1e6:.1f} MB, "
            f"{self.records_written} records written ({reduction:.1f}% size reduction), "
            f"{self.tombstones_removed} tombstones removed, in {self.duration_s:.3f} s "
            f"({self.mb_per_s:.1f} MB/s){fill}"
            f"{' (partial pass)' if self.partial else ''}; segments "
            f"{self.segments_before} -> {self.segments_after}"
        )

    def add_groups(self, total: GroupStats) -> None:
        """The rewrite's totals over every group."""
        for k in (
            "records_read",
            "bytes_read",
            "records_written",
            "bytes_written",
            "tombstones_removed",
            "unkeyed_removed",
            "batches_copied",
        ):
            setattr(self, k, getattr(total, k))

    def add_dirty(self, dirty: DirtyRange) -> None:
        """What the key map covered (Kafka's ``CleanerStats`` map figures)."""
        self.end_offset = dirty.end_offset
        self.partial = dirty.partial
        self.map_utilization = dirty.map_utilization
        self.map_entries = dirty.map_entries
        self.map_records_read = dirty.records_read
        self.map_bytes_read = dirty.bytes_read


@dataclass
class DirtyRange:
    """What an engine's key map covered: where this round ends (a partial pass of the
    in-process map stops early, Kafka's ``buildOffsetMap``) and how to look a key up."""

    end_offset: int
    lookup: LatestLookup | None = None  # the in-process engine's offset map
    map_utilization: float | None = None  # None: no offset map (the Spark engine joins)
    map_entries: int = 0
    records_read: int = 0
    bytes_read: int = 0
    partial: bool = False


@dataclass
class RunningClean:
    """A clean under way (Kafka's cleaner shows it only as a log line when it ends):
    what the console's "running" row and progress bar show. ``done``/``total`` are the
    engine's progress units (segment groups or Spark tasks), 0/0 until it reports."""

    topic: str
    partition: int
    engine: str
    dry_run: bool
    started_ms: int
    done: int = 0
    total: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
