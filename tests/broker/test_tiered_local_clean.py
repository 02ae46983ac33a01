"""A tiered compacted partition whose tiered segments stay local (a large
``local.retention.bytes``) while the broker's local log cleaner runs: the cleaner merges
neighbouring small segments (Kafka's ``groupSegmentsBySize``), so a local segment can
hold offsets already tiered and offsets not yet tiered. The copy uploads only what lies
at or above the remote log's end (KIP-405's ``RLMCopyTask`` copies each offset once,
from ``highestOffsetInRemoteStorage + 1``), so no two remote objects hold the same
offsets and remote cleans go on; a consumer from offset 0 reads the latest value of
every key, from the local log and from the remote tier alone."""

from __future__ import annotations

from pathlib import Path

from cleaner_kit import append
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from shared_kit import wait_for

from kompakt.broker.tiering import tiering_of
from kompakt.broker.tiering_stage import cut_at, stage, stage_tail
from kompakt.log.manager import LogManager
from kompakt.log.segment import LOG_SUFFIX, LogSegment
from kompakt.log.txn_index import AbortedTxn
from kompakt.remote.layout import file_base_offset
from tests.broker.test_tiered import read_all
from tests.remote.broker_kit import TIMEOUT, create_topic, tiered_broker

TOPIC = "merged"
CONFIGS = {
    "cleanup.policy": "compact",
    "remote.storage.enable": "true",
    "segment.bytes": "2048",
    "local.retention.bytes": str(1 << 20),  # every tiered segment stays local too
    "min.cleanable.dirty.ratio": "0.01",
    "min.compaction.lag.ms": "0",
    "file.delete.delay.ms": "0",
}
BROKER = {
    # the test runs the remote log manager's passes itself, between the local cleans
    "remote.log.manager.task.interval.ms": "600000",
    "log.cleaner.backoff.ms": "50",
}


def test_a_local_segment_merged_across_the_remote_end_goes_up_from_the_end_only(
    tmp_path: Path,
) -> None:
    b = tiered_broker(tmp_path / "data", **BROKER)
    try:
        create_topic(b, TOPIC, CONFIGS)
        plog = b.logs.get_log(TOPIC, 0)
        tiering = tiering_of(b.broker.state)
        assert tiering is not None
        cleaner = b.broker.background.cleaner()
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 2, "batch.num.messages": 5})
        latest: dict[bytes, bytes | None] = {}

        def produce(rnd: int) -> None:
            for i in range(200):  # a key of this round only, then keys every round rewrites
                key = b"r%d-%d" % (rnd, i) if i % 10 == 0 else b"k%d" % (i % 5)
                value = b"v%d-%d-" % (rnd, i) + b"x" * 30
                p.produce(TOPIC, key=key, value=value)
                latest[key] = value
            assert p.flush(TIMEOUT) == 0

        def cleaned_locally() -> bool:
            top = plog.active_segment.base_offset
            return cleaner.checkpoints().get((TOPIC, 0), 0) >= top

        produce(0)
        wait_for(cleaned_locally, "the local cleaner through the first round", TIMEOUT)
        tiering.copy(plog)  # the rolled segments go up as they are, no remote clean yet
        m = tiering.manifest(plog)
        assert m is not None
        end = m.end_offset
        merged: list = []
        rnd = 0
        while not merged and rnd < 4:  # how a clean groups depends on when it ran
            rnd += 1
            produce(rnd)
            wait_for(cleaned_locally, f"the local cleaner through round {rnd}", TIMEOUT)
            merged = [
                s for s in plog.segments_snapshot() if s.base_offset < end <= (s.last_offset or -1)
            ]
        assert merged, "the local cleaner merged a tiered segment with an untiered one"
        for later in (rnd + 1, rnd + 2):  # copies, remote cleans, and a remote range dirtied again
            tiering.run_once()
            produce(later)
            wait_for(cleaned_locally, f"the local cleaner through round {later}", TIMEOUT)
        tiering.run_once()
        tiering.run_once()
        m = tiering.manifest(plog)
        assert m is not None and tiering.copy_lag(plog, m) == (0, 0)
        assert m.clean_point == m.end_offset  # the remote range cleaned to its end
        for s in m.segments:  # each object's records start where its range does
            assert file_base_offset(s.files[LOG_SUFFIX].key) >= s.base_offset, s
        for a, c in zip(m.segments, m.segments[1:], strict=False):
            assert a.last_offset < c.base_offset, (a, c)
        assert {r[1]: r[2] for r in read_all(b.bootstrap, TOPIC)} == latest
        # local retention down to the active segment: offset 0 on is read from the tier
        res = ConfigResource("topic", TOPIC)
        res.add_incremental_config(
            ConfigEntry("local.retention.bytes", "0", incremental_operation=AlterConfigOpType.SET)
        )
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.incremental_alter_configs([res])[res].result(TIMEOUT)
        wait_for(lambda: b.logs.get_log(TOPIC, 0).config.local_retention_bytes == 0)
        tiering.run_once()
        assert plog.log_start_offset == plog.active_segment.base_offset
        assert {r[1]: r[2] for r in read_all(b.bootstrap, TOPIC)} == latest
    finally:
        b.stop()


def test_the_uploaded_tail_is_the_segments_bytes_from_the_remote_end_with_its_indexes(
    tmp_path: Path,
) -> None:
    """The tail a straddling segment uploads: its ``.log`` is byte for byte the local
    file from the first batch reaching the remote end, its offset and time indexes
    answer for it as a segment of its own, and its ``.txnindex`` keeps the aborted
    transactions that reach the end (Kafka's ``collectAbortedTxns`` over the tail's
    range) and drops those wholly below it."""
    logs = LogManager(tmp_path / "data")
    try:
        logs.create_topic("t", 1, {"segment.index.bytes": "4096", "index.interval.bytes": "64"})
        plog = logs.get_log("t", 0)
        t0 = plog.clock()
        for i in range(40):
            append(plog, [(b"k%d" % i, b"v%d" % i + b"x" * 40)], ts=t0 + i)
        plog.roll()
        seg = plog.segments[0]
        below, across = AbortedTxn(7, 2, 5, 2), AbortedTxn(8, 10, 30, 10)
        seg.update_txn_index(below)
        seg.update_txn_index(across)
        seg.flush()
        start = 25
        with plog.lock:
            files = stage(seg, tmp_path / "staging")
            cut = cut_at(seg, start)
        assert cut is not None and cut.base_offset == start
        base, max_ts, out = stage_tail(files, cut)
        whole = seg.log_path.read_bytes()
        assert base == start and max_ts == t0 + 39
        assert out[LOG_SUFFIX].read_bytes() == whole[cut.position :]
        tail = LogSegment(out[LOG_SUFFIX].parent, base, read_only=True)
        try:
            assert tail.last_offset == 39 and tail.offset_index.entries > 0
            assert tail.translate_offset(33) is not None
            assert tail.translate_offset(33)[1].base_offset == 33
            assert tail.find_offset_by_timestamp(t0 + 30) == (30, t0 + 30)
            assert tail.collect_aborted(0, 40)[0] == [across]
        finally:
            tail.close()
        assert cut_at(seg, seg.base_offset) is None  # no cut where the segment starts
    finally:
        logs.close()
