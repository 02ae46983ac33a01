"""Fetches below the local log start, through the Kafka protocol: the bytes the remote
tier returns are the bytes the local log returned before its segments were deleted
(Kafka's remote fetch serves the uploaded segment as is), the log start stays the
remote log's (Fetch's ``log_start_offset``, ListOffsets EARLIEST) and a fetch below it
is OFFSET_OUT_OF_RANGE; DeleteRecords moves it in the remote tier too; READ_COMMITTED
takes its aborted transactions from the tiered ``.txnindex``.

The broker's task runs once at start and then hourly: each test runs it
(``Tiering.run_once``) when its records are in, so the local reads before tiering are
taken at a known point."""

from __future__ import annotations

import os
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from shared_kit import consume_until, wait_for

from kompakt.broker.app import BrokerThread
from kompakt.broker.tiering import Tiering, tiering_of
from kompakt.remote import open_store
from kompakt.remote.metadata import RemoteLogMetadataManager
from tests.remote.broker_kit import (
    EARLIEST,
    EARLIEST_LOCAL,
    OFFSET_OUT_OF_RANGE,
    TIMEOUT,
    create_topic,
    fetch,
    list_offset,
    tiered_broker,
)

TOPIC_CONFIGS = {
    "cleanup.policy": "compact",
    "remote.storage.enable": "true",
    "segment.bytes": "4096",
    "local.retention.bytes": "4096",
}


def start(data: Path) -> tuple[BrokerThread, Tiering]:
    b = tiered_broker(
        data,
        **{
            "remote.log.manager.task.interval.ms": 3_600_000,
            "log.cleaner.enable": "false",
            "transaction.state.log.num.partitions": 1,
            "offsets.topic.num.partitions": 1,
        },
    )
    tiering = tiering_of(b.broker.state)
    assert tiering is not None
    return b, tiering


def create(b: BrokerThread, topic: str, **configs: str) -> None:
    create_topic(b, topic, {**TOPIC_CONFIGS, **configs})


def produce(b: BrokerThread, topic: str, n: int) -> None:
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5, "batch.num.messages": 5})
    for i in range(n):
        p.produce(topic, key=b"k%d" % (i % 13), value=b"v%d-" % i + b"y" * (i % 30))
    assert p.flush(TIMEOUT) == 0


def test_remote_fetch_returns_the_bytes_the_local_log_returned(tmp_path: Path) -> None:
    """Byte-identical batches below the local log start, Fetch's log_start_offset and
    ListOffsets EARLIEST at the remote log start (here 20, set by DeleteRecords before
    tiering: the first remote segment starts inside its file), OFFSET_OFFSET_OUT_OF_RANGE
    below it (Kafka's rule for a fetch below logStartOffset)."""
    b, tiering = start(tmp_path / "data")
    try:
        # DeleteRecords needs "delete" in the policy (Kafka's PolicyViolation otherwise)
        create(b, "t", **{"cleanup.policy": "compact,delete"})
        produce(b, "t", 300)
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        tp = TopicPartition("t", 0, 20)
        assert admin.delete_records([tp])[tp].result(TIMEOUT).low_watermark == 20
        offsets = [20, 21, 57, 100, 150]
        before = {o: fetch(b, "t", o) for o in offsets}
        assert all(r.error_code == 0 and r.records for r in before.values())
        tiering.run_once()
        local_start = b.logs.get_log("t", 0).log_start_offset
        assert local_start > max(offsets)
        for o in offsets:
            after = fetch(b, "t", o)
            assert after.error_code == 0
            assert after.records == before[o].records, o
            assert (after.log_start_offset, after.high_watermark) == (20, 300)
        assert fetch(b, "t", 19).error_code == OFFSET_OUT_OF_RANGE
        assert list_offset(b, "t", EARLIEST) == 20
        assert list_offset(b, "t", EARLIEST_LOCAL) == local_start
        # DeleteRecords below the local start moves the remote log start
        tp = TopicPartition("t", 0, 60)
        assert admin.delete_records([tp])[tp].result(TIMEOUT).low_watermark == 60
        assert fetch(b, "t", 59).error_code == OFFSET_OUT_OF_RANGE
        assert fetch(b, "t", 100).records == before[100].records
        assert list_offset(b, "t", EARLIEST) == 60
        assert b.logs.get_log("t", 0).log_start_offset == local_start
    finally:
        b.stop()


