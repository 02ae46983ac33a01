"""A group's metadata record is written before the answer it backs (Kafka's
``GroupCoordinator.doSyncGroup`` → ``GroupMetadataManager.storeGroup`` callback), and a
failed write resets the group with Kafka's error (``resetAndPropagateAssignmentError``,
the ``storeGroup`` error mapping; ``updateStaticMemberAndRebalance`` undoes a static
member's replacement).

Real parts: the coordinator on a real event loop (``LoopScheduler``), storing into a
real ``__consumer_offsets`` of a real ``LogManager``; the failure comes from the write
thread through the coordinator's fault hook, as a failing disk would raise there.
"""

from __future__ import annotations

import asyncio
import errno
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from kompakt.broker.config import BrokerConfig
from kompakt.broker.coordinator.coordinator import GroupCoordinator
from kompakt.broker.coordinator.faults import CoordinatorFaults
from kompakt.broker.coordinator.records import OffsetAndMetadata, offset_key
from kompakt.broker.coordinator.scheduler import LoopScheduler
from kompakt.broker.coordinator.state import GroupState
from kompakt.broker.coordinator.storage import OffsetsStorage
from kompakt.errors import UnknownTopicError
from kompakt.log.manager import LogManager

PROTOCOLS = [("range", b"r")]
TIMEOUT = 10


def fail_from(generation: int, exc: Exception) -> Callable[[str, int], None]:
    """A write hook that raises ``exc`` for every record of ``generation`` or later."""

    def hook(_group: str, gen: int) -> None:
        if gen >= generation:
            raise exc

    return hook


def fail_after(stored: int, exc: Exception) -> Callable[[str, int], None]:
    """A write hook that lets ``stored`` records through, then raises ``exc``."""
    count = [0]

    def hook(_group: str, _gen: int) -> None:
        count[0] += 1
        if count[0] > stored:
            raise exc

    return hook


