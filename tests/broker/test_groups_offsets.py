"""Committed offsets over time: expiry (KIP-211) and a bounded ``__consumer_offsets``.

Kafka's rules checked here: ``ClassicGroup.offsetExpirationCondition`` and
``OffsetMetadataManager.cleanupExpiredOffsets`` (what expires when), expired offsets and
Dead groups leave tombstones (``GroupMetadataManager.cleanupGroupMetadata``), and the log
cleaner keeps ``__consumer_offsets`` at one record per key and drops tombstones after
``delete.retention.ms``. The coordinator's clock is a :class:`ManualClock`; the cleaner
runs in the broker's background thread (local engine) on real time.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
import urllib.request
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from manual_clock import ManualClock
from shared_kit import wait_for

from kompakt.broker.app import BrokerThread, start_test_broker
from kompakt.broker.coordinator import records as R
from kompakt.broker.coordinator.coordinator import GroupCoordinator
from kompakt.broker.coordinator.offsets import expired_offsets
from kompakt.broker.coordinator.records import OffsetAndMetadata
from kompakt.broker.coordinator.state import Group, GroupState
from kompakt.broker.coordinator.storage import OFFSETS_TOPIC
from kompakt.record.encode import build_simple_batch

TIMEOUT = 10
MINUTE = 60_000
_ids = itertools.count()


def create(bootstrap: str, *names: str, partitions: int = 2) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fs = admin.create_topics([NewTopic(n, partitions, 1) for n in names])
    for f in fs.values():
        f.result(TIMEOUT)


def consumer(bootstrap: str, group: str, **extra: Any) -> Consumer:
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
        "fetch.wait.max.ms": 100,
    }
    conf.update(extra)
    return Consumer(conf)


def coordinator(b: BrokerThread) -> GroupCoordinator:
    """The broker's coordinator, created (and __consumer_offsets with it) by a ListGroups."""
    admin = AdminClient({"bootstrap.servers": b.bootstrap})  # keep it alive until answered
    admin.list_consumer_groups().result(TIMEOUT)
    return b.broker.state.extra["group_coordinator"]


def committed(b: BrokerThread, group: str, tps: list[tuple[str, int]]) -> list[int]:
    c = consumer(b.bootstrap, group)
    try:
        got = c.committed([TopicPartition(t, p) for t, p in tps], TIMEOUT)
        return [tp.offset if tp.offset >= 0 else -1 for tp in got]
    finally:
        c.close()


def offsets_log_records(b: BrokerThread, partition: int = 0) -> list[tuple[int, tuple, bool, int]]:
    """(offset, parsed key, is tombstone, batch delete horizon or -1) for every record."""
    plog = b.logs.get_log(OFFSETS_TOPIC, partition)
    for _ in range(5):  # a clean may swap segments under the reader: read again
        try:
            out = []
            for batch in plog.iter_batches(plog.log_start_offset):
                horizon = batch.header.delete_horizon
                for r in batch.records():
                    parsed = R.parse_key(r.key)
                    out.append(
                        (r.offset, parsed, r.value is None, -1 if horizon is None else horizon)
                    )
            return out
        except (OSError, ValueError):
            time.sleep(0.05)  # back-off before the retry, not a wait for an event
    raise AssertionError("cannot read __consumer_offsets")


# -- the expiry rule, unit level ------------------------------------------------------------


def _group(state: str, protocol_type: str | None, empty_since: int | None = None) -> Group:
    g = Group("g", state=state, protocol_type=protocol_type, state_timestamp=empty_since)
    return g


def test_expiry_rule_simple_consumer_counts_from_last_commit():
    """Kafka: a standalone consumer's offset expires ``offsets.retention.minutes`` after
    its commit (``now - commitTimestamp >= retention``)."""
    g = _group(GroupState.EMPTY, None)
    g.offsets[("t", 0)] = OffsetAndMetadata(5, commit_timestamp=1000)
    g.offsets[("t", 1)] = OffsetAndMetadata(5, commit_timestamp=2000)
    assert expired_offsets(g, 1000 + MINUTE - 1, MINUTE) == {}
    assert set(expired_offsets(g, 1000 + MINUTE, MINUTE)) == {("t", 0)}


