"""The consumer groups pages' data: members, assignment, committed offsets and lag.

From the group coordinator's state (what DescribeGroups and OffsetFetch answer); lag is
``high watermark - committed`` as ``kafka-consumer-groups.sh --describe`` computes it,
also exported as ``kompakt_consumer_group_lag`` (:func:`lag_samples`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from kompakt.errors import KompaktError


@dataclass
class PartitionLag:
    topic: str
    partition: int
    committed: int | None
    end_offset: int | None
    lag: int | None
    member_id: str | None = None


@dataclass
class GroupMemberView:
    """One member as DescribeGroups shows it. ``assignment`` is left unfiltered on
    purpose: Kafka's handleDescribeGroupsRequest asks only DESCRIBE on the GROUP and
    returns each member's assignment bytes whole, topics the caller may not DESCRIBE
    included; the committed offsets beside it are OffsetFetch's, filtered by topic."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: list[tuple[str, int]]


@dataclass
class GroupView:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    generation: int
    members: list[GroupMemberView] = field(default_factory=list)
    partitions: list[PartitionLag] = field(default_factory=list)

    @property
    def total_lag(self) -> int:
        return sum(p.lag or 0 for p in self.partitions)


def decode_assignment(data: bytes) -> list[tuple[str, int]]:
    """A ConsumerProtocolAssignment's topic-partitions (read as v0, the prefix of every
    version, as Kafka's ``ConsumerProtocol.deserializeAssignment``); [] if not one."""
    from kio.schema.consumer_protocol_assignment.v0.data import ConsumerProtocolAssignment
    from kio.serial import entity_reader

    if len(data) < 2:
        return []
    try:
        a, _used = entity_reader(ConsumerProtocolAssignment)(memoryview(data)[2:], 0)
    except Exception:  # another protocol's bytes (connect, a custom assignor)
        return []
    return sorted((t.topic, int(p)) for t in a.assigned_partitions for p in t.partitions)


def end_offset(logs: Any, topic: str, partition: int) -> int | None:
    """ListOffsets LATEST (read_uncommitted): the high watermark; None if gone."""
    try:
        return logs.get_log(topic, partition).high_watermark
    except KompaktError:
        return None


def group_lags(logs: Any, group: Any) -> list[PartitionLag]:
    """Committed offset, end offset and lag of each partition the group committed,
    as ``kafka-consumer-groups.sh --describe`` reports them (lag never below 0)."""
    out = []
    for (t, p), om in sorted(list(group.offsets.items())):
        end = end_offset(logs, t, p)
        lag = max(end - om.offset, 0) if end is not None and om.offset >= 0 else None
        out.append(PartitionLag(t, p, om.offset, end, lag))
    return out


def describe_group(logs: Any, coordinator: Any, group_id: str) -> GroupView | None:
    """One group as DescribeGroups + OffsetFetch show it, with lag; None if unknown."""
    if coordinator is None:
        return None
    g = coordinator.groups.get(group_id)
    if g is None or g.state.value == "Dead":
        return None
    stable = g.state.value == "Stable"
    view = GroupView(
        g.group_id, g.state.value, g.protocol_type or "", g.protocol or "", g.generation
    )
    owner = {}
    for m in list(g.members.values()):
        tps = decode_assignment(m.assignment) if stable and g.protocol_type == "consumer" else []
        for tp in tps:
            owner[tp] = m.member_id
        view.members.append(
            GroupMemberView(m.member_id, m.group_instance_id, m.client_id, m.client_host, tps)
        )
    lags = {(x.topic, x.partition): x for x in group_lags(logs, g)}
    for tp, mid in owner.items():
        if tp not in lags:
            lags[tp] = PartitionLag(tp[0], tp[1], None, end_offset(logs, *tp), None)
        lags[tp].member_id = mid
    view.partitions = [lags[k] for k in sorted(lags)]
    view.members.sort(key=lambda m: m.member_id)
    return view


def describe_groups(logs: Any, coordinator: Any) -> list[GroupView]:
    """Every live group (ListGroups' list), each described with its lag."""
    if coordinator is None:
        return []
    out = []
    for gid in sorted(list(coordinator.groups)):
        v = describe_group(logs, coordinator, gid)
        if v is not None:
            out.append(v)
    return out


def lag_samples(logs: Any, coordinator: Any) -> Iterator[tuple[str, str, int, int]]:
    """(group, topic, partition, lag) of every committed offset of every live group,
    for ``kompakt_consumer_group_lag`` (computed at scrape, like the other gauges)."""
    if coordinator is None or logs is None:
        return
    for g in list(coordinator.groups.values()):
        if g.state.value == "Dead":
            continue
        for x in group_lags(logs, g):
            if x.lag is not None:
                yield g.group_id, x.topic, x.partition, x.lag
