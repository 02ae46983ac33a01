"""One broker writes a remote tier (kompakt.broker.tier_owner): a second broker pointed
at a bucket in use (an outside probe started one on an empty data dir while the first
ran) is refused at start while the first renews its lease; the same data dir takes its
own record back at once; a lease run out is taken over, and the broker it was taken
from stops tiering instead of overwriting the new owner's records."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from kompakt.broker.tier_owner import OWNER_KEY, TierInUseError, TierOwnership
from kompakt.remote import open_store

LEASE = 6000


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def test_a_second_data_dir_waits_for_the_lease_and_the_first_then_stops(tmp_path: Path, caplog):
    store = open_store((tmp_path / "bucket").as_uri())
    clock = Clock()
    first = TierOwnership(store, "dir-a", LEASE, clock)
    first.claim()
    assert json.loads(store.get(OWNER_KEY)[0])["directory_id"] == "dir-a"
    second = TierOwnership(store, "dir-b", LEASE, clock)
    clock.now += 2.0
    assert first.renew()
    clock.now += LEASE / 1000 - 0.5  # within the lease the first renewed
    with pytest.raises(TierInUseError, match=r"in use by another broker \(data dir dir-a"):
        second.claim()
    again = TierOwnership(store, "dir-a", LEASE, clock)  # the same data dir restarting
    again.claim()
    clock.now += LEASE / 1000  # its lease runs out: the other dir takes the bucket
    with caplog.at_level(logging.WARNING, "kompakt.broker.tiering"):
        second.claim()
        assert "taking over the remote tier" in caplog.text
        assert not again.renew() and again.fenced  # and the one it was taken from stops
        assert not again.renew()
        assert "was taken over by another broker" in caplog.text
    assert second.renew()
    assert json.loads(store.get(OWNER_KEY)[0])["directory_id"] == "dir-b"


def test_a_damaged_owner_record_is_one_line(tmp_path: Path) -> None:
    store = open_store((tmp_path / "bucket").as_uri())
    store.put(OWNER_KEY, b"{not json")
    with pytest.raises(Exception, match="brokers/owner.json cannot be read") as bad:
        TierOwnership(store, "dir-a", LEASE, Clock()).claim()
    assert "\n" not in str(bad.value)


def test_a_clean_stop_lets_another_data_dir_take_the_bucket_at_once(tmp_path: Path) -> None:
    store = open_store((tmp_path / "bucket").as_uri())
    clock = Clock()
    first = TierOwnership(store, "dir-a", LEASE, clock)
    first.claim()
    first.release()
    TierOwnership(store, "dir-b", LEASE, clock).claim()  # no wait for the lease
    assert not first.renew()  # the released one does not come back by itself
