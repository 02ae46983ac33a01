"""Idempotent producer state survives a restart after retention or compaction removed
the batches it was built from: Kafka's producer-state snapshots.

Kafka's ``ProducerStateManager`` writes ``<offset>.snapshot`` at each segment roll
(``LocalLog.roll`` -> ``takeSnapshot``) and at a clean shutdown, and at load starts from
the latest snapshot at or below the log end, replaying only the batches after it
(``LogLoader.rebuildProducerState``). Kafka's snapshot keeps each producer's last batch
only; kompakt's keeps an entry for each of the last five (Kafka's reader keeps the last
one), so after a restart a retry of any of them is a duplicate, answered with the
original's offset.

Real ``LogManager``s on tmp dirs, the broker's own append path
(``kompakt.broker.handlers.produce._append``) and, at the end, a real broker restarted
between a confluent-kafka idempotent producer's writes and a retry.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest
from shared_kit import consume_until

from kompakt.broker.handlers.produce import _append
from kompakt.broker.producers import OutOfOrderSequenceError, ProducerStateManager
from kompakt.cleaner.cleaner import Cleaner
from kompakt.log.manager import LogManager
from kompakt.log.producer_snapshot import ProducerSnapshotFile, list_snapshots
from kompakt.log.producer_state import PRODUCER_ID_EXPIRATION_MS
from kompakt.record.decode import iter_batches
from kompakt.record.encode import build_simple_batch

PID, EPOCH = 4242, 0


def now_ms() -> int:
    return int(time.time() * 1000)


def idem(first_seq: int, n: int, ts: int, key: bytes = b"k") -> bytes:
    items = [(key + b"%d" % (first_seq + i), b"v%d" % (first_seq + i)) for i in range(n)]
    return build_simple_batch(
        items, timestamp=ts, producer_id=PID, producer_epoch=EPOCH, base_sequence=first_seq
    )


def plain(items: list[tuple[bytes, bytes]], ts: int) -> bytes:
    return build_simple_batch(items, timestamp=ts)


def header(data: bytes):
    (b,) = list(iter_batches(data))
    return b.header


def open_broker_state(data: Path) -> tuple[LogManager, ProducerStateManager]:
    """What a broker start builds: the logs, the producer state, the KIP-360 hook."""
    logs = LogManager(data)
    producers = ProducerStateManager(data)
    logs.batch_removal_listeners.append(producers.for_log)
    return logs, producers


def produce(plog, producers: ProducerStateManager, records: bytes) -> int:
    return _append(plog, producers, records)[0]["base_offset"]


def first_session_original_then_others(data: Path, old: int) -> None:
    """The producer's batch (offsets 0-9, sequences 0-9) in the first segment, then a
    roll (a snapshot at 10) and another client's records (10-14); a clean shutdown."""
    logs, producers = open_broker_state(data)
    with logs:
        logs.create_topic("ev", 1, {"cleanup.policy": "delete", "retention.ms": "1000"})
        plog = logs.get_log("ev", 0)
        assert produce(plog, producers, idem(0, 10, old)) == 0
        plog.roll()
        produce(plog, producers, plain([(b"x", b"y")] * 5, now_ms()))
    assert [s.offset for s in list_snapshots(data / "ev-0")] == [10, 15]  # roll, close


def test_restart_after_retention_deleted_the_original_retry_is_a_duplicate(tmp_path: Path):
    data = tmp_path / "data"
    old = now_ms() - 60_000
    first_session_original_then_others(data, old)
    logs, producers = open_broker_state(data)
    with logs:
        assert logs.apply_retention() == 1
        assert logs.get_log("ev", 0).log_start_offset == 10
    logs, producers = open_broker_state(data)  # a restart: nothing built yet
    with logs:
        plog = logs.get_log("ev", 0)
        end = plog.log_end_offset
        assert produce(plog, producers, idem(0, 10, old)) == 0  # the original's offset
        assert plog.log_end_offset == end, "the retry was appended a second time"
        assert produce(plog, producers, idem(10, 3, now_ms())) == end  # and it goes on


