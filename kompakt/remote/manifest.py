"""The remote metadata as values: a partition's manifest and a topic's record.

A manifest (Kafka's ``RemoteLogSegmentMetadata`` for every segment of a partition, in
one object instead of a ``__remote_log_metadata`` topic) is the whole truth about the
partition's remote log: the segments in offset order, each with its objects' keys,
sizes and SHA-256, the ``.log``'s per-chunk CRC32C (so a range read is verified without
fetching the whole segment), its offsets, max timestamp and earliest tombstone delete
horizon (KIP-534), plus the partition's remote log start and the cleaner's clean point.
The producer snapshot is the last segment's ``.snapshot`` object (Kafka uploads one
with every segment). Values are frozen: a change is a new manifest, committed by
:class:`kompakt.remote.metadata.RemoteLogMetadataManager` with a conditional put.

The JSON is checked field by field on load, so a damaged object is reported as one
line naming the key and the field instead of failing later somewhere else.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from kompakt.log.producer_snapshot import SNAPSHOT_SUFFIX
from kompakt.log.segment import LOG_SUFFIX
from kompakt.remote.store import RemoteStorageError

FORMAT = 1


class ManifestError(RemoteStorageError):
    """A manifest or topic object that cannot be read, or a change that breaks its rules."""


@dataclass(frozen=True)
class RemoteFile:
    key: str
    size: int
    sha256: str


@dataclass(frozen=True)
class RemoteSegment:
    """One uploaded segment. ``files`` maps the local suffix (``.log``, ``.index``,
    ``.timeindex``, ``.txnindex``, ``.snapshot``) to its object; ``chunk_crcs`` are the
    CRC32C of each ``chunk_bytes`` slice of the ``.log``."""

    segment_id: str
    base_offset: int
    last_offset: int
    max_timestamp_ms: int
    uploaded_ms: int
    files: Mapping[str, RemoteFile]
    chunk_bytes: int
    chunk_crcs: tuple[int, ...]
    delete_horizon_ms: int = -1  # earliest KIP-534 horizon of a tombstone inside; -1 none

    @property
    def size(self) -> int:
        """Bytes of the ``.log`` (what the remote log's size counts, as in Kafka)."""
        return self.files[LOG_SUFFIX].size

    def keys(self) -> list[str]:
        return [f.key for f in self.files.values()]


@dataclass(frozen=True)
class PartitionManifest:
    topic: str
    partition: int
    topic_id: str
    generation: int = 0
    segments: tuple[RemoteSegment, ...] = ()
    log_start_offset: int = 0
    clean_point: int = 0  # offsets below it are clean (the cleaner's checkpoint)
    updated_ms: int = 0

    @property
    def end_offset(self) -> int:
        """One past the last remote offset (Kafka's highest remote offset + 1)."""
        return self.segments[-1].last_offset + 1 if self.segments else self.log_start_offset

    @property
    def size(self) -> int:
        return sum(s.size for s in self.segments)

    @property
    def producer_snapshot(self) -> RemoteFile | None:
        """The producer state at the end of the remote log (the last segment's)."""
        return self.segments[-1].files.get(SNAPSHOT_SUFFIX) if self.segments else None

    def keys(self) -> set[str]:
        return {k for s in self.segments for k in s.keys()}

    def segment_for(self, offset: int) -> RemoteSegment | None:
        """The segment holding ``offset``, or the first one after it (a gap left by
        compaction), else None."""
        for s in self.segments:
            if offset <= s.last_offset:
                return s
        return None

    def next(self, segments: tuple[RemoteSegment, ...], **changes: Any) -> PartitionManifest:
        """The successor manifest: ``generation + 1`` with these segments and changes."""
        out = replace(self, generation=self.generation + 1, segments=tuple(segments), **changes)
        out.check()
        return out

    def check(self) -> None:
        """Segments ascend without overlap and lie at or above the log start."""
        prev = self.log_start_offset - 1
        for s in self.segments:
            if s.base_offset <= prev or s.last_offset < s.base_offset or LOG_SUFFIX not in s.files:
                raise ManifestError(
                    f"{self.topic}-{self.partition}: segment {s.base_offset}..{s.last_offset} "
                    f"overlaps, lies below the log start or has no .log (previous end {prev})"
                )
            prev = s.last_offset

    def to_json(self) -> bytes:
        body = {
            "format": FORMAT,
            "topic": self.topic,
            "partition": self.partition,
            "topic_id": self.topic_id,
            "generation": self.generation,
            "log_start_offset": self.log_start_offset,
            "clean_point": self.clean_point,
            "updated_ms": self.updated_ms,
            "segments": [_segment_json(s) for s in self.segments],
        }
        return json.dumps(body, indent=1, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes, where: str) -> PartitionManifest:
        r = _Reader(_load(data, where), where)
        r.format()
        m = cls(
            topic=r.text("topic"),
            partition=r.integer("partition"),
            topic_id=r.text("topic_id"),
            generation=r.integer("generation"),
            segments=tuple(
                _segment(r.sub(s, f"segments[{i}]")) for i, s in enumerate(r.array("segments"))
            ),
            log_start_offset=r.integer("log_start_offset"),
            clean_point=r.integer("clean_point"),
            updated_ms=r.integer("updated_ms"),
        )
        try:
            m.check()
        except ManifestError as e:
            raise ManifestError(f"{where}: {e}") from None
        return m


@dataclass(frozen=True)
class TopicRecord:
    """What a broker with an empty disk needs to recreate a tiered topic: its id, its
    partition count and its config overrides (as text, the way they are stored)."""

    topic: str
    topic_id: str
    partitions: int
    configs: Mapping[str, str] = field(default_factory=dict)
    generation: int = 0

    def to_json(self) -> bytes:
        body = {
            "format": FORMAT,
            "topic": self.topic,
            "topic_id": self.topic_id,
            "partitions": self.partitions,
            "configs": dict(sorted(self.configs.items())),
            "generation": self.generation,
        }
        return json.dumps(body, indent=1, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes, where: str) -> TopicRecord:
        r = _Reader(_load(data, where), where)
        r.format()
        configs = r.get("configs", dict)
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in configs.items()):
            raise ManifestError(f"{where}: 'configs' must map strings to strings")
        return cls(
            r.text("topic"),
            r.text("topic_id"),
            r.integer("partitions"),
            configs,
            r.integer("generation"),
        )


