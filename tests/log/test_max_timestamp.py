"""ListOffsets MAX_TIMESTAMP (-3) finds the record, not its batch (KAFKA-16310, Kafka 3.8).

Kafka's segment keeps the *batch* (shallow) offset of its largest timestamp, as its time
index does; ``UnifiedLog.fetchOffsetByTimestamp`` then reads the first batch whose
maxTimestamp matches and answers ``RecordBatch.offsetOfMaxTimestamp``: the first record
holding that timestamp. These tests hold kompakt to that across reopen, index
recovery, compression, LogAppendTime and a clean.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from manual_clock import T0, ManualClock

from kompakt.cleaner.cleaner import Cleaner
from kompakt.log.manager import LogManager
from kompakt.record import codecs
from kompakt.record.decode import Record
from kompakt.record.encode import build_batch


def batch_of(*stamps: tuple[bytes, int], codec: int = codecs.NONE, **kw) -> bytes:
    recs = [Record(i, ts, key, b"v", []) for i, (key, ts) in enumerate(stamps)]
    return build_batch(recs, compression=codec, **kw)


@pytest.mark.parametrize("codec", [codecs.NONE, codecs.ZSTD])
def test_max_timestamp_answers_the_record_holding_it_not_the_batch_end(manager, codec):
    """KAFKA-16310: records at T0, T0+9, T0+2 in one batch -> offset 1, not 2."""
    manager.create_topic("t", 1)
    plog = manager.get_log("t", 0)
    plog.append(batch_of((b"a", T0), (b"b", T0 + 9), (b"c", T0 + 2), codec=codec))
    assert plog.max_timestamp_offset() == (1, T0 + 9)


def test_max_timestamp_tie_answers_the_first_record_and_first_batch(manager):
    """RecordBatch.offsetOfMaxTimestamp returns the earliest record of the tie, and the
    segment keeps the first batch reaching the max (strictly greater replaces it)."""
    manager.create_topic("t", 1)
    plog = manager.get_log("t", 0)
    plog.append(batch_of((b"a", T0), (b"b", T0 + 5), (b"c", T0 + 5), (b"d", T0 + 1)))
    plog.append(batch_of((b"e", T0 + 5), (b"f", T0 + 3)))
    assert plog.max_timestamp_offset() == (1, T0 + 5)


def test_max_timestamp_of_log_append_time_batch_is_its_first_record(manager, clock):
    """LogAppendTime: every record carries the batch's append time, so the first one."""
    manager.create_topic("t", 1, {"message.timestamp.type": "LogAppendTime"})
    plog = manager.get_log("t", 0)
    plog.append(batch_of((b"a", T0), (b"b", T0)))
    clock.advance(10)
    plog.append(batch_of((b"c", T0), (b"d", T0 + 3), (b"e", T0)))
    assert plog.max_timestamp_offset() == (2, clock.now)


def test_max_timestamp_record_survives_reopen_and_index_rebuild(
    data_dir: Path, clock: ManualClock
) -> None:
    """After a restart (lazy segments: the time index's last entry) and after the
    indexes are rebuilt from the .log (Kafka's LogSegment.recover), the same record."""
    m = LogManager(data_dir, clock=clock)
    m.create_topic("t", 1, {"index.interval.bytes": "1"})
    plog = m.get_log("t", 0)
    for i in range(20):
        top = T0 + 100 if i == 7 else T0 + i
        plog.append(batch_of((b"x", T0 + i), (b"y", top), (b"z", T0 + i)))
    plog.roll()
    plog.append(batch_of((b"w", T0 + 50)))
    want = (7 * 3 + 1, T0 + 100)
    assert plog.max_timestamp_offset() == want
    m.close()
    m = LogManager(data_dir, clock=clock)
    assert m.get_log("t", 0).max_timestamp_offset() == want
    m.close()
    for p in (data_dir / "t-0").glob("*index"):
        p.unlink()
    m = LogManager(data_dir, clock=clock)
    assert m.get_log("t", 0).max_timestamp_offset() == want
    m.close()


def test_max_timestamp_after_a_clean_is_the_record_the_clean_kept(manager):
    """A clean rewrites the batch without the superseded record that held the max; the
    answer is then the largest timestamp among the records kept, at its own offset."""
    manager.create_topic("t", 1, {"cleanup.policy": "compact"})
    plog = manager.get_log("t", 0)
    plog.append(batch_of((b"k1", T0 + 9), (b"k2", T0 + 1), (b"k3", T0 + 4)))  # 0..2
    plog.append(batch_of((b"k1", T0 + 2)))  # 3: supersedes offset 0
    plog.roll()
    plog.append(batch_of((b"k4", T0)))
    assert plog.max_timestamp_offset() == (0, T0 + 9)
    Cleaner(manager).clean_partition(plog, force=True)
    assert 0 not in {r.offset for b in plog.iter_batches() for r in b.records()}
    assert plog.max_timestamp_offset() == (2, T0 + 4)