def read_values(b: BrokerThread, topic: str, isolation: str, end: int) -> list[bytes]:
    c = Consumer(
        {
            "bootstrap.servers": b.bootstrap,
            "group.id": f"g-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    c.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []

    def done() -> bool:
        for m in c.consume(100, timeout=0.2):
            if m.error() is None:
                got.append(m.value())
        return c.position([TopicPartition(topic, 0)])[0].offset >= end

    try:
        wait_for(done, f"{isolation} reads up to {end}", TIMEOUT)
    finally:
        c.close()
    return got


def test_read_committed_from_the_remote_tier_drops_aborted_records(tmp_path: Path) -> None:
    """Kafka's RemoteLogManager.collectAbortedTransactions: the aborted transactions of a
    fetch served by the remote tier come from the tiered .txnindex, so a READ_COMMITTED
    consumer from offset 0 skips the aborted records after the local copies are gone."""
    b, tiering = start(tmp_path / "data")
    try:
        create(b, "tx")
        p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "tx-1"})
        p.init_transactions(TIMEOUT)
        committed: list[bytes] = []
        for t in range(12):
            p.begin_transaction()
            values = [b"t%d-%d-" % (t, i) + b"z" * 60 for i in range(8)]
            for v in values:
                p.produce("tx", key=b"k", value=v, partition=0)
            assert p.flush(TIMEOUT) == 0
            if t % 3 == 1:
                p.abort_transaction(TIMEOUT)
            else:
                p.commit_transaction(TIMEOUT)
                committed += values
        plog = b.logs.get_log("tx", 0)
        end = 12 * 9  # 8 records and a marker a transaction
        wait_for(lambda: plog.last_stable_offset == end, "the last marker")
        tiering.run_once()
        assert plog.log_start_offset > 27  # the first aborted transaction is remote only
        got = read_values(b, "tx", "read_committed", end)
        assert got == committed
        everything = read_values(b, "tx", "read_uncommitted", end)
        assert len(everything) == 12 * 8
    finally:
        b.stop()


def test_a_clean_of_tiered_segments_then_tiering_keeps_the_log_readable(
    tmp_path: Path,
) -> None:
    """A local clean rewrites segments the remote tier already holds (the remote copies
    stay as they were) and empties others; tiering goes on past the emptied ones (a
    compaction gap in the remote log), and a consumer from offset 0 reads ascending
    offsets ending with every key's latest value (Kafka's compaction guarantee)."""
    b, tiering = start(tmp_path / "data")
    try:
        create(b, "c", **{"min.cleanable.dirty.ratio": "0.01"})
        latest: dict[bytes, bytes] = {}
        p = Producer({"bootstrap.servers": b.bootstrap, "batch.num.messages": 5})
        for i in range(600):
            key, value = b"k%d" % (i % 13), b"v%d-" % i + b"c" * (i % 40)
            p.produce("c", key=key, value=value)
            latest[key] = value
            if i == 299:
                assert p.flush(TIMEOUT) == 0
                tiering.run_once()
        assert p.flush(TIMEOUT) == 0
        plog = b.logs.get_log("c", 0)
        tiered_before = tiering.highest_tiered_offset(plog)
        b.broker.background.cleaner().compact_now("c", 0)
        tiering.run_once()
        assert tiering.highest_tiered_offset(plog) > tiered_before
        assert plog.log_start_offset > 0
        c = Consumer(
            {
                "bootstrap.servers": b.bootstrap,
                "group.id": f"g-{time.monotonic_ns()}",
                "enable.partition.eof": True,
            }
        )
        c.assign([TopicPartition("c", 0, 0)])
        msgs = consume_until(c, timeout=TIMEOUT)
        c.close()
        offsets = [m.offset() for m in msgs]
        assert offsets == sorted(set(offsets)) and offsets[0] == 0
        assert {m.key(): m.value() for m in msgs} == latest
    finally:
        b.stop()