async def loaded(logs: LogManager, faults: CoordinatorFaults) -> GroupCoordinator:
    cfg = BrokerConfig.from_mapping(
        {"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "100"}
    )
    loop = asyncio.get_running_loop()
    gc = GroupCoordinator(
        cfg, LoopScheduler(loop, logs.clock), OffsetsStorage(logs, 1, 1 << 20), faults, loop
    )
    await gc.ensure_loaded()
    return gc


def join(gc: GroupCoordinator, member_id: str, instance: str | None = None) -> Any:
    return gc.join("g", member_id, instance, "cli", "/h", 6000, 6000, "consumer", PROTOCOLS, False)


async def answer(reply: Any) -> dict[str, Any]:
    return await asyncio.wait_for(reply, TIMEOUT)


@pytest.mark.parametrize(
    ("exc", "told"),
    [
        (OSError(errno.EIO, "Input/output error"), ErrorCode.not_coordinator),
        (UnknownTopicError("__consumer_offsets-0 is gone"), ErrorCode.coordinator_not_available),
    ],
)
def test_failed_sync_write_resets_group_with_kafkas_error(
    tmp_path: Path, exc: Exception, told: ErrorCode
) -> None:
    """``resetAndPropagateAssignmentError``: both members' SyncGroup get the mapped
    error (KAFKA_STORAGE_ERROR → NOT_COORDINATOR, UNKNOWN_TOPIC_OR_PARTITION →
    COORDINATOR_NOT_AVAILABLE), every assignment is emptied, the group rebalances, and
    the log still holds the previous generation."""

    async def main(logs: LogManager) -> None:
        gc = await loaded(logs, CoordinatorFaults(before_group_write=fail_from(2, exc)))
        first = await answer(join(gc, ""))
        a = first["member_id"]
        assert (await answer(gc.sync("g", 1, a, {a: b"A-all"})))["assignment"] == b"A-all"
        pending_b = join(gc, "")
        pending_a = join(gc, a)
        jb, ja = await answer(pending_b), await answer(pending_a)
        b = jb["member_id"]
        assert ja["generation_id"] == jb["generation_id"] == 2
        sync_b = gc.sync("g", 2, b, {})
        sync_a = gc.sync("g", 2, a, {a: b"A", b: b"B"})
        assert (await answer(sync_b))["error_code"] == told
        assert (await answer(sync_a))["error_code"] == told
        g = gc.groups["g"]
        assert g.state == GroupState.PREPARING_REBALANCE
        assert [m.assignment for m in g.members.values()] == [b"", b""]
        gc.shutdown()
        stored = await asyncio.to_thread(OffsetsStorage(logs, 1, 1 << 20).load)
        meta, _offsets = stored["g"]
        assert meta is not None and meta.generation == 1
        assert [(m[0], m[7]) for m in meta.members] == [(a, b"A-all")]

    with LogManager(tmp_path) as logs:
        asyncio.run(main(logs))


def test_failed_static_replacement_write_undoes_it_and_tells_the_error(tmp_path: Path) -> None:
    """``updateStaticMemberAndRebalance``: a restarted static member of a Stable group
    is answered only once the record with its new member id is written; when that
    write fails it gets the mapped error and no member id, and the old member id stays
    the group's (its heartbeats are still accepted)."""

    async def main(logs: LogManager) -> None:
        disk_full = OSError(errno.ENOSPC, "No space left on device")
        gc = await loaded(logs, CoordinatorFaults(before_group_write=fail_after(1, disk_full)))
        old = (await answer(join(gc, "", "static-1")))["member_id"]
        assert (await answer(gc.sync("g", 1, old, {old: b"mine"})))["error_code"] == 0
        again = await answer(join(gc, "", "static-1"))
        assert again["error_code"] == ErrorCode.not_coordinator
        assert again["member_id"] == ""
        g = gc.groups["g"]
        assert list(g.members) == [old] and g.static == {"static-1": old}
        assert g.leader == old and g.state == GroupState.STABLE
        assert gc.heartbeat("g", 1, old, "static-1") == ErrorCode.none
        gc.shutdown()

    with LogManager(tmp_path) as logs:
        asyncio.run(main(logs))


def test_leave_that_empties_the_group_is_stored_before_it_is_answered(tmp_path: Path) -> None:
    """The last member's LeaveGroup ends the round with an Empty generation (Kafka's
    ``onCompleteJoin`` stores it); the handler answers after ``flushed``, by which time
    the record is in the log even on a slow disk, so a restart after the answer does
    not bring the member back."""
    stall = threading.Event()

    def slow_disk(_group: str, generation: int) -> None:
        if generation == 2:
            stall.wait(0.5)  # the injected fault: a write that takes its time

    async def main(logs: LogManager) -> None:
        gc = await loaded(logs, CoordinatorFaults(before_group_write=slow_disk))
        a = (await answer(join(gc, "")))["member_id"]
        assert (await answer(gc.sync("g", 1, a, {a: b"all"})))["error_code"] == 0
        await gc.flushed("g")
        assert gc.leave("g", a) == ErrorCode.none
        await asyncio.wait_for(gc.flushed("g"), TIMEOUT)
        stored = await asyncio.to_thread(OffsetsStorage(logs, 1, 1 << 20).load)
        meta, _offsets = stored["g"]
        assert meta is not None and (meta.generation, meta.members) == (2, ())
        gc.shutdown()

    with LogManager(tmp_path) as logs:
        asyncio.run(main(logs))


def test_concurrent_offset_commits_share_one_fsync_each_answered_once_durable(
    tmp_path: Path,
) -> None:
    """Kafka appends an OffsetCommit with acks=-1 and answers after that write; here
    acks=-1 is an fsync, so each commit is answered only once an fsync covers its
    record. Commits that queue while one is written go in the next write together
    (each its own batch, one fsync for all: a group commit), and the offsets of the
    same partition committed in one order stay in that order in the cache and the
    log."""

    async def main(logs: LogManager) -> None:
        gc = await loaded(logs, CoordinatorFaults())
        await asyncio.to_thread(logs.create_topic, "t", 1)
        plog = logs.get_log("__consumer_offsets", 0)
        fsyncs = []
        flush = plog.flush_records

        def counted() -> None:
            fsyncs.append(plog.log_end_offset)
            flush()

        plog.flush_records = counted  # type: ignore[method-assign]

        def durable_keys() -> set[bytes]:
            return {
                bytes(r.key)
                for b in plog.iter_batches(0)
                if b.header.last_offset < plog.durable_offset
                for r in b.records()
            }

        async def commit(group: str, offset: int) -> set[bytes]:
            refused = await gc.offsets.commit(group, {("t", 0): OffsetAndMetadata(offset)})
            assert refused == set()
            return durable_keys()

        groups = [f"g{i}" for i in range(10)]
        seen = await asyncio.gather(
            *(commit(g, 1) for g in groups), *(commit("g0", n) for n in range(2, 7))
        )
        for group, durable in zip(groups, seen, strict=False):
            assert offset_key(group, "t", 0) in durable
        assert len(fsyncs) < len(seen)
        assert gc.offsets.groups["g0"].offsets[("t", 0)].offset == 6
        stored = await asyncio.to_thread(OffsetsStorage(logs, 1, 1 << 20).load)
        assert stored["g0"][1][("t", 0)].offset == 6
        gc.shutdown()

    with LogManager(tmp_path) as logs:
        asyncio.run(main(logs))
