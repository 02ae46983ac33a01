"""Consumer-group verbs against a broker, as ``kafka-consumer-groups.sh`` does them:
list, describe (members and lag), reset offsets, delete. Groups live on the broker's
group coordinator, so there is no offline counterpart.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from kompakt.errors import KompaktError

from ..backend import (
    CliError,
    GroupDescription,
    GroupMember,
    GroupPartitionLag,
    GroupSummary,
    OffsetReset,
    select_partitions,
)
from .connection import BrokerConnection

_NO_OFFSET = -1001  # librdkafka's OFFSET_INVALID: nothing committed


class GroupNotEmptyError(KompaktError):
    """A group with active members cannot have its offsets reset (NON_EMPTY_GROUP)."""

    error_code = ErrorCode.non_empty_group


class UnknownGroupError(KompaktError):
    """GROUP_ID_NOT_FOUND."""

    error_code = ErrorCode.group_id_not_found


def _state_name(state: Any) -> str:
    """confluent-kafka's ConsumerGroupState as Kafka names it (``Stable``, ``Empty``...)."""
    name = getattr(state, "name", str(state))
    return {
        "STABLE": "Stable",
        "EMPTY": "Empty",
        "DEAD": "Dead",
        "PREPARING_REBALANCING": "PreparingRebalance",
        "COMPLETING_REBALANCING": "CompletingRebalance",
    }.get(name, name.title())


def _not_empty(group: str, state: str) -> GroupNotEmptyError:
    # kafka-consumer-groups.sh's wording
    return GroupNotEmptyError(
        f"Assignments can only be reset if the group '{group}' is inactive, "
        f"but the current state is {state}."
    )


class GroupVerbs(BrokerConnection):
    """``kompakt group ...`` over the Kafka protocol."""

    def list_groups(self) -> list[GroupSummary]:
        result = self._wait(self.admin.list_consumer_groups(request_timeout=self.timeout))
        return sorted(
            (
                GroupSummary(
                    g.group_id,
                    _state_name(g.state),
                    getattr(getattr(g, "type", None), "name", "CLASSIC").lower(),
                )
                for g in result.valid
            ),
            key=lambda g: g.group_id,
        )

    def _describe_group(self, group: str) -> Any:
        """The group's description, or None when the broker does not know it."""
        futures = self._call(
            lambda: self.admin.describe_consumer_groups([group], request_timeout=self.timeout)
        )
        try:
            desc = futures[group].result(timeout=self.timeout + 2)
        except self._ck.KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if err is not None and err.code() == self._ck.KafkaError.GROUP_ID_NOT_FOUND:
                return None
            raise self._error(exc) from None
        except concurrent.futures.TimeoutError as exc:
            raise self._error(exc) from None
        return None if _state_name(desc.state) == "Dead" else desc

    def _committed(self, group: str) -> dict[tuple[str, int], int]:
        request = [self._ck.ConsumerGroupTopicPartitions(group)]
        futures = self._call(
            lambda: self.admin.list_consumer_group_offsets(request, request_timeout=self.timeout)
        )
        result = self._wait(futures[group])
        return {
            (tp.topic, tp.partition): tp.offset
            for tp in result.topic_partitions or []
            if tp.offset != _NO_OFFSET and tp.error is None
        }

    def describe_group(self, group: str) -> GroupDescription:
        desc = self._describe_group(group)
        if desc is None:
            raise UnknownGroupError(f"consumer group '{group}' does not exist")
        committed = self._committed(group)
        members = []
        owner: dict[tuple[str, int], str] = {}
        for m in desc.members:
            tps = sorted(
                (tp.topic, tp.partition)
                for tp in (m.assignment.topic_partitions if m.assignment else [])
            )
            for tp in tps:
                owner[tp] = m.member_id
            members.append(GroupMember(m.member_id, m.client_id, m.host, m.group_instance_id, tps))
        tps = sorted(set(committed) | set(owner))
        ends = self._offsets(tps, latest=True)
        partitions = []
        for t, p in tps:
            c, e = committed.get((t, p)), ends.get((t, p))
            lag = max(e - c, 0) if c is not None and e is not None else None
            partitions.append(GroupPartitionLag(t, p, c, e, lag, owner.get((t, p))))
        return GroupDescription(
            group,
            _state_name(desc.state),
            desc.partition_assignor or "",
            sorted(members, key=lambda m: m.member_id),
            partitions,
        )

    def reset_offsets(
        self,
        group: str,
        topic: str,
        partition: int | None,
        to: str | int,
        *,
        dry_run: bool = False,
    ) -> list[OffsetReset]:
        """Set the group's committed offsets for a topic (or one partition) to the earliest,
        the latest or a given offset (clamped to the log, as Kafka does); only while the
        group has no active members, like ``kafka-consumer-groups.sh --reset-offsets``."""
        desc = self._describe_group(group)
        if desc is not None and _state_name(desc.state) != "Empty":
            raise _not_empty(group, _state_name(desc.state))
        parts = select_partitions(topic, partition, self._partition_count(topic))
        tps = [(topic, p) for p in parts]
        starts = self._offsets(tps, latest=False)
        ends = self._offsets(tps, latest=True)
        committed = self._committed(group) if desc is not None else {}
        out = []
        for tp in tps:
            low, high = starts.get(tp), ends.get(tp)
            if low is None or high is None:
                raise CliError(f"cannot read the offsets of {tp[0]}-{tp[1]}")
            if to == "earliest":
                new = low
            elif to == "latest":
                new = high
            else:
                new = min(max(int(to), low), high)
            out.append(OffsetReset(tp[0], tp[1], committed.get(tp), new))
        if dry_run:
            return out
        request = [
            self._ck.ConsumerGroupTopicPartitions(
                group, [self._ck.TopicPartition(r.topic, r.partition, r.new_offset) for r in out]
            )
        ]
        futures = self._call(
            lambda: self.admin.alter_consumer_group_offsets(request, request_timeout=self.timeout)
        )
        try:
            result = self._wait(futures[group])
            errors = [tp.error for tp in result.topic_partitions or [] if tp.error is not None]
        except CliError:
            errors = [None]
        if errors:
            # a member joined between the check and the commit: say so as Kafka would
            now = self._describe_group(group)
            if now is not None and _state_name(now.state) != "Empty":
                raise _not_empty(group, _state_name(now.state))
            if errors[0] is not None:
                raise self._kafka_error(errors[0], topic=topic)
            raise CliError(f"resetting the offsets of group '{group}' failed")
        return out

    def delete_groups(self, groups: Sequence[str]) -> dict[str, str | None]:
        """Delete each group; per group None or why it could not be deleted."""
        KE = self._ck.KafkaError  # noqa: N806
        futures = self._call(
            lambda: self.admin.delete_consumer_groups(list(groups), request_timeout=self.timeout)
        )
        out: dict[str, str | None] = {}
        for g in groups:
            try:
                futures[g].result(timeout=self.timeout + 2)
                out[g] = None
            except self._ck.KafkaException as exc:
                err = exc.args[0] if exc.args else None
                code = err.code() if err is not None else None
                if code == KE.GROUP_ID_NOT_FOUND:
                    out[g] = f"consumer group '{g}' does not exist"
                elif code == KE.NON_EMPTY_GROUP:
                    out[g] = f"consumer group '{g}' is not empty (it has active members)"
                else:
                    out[g] = f"consumer group '{g}': {self._error(exc)}"
            except concurrent.futures.TimeoutError as exc:
                raise self._error(exc) from None
        return out