def test_retention_bytes_expires_remote_segments_of_a_delete_topic(tmp_path: Path) -> None:
    """Kafka's RLMExpirationTask: with cleanup.policy=delete, retention.bytes bounds the
    whole log (remote segments plus the untiered local ones); the oldest remote
    segments go, the log start moves to the first one kept, and a fetch below it is
    OFFSET_OUT_OF_RANGE."""
    b, tiering = start(tmp_path / "data")
    try:
        create(b, "d", **{"cleanup.policy": "delete", "retention.bytes": "12288"})
        produce(b, "d", 600)
        tiering.run_once()
        plog = b.logs.get_log("d", 0)
        m = tiering.manifest(plog)
        assert m is not None and m.segments
        first = list_offset(b, "d", EARLIEST)
        assert first == m.log_start_offset == m.segments[0].base_offset > 0
        assert first < plog.log_start_offset  # some records only in the remote tier
        only_local = sum(s.size for s in plog.segments if s.base_offset >= m.end_offset)
        assert m.size + only_local < 12288 + 4096 * 2
        assert fetch(b, "d", first - 1).error_code == OFFSET_OUT_OF_RANGE
        assert fetch(b, "d", first).records
    finally:
        b.stop()


def test_the_task_sweeps_objects_no_manifest_names(tmp_path: Path) -> None:
    """An upload a crash left unnamed (older than the grace period) goes with the
    task's sweep; the objects the manifest names stay and are served."""
    b, tiering = start(tmp_path / "data")
    try:
        create(b, "o")
        produce(b, "o", 300)
        tiering.run_once()  # the first pass at start swept an empty tier
        folder = tmp_path / "data-remote" / "topics" / "o" / "0" / "segments"
        orphan = folder / f"{0:020d}-{'0' * 32}.log"
        orphan.write_bytes(b"left by a crash before its commit")
        hours_ago = time.time() - 2 * 3600
        os.utime(orphan, (hours_ago, hours_ago))
        named = sorted(p.name for p in folder.iterdir())
        tiering.last_sweep_s = 0.0  # as if the last sweep was long ago
        tiering.run_once()
        assert not orphan.exists()
        assert sorted(p.name for p in folder.iterdir()) == [n for n in named if n != orphan.name]
        assert fetch(b, "o", 0).records
    finally:
        b.stop()


def test_a_fetch_rereads_a_manifest_another_writer_changed(tmp_path: Path) -> None:
    """A reader whose manifest is older than the store's finds a dropped segment's
    objects gone; it reads the manifest again (docs/tiered-storage.md), so the fetch
    is answered by the new one: OFFSET_OUT_OF_RANGE below its log start, records
    above it."""
    b, tiering = start(tmp_path / "data")
    try:
        create(b, "w")
        produce(b, "w", 300)
        tiering.run_once()
        other = RemoteLogMetadataManager(open_store((tmp_path / "data-remote").as_uri()))
        v = other.load_partition("w", 0)
        assert v is not None and len(v.value.segments) > 2
        kept = v.value.segments[1:]
        # the broker caches the manifest (not segment 0's chunks: objects never change,
        # so cached bytes stay valid to serve)
        assert fetch(b, "w", kept[-1].base_offset).records
        other.commit_partition(v.value.next(kept, log_start_offset=kept[0].base_offset), v)
        assert fetch(b, "w", 0).error_code == OFFSET_OUT_OF_RANGE
        assert fetch(b, "w", kept[0].base_offset).records
        assert list_offset(b, "w", EARLIEST) == kept[0].base_offset
    finally:
        b.stop()