def test_expiry_rule_empty_group_counts_from_when_it_became_empty():
    """KIP-211: an Empty group's offsets expire a retention after it became Empty, not
    after the commit; an offset committed later (e.g. an admin reset) gets its own full
    retention (we take the later of the two)."""
    g = _group(GroupState.EMPTY, "consumer", empty_since=50_000)
    g.offsets[("t", 0)] = OffsetAndMetadata(5, commit_timestamp=1000)
    g.offsets[("t", 1)] = OffsetAndMetadata(5, commit_timestamp=80_000)
    assert expired_offsets(g, 50_000 + MINUTE - 1, MINUTE) == {}
    assert set(expired_offsets(g, 50_000 + MINUTE, MINUTE)) == {("t", 0)}
    assert len(expired_offsets(g, 80_000 + MINUTE, MINUTE)) == 2


def test_expiry_rule_stable_group_expires_only_unsubscribed_topics():
    """KIP-211: while a consumer-protocol group is Stable, offsets of topics it still
    subscribes to never expire; the others expire a retention after their last commit.
    In other states (rebalancing) nothing expires; so for non-consumer protocols."""
    g = _group(GroupState.STABLE, "consumer")
    g.subscribed = {"a"}
    g.offsets[("a", 0)] = OffsetAndMetadata(5, commit_timestamp=0)
    g.offsets[("b", 0)] = OffsetAndMetadata(5, commit_timestamp=0)
    assert set(expired_offsets(g, 10 * MINUTE, MINUTE)) == {("b", 0)}
    g.subscribed = None  # subscriptions unknown (unparsable metadata): keep everything
    assert expired_offsets(g, 10 * MINUTE, MINUTE) == {}
    g.subscribed = {"a"}
    g.state = GroupState.COMPLETING_REBALANCE
    assert expired_offsets(g, 10 * MINUTE, MINUTE) == {}
    g.state, g.protocol_type = GroupState.STABLE, "connect"
    assert expired_offsets(g, 10 * MINUTE, MINUTE) == {}


def test_expiry_rule_explicit_expire_timestamp_wins():
    """OffsetCommit v2-v4 ``retention_time`` gives an expire timestamp that alone decides
    (Kafka's old expiration semantics); it round-trips as offset value v1."""
    om = OffsetAndMetadata(5, -1, "m", commit_timestamp=1000, expire_timestamp=3000)
    assert R.parse_offset_value(R.offset_value(om)) == om
    g = _group(GroupState.EMPTY, None)
    g.offsets[("t", 0)] = om
    assert expired_offsets(g, 2999, MINUTE) == {}
    assert set(expired_offsets(g, 3000, MINUTE)) == {("t", 0)}


def test_subscription_topics_parse_every_consumer_protocol_version():
    """Kafka reads any ConsumerProtocolSubscription version through its v0 prefix."""
    v0 = b"\x00\x00" + b"\x00\x00\x00\x02" + b"\x00\x01a" + b"\x00\x02bb" + b"\xff\xff\xff\xff"
    assert R.subscription_topics(v0) == {"a", "bb"}
    v3 = b"\x00\x03" + v0[2:] + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x07" + b"\xff\xff"
    assert R.subscription_topics(v3) == {"a", "bb"}
    with pytest.raises(ValueError):
        R.subscription_topics(b"\x00\x00\x00\x00\x00\x05\x00\x01a")


# -- against a broker -----------------------------------------------------------------------


