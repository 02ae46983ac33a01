"""Committed offsets of every group (Kafka's ``OffsetMetadataManager``).

Commits, fetches, and every way offsets leave: KIP-211 expiry, DeleteGroups, OffsetDelete
and a deleted topic. All removals go through one path, Kafka's
``GroupMetadataManager.cleanupGroupMetadata`` (:meth:`OffsetManager._cleanup`):
tombstones for the removed offsets, and a group left Empty with no offsets goes Dead with
a metadata tombstone. The compacted ``__consumer_offsets`` then stays bounded: the cleaner
keeps one record per key and drops the tombstones after ``delete.retention.ms``.

Offsets live on the groups the :class:`~.coordinator.GroupCoordinator` holds (one dict,
shared), and every write to the topic, the coordinator's group records included, is
decided and appended under one write lock, so a removal can never tombstone a commit
that raced it. Expiry runs every ``offsets.retention.check.interval.ms`` as a timer of
the injected scheduler.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from kompakt.broker.coordinator import records as rec
from kompakt.broker.coordinator.records import NO_TIMESTAMP, OffsetAndMetadata
from kompakt.broker.coordinator.scheduler import Scheduler, TimerHandle
from kompakt.broker.coordinator.state import Group, GroupState
from kompakt.broker.coordinator.storage import OffsetsStorage, Records

log = logging.getLogger("kompakt.broker.coordinator")

MS_PER_MINUTE = 60_000

CHUNK = 1000
"""Tombstones per appended batch, well under ``max.message.bytes``."""

Offsets = dict[tuple[str, int], OffsetAndMetadata]


class OffsetManager:
    """Kafka's ``OffsetMetadataManager`` for the classic groups in ``groups``.

    ``loaded`` is set by the coordinator once ``__consumer_offsets`` has been read;
    before that nothing is removed. ``storage`` is None only in unit tests that never
    commit.
    """

    def __init__(
        self,
        config: Any,
        scheduler: Scheduler,
        storage: OffsetsStorage | None,
        groups: dict[str, Group],
        write_lock: asyncio.Lock,
    ):
        self.config = config
        self.scheduler = scheduler
        self.storage = storage
        self.groups = groups
        self.write_lock = write_lock
        self.loaded = False
        self.closed = False
        self.offsets_expired = 0  # offsets removed by retention since start (for metrics)
        self.pending_txn: dict[int, dict[str, Offsets]] = {}
        """TxnOffsetCommit offsets by producer id and group, written but waiting for
        their transaction's marker (Kafka's ``pendingTransactionalOffsetCommits``)."""
        self._expiry_timer: TimerHandle | None = None
        self._expiry_task: asyncio.Task | None = None
        self._queued: list[tuple[str, Offsets, asyncio.Future]] = []
        """Commits waiting for the next group write; owned by the event loop."""
        self._writer: asyncio.Task | None = None

    def now(self) -> int:
        return self.scheduler.now()

    def _cfg(self, key: str) -> int:
        return int(self.config.get(key))

    def committed_topics(self) -> set[str]:
        return {t for g in self.groups.values() for t, _p in g.offsets}

    def shutdown(self) -> None:
        self.closed = True
        if self._expiry_timer is not None:
            self._expiry_timer.cancel()
        if self._expiry_task is not None:
            self._expiry_task.cancel()

    async def drop_gone_topics(self) -> None:
        """At load: offsets of topics deleted (or deleted and created again) while the
        broker was down go, with tombstones, as DeleteTopics would have done; then the
        topic-ids file is rebuilt from the offsets that stay."""
        storage = self.storage
        assert storage is not None
        gone = await asyncio.to_thread(storage.gone_topics, self.committed_topics())
        if gone:
            removed = await self._cleanup(
                lambda g: {tp: om for tp, om in g.offsets.items() if tp[0] in gone},
                force=True,
            )
            log.info("removed %d committed offsets of deleted topics %s", removed, sorted(gone))
        await asyncio.to_thread(storage.save_topic_ids, self.committed_topics(), rebuild=True)

    def start_expiry(self) -> None:
        """Kafka's ``delete-expired-group-metadata`` task, every
        ``offsets.retention.check.interval.ms`` after the previous run ended."""
        interval = self._cfg("offsets.retention.check.interval.ms")  # atLeast(1)
        self._expiry_timer = self.scheduler.call_later(interval, self._expiry_due)

    def _expiry_due(self) -> None:
        if not self.closed:
            self._expiry_task = asyncio.get_running_loop().create_task(
                self._expire_and_reschedule()
            )

    async def _expire_and_reschedule(self) -> None:
        try:
            await self.expire_offsets()
        except Exception:
            log.exception("offset expiry failed")
        if not self.closed:
            self.start_expiry()

    async def _append_chunked(self, partition: int, items: Records) -> None:
        """Append in batches of :data:`CHUNK` records, well under ``max.message.bytes``."""
        assert self.storage is not None
        for i in range(0, len(items), CHUNK):
            chunk = items[i : i + CHUNK]
            if chunk:
                await asyncio.to_thread(self.storage.append, partition, chunk)

    async def commit(self, group_id: str, offsets: Offsets) -> set[tuple[str, int]]:
        """Write ``offsets``; returns those refused because their topic was deleted
        after the request was checked (a DeleteTopics racing the commit), which would
        otherwise outlive the topic's tombstones. Answered once fsynced (Kafka appends a
        commit with acks=-1); commits that arrive while others are written go in the
        next write together, one fsync per partition for all (a group commit)."""
        if not offsets:
            return set()
        answer: asyncio.Future = asyncio.get_running_loop().create_future()
        self._queued.append((group_id, offsets, answer))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.ensure_future(self._write_queued())
        return await answer

    async def _write_queued(self) -> None:
        storage = self.storage
        assert storage is not None
        while self._queued:
            async with self.write_lock:  # expiry and topic deletion decide under it too
                queued, self._queued = self._queued, []
                accepted = [
                    {tp: om for tp, om in offsets.items() if storage.has_topic(tp[0])}
                    for _group, offsets, _answer in queued
                ]
                writes = [(g, acc) for (g, _o, _a), acc in zip(queued, accepted, strict=True)]
                try:
                    errors = await asyncio.to_thread(self._write_sync, writes)
                except Exception as exc:
                    errors = [exc] * len(queued)
                for (group_id, offsets, answer), acc, error in zip(
                    queued, accepted, errors, strict=True
                ):
                    if error is None and acc:
                        g = self.groups.get(group_id)
                        if g is None:
                            g = self.groups[group_id] = Group(group_id)
                        g.offsets.update(acc)
                    if answer.done():  # its request went away; the write stands
                        continue
                    if error is None:
                        answer.set_result(set(offsets) - set(acc))
                    else:
                        answer.set_exception(error)

    def _write_sync(self, writes: list[tuple[str, Offsets]]) -> list[Exception | None]:
        """Each commit appended as its own batch (a commit is atomic), then each
        partition written fsynced once; a commit fails with its append or that fsync."""
        storage = self.storage
        assert storage is not None
        errors: list[Exception | None] = [None] * len(writes)
        written: dict[int, list[int]] = {}
        for i, (group_id, accepted) in enumerate(writes):
            if not accepted:
                continue
            try:
                new_topics = {t for t, _p in accepted if t not in storage.topic_ids}
                if new_topics:
                    storage.save_topic_ids(new_topics)
                items: Records = [
                    (rec.offset_key(group_id, t, p), rec.offset_value(om))
                    for (t, p), om in accepted.items()
                ]
                partition = storage.partition_for(group_id)
                storage.append(partition, items, durable=False)
                written.setdefault(partition, []).append(i)
            except Exception as exc:
                errors[i] = exc
        for partition, done in written.items():
            try:
                storage.flush(partition)
            except Exception as exc:
                for i in done:
                    errors[i] = exc
        return errors

    def unstable(self, group_id: str) -> set[tuple[str, int]]:
        """Partitions of the group with transactional offsets not yet committed or
        aborted (Kafka's ``hasPendingOffsetCommitsForTopicPartition``)."""
        return {tp for groups in self.pending_txn.values() for tp in groups.get(group_id, {})}

    def fetch(
        self, group_id: str, wanted: list[tuple[str, list[int]]] | None
    ) -> dict[str, list[tuple[int, OffsetAndMetadata | None]]]:
        g = self.groups.get(group_id)
        offsets = g.offsets if g is not None else {}
        out: dict[str, list[tuple[int, OffsetAndMetadata | None]]] = {}
        if wanted is None:
            for (t, p), om in sorted(offsets.items()):
                out.setdefault(t, []).append((p, om))
            return out
        for t, parts in wanted:
            lst = out.setdefault(t, [])
            for p in parts:
                lst.append((p, offsets.get((t, p))))
        return out

    async def delete_group(self, group_id: str) -> ErrorCode:
        """DeleteGroups for an Empty group: tombstones for every committed offset and for
        the metadata, offsets first (Kafka's ``GroupCoordinatorShard.deleteGroups``:
        ``deleteAllOffsets`` then ``createGroupTombstoneRecords``), so replaying the log
        after a restart cannot bring the group back. Decided under the write lock, so an
        offset committed concurrently is tombstoned too."""
        assert self.storage is not None
        async with self.write_lock:
            g = self.groups.get(group_id)
            if g is None or g.state == GroupState.DEAD:
                return ErrorCode.group_id_not_found
            if g.state != GroupState.EMPTY:  # Kafka's ClassicGroup.validateDeleteGroup
                return ErrorCode.non_empty_group
            items: Records = [(rec.offset_key(group_id, t, p), None) for (t, p) in g.offsets]
            items.append((rec.group_key(group_id), None))
            await self._append_chunked(self.storage.partition_for(group_id), items)
            if self.groups.get(group_id) is g:
                g.transition_to(GroupState.DEAD, self.now())
                del self.groups[group_id]
                for h in g.pending.values():
                    h.cancel()
            log.info("group %s deleted with %d committed offsets", group_id, len(items) - 1)
            return ErrorCode.none

    async def delete_offsets(
        self, group_id: str, wanted: list[tuple[str, int]]
    ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
        """OffsetDelete (KIP-496), as Kafka's ``OffsetMetadataManager.deleteOffsets``: the
        group must exist (GROUP_ID_NOT_FOUND) and be Empty or use the consumer protocol
        (NON_EMPTY_GROUP); offsets of topics its members subscribe to are kept
        (GROUP_SUBSCRIBED_TO_TOPIC per partition); the others get tombstones, and the
        group goes Dead if it is Empty with no offsets left (``cleanupGroupMetadata``).
        Returns the group error and each partition's error."""
        g = self.groups.get(group_id)
        if g is None or g.state == GroupState.DEAD:
            return ErrorCode.group_id_not_found, {}
        if g.state != GroupState.EMPTY and g.protocol_type != "consumer":
            return ErrorCode.non_empty_group, {}
        errors = {
            tp: ErrorCode.group_subscribed_to_topic if g.is_subscribed(tp[0]) else ErrorCode.none
            for tp in wanted
        }
        targets = {tp for tp, code in errors.items() if code == ErrorCode.none}
        await self._cleanup(
            lambda x: {tp: om for tp, om in x.offsets.items() if tp in targets}, groups=[g]
        )
        return ErrorCode.none, errors

    async def on_topics_deleted(self, topics: set[str]) -> int:
        """Kafka's ``GroupCoordinator.onPartitionsDeleted``: a deleted topic's committed
        offsets leave every group, with tombstones, so a topic created again under the
        same name starts with no committed offsets. Returns the number removed."""
        if not topics or self.closed:
            return 0
        assert self.storage is not None
        self.storage.forget_topics(topics)
        removed = await self._cleanup(
            lambda g: {tp: om for tp, om in g.offsets.items() if tp[0] in topics}
        )
        if removed:
            log.info("removed %d committed offsets of deleted topics %s", removed, sorted(topics))
        await asyncio.to_thread(self.storage.save_topic_ids, self.committed_topics(), rebuild=True)
        return removed

    # -- removing offsets: expiry (KIP-211), deleted topics, OffsetDelete, DeleteGroups ----
    async def expire_offsets(self) -> int:
        """One pass of Kafka's ``cleanupGroupMetadata`` with the expiry rule of
        :func:`expired_offsets`. Returns the number of offsets expired."""
        if not self.loaded or self.closed:
            return 0
        retention_ms = self._cfg("offsets.retention.minutes") * MS_PER_MINUTE
        now = self.now()
        count = await self._cleanup(lambda g: expired_offsets(g, now, retention_ms))
        self.offsets_expired += count
        return count

    async def _cleanup(
        self,
        selector: Callable[[Group], Offsets],
        groups: list[Group] | None = None,
        force: bool = False,
    ) -> int:
        """Kafka's ``GroupMetadataManager.cleanupGroupMetadata(groups, selector)``: remove
        the offsets ``selector`` picks from each group and write their tombstones; a group
        then Empty with no offsets goes Dead and, if it ever had a generation (so a
        metadata record exists), gets a metadata tombstone too. Only the selected
        offsets and groups are touched. Decided and written under the write lock, so a
        concurrent commit cannot be tombstoned. ``force`` runs it during the load.
        Returns the number of offsets removed."""
        if (not self.loaded and not force) or self.closed:
            return 0
        storage = self.storage
        assert storage is not None
        async with self.write_lock:
            plan: list[tuple[Group, Offsets, bool]] = []
            writes: dict[int, Records] = {}
            for g in list(self.groups.values() if groups is None else groups):
                if self.groups.get(g.group_id) is not g:
                    continue
                removed = selector(g)
                dead = (
                    g.state == GroupState.EMPTY
                    and not g.members
                    and not g.pending
                    and len(removed) == len(g.offsets)
                )
                if not removed and not dead:
                    continue
                plan.append((g, removed, dead))
                items = writes.setdefault(storage.partition_for(g.group_id), [])
                items.extend((rec.offset_key(g.group_id, t, p), None) for t, p in removed)
                if dead and g.generation > 0:  # generation 0: no metadata record to delete
                    items.append((rec.group_key(g.group_id), None))
            for partition, items in writes.items():
                await self._append_chunked(partition, items)
            count = 0
            for g, removed, dead in plan:
                for tp, om in removed.items():
                    if g.offsets.get(tp) is om:
                        del g.offsets[tp]
                        count += 1
                # a join may have arrived while the tombstones were written
                if dead and not g.offsets and not g.members and not g.pending:
                    if g.state == GroupState.EMPTY and self.groups.get(g.group_id) is g:
                        g.transition_to(GroupState.DEAD, self.now())
                        del self.groups[g.group_id]
                        log.info("group %s: Empty with no offsets, now Dead", g.group_id)
            return count


def expired_offsets(g: Group, now: int, retention_ms: int) -> Offsets:
    """The offsets of ``g`` that have expired at ``now``.

    Kafka's ``ClassicGroup.offsetExpirationCondition``: a simple consumer's group (no
    protocol type) expires an offset ``offsets.retention.minutes`` after its commit; an
    Empty group counts from the time it became Empty (we take the later of that and
    the commit, so an offset committed to an already-empty group, e.g. by an admin
    reset, also gets the full retention); a Stable consumer-protocol group expires only
    offsets of topics none of its members subscribes to, counted from the commit; any
    other state expires nothing. An offset committed with an explicit expire timestamp
    (OffsetCommit v2-v4 ``retention_time``) expires at that time instead.
    """
    subscribed: set[str] = set()
    if g.protocol_type is None or g.state == GroupState.EMPTY:
        empty_since = g.state_timestamp if g.state_timestamp is not None else NO_TIMESTAMP
    elif (
        g.protocol_type == "consumer" and g.state == GroupState.STABLE and g.subscribed is not None
    ):
        empty_since, subscribed = NO_TIMESTAMP, g.subscribed
    else:
        return {}
    out = {}
    for tp, om in g.offsets.items():
        if tp[0] in subscribed:
            continue
        if om.expire_timestamp is not None:
            if now >= om.expire_timestamp:
                out[tp] = om
        elif now - max(om.commit_timestamp, empty_since) >= retention_ms:
            out[tp] = om
    return out
