"""The transaction coordinator's broker keys, read from the broker's config as Kafka's
``KafkaConfig`` / ``AddPartitionsToTxnConfig`` define them."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kompakt.broker.app import start_test_broker
from kompakt.broker.config import BrokerConfig
from kompakt.broker.txn.broker import load_txn_coordinator
from kompakt.errors import InvalidConfigError

KEY = "add.partitions.to.txn.retry.backoff.max.ms"


def test_add_partitions_to_txn_retry_backoff_max_ms_bounds_the_coordinators_wait(
    tmp_path: Path,
) -> None:
    """Kafka's ``add.partitions.to.txn.retry.backoff.max.ms`` (AddPartitionsToTxnConfig,
    default 100): how long an AddPartitionsToTxn waits on the coordinator for the
    previous transaction's completion; a Kafka server.properties naming it starts
    kompakt, and the coordinator waits as long as it says."""
    assert BrokerConfig.from_mapping({"log.dirs": str(tmp_path)}).get(KEY) == 100
    b = start_test_broker(tmp_path, **{KEY: "0"})
    try:
        tb = asyncio.run_coroutine_threadsafe(load_txn_coordinator(b.broker.state), b.loop).result(
            30
        )
        assert tb.coordinator.config.add_partitions_retry_backoff_max_ms == 0
    finally:
        b.stop()


def test_a_negative_add_partitions_to_txn_retry_backoff_max_ms_is_refused(
    tmp_path: Path,
) -> None:
    """``atLeast(0)`` in Kafka's definition: refused with the key named, in one line."""
    with pytest.raises(InvalidConfigError, match=KEY):
        BrokerConfig.from_mapping({"log.dirs": str(tmp_path), KEY: "-1"})