def test_offsets_expire_to_tombstones_and_cleaner_removes_them_after_delete_retention(
    tmp_path,
):
    """Kafka (KIP-211): after ``offsets.retention.minutes`` an Empty group's offsets and a
    simple consumer's offsets expire, a Stable group loses only the offsets of a topic it
    does not subscribe to; tombstones are written for each, and for the metadata of the
    group that went Dead. The cleaner keeps those tombstones through the clean that first
    sees them and removes them once ``delete.retention.ms`` (set on the topic) passed."""
    b = start_test_broker(
        tmp_path / "d",
        **{
            "group.initial.rebalance.delay.ms": 0,
            "offsets.topic.num.partitions": 1,
            "offsets.topic.segment.bytes": 2048,
            "offsets.retention.minutes": 1,
            "offsets.retention.check.interval.ms": 100,
            "log.cleaner.backoff.ms": 100,
        },
    )
    live = None
    try:
        clock = ManualClock()
        gc = coordinator(b)
        gc.scheduler.clock = clock  # the coordinator's time only: the cleaner's stays real
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        res = ConfigResource(
            ResourceType.TOPIC,
            OFFSETS_TOPIC,
            incremental_configs=[
                ConfigEntry(
                    "delete.retention.ms", "3000", incremental_operation=AlterConfigOpType.SET
                ),
                ConfigEntry(
                    "min.cleanable.dirty.ratio", "0.01", incremental_operation=AlterConfigOpType.SET
                ),
            ],
        )
        for f in admin.incremental_alter_configs([res]).values():
            f.result(TIMEOUT)
        ta, tb = "exp-a", "exp-b"
        create(b.bootstrap, ta, tb)

        # "gone": a subscribed group that commits, then its only member leaves (Empty)
        c = consumer(b.bootstrap, "gone")
        c.subscribe([ta])
        wait_for(lambda: c.poll(0.05) is None and len(c.assignment()) == 2)
        c.commit(offsets=[TopicPartition(ta, 0, 3), TopicPartition(ta, 1, 4)], asynchronous=False)
        c.close()
        wait_for(lambda: gc.groups["gone"].state == GroupState.EMPTY)
        # "simple": commits with assign() only (no protocol type)
        c = consumer(b.bootstrap, "simple")
        c.commit(offsets=[TopicPartition(ta, 0, 7)], asynchronous=False)
        c.close()
        # "live": stays subscribed to a, also commits b (which it does not subscribe to)
        live = consumer(b.bootstrap, "live")
        live.subscribe([ta])
        wait_for(lambda: live.poll(0.05) is None and len(live.assignment()) == 2)
        wait_for(lambda: gc.groups["live"].state == GroupState.STABLE)
        live.commit(
            offsets=[TopicPartition(ta, 0, 1), TopicPartition(tb, 0, 9)], asynchronous=False
        )

        clock.advance(MINUTE - 1)  # one ms short of the retention: nothing expires
        # an expiry pass run here, so it surely ran at this time
        assert (
            asyncio.run_coroutine_threadsafe(gc.offsets.expire_offsets(), b.loop).result(TIMEOUT)
            == 0
        )
        live.poll(0.05)
        assert gc.offsets_expired == 0
        assert committed(b, "gone", [(ta, 0), (ta, 1)]) == [3, 4]

        clock.advance(1)
        wait_for(lambda: "gone" not in gc.groups and "simple" not in gc.groups)
        assert gc.offsets_expired == 4
        url = f"http://127.0.0.1:{b.admin_port}/metrics"
        metrics = urllib.request.urlopen(url, timeout=5).read().decode()
        assert "kompakt_group_offsets_expired_total 4.0" in metrics
        assert 'kompakt_consumer_groups{state="Stable"} 1.0' in metrics
        assert committed(b, "gone", [(ta, 0), (ta, 1)]) == [-1, -1]
        assert committed(b, "simple", [(ta, 0)]) == [-1]
        assert committed(b, "live", [(ta, 0), (tb, 0)]) == [1, -1]
        listed = {g.group_id for g in admin.list_consumer_groups().result(TIMEOUT).valid}
        assert "gone" not in listed and "simple" not in listed and "live" in listed

        expired_keys = {
            ("offset", ("gone", ta, 0)),
            ("offset", ("gone", ta, 1)),
            ("offset", ("simple", ta, 0)),
            ("offset", ("live", tb, 0)),
            ("group", ("gone",)),  # Dead with a generation: its metadata is tombstoned
        }
        recs = offsets_log_records(b)
        tombstoned = {key for _o, key, dead, _h in recs if dead}
        assert tombstoned == expired_keys  # no group tombstone for the simple consumer
        last_tombstone = max(o for o, key, dead, _h in recs if dead)

        # keep committing so segments roll and the cleaner passes over the tombstones
        n = itertools.count(2)

        def tombstones_state() -> str | None:
            live.commit(offsets=[TopicPartition(ta, 0, next(n))], asynchronous=False)
            live.poll(0)
            recs = offsets_log_records(b)
            left = [(key, dead, h) for _o, key, dead, h in recs if key in expired_keys]
            if not left:
                return "removed"
            cps = b.logs.cleaner_checkpoint().read()
            cleaned_past = max(cps.values(), default=0) > last_tombstone
            # survived a clean: only the tombstones are left, stamped with a horizon
            if cleaned_past and all(dead and h > 0 for _k, dead, h in left):
                assert {k for k, _d, _h in left} == expired_keys
                return "kept"
            return None

        assert wait_for(tombstones_state, timeout=30) == "kept"
        assert wait_for(lambda: tombstones_state() == "removed", timeout=30)
        assert committed(b, "live", [(ta, 0)]) == [next(n) - 1]
    finally:
        if live is not None:
            live.close()
        b.stop()


