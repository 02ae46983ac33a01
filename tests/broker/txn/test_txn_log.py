"""``__transaction_state`` writes (:mod:`kompakt.broker.txn.log`): the coordinator's
one-record batches are the broker's own, appended as Kafka appends a coordinator's
records (``AppendOrigin.COORDINATOR``) without the checks a client's Produce gets, and
read back as written."""

from __future__ import annotations

from pathlib import Path

import pytest

import kompakt.broker.handlers  # noqa: F401  (the broker's modules, in their import order)
from kompakt.broker.txn import records as txn_rec
from kompakt.broker.txn.log import TRANSACTION_STATE_TOPIC, TransactionLog
from kompakt.broker.txn.records import TransactionLogValue
from kompakt.broker.txn.state import TransactionState
from kompakt.log import validator
from kompakt.log.manager import LogManager


def test_coordinator_batches_skip_the_client_checks_and_read_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A coordinator record is appended without :func:`validator.validate` (the client
    checks of a Produce; a batch the broker built itself has nothing to fail), gets its
    offset, and the load reads it back."""
    logs = LogManager(tmp_path / "data")
    txn_log = TransactionLog(logs, 1, 1 << 20)
    txn_log.ensure_topic()

    def refuse(*_args: object) -> None:
        raise AssertionError("a coordinator batch went through the Produce checks")

    monkeypatch.setattr(validator, "validate", refuse)
    value = TransactionLogValue(
        producer_id=7,
        producer_epoch=0,
        transaction_timeout_ms=60_000,
        state=TransactionState.EMPTY,
        partitions=None,
        last_update_timestamp_ms=1,
        start_timestamp_ms=-1,
    )
    items = [(txn_rec.key_bytes("tx"), txn_rec.value_bytes(value))]
    assert txn_log.append(0, items) == 1
    assert txn_log.append(0, items) == 2
    assert logs.get_log(TRANSACTION_STATE_TOPIC, 0).log_end_offset == 2
    assert [tid for tid, _value in txn_log.read()] == ["tx", "tx"]
