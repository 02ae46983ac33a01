"""The admin side's view of the broker (kompakt.broker.seams): the real broker, cleaner
and coordinators of a running broker offer every field and call the console, /metrics
and the admin API read, so dropping one fails here instead of emptying a page."""

from __future__ import annotations

from kompakt.broker.app import start_test_broker
from kompakt.broker.coordinator.snapshot import CoordinatorSnapshot
from kompakt.broker.handlers.txn import txn_broker_if_started
from kompakt.broker.seams import (
    AdminApiView,
    BrokerView,
    CleanerStatesView,
    CleanerView,
    CoordinatorView,
    ThrottleView,
    TransactionCounts,
    TransactionsView,
)
from kompakt.cleaner.status import CleaningStatus


def test_a_running_broker_and_its_parts_offer_what_the_admin_side_reads(tmp_path):
    b = start_test_broker(tmp_path / "data")
    try:
        broker = b.broker
        assert isinstance(broker, BrokerView)
        assert broker.admin is not None
        assert isinstance(broker.admin.api, AdminApiView)
        assert broker.admin.api.broker is broker
        assert broker.cleaner_if_started() is None  # not built before a clean asks for it
        assert broker.background is not None
        cleaner = broker.background.cleaner()
        assert broker.cleaner_if_started() is cleaner
        assert isinstance(cleaner, CleanerView)
        assert isinstance(cleaner.throttle, ThrottleView)
        assert isinstance(cleaner.states, CleanerStatesView)
        assert isinstance(broker.cleaning_status(), CleaningStatus)
        gc = broker.group_coordinator()
        assert isinstance(gc, CoordinatorView)
        assert isinstance(gc.snapshot(), CoordinatorSnapshot)
        txn = txn_broker_if_started(broker.state)
        assert isinstance(txn, TransactionsView)
        assert isinstance(txn.coordinator, TransactionCounts)
    finally:
        b.stop()


def test_a_missing_field_is_caught_by_the_seam():
    """The check can fail: an object without the cleaner's totals is no CleanerView."""

    class Partial:
        compactions_total = 0

    assert not isinstance(Partial(), CleanerView)