def test_consumer_offsets_stays_bounded_under_many_commits(tmp_path):
    """20k commits of one group on three partitions: with small
    ``offsets.topic.segment.bytes`` the background cleaner keeps ``__consumer_offsets`` at
    a few segments (Kafka keeps the topic compacted for this), and ``committed()`` gives
    the latest offsets, also after a restart (the load reads the compacted log)."""
    data = tmp_path / "d"
    seg = 16384
    props = {
        "group.initial.rebalance.delay.ms": 0,
        "offsets.topic.num.partitions": 3,
        "offsets.topic.segment.bytes": seg,
        "log.cleaner.backoff.ms": 50,
    }
    b = start_test_broker(data, **props)
    topic, group, n = "bounded", "many-commits", 20_000
    try:
        create(b.bootstrap, topic, partitions=3)
        coordinator(b)
        part = R.partition_for(group, 3)
        plog = b.logs.get_log(OFFSETS_TOPIC, part)
        errors: list[Any] = []

        def on_commit(err: Any, _parts: Any) -> None:
            if err is not None:
                errors.append(err)

        sizes: list[int] = []
        done = threading.Event()

        def sample() -> None:  # the partition's size while the commits are written
            while not done.wait(0.02):
                sizes.append(plog.size_bytes())

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        c = consumer(b.bootstrap, group, on_commit=on_commit)
        for i in range(n):
            c.commit(offsets=[TopicPartition(topic, i % 3, i + 1)], asynchronous=True)
            if i % 200 == 0:
                c.poll(0)
        c.commit(
            offsets=[TopicPartition(topic, p, n - 2 + p) for p in range(3)], asynchronous=False
        )
        done.set()
        sampler.join()
        assert not errors, errors[:3]
        assert plog.log_end_offset >= n
        peak = max(sizes)
        one_commit = build_simple_batch(
            [(R.offset_key(group, topic, 0), R.offset_value(OffsetAndMetadata(n, -1, "", 0)))],
            timestamp=0,
        )
        written = n * len(one_commit)
        wait_for(lambda: plog.size_bytes() <= 2 * seg, timeout=30)
        assert peak < written / 10, (peak, written)  # cleaned while being written
        final = plog.size_bytes()
        latest = committed(b, group, [(topic, p) for p in range(3)])
        assert latest == [n - 2, n - 1, n]
        c.close()
    finally:
        b.stop()
    assert final <= 2 * seg < written / 50
    b = start_test_broker(data, **props)
    try:
        assert committed(b, group, [(topic, p) for p in range(3)]) == [n - 2, n - 1, n]
        assert b.logs.get_log(OFFSETS_TOPIC, part).size_bytes() <= 2 * seg
    finally:
        b.stop()


def test_offsets_configs_have_kafkas_names_defaults_and_validation():
    """GroupCoordinatorConfig: offsets.retention.minutes INT 10080 atLeast(1),
    offsets.retention.check.interval.ms LONG 600000 atLeast(1),
    offsets.topic.segment.bytes INT 104857600 atLeast(1)."""
    from kompakt.broker.config import BrokerConfig
    from kompakt.errors import InvalidConfigError

    c = BrokerConfig.from_mapping({})
    assert c.get("offsets.retention.minutes") == 10080
    assert c.get("offsets.retention.check.interval.ms") == 600000
    assert c.get("offsets.topic.segment.bytes") == 104857600
    for key in (
        "offsets.retention.minutes",
        "offsets.retention.check.interval.ms",
        "offsets.topic.segment.bytes",
        "offsets.topic.num.partitions",
    ):
        with pytest.raises(InvalidConfigError, match=key):
            BrokerConfig.from_mapping({key: "0"})
