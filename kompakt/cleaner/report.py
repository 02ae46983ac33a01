"""The result of a "compact now": one JSON document for the CLI offline, the CLI through
a broker and ``POST /v1/compact`` alike.

Document::

    {"engine": "local", "dry_run": false, "results": [
        {"topic": "users", "partition": 0,
         "status": "cleaned" | "dry-run" | "skipped" | "uncleanable",
         "reason": str | null,          # why skipped or uncleanable
         "file": str | null,            # uncleanable: the segment with the corrupt batch
         "position": int | null,        # ... and the batch's byte position in it
         "first_dirty_offset": int | null, "first_uncleanable_offset": int | null,
         "stats": {CleanStats} | null}, # cleaned / dry-run: what the clean did
    ...]}

Every entry has every key, so a reader needs no per-status cases to parse it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

CLEANED = "cleaned"
DRY_RUN = "dry-run"
SKIPPED = "skipped"
UNCLEANABLE = "uncleanable"


@dataclass
class PartitionResult:
    topic: str
    partition: int
    status: str
    reason: str | None = None
    file: str | None = None
    position: int | None = None
    first_dirty_offset: int | None = None
    first_uncleanable_offset: int | None = None
    stats: Any = None  # CleanStats

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "status": self.status,
            "reason": self.reason,
            "file": self.file,
            "position": self.position,
            "first_dirty_offset": self.first_dirty_offset,
            "first_uncleanable_offset": self.first_uncleanable_offset,
            "stats": self.stats.to_json() if self.stats is not None else None,
        }


@dataclass
class CompactReport:
    engine: str
    dry_run: bool
    results: list[PartitionResult] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "dry_run": self.dry_run,
            "results": [r.to_json() for r in self.results],
        }


def uncleanable_lines(doc: dict[str, Any]) -> list[str]:
    """One readable line per partition a report found uncleanable (the CLI's errors)."""
    return [
        f"{r['topic']}-{r['partition']} is uncleanable: {r['reason']}"
        for r in doc.get("results", [])
        if r.get("status") == UNCLEANABLE
    ]