def test_a_crash_after_retention_keeps_the_state_of_the_deleted_batches(tmp_path: Path):
    """No clean shutdown after the deletion: the snapshot written before the head
    segments went (KIP-360) carries the state."""
    data = tmp_path / "data"
    old = now_ms() - 60_000
    first_session_original_then_others(data, old)
    for p in list_snapshots(data / "ev-0"):
        p.delete()  # only what retention leaves behind counts
    logs, _producers = open_broker_state(data)
    assert logs.apply_retention() == 1
    logs._release_lock()  # killed: no close, no shutdown snapshot
    logs, producers = open_broker_state(data)
    with logs:
        plog = logs.get_log("ev", 0)
        dup = producers.for_log(plog).check(header(idem(0, 10, old)))
        assert dup is not None and (dup.first_offset, dup.last_offset) == (0, 9)


def test_a_snapshot_keeps_the_last_five_batches_and_kafka_reads_the_last(tmp_path: Path):
    """In flight together, two batches may be split by a roll: the snapshot written
    there must let a retry of the first be a duplicate after a restart. Kafka's schema
    has one batch per entry and Kafka writes only the last; kompakt writes an entry per
    retained batch (``NUM_BATCHES_TO_RETAIN``), oldest first, so Kafka's reader, which
    keeps the last entry of a producer id, still sees the last batch. A retry older
    than the five is OUT_OF_ORDER_SEQUENCE_NUMBER, as in memory."""
    data = tmp_path / "data"
    ts = now_ms() - 60_000
    logs, producers = open_broker_state(data)
    with logs:
        logs.create_topic("ev", 1, {"retention.ms": "1000"})
        plog = logs.get_log("ev", 0)
        for i in range(7):  # sequences 0-34, offsets 0-34, five records a batch
            produce(plog, producers, idem(i * 5, 5, ts))
        plog.roll()
        produce(plog, producers, plain([(b"x", b"y")], now_ms()))
        assert logs.apply_retention() == 1
    snap = list_snapshots(data / "ev-0")[-1]  # the newest (at the clean shutdown)
    entries = snap.read()
    assert [e.last_offset for e in entries] == [14, 19, 24, 29, 34]
    kafka_view = {e.producer_id: e for e in entries}  # Kafka's loadFromSnapshot: put()
    assert kafka_view[PID].last_offset == 34 and kafka_view[PID].last_sequence == 34
    logs, producers = open_broker_state(data)
    with logs:
        state = producers.for_log(logs.get_log("ev", 0))
        for i in range(2, 7):
            dup = state.check(header(idem(i * 5, 5, ts)))
            assert dup is not None and (dup.first_offset, dup.last_offset) == (i * 5, i * 5 + 4)
        with pytest.raises(OutOfOrderSequenceError):
            state.check(header(idem(5, 5, ts)))