def _segment_json(s: RemoteSegment) -> dict[str, Any]:
    return {
        "segment_id": s.segment_id,
        "base_offset": s.base_offset,
        "last_offset": s.last_offset,
        "max_timestamp_ms": s.max_timestamp_ms,
        "uploaded_ms": s.uploaded_ms,
        "delete_horizon_ms": s.delete_horizon_ms,
        "chunk_bytes": s.chunk_bytes,
        "chunk_crc32c": "".join(f"{c:08x}" for c in s.chunk_crcs),
        "files": {
            suffix: {"key": f.key, "size": f.size, "sha256": f.sha256}
            for suffix, f in sorted(s.files.items())
        },
    }


def _segment(r: _Reader) -> RemoteSegment:
    crcs = r.text("chunk_crc32c")
    if len(crcs) % 8:
        raise ManifestError(f"{r.where}: 'chunk_crc32c' is not a list of 8-digit hex CRCs")
    files = {}
    for suffix, f in r.get("files", dict).items():
        fr = r.sub(f, f"files[{suffix}]")
        files[suffix] = RemoteFile(fr.text("key"), fr.integer("size"), fr.text("sha256"))
    try:
        chunk_crcs = tuple(int(crcs[i : i + 8], 16) for i in range(0, len(crcs), 8))
    except ValueError:
        raise ManifestError(f"{r.where}: 'chunk_crc32c' is not hex") from None
    return RemoteSegment(
        segment_id=r.text("segment_id"),
        base_offset=r.integer("base_offset"),
        last_offset=r.integer("last_offset"),
        max_timestamp_ms=r.integer("max_timestamp_ms"),
        uploaded_ms=r.integer("uploaded_ms"),
        files=files,
        chunk_bytes=r.integer("chunk_bytes"),
        chunk_crcs=chunk_crcs,
        delete_horizon_ms=r.integer("delete_horizon_ms"),
    )


def _load(data: bytes, where: str) -> Any:
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise ManifestError(f"{where}: not JSON ({e})") from None


class _Reader:
    """Typed field access on a JSON object, each failure one line naming the field."""

    def __init__(self, body: Any, where: str):
        if not isinstance(body, dict):
            raise ManifestError(f"{where}: expected a JSON object")
        self.body, self.where = body, where

    def sub(self, body: Any, name: str) -> _Reader:
        return _Reader(body, f"{self.where} {name}")

    def get(self, name: str, kind: type) -> Any:
        value = self.body.get(name)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ManifestError(f"{self.where}: field '{name}' must be a {kind.__name__}")
        return value

    def integer(self, name: str) -> int:
        return self.get(name, int)

    def text(self, name: str) -> str:
        return self.get(name, str)

    def array(self, name: str) -> list[Any]:
        return self.get(name, list)

    def format(self) -> None:
        if self.body.get("format") != FORMAT:
            raise ManifestError(
                f"{self.where}: format {self.body.get('format')!r} is not {FORMAT} "
                "(written by another kompakt version?)"
            )
