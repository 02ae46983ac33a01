"""Frozen copies of the group coordinator's state for readers on other threads.

Groups and members are owned by the broker's event loop: JoinGroup, SyncGroup and the
session timers change them there. The console and ``/metrics`` run on the admin
server's threads, so they never iterate the live objects (a dict changed while another
thread walks it raises, or a page misses a member); they ask
:meth:`~.coordinator.GroupCoordinator.snapshot`, which builds these on the loop
(``asyncio.run_coroutine_threadsafe``) and hands back immutable values with the same
field names as :class:`~.state.Group` and :class:`~.state.Member`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from kompakt.broker.coordinator.records import OffsetAndMetadata
from kompakt.broker.coordinator.state import Group, GroupState, Member


@dataclass(frozen=True)
class MemberSnapshot:
    """A member as DescribeGroups shows it."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: bytes

    @classmethod
    def of(cls, m: Member) -> MemberSnapshot:
        return cls(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.assignment)


@dataclass(frozen=True)
class GroupSnapshot:
    """A group, its members and committed offsets at one moment of the loop."""

    group_id: str
    state: GroupState
    generation: int
    protocol_type: str | None
    protocol: str | None
    leader: str | None
    members: Mapping[str, MemberSnapshot]
    offsets: Mapping[tuple[str, int], OffsetAndMetadata]

    @classmethod
    def of(cls, g: Group) -> GroupSnapshot:
        return cls(
            g.group_id,
            g.state,
            g.generation,
            g.protocol_type,
            g.protocol,
            g.leader,
            MappingProxyType({mid: MemberSnapshot.of(m) for mid, m in g.members.items()}),
            MappingProxyType(dict(g.offsets)),
        )


@dataclass(frozen=True)
class CoordinatorSnapshot:
    """Every group (by id) and the offsets-expired counter, read in one loop turn."""

    groups: Mapping[str, GroupSnapshot]
    offsets_expired: int

    @classmethod
    def of(cls, groups: Mapping[str, Group], offsets_expired: int) -> CoordinatorSnapshot:
        return cls(
            MappingProxyType({gid: GroupSnapshot.of(g) for gid, g in groups.items()}),
            offsets_expired,
        )
