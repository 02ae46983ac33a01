"""The transaction coordinator's I/O (:class:`~kompakt.broker.txn.broker.TransactionBroker`)
on a real broker: what a marker write completes in the group coordinator."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from kio.schema.errors import ErrorCode

from kompakt.broker.app import BrokerThread, start_test_broker
from kompakt.broker.coordinator import handlers as group_handlers
from kompakt.broker.coordinator.records import OffsetAndMetadata
from kompakt.broker.coordinator.storage import OFFSETS_TOPIC
from kompakt.broker.txn.broker import load_txn_coordinator, wait_completion
from kompakt.broker.txn.results import TransactionResult

TIMEOUT = 30


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    b = start_test_broker(
        tmp_path_factory.mktemp("txn-broker"),
        **{"transaction.state.log.num.partitions": 1, "offsets.topic.num.partitions": 1},
    )
    try:
        yield b
    finally:
        b.stop()


def test_offsets_complete_with_the_marker_to_consumer_offsets_only(broker: BrokerThread) -> None:
    """Kafka's ``handleWriteTxnMarkersRequest`` calls the group coordinator's
    ``onTransactionCompleted`` only for markers written to ``__consumer_offsets``: a
    producer's TxnOffsetCommit offsets stay pending through a marker to a data partition
    alone, and count once the marker reaches the group's partition."""
    state = broker.broker.state
    assert state is not None
    state.logs.create_topic("data", 1)
    pid, epoch, om = 4242, 0, OffsetAndMetadata(17)

    async def scenario() -> tuple[bool, bool, OffsetAndMetadata | None]:
        await group_handlers.load_coordinator(state)
        tb = await load_txn_coordinator(state)
        gc = group_handlers.coordinator_if_started(state)
        assert gc is not None
        stored = await wait_completion(tb.store_offsets("g", pid, epoch, {("data", 0): om}))
        assert stored == ErrorCode.none

        async def markers(*partitions: tuple[str, int]) -> None:
            with tb.lock:
                pending = tb._write_markers(
                    pid, epoch, TransactionResult.COMMIT, frozenset(partitions), (0, [])
                )
            outcome = await wait_completion(pending, tb.lock)
            assert outcome == (ErrorCode.none, ErrorCode.none)

        await markers(("data", 0))
        after_data = pid in gc.offsets.pending_txn
        await markers(("data", 0), (OFFSETS_TOPIC, 0))
        group = gc.offsets.groups.get("g")
        committed = group.offsets.get(("data", 0)) if group is not None else None
        return after_data, pid in gc.offsets.pending_txn, committed

    after_data, after_offsets, committed = asyncio.run_coroutine_threadsafe(
        scenario(), broker.loop
    ).result(TIMEOUT)
    assert after_data, "a marker to a data partition alone completed the group's offsets"
    assert not after_offsets
    assert committed == om
