"""The one legal-transition check both coordinators use (Kafka's ``validPreviousStates``
in ``GroupMetadata`` and ``TransactionMetadata``, each throwing IllegalStateException)."""

from __future__ import annotations

import pytest

from kompakt.broker.coordinator.state import VALID_PREVIOUS_STATES as GROUP_TABLE
from kompakt.broker.coordinator.state import GroupState, IllegalGroupStateTransition
from kompakt.broker.transitions import check_transition
from kompakt.broker.txn.state import VALID_PREVIOUS_STATES as TXN_TABLE
from kompakt.broker.txn.state import IllegalTransactionTransition, TransactionState


def test_check_transition_allows_exactly_the_valid_previous_states() -> None:
    for table, error in (
        (GROUP_TABLE, IllegalGroupStateTransition),
        (TXN_TABLE, IllegalTransactionTransition),
    ):
        for target, allowed in table.items():
            for current in type(target):
                if current in allowed:
                    check_transition(table, current, target, error=error)
                else:
                    with pytest.raises(error, match=f"before moving to {target}, but is {current}"):
                        check_transition(table, current, target, subject="x", error=error)


def test_kafka_examples() -> None:
    """CompleteCommit only from PrepareCommit; Stable only from CompletingRebalance."""
    check_transition(TXN_TABLE, TransactionState.PREPARE_COMMIT, TransactionState.COMPLETE_COMMIT)
    with pytest.raises(RuntimeError):
        check_transition(TXN_TABLE, TransactionState.ONGOING, TransactionState.COMPLETE_COMMIT)
    with pytest.raises(RuntimeError):
        check_transition(GROUP_TABLE, GroupState.EMPTY, GroupState.STABLE)