def test_restart_after_compaction_removed_the_producers_records(tmp_path: Path):
    """Kafka's cleaner keeps a producer's last batch, emptied, while its state may be
    needed (``LogCleaner``: ``isBatchLastRecordOfProducer``), and the snapshot written
    at the roll covers it too: either way the retry after a restart is a duplicate."""
    data = tmp_path / "data"
    ts = now_ms()
    logs, producers = open_broker_state(data)
    with logs:
        logs.create_topic(
            "kv", 1, {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"}
        )
        plog = logs.get_log("kv", 0)
        produce(plog, producers, idem(0, 5, ts))  # k0-k4 at 0-4
        produce(plog, producers, idem(5, 5, ts, key=b"j"))  # j5-j9 at 5-9
        plog.roll()
        others = [(b"k%d" % i, b"new") for i in range(5)] + [
            (b"j%d" % i, b"new") for i in range(5, 10)
        ]
        produce(plog, producers, plain(others, ts))  # 10-19 supersede every record of PID
        plog.roll()
        Cleaner(logs).compact_now("kv", 0)
        kept = [b for b in plog.iter_batches(0) if b.header.producer_id == PID]
        assert [
            (b.header.base_offset, b.header.last_offset, len(list(b.records()))) for b in kept
        ] == [(5, 9, 0)], "the producer's last batch stays, empty"
        # the snapshot of the merged-away segment 10 went with it (Kafka's
        # replaceSegments -> deleteProducerSnapshots); the one at the roll to 20 stays
        assert [s.offset for s in list_snapshots(plog.dir)] == [20]
    for drop_snapshots in (False, True):
        if drop_snapshots:  # the log alone (the empty batch) still knows the producer
            for s in list_snapshots(data / "kv-0"):
                s.delete()
        logs, producers = open_broker_state(data)
        with logs:
            plog = logs.get_log("kv", 0)
            end = plog.log_end_offset
            assert produce(plog, producers, idem(5, 5, ts, key=b"j")) == 5
            assert plog.log_end_offset == end


def test_a_corrupt_snapshot_is_ignored_with_a_warning_and_the_state_rebuilt_from_the_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    """Kafka's ``loadFromSnapshot``: ``CorruptSnapshotException`` -> warn, delete, go on."""
    data = tmp_path / "data"
    ts = now_ms()
    logs, producers = open_broker_state(data)
    with logs:
        logs.create_topic("ev", 1)
        plog = logs.get_log("ev", 0)
        produce(plog, producers, idem(0, 4, ts))
    (snap,) = list_snapshots(data / "ev-0")
    raw = bytearray(snap.path.read_bytes())
    raw[-1] ^= 0xFF
    snap.path.write_bytes(bytes(raw))
    logs, producers = open_broker_state(data)
    with logs, caplog.at_level(logging.WARNING):
        plog = logs.get_log("ev", 0)
        assert produce(plog, producers, idem(0, 4, ts)) == 0  # known from the log
        assert "CRC is no longer valid" in caplog.text
        assert plog.log_end_offset == 4
    assert [s.offset for s in list_snapshots(data / "ev-0")] == [4]  # a good one again
    ProducerSnapshotFile(data / "ev-0", 4).read()


def test_a_producer_idle_past_producer_id_expiration_ms_is_not_written(tmp_path: Path):
    """Kafka's ``isProducerExpired``: no open transaction and the last timestamp older
    than ``producer.id.expiration.ms``."""
    data = tmp_path / "data"
    logs, producers = open_broker_state(data)
    with logs:
        logs.create_topic(
            "ev", 1, {"message.timestamp.before.max.ms": str(2 * PRODUCER_ID_EXPIRATION_MS)}
        )
        plog = logs.get_log("ev", 0)
        produce(plog, producers, idem(0, 2, now_ms() - PRODUCER_ID_EXPIRATION_MS - 60_000))
        assert PID in producers.for_log(plog).entries
    (snap,) = list_snapshots(data / "ev-0")
    assert snap.read() == []


def test_an_open_transaction_whose_start_retention_deleted_holds_the_lso_after_restart(
    tmp_path: Path,
):
    """Kafka loads ``ongoingTxns`` from the snapshot's ``current_txn_first_offset``
    (``loadProducerEntry``): after a restart the last stable offset stays at the log
    start (``maybeIncrementFirstUnstableOffset`` never goes below it) until the marker,
    though the batches that opened the transaction are gone."""
    from kompakt.record.encode import build_control_batch
    from kompakt.record.header import CONTROL_COMMIT

    data = tmp_path / "data"
    old = now_ms() - 60_000
    logs, producers = open_broker_state(data)
    with logs:
        logs.create_topic("ev", 1, {"cleanup.policy": "delete", "retention.ms": "1000"})
        plog = logs.get_log("ev", 0)
        txn = build_simple_batch(
            [(b"a", b"1"), (b"b", b"2")],
            timestamp=old,
            producer_id=PID,
            producer_epoch=EPOCH,
            base_sequence=0,
            transactional=True,
        )
        produce(plog, producers, txn)  # 0-1, open
        plog.roll()
        produce(plog, producers, plain([(b"x", b"y")] * 3, now_ms()))  # 2-4
        assert logs.apply_retention() == 1
        assert (plog.log_start_offset, plog.last_stable_offset) == (2, 2)
    logs, producers = open_broker_state(data)
    with logs:
        plog = logs.get_log("ev", 0)
        assert plog.last_stable_offset == 2, "the open transaction was forgotten"
        plog.append(
            build_control_batch(
                CONTROL_COMMIT, producer_id=PID, producer_epoch=EPOCH, timestamp=now_ms()
            )
        )
        assert plog.last_stable_offset == plog.log_end_offset == 6


# -- end to end: confluent-kafka's idempotent producer and a restarted broker ------------


def test_confluent_idempotent_retry_after_delete_records_and_restart_is_a_duplicate(
    tmp_path: Path,
):
    """librdkafka (``enable.idempotence``) writes, DeleteRecords removes the segment with
    its batch, the broker restarts (a clean stop: the snapshot is on disk); a retry of
    that batch (the same producer id, epoch and sequences, sent raw as a client whose
    answer was lost would) gets the original's offset and is not appended again, and
    the producer goes on writing across the restart with no sequence error."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic
    from raw_kafka import API, call
    from shared_kit import free_port

    from kompakt.broker.app import start_test_broker

    port, topic, timeout = free_port(), "idem-snap", 10
    listeners = f"PLAINTEXT://127.0.0.1:{port}"
    b = start_test_broker(tmp_path / "data", listeners=listeners)
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        # a small segment.bytes: the next append after the producer's batch rolls
        new = NewTopic(topic, 1, 1, config={"segment.bytes": "100"})
        admin.create_topics([new])[topic].result(timeout)
        # linger.ms: the five records go as one batch even on a busy machine (flush sends)
        p = Producer(
            {"bootstrap.servers": b.bootstrap, "enable.idempotence": True, "linger.ms": 1000}
        )
        for i in range(5):
            p.produce(topic, b"v%d" % i, b"k%d" % i)
        assert p.flush(timeout) == 0
        plog = b.logs.get_log(topic, 0)
        original = plog.read(0, 1 << 20)
        h = header(original)
        assert h.producer_id >= 0 and (h.base_offset, h.last_offset) == (0, 4)
        other = Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": False})
        other.produce(topic, b"x", b"other")
        assert other.flush(timeout) == 0
        assert [s.base_offset for s in plog.segments_snapshot()] == [0, 5]
        end = plog.log_end_offset
        tp = TopicPartition(topic, 0, end)
        admin.delete_records([tp])[tp].result(timeout)
        assert plog.log_start_offset == end
        assert [s.base_offset for s in plog.segments_snapshot()] == [5], "its segment went"
        b.stop()
        b = start_test_broker(tmp_path / "data", listeners=listeners)
        body = {
            "acks": -1,
            "timeout": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": original}]}],
        }
        (part,) = call(b.port, API.produce, 9, body).responses[0].partition_responses
        assert (part.error_code, part.base_offset) == (0, 0), "the original's offset"
        assert b.logs.get_log(topic, 0).log_end_offset == end, "appended a second time"
        for i in range(5, 8):
            p.produce(topic, b"v%d" % i, b"k%d" % i)
        assert p.flush(timeout) == 0
        c = Consumer(
            {"bootstrap.servers": b.bootstrap, "group.id": "g", "auto.offset.reset": "earliest"}
        )
        c.assign([TopicPartition(topic, 0, end)])
        try:
            seen = [m.value() for m in consume_until(c, lambda out: len(out) >= 3, timeout)]
        finally:
            c.close()
        assert seen == [b"v5", b"v6", b"v7"]
    finally:
        b.stop()
