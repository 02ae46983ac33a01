"""The Spark source's plan for ``read_committed`` (no Spark needed): each range ends at
the partition's last stable offset and carries the aborted transactions overlapping it,
taken from the ``.txnindex`` files and the batches, as the broker's READ_COMMITTED
fetch (Kafka's ``collectAbortedTransactions``)."""

from __future__ import annotations

from pathlib import Path

from txn_kit import data, marker

from kompakt.log.manager import LogManager
from kompakt.log.txn_index import AbortedTxn
from kompakt.pipeline.layout import partition_dir
from kompakt.pipeline.plan import committed_view, plan_ranges
from kompakt.record.header import CONTROL_ABORT, CONTROL_COMMIT


def build(data_dir: Path, clock) -> None:
    with LogManager(data_dir, clock=clock) as logs:
        logs.create_topic("t", 1, {"segment.bytes": "150"})
        plog = logs.get_log("t", 0)
        plog.append(data(7, b"a" * 40))  # 0
        plog.append(data(8, b"b" * 40))  # 1
        plog.append(marker(7, CONTROL_ABORT))  # 2: 8 open -> LSO 1
        plog.append(marker(8, CONTROL_COMMIT))  # 3
        plog.append(data(9, b"c"))  # 4: left open
        plog.append(data(-1, b"plain", transactional=False))  # 5: past the LSO


def test_committed_view_is_the_lso_and_the_aborted_transactions(data_dir, clock) -> None:
    build(data_dir, clock)
    pdir = partition_dir(data_dir, "t", 0)
    assert committed_view(pdir) == (4, [AbortedTxn(7, 0, 2, 1)])
    for f in pdir.glob("*.txnindex"):  # a lost index: the batches still show the abort
        f.unlink()
    assert committed_view(pdir) == (4, [AbortedTxn(7, 0, 2, 1)])


def test_read_committed_ranges_stop_at_the_lso(data_dir, clock) -> None:
    build(data_dir, clock)
    ranges = plan_ranges({"path": str(data_dir), "subscribe": "t", "minPartitions": "3"})
    assert max(r.end for r in ranges) == 4
    assert {r.aborted for r in ranges if r.start <= 2} == {((7, 0, 2),)}
    raw = plan_ranges(
        {"path": str(data_dir), "subscribe": "t", "kafka.isolation.level": "read_uncommitted"}
    )
    assert max(r.end for r in raw) == 6 and all(r.aborted == () for r in raw)
