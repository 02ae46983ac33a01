"""A committed transactional record survives cleans whose segment groups split it from
its COMMIT marker (issue 25's data loss, found by a KafkaJS user).

Kafka's ``Cleaner.doClean`` carries ONE ``CleanedTransactionMetadata`` through every
``cleanSegments`` call of a clean: a COMMIT marker at the start of a group still knows the
transaction's data was read in the group before, so the marker is kept while that data
is (``onControlBatchRead``: a COMMIT is discardable only when no batch of its transaction
was read). kompakt built a fresh tracker per group: the marker looked empty, got its
delete horizon and went while the record stayed; when the producer's next transaction
aborted, a later clean took the committed record for aborted data.
"""

from __future__ import annotations

from pathlib import Path

from cleaner_kit import T0, ManualClock
from txn_kit import read_committed

from kompakt.cleaner import Cleaner, LocalEngine
from kompakt.log.manager import LogManager
from kompakt.record.encode import build_control_batch, build_simple_batch
from kompakt.record.header import CONTROL_ABORT, CONTROL_COMMIT

PID = 4242
CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": "1024",
    "delete.retention.ms": "0",
    "file.delete.delay.ms": "0",
    "min.cleanable.dirty.ratio": "0.01",
}


class Producer:
    """One transactional producer id writing straight into the partition's log."""

    def __init__(self, plog, clock):
        self.plog, self.clock, self.seq = plog, clock, 0

    def txn(self, items, commit: bool) -> None:
        self.plog.append(
            build_simple_batch(
                items,
                timestamp=self.clock(),
                producer_id=PID,
                producer_epoch=0,
                base_sequence=self.seq,
                transactional=True,
            )
        )
        self.seq += len(items)
        kind = CONTROL_COMMIT if commit else CONTROL_ABORT
        self.plog.append(
            build_control_batch(kind, producer_id=PID, producer_epoch=0, timestamp=self.clock())
        )


def run_repro(root: Path, engine) -> list[bytes]:
    clock = ManualClock(T0)
    m = LogManager(root, clock=clock)
    try:
        m.create_topic("t", 1, CONFIG)
        plog = m.get_log("t", 0)
        cleaner = Cleaner(m, engine=engine)
        p = Producer(plog, clock)
        p.txn([(b"keep", b"v" * 900)], commit=True)
        assert len(plog.segments) == 2, "the COMMIT marker starts segment 1"
        p.txn([(b"gone", b"x")], commit=False)
        for i in range(1, 5):
            p.txn([(b"c%d" % i, b"y")], commit=True)
            plog.roll()
            clock.advance(10)
            cleaner.clean_partition(plog)
        return [k for _o, k, _v in read_committed(plog)]
    finally:
        m.close()


def test_commit_marker_starting_a_group_keeps_its_record_local_engine(tmp_path: Path):
    assert run_repro(tmp_path / "d", LocalEngine(1 << 20)) == [b"keep", b"c1", b"c2", b"c3", b"c4"]


def test_commit_marker_starting_a_group_keeps_its_record_spark_engine(tmp_path: Path, spark):
    from kompakt.pipeline.engine import SparkEngine

    assert run_repro(tmp_path / "d", SparkEngine()) == [b"keep", b"c1", b"c2", b"c3", b"c4"]
