"""The Spark engine's group starting states (``segment_io.tracker_states``: Kafka's
``Cleaner.doClean`` carries one ``CleanedTransactionMetadata`` through every group)
read only segments that hold transactional batches or markers, and decide every later
batch as a pass through every segment does. Real logs, no Spark."""

from __future__ import annotations

from txn_kit import TS, data, marker

from kompakt.cleaner.segment_io import segment_buffer, tracker_states
from kompakt.cleaner.transactions import control_type_of
from kompakt.log.manager import LogManager
from kompakt.record.header import CONTROL_ABORT, CONTROL_BIT, CONTROL_COMMIT, TRANSACTIONAL_BIT
from kompakt.record.scan import scan_batch_headers


def plain(*values: bytes) -> bytes:
    return data(-1, *values, transactional=False)


def write(plog) -> None:
    """Transactions that span segments and groups, with segments of plain batches
    between them: 7 aborts across a plain segment, 8 commits across two."""
    for batch in (
        [plain(b"a")],
        [data(7, b"x"), data(8, b"y")],
        [plain(b"b"), plain(b"c")],
        [plain(b"d")],
        [marker(7, CONTROL_ABORT), plain(b"e")],
        [plain(b"f")],
        [marker(8, CONTROL_COMMIT), data(9, b"z")],
        [marker(9, CONTROL_ABORT)],
    ):
        for b in batch:
            plog.append(b)
        plog.roll()


def decisions(groups, aborted) -> list[list[bool]]:
    """Per group, what its starting state decides of each of its batches, as a Spark
    task's rewrite asks it (``onBatchRead``: aborted data; ``onControlBatchRead``: a
    marker that may go)."""
    out = []
    for group, txn in zip(groups, tracker_states(groups, aborted), strict=True):
        said: list[bool] = []
        for seg in group:
            buf = segment_buffer(seg.log_path, seg.size)
            h = scan_batch_headers(buf)
            for i in range(len(h.position)):
                pid, last = int(h.producer_id[i]), int(h.last_offset[i])
                if h.attributes[i] & CONTROL_BIT:
                    pos, n = int(h.position[i]), int(h.size[i])
                    said.append(
                        txn.on_control_batch(pid, last, control_type_of(buf[pos : pos + n]))
                    )
                else:
                    said.append(txn.on_batch(pid, last, bool(h.attributes[i] & TRANSACTIONAL_BIT)))
        out.append(said)
    return out


def test_group_states_skip_segments_without_transactions_and_decide_the_same(tmp_path, clock):
    clock.now = TS
    m = LogManager(tmp_path / "data", clock=clock)
    m.create_topic("t", 1, {})
    write(m.get_log("t", 0))
    m.close()
    m = LogManager(tmp_path / "data", clock=clock)  # a restart: no segment knows yet
    try:
        plog = m.get_log("t", 0)
        segments = [s for s in plog.segments_snapshot() if s.size]
        groups = [segments[i : i + 1] for i in range(len(segments))]
        aborted = plog.collect_aborted_transactions(0, plog.log_end_offset)
        assert [s.holds_txn_batches for s in segments] == [None] * len(segments)
        first = decisions(groups, aborted)  # reads every segment but the last
        known = [s.holds_txn_batches for s in segments[:-1]]
        assert known == [False, True, False, False, True, False, True]
        away = [s.log_path for s in segments if s.holds_txn_batches is False]
        for path in away:  # skipped from now on: their bytes are not needed
            path.rename(path.with_name(path.name + ".away"))
        states = tracker_states(groups, aborted)
        for path in away:
            path.with_name(path.name + ".away").rename(path)
        assert len(states) == len(groups)
        assert decisions(groups, aborted) == first
        # 7's data is aborted; its ABORT marker stays (data read in this pass), 8's
        # COMMIT stays (its data was read two groups before), 9's data is aborted
        assert first[1] == [True, False]
        assert first[4] == [False, False] and first[6] == [False, True] and first[7] == [False]
    finally:
        m.close()
