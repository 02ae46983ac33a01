"""Idempotent producer state outlives retention (KIP-360): a batch retried after a
restart is still a duplicate when retention deleted its original's segment in between.

Found by the fault campaign (CI, seed 551445763): a batch appended just before a
SIGKILL was retried after the restart, retention had meanwhile deleted the segment
holding the original, the lazily built state no longer knew the producer, and the retry
was appended a second time, 22 offsets later (the producer was told the later offset).
"""

from __future__ import annotations

import time
from pathlib import Path

from kompakt.broker.producers import ProducerStateManager
from kompakt.log.manager import LogManager
from kompakt.record.decode import iter_batches
from kompakt.record.encode import build_simple_batch

PID, EPOCH = 4242, 0


def _batch(first_seq: int, n: int, ts: int) -> bytes:
    items = [(b"k%d" % (first_seq + i), b"v%d" % (first_seq + i)) for i in range(n)]
    return build_simple_batch(
        items, timestamp=ts, producer_id=PID, producer_epoch=EPOCH, base_sequence=first_seq
    )


def _header(data: bytes):
    (b,) = list(iter_batches(data))
    return b.header


def _restart(data: Path) -> tuple[LogManager, ProducerStateManager]:
    logs = LogManager(data)
    producers = ProducerStateManager(data)
    logs.batch_removal_listeners.append(producers.for_log)
    return logs, producers


def test_a_retried_batch_is_a_duplicate_after_retention_deleted_its_segment(tmp_path: Path):
    data = tmp_path / "data"
    old = int(time.time() * 1000) - 60_000
    with LogManager(data) as logs:
        logs.create_topic("ev", 1, {"cleanup.policy": "delete", "retention.ms": "1000"})
        plog = logs.get_log("ev", 0)
        plog.append(_batch(0, 10, old))  # offsets 0-9, the original
        plog.roll()
        # offsets 10-14, kept: another client's records (the producer's last batch was
        # the one in the deleted segment, as after the crash in the campaign)
        plog.append(build_simple_batch([(b"x", b"y")] * 5, timestamp=int(time.time() * 1000)))
    logs, producers = _restart(data)  # state not built yet, as after a restart
    with logs:
        plog = logs.get_log("ev", 0)
        assert logs.apply_retention() == 1  # the original's segment is gone
        assert plog.log_start_offset == 10
        # the producer retries its batch of sequences 0-9 (its answer was lost)
        original = producers.for_log(plog).check(_header(_batch(0, 10, old)))
        assert original is not None, "the retry would be appended a second time"
        assert (original.first_offset, original.last_offset) == (0, 9)


def test_without_a_listener_the_state_would_be_lost(tmp_path: Path):
    """The same steps without the hook: the state built after the deletion does not
    know the producer (what the hook prevents)."""
    data = tmp_path / "data"
    old = int(time.time() * 1000) - 60_000
    with LogManager(data) as logs:
        logs.create_topic("ev", 1, {"cleanup.policy": "delete", "retention.ms": "1000"})
        plog = logs.get_log("ev", 0)
        plog.append(_batch(0, 10, old))
        plog.roll()
        plog.append(build_simple_batch([(b"x", b"y")] * 5, timestamp=int(time.time() * 1000)))
    with LogManager(data) as logs:
        producers = ProducerStateManager(data)
        plog = logs.get_log("ev", 0)
        assert logs.apply_retention() == 1
        assert producers.for_log(plog).check(_header(_batch(0, 10, old))) is None


def _keyed_batch(first_seq: int, keys: list[bytes], ts: int) -> bytes:
    return build_simple_batch(
        [(k, b"%s-%d" % (k, first_seq)) for k in keys],
        timestamp=ts,
        producer_id=PID,
        producer_epoch=EPOCH,
        base_sequence=first_seq,
    )


def test_a_retried_batch_is_a_duplicate_after_a_clean_removed_its_original(tmp_path: Path):
    """Kafka builds producer state at load, before any clean; kompakt builds it on first
    use, so a clean's swap first lets the broker build it from the batches it removes.

    Found by the 1,000-fault campaign (seed 112526): two batches of one producer were
    appended just before a SIGKILL, their answers lost; after the restart the
    background cleaner removed the first (its keys overwritten by the second) before the
    producer's retry arrived, the state built then knew only the second batch, and the
    retry of the first was appended again, 7 offsets later."""
    from kompakt.cleaner import Cleaner, LocalEngine

    data = tmp_path / "data"
    now = int(time.time() * 1000)
    keys = [b"a", b"b", b"c"]
    with LogManager(data) as logs:
        logs.create_topic("kv", 1, {"cleanup.policy": "compact", "min.compaction.lag.ms": "0"})
        plog = logs.get_log("kv", 0)
        plog.append(_keyed_batch(0, keys, now))  # offsets 0-2: the first batch
        plog.append(_keyed_batch(3, keys, now))  # offsets 3-5: overwrites every key
        plog.roll()  # both sealed: cleanable
        plog.append(build_simple_batch([(b"z", b"z")], timestamp=now))
    logs, producers = _restart(data)  # the state is not built yet
    with logs:
        plog = logs.get_log("kv", 0)
        report = Cleaner(logs, engine=LocalEngine(1 << 20)).compact_now("kv", 0)
        assert report.results[0].status == "cleaned", report
        remaining = [b.header.base_offset for s in plog.segments for b in s.iter_batches()]
        assert 0 not in remaining  # the first batch is gone from the log
        # the producer retries the first batch (sequences 0-2): a duplicate, answered
        # with the original's offsets, not appended again
        original = producers.for_log(plog).check(_header(_keyed_batch(0, keys, now)))
        assert original is not None, "the retry would be appended a second time"
        assert (original.first_offset, original.last_offset) == (0, 2)
