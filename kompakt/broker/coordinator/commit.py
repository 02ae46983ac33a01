"""The per-partition checks of an offset commit, shared by OffsetCommit and its
transactional twin TxnOffsetCommit, as Kafka runs both through one path (``KafkaApis``
filters unknown partitions, then ``GroupCoordinator.doCommitOffsets`` /
``doTxnCommitOffsets`` share ``validateOffsetMetadataLength``): a partition the topic
does not have is UNKNOWN_TOPIC_OR_PARTITION, metadata longer than
``offset.metadata.max.bytes`` is OFFSET_METADATA_TOO_LARGE, each on its own partition
while the others commit. The group-level check differs between the two APIs and stays
with each handler; its error, if any, is every partition's.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from kompakt.broker.coordinator.records import NO_LEADER_EPOCH, OffsetAndMetadata
from kompakt.broker.protocol import ZERO_UUID
from kompakt.broker.state import RequestContext

MAX_METADATA = 4096
"""Kafka's ``offset.metadata.max.bytes`` default: longer commit metadata is refused."""


def commit_error_partition(index: int, code: ErrorCode) -> dict[str, Any]:
    """An OffsetCommit (and TxnOffsetCommit, OffsetDelete) partition answered ``code``."""
    return {"partition_index": index, "error_code": code}


def topic_name(ctx: RequestContext, t: Any) -> str | None:
    """The topic a request's entry names, by name or (v10+, KIP-516) by id."""
    name = getattr(t, "name", None)
    if name:
        return name
    tid = getattr(t, "topic_id", None)
    if tid is not None and tid != ZERO_UUID:
        return ctx.state.topic_by_id(tid)
    return None


@dataclass
class CommitCheck:
    """The outcome of :func:`check_commit`: each request topic with its name (None if
    unknown) and its partitions' answers so far, and the offsets to write."""

    topics: list[tuple[Any, str | None, list[dict[str, Any]]]] = field(default_factory=list)
    to_commit: dict[tuple[str, int], OffsetAndMetadata] = field(default_factory=dict)

    def fail_rest(self, code: ErrorCode) -> None:
        """The write failed: every partition not already refused answers ``code``."""
        for _t, _name, parts in self.topics:
            for p in parts:
                if p["error_code"] == ErrorCode.none:
                    p["error_code"] = code

    def refuse(self, refused: Iterable[tuple[str, int]], code: ErrorCode) -> None:
        """The write refused these partitions (a topic deleted meanwhile)."""
        gone = set(refused)
        for _t, name, parts in self.topics:
            for p in parts:
                if (name, p["partition_index"]) in gone:
                    p["error_code"] = code


def check_commit(
    ctx: RequestContext,
    topics: Iterable[Any],
    group_error: ErrorCode,
    now: int,
    expire: int | None = None,
) -> CommitCheck:
    """Check every partition of an OffsetCommit or TxnOffsetCommit request's ``topics``
    (``group_error`` NONE once the group accepted it, else every partition's answer)
    and build the offsets to write, stamped ``now`` (and ``expire``: OffsetCommit
    v2-v4's ``retention_time``)."""
    out = CommitCheck()
    for t in topics:
        name = topic_name(ctx, t)
        nparts = ctx.logs.partition_count(name) if name and ctx.logs.has_topic(name) else 0
        parts = []
        for p in t.partitions:
            index = int(p.partition_index)
            code = group_error
            if code == ErrorCode.none:
                if not 0 <= index < nparts:
                    code = ErrorCode.unknown_topic_or_partition
                elif p.committed_metadata is not None and len(p.committed_metadata) > MAX_METADATA:
                    code = ErrorCode.offset_metadata_too_large
                else:
                    assert name is not None
                    out.to_commit[(name, index)] = OffsetAndMetadata(
                        int(p.committed_offset),
                        int(getattr(p, "committed_leader_epoch", NO_LEADER_EPOCH)),
                        p.committed_metadata or "",
                        now,
                        expire,
                    )
            parts.append(commit_error_partition(index, code))
        out.topics.append((t, name, parts))
    return out
