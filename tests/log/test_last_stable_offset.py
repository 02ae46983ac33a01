"""The last stable offset and the aborted transactions of one partition (Kafka's
``ProducerStateManager.firstUnstableOffset`` and ``TransactionIndex`` entries), from
batches appended to a real :class:`~kompakt.log.partition_log.PartitionLog`."""

from __future__ import annotations

from txn_kit import TS, data, marker

from kompakt.log.manager import LogManager
from kompakt.log.transactions import AbortedTxn
from kompakt.record.encode import build_simple_batch
from kompakt.record.header import CONTROL_ABORT, CONTROL_COMMIT


def test_lso_is_the_first_offset_of_the_earliest_open_transaction(manager: LogManager) -> None:
    manager.create_topic("t", 1, {})
    plog = manager.get_log("t", 0)
    plog.append(build_simple_batch([(b"k", b"plain")], timestamp=TS))  # 0
    assert plog.last_stable_offset == 1 == plog.high_watermark
    plog.append(data(7, b"a", b"b"))  # 1-2: producer 7 opens at 1
    plog.append(data(8, b"c"))  # 3: producer 8 opens at 3
    plog.append(data(7, b"d"))  # 4: still 7's transaction from 1
    assert (plog.last_stable_offset, plog.high_watermark) == (1, 5)
    plog.append(marker(7, CONTROL_COMMIT))  # 5
    assert plog.last_stable_offset == 3
    plog.append(marker(8, CONTROL_ABORT))  # 6
    assert plog.last_stable_offset == 7 == plog.high_watermark


def test_aborted_transactions_overlapping_a_fetch_range(manager: LogManager) -> None:
    manager.create_topic("t", 1, {})
    plog = manager.get_log("t", 0)
    plog.append(data(7, b"a"))  # 0
    plog.append(data(8, b"b"))  # 1
    plog.append(marker(7, CONTROL_ABORT))  # 2: LSO then 1 (8 still open)
    plog.append(marker(8, CONTROL_COMMIT))  # 3
    plog.append(data(9, b"c"))  # 4
    plog.append(marker(9, CONTROL_ABORT))  # 5
    collect = plog.collect_aborted_transactions
    assert collect(0, 6) == [AbortedTxn(7, 0, 2, 1), AbortedTxn(9, 4, 5, 6)]
    assert collect(3, 6) == [AbortedTxn(9, 4, 5, 6)]
    assert collect(0, 4) == [AbortedTxn(7, 0, 2, 1)]


def test_a_restart_rebuilds_the_open_transactions_from_the_log(tmp_path, clock) -> None:
    m = LogManager(tmp_path / "data", clock=clock)
    m.create_topic("t", 1, {})
    m.get_log("t", 0).append(data(7, b"a"))
    m.get_log("t", 0).append(data(-1, b"plain", transactional=False))
    m.close()
    m = LogManager(tmp_path / "data", clock=clock)
    try:
        plog = m.get_log("t", 0)
        assert (plog.last_stable_offset, plog.high_watermark) == (0, 2)
        plog.append(marker(7, CONTROL_ABORT))
        assert plog.last_stable_offset == 3
        assert plog.collect_aborted_transactions(0, 3) == [AbortedTxn(7, 0, 2, 3)]
    finally:
        m.close()


def test_tracking_across_segments_reads_on_from_where_it_stopped(manager: LogManager) -> None:
    """Every batch its own segment: the tracker goes on from the segment holding its
    next offset, never losing a transaction opened in an earlier one."""
    manager.create_topic("t", 1, {"segment.bytes": "100"})
    plog = manager.get_log("t", 0)
    plog.append(data(7, b"a" * 80))  # 0
    assert plog.last_stable_offset == 0
    plog.append(data(8, b"b" * 80))  # 1
    plog.append(build_simple_batch([(b"k", b"c" * 80)], timestamp=TS))  # 2
    assert len(plog.segments) >= 3
    assert plog.last_stable_offset == 0
    plog.append(marker(7, CONTROL_ABORT))  # 3
    assert plog.last_stable_offset == 1
    plog.append(marker(8, CONTROL_ABORT))  # 4
    assert plog.last_stable_offset == 5
    assert plog.collect_aborted_transactions(2, 5) == [
        AbortedTxn(7, 0, 3, 1),
        AbortedTxn(8, 1, 4, 5),
    ]
