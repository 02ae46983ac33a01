"""``.txnindex``: Kafka's ``TransactionIndex`` of aborted transactions, one per segment.

Format (Kafka's ``AbortedTxn``): 34-byte big-endian entries ``version int16 = 0 |
producerId int64 | firstOffset int64 | lastOffset int64 | lastStableOffset int64``,
appended when an ABORT marker is appended, in the file of the segment the marker went
to, created lazily. Derived data like the other indexes: rebuilt at recovery, when torn,
when missing; deleted and renamed with its segment; the cleaner copies the entries of the
ABORT markers it keeps (``CleanedTransactionMetadata.onControlBatchRead``).
"""

from __future__ import annotations

import struct
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from manual_clock import ManualClock
from txn_kit import TS, data, marker

from kompakt.cleaner.cleaner import Cleaner
from kompakt.log.manager import CLEAN_SHUTDOWN_FILE, LogManager
from kompakt.log.txn_index import (
    AbortedTxn,
    TransactionIndex,
    aborted_by_producer,
    consumer_records,
)
from kompakt.record.encode import build_simple_batch
from kompakt.record.header import CONTROL_ABORT, CONTROL_COMMIT

KAFKA_ENTRY = struct.Struct(">hqqqq")  # written here from AbortedTxn.java, not imported


def read_kafka_txnindex(path: Path) -> list[tuple[int, int, int, int]]:
    """An independent reader: (producerId, firstOffset, lastOffset, lastStableOffset)."""
    raw = path.read_bytes()
    assert len(raw) % 34 == 0
    out = []
    for pos in range(0, len(raw), 34):
        version, pid, first, last, lso = KAFKA_ENTRY.unpack_from(raw, pos)
        assert version == 0
        out.append((pid, first, last, lso))
    return out


def txnindex_files(part: Path) -> list[str]:
    return sorted(p.name for p in part.iterdir() if ".txnindex" in p.name)


def test_abort_marker_appends_one_kafka_aborted_txn_entry(manager: LogManager) -> None:
    """Kafka ``UnifiedLog.append`` -> ``LogSegment.updateTxnIndex``: an ABORT marker
    appends (producerId, firstOffset, lastOffset = marker, lastStableOffset); a COMMIT
    writes nothing, and the file exists only once there is an entry (created lazily)."""
    manager.create_topic("t", 1, {})
    plog = manager.get_log("t", 0)
    plog.append(data(7, b"a", b"b"))  # 0-1: 7 opens at 0
    plog.append(data(8, b"c"))  # 2: 8 opens at 2
    plog.append(marker(8, CONTROL_COMMIT))  # 3
    assert txnindex_files(plog.dir) == []
    plog.append(marker(7, CONTROL_ABORT))  # 4: nothing else open -> LSO 5
    plog.append(data(9, b"d"))  # 5
    plog.append(data(10, b"e"))  # 6
    plog.append(marker(9, CONTROL_ABORT))  # 7: 10 still open at 6 -> LSO 6
    path = plog.dir / "00000000000000000000.txnindex"
    assert txnindex_files(plog.dir) == [path.name]
    assert path.stat().st_size == 2 * 34
    assert read_kafka_txnindex(path) == [(7, 0, 4, 5), (9, 5, 7, 6)]


def test_collect_aborted_reads_on_to_the_segment_of_the_marker(manager: LogManager) -> None:
    """Kafka ``LocalLog.collectAbortedTransactions``: from the segment holding the fetch
    offset on, until an entry's lastStableOffset reaches the upper bound; an abort whose
    data starts in one segment and whose marker is in a later one is found."""
    manager.create_topic("t", 1, {"segment.bytes": "100"})
    plog = manager.get_log("t", 0)
    plog.append(data(7, b"a" * 80))  # 0
    plog.append(build_simple_batch([(b"k", b"b" * 80)], timestamp=TS))  # 1
    plog.append(marker(7, CONTROL_ABORT))  # 2
    assert len(plog.segments) == 3
    assert plog.collect_aborted_transactions(0, 2) == [AbortedTxn(7, 0, 2, 3)]
    # overlap, not containment: lastOffset >= fetchOffset and firstOffset < upperBound
    assert plog.collect_aborted_transactions(1, 2) == [AbortedTxn(7, 0, 2, 3)]
    assert plog.collect_aborted_transactions(0, 0) == []
    assert plog.collect_aborted_transactions(2, 3) == [AbortedTxn(7, 0, 2, 3)]
    assert read_kafka_txnindex(plog.segments[2].txn_index.path) == [(7, 0, 2, 3)]


def build(m: LogManager, topic: str = "t"):
    m.create_topic(topic, 1, {})
    plog = m.get_log(topic, 0)
    plog.append(data(7, b"a"))  # 0
    plog.append(data(8, b"b"))  # 1
    plog.append(marker(7, CONTROL_ABORT))  # 2: LSO 1
    plog.append(marker(8, CONTROL_ABORT))  # 3: LSO 4
    plog.append(data(9, b"c"))  # 4: left open
    return plog


def reopen(data_dir: Path, clock: ManualClock, clean: bool = True) -> LogManager:
    if not clean:
        (data_dir / CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)
    return LogManager(data_dir, clock=clock)


def test_missing_txnindex_is_rebuilt_at_open(data_dir: Path, clock: ManualClock) -> None:
    """Derived data: a lost ``.txnindex`` comes back from the segment's batches, and the
    open transaction (producer 9 at 4) is found again, so the LSO holds at 4."""
    m = LogManager(data_dir, clock=clock)
    plog = build(m)
    path = plog.segments[0].txn_index.path
    before = path.read_bytes()
    m.close()
    path.unlink()
    m = reopen(data_dir, clock)
    try:
        plog = m.get_log("t", 0)
        assert path.read_bytes() == before
        assert read_kafka_txnindex(path) == [(7, 0, 2, 1), (8, 1, 3, 4)]
        assert (plog.last_stable_offset, plog.high_watermark) == (4, 5)
    finally:
        m.close()


def test_torn_txnindex_tail_is_rebuilt_at_open(data_dir: Path, clock: ManualClock) -> None:
    """A size that is not a multiple of 34 (Kafka's sanityCheck: "last entry is not
    complete") is rebuilt rather than read short."""
    m = LogManager(data_dir, clock=clock)
    path = build(m).segments[0].txn_index.path
    before = path.read_bytes()
    m.close()
    path.write_bytes(before[:-5])
    m = reopen(data_dir, clock)
    try:
        m.get_log("t", 0)
        assert path.read_bytes() == before
    finally:
        m.close()


def test_unclean_shutdown_rebuilds_txnindex_without_truncated_markers(
    data_dir: Path, clock: ManualClock
) -> None:
    """Kafka ``LogSegment.recover`` rebuilds the txn index with the producer state: an
    ABORT marker cut off by a torn log tail leaves no entry, and its transaction is
    open again (the LSO falls back to its first offset)."""
    m = LogManager(data_dir, clock=clock)
    m.create_topic("t", 1, {})
    plog = m.get_log("t", 0)
    plog.append(data(7, b"a"))  # 0
    plog.append(marker(7, CONTROL_ABORT))  # 1
    plog.append(data(8, b"b"))  # 2
    plog.append(marker(8, CONTROL_ABORT))  # 3
    seg = plog.segments[0]
    log_path, idx_path = seg.log_path, seg.txn_index.path
    assert read_kafka_txnindex(idx_path) == [(7, 0, 1, 2), (8, 2, 3, 4)]
    m.close()
    raw = log_path.read_bytes()
    log_path.write_bytes(raw[:-3])  # tear the last marker
    m = reopen(data_dir, clock, clean=False)
    try:
        plog = m.get_log("t", 0)
        assert plog.log_end_offset == 3
        assert read_kafka_txnindex(idx_path) == [(7, 0, 1, 2)]
        assert plog.last_stable_offset == 2
        plog.append(marker(8, CONTROL_ABORT))  # 3 again
        assert read_kafka_txnindex(idx_path) == [(7, 0, 1, 2), (8, 2, 3, 4)]
    finally:
        m.close()


def test_txnindex_is_deleted_with_its_segment(manager: LogManager) -> None:
    """Kafka ``LocalLog.deleteSegmentFiles``: every file of the segment, the
    ``.txnindex`` too, goes through ``.deleted`` and away."""
    manager.create_topic("t", 1, {"segment.bytes": "100", "file.delete.delay.ms": "0"})
    plog = manager.get_log("t", 0)
    plog.append(data(7, b"a" * 80))  # 0
    plog.append(marker(7, CONTROL_ABORT))  # 1 (segment 1)
    plog.append(build_simple_batch([(b"k", b"b" * 80)], timestamp=TS))  # 2
    plog.append(build_simple_batch([(b"k", b"c" * 80)], timestamp=TS))  # 3
    assert txnindex_files(plog.dir) == ["00000000000000000001.txnindex"]
    seg = plog.segments[1]
    assert seg.base_offset == 1 and seg.txn_index.path in seg.files()
    plog.delete_records_before(3)  # file.delete.delay.ms=0: .deleted, then unlinked
    assert txnindex_files(plog.dir) == []
    assert plog.collect_aborted_transactions(3, 4) == []


def test_cleaner_keeps_the_aborted_txn_of_a_kept_abort_marker(
    data_dir: Path, clock: ManualClock
) -> None:
    """Kafka's cleaner: aborted data is removed, its ABORT marker kept while this pass
    saw the transaction's batches, and that marker's ``AbortedTxn`` is appended to the
    cleaned segment's index; the old segments' ``.txnindex`` files go with them."""
    m = LogManager(data_dir, clock=clock)
    m.create_topic(
        "t", 1, {"cleanup.policy": "compact", "segment.bytes": "200", "file.delete.delay.ms": "0"}
    )
    plog = m.get_log("t", 0)
    plog.append(data(7, b"x" * 40, key=b"a"))  # 0 aborted
    plog.append(marker(7, CONTROL_ABORT))  # 1
    plog.append(data(-1, b"y" * 60, key=b"b", transactional=False))  # 2
    plog.append(data(-1, b"z" * 60, key=b"b", transactional=False))  # 3
    plog.append(data(-1, b"w" * 60, key=b"c", transactional=False))  # 4
    assert len(plog.segments) >= 3
    assert plog.collect_aborted_transactions(0, 5) == [AbortedTxn(7, 0, 1, 2)]
    Cleaner(m).clean_partition(plog)
    first = plog.segments[0]
    assert first.base_offset == 0
    records = {r.offset for b in plog.iter_batches() for r in b.records()}
    assert 0 not in records and 1 in records  # aborted data gone, its marker kept
    assert read_kafka_txnindex(first.txn_index.path) == [(7, 0, 1, 2)]
    assert not [n for n in txnindex_files(plog.dir) if n.endswith((".cleaned", ".swap"))]
    m.close()
    m = reopen(data_dir, clock)
    try:
        plog = m.get_log("t", 0)
        assert plog.collect_aborted_transactions(0, 5) == [AbortedTxn(7, 0, 1, 2)]
    finally:
        m.close()


def test_change_suffix_renames_the_txnindex(tmp_path: Path) -> None:
    """The swap protocol (.cleaned -> .swap -> live) moves the ``.txnindex`` with its
    ``.log``; a segment without one renames nothing."""
    idx = TransactionIndex(tmp_path / "00000000000000000000.txnindex.cleaned", 0)
    idx.rename(tmp_path / "00000000000000000000.txnindex.swap")  # no file yet: fine
    idx.append(AbortedTxn(1, 0, 3, 4))
    idx.rename(tmp_path / "00000000000000000000.txnindex")
    assert txnindex_files(tmp_path) == ["00000000000000000000.txnindex"]
    assert read_kafka_txnindex(idx.path) == [(1, 0, 3, 4)]


def test_entries_must_come_in_marker_order(tmp_path: Path) -> None:
    """Kafka's ``TransactionIndex.append`` refuses a lastOffset that does not increase;
    the file is unchanged."""
    idx = TransactionIndex(tmp_path / "00000000000000000000.txnindex", 0)
    idx.append(AbortedTxn(1, 0, 3, 4))
    try:
        idx.append(AbortedTxn(2, 1, 3, 4))
    except ValueError as exc:
        assert "must increase" in str(exc)
    else:
        raise AssertionError("an out-of-order entry was accepted")
    assert read_kafka_txnindex(idx.path) == [(1, 0, 3, 4)]


# -- property: the index always equals the aborted transactions of its segment ----------

OPS = st.lists(
    st.tuples(st.sampled_from(["data", "commit", "abort", "plain", "roll"]), st.integers(1, 3)),
    max_size=30,
)


def model_aborts(ops: list[tuple[str, int]]) -> list[tuple[int, int, int, int]]:
    """Kafka's rule, from the ops alone: a producer's transaction opens at its first
    data batch, an ABORT closes it with LSO = earliest other open first offset, else the
    marker + 1; a marker with no open transaction is ignored."""
    offset, open_, out = 0, {}, []
    for op, pid in ops:
        if op == "roll":
            continue
        if op == "data":
            open_.setdefault(pid, offset)
        elif op in ("commit", "abort"):
            first = open_.pop(pid, None)
            if op == "abort" and first is not None:
                out.append((pid, first, offset, min(open_.values(), default=offset + 1)))
        offset += 1
    return out


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=OPS, lose=st.sampled_from(["none", "files", "unclean"]))
def test_index_entries_are_the_aborted_transactions_of_each_segment(
    tmp_path_factory, ops: list[tuple[str, int]], lose: str
) -> None:
    """After any appends and rolls, the ``.txnindex`` files (read by the independent
    reader, in segment order) hold exactly the model's aborted transactions, each in the
    segment of its marker; the same after a reopen that lost every ``.txnindex`` or
    followed an unclean shutdown."""
    data_dir = tmp_path_factory.mktemp("prop") / "data"
    clock = ManualClock()
    m = LogManager(data_dir, clock=clock)
    m.create_topic("t", 1, {})
    plog = m.get_log("t", 0)
    marker_segment = {}
    for op, pid in ops:
        if op == "roll":
            plog.roll()
            continue
        if op == "data":
            info = plog.append(data(pid, b"v"))
        elif op == "plain":
            info = plog.append(data(-1, b"v", transactional=False))
        else:
            kind = CONTROL_ABORT if op == "abort" else CONTROL_COMMIT
            info = plog.append(marker(pid, kind))
        marker_segment[info.first_offset] = plog.active_segment.base_offset

    def on_disk(part: Path) -> dict[int, list]:
        got: dict[int, list] = {}
        for p in sorted(part.glob("*.txnindex")):
            got[int(p.name.split(".")[0])] = read_kafka_txnindex(p)
        return got

    want_list = model_aborts(ops)
    want: dict[int, list] = {}
    for e in want_list:
        want.setdefault(marker_segment[e[2]], []).append(e)
    assert on_disk(plog.dir) == want
    part = plog.dir
    m.close()
    if lose == "files":
        for p in part.glob("*.txnindex"):
            p.unlink()
    m = reopen(data_dir, clock, clean=lose != "unclean")
    try:
        plog = m.get_log("t", 0)
        assert on_disk(part) == want
        n = plog.log_end_offset
        got = plog.collect_aborted_transactions(0, n)
        assert [
            (a.producer_id, a.first_offset, a.last_offset, a.last_stable_offset) for a in got
        ] == want_list
    finally:
        m.close()


def test_a_commit_marker_in_another_group_stays_with_its_data_and_goes_after_it(
    data_dir: Path,
) -> None:
    """Kafka's cleaner carries one ``CleanedTransactionMetadata`` through every segment
    group of a clean, so a COMMIT marker in a later group than its transaction's data
    is kept while that data is (``onControlBatchRead``); once a later record of the key
    supersedes the data and its producer expires, the marker gets its delete horizon
    and goes after it. Neither
    a clean nor a restart opens a transaction: the LSO is not held back."""
    now = [TS]
    cfg = {
        "cleanup.policy": "compact",
        "segment.bytes": "600",
        "delete.retention.ms": "1000",
        "file.delete.delay.ms": "0",
    }
    pad = b"x" * 380
    m = LogManager(data_dir, clock=lambda: now[0])
    m.create_topic("t", 1, cfg)
    plog = m.get_log("t", 0)
    plog.append(data(-1, b"v0", transactional=False))  # 0
    plog.append(data(9, b"v1"))  # 1: committed at 3, in another segment
    plog.append(data(-1, pad, key=b"pad1", transactional=False))  # 2
    plog.roll()
    plog.append(marker(9, CONTROL_COMMIT))  # 3
    plog.append(data(-1, pad, key=b"pad2", transactional=False))  # 4
    plog.roll()
    cleaner = Cleaner(m)

    def clean_later(ms: int) -> list[tuple[int, bool]]:
        now[0] += ms
        assert cleaner.clean_partition(plog) is not None
        return [(b.header.base_offset, b.header.is_control) for b in plog.iter_batches()]

    for ms in (10_000, 5_000):  # past any horizon: the data stays, so does its marker
        plog.append(data(-1, b"v", key=b"other", transactional=False))  # something dirty
        plog.roll()
        kept = clean_later(ms)
        assert (1, False) in kept and (3, True) in kept
    plog.append(data(-1, b"v2", transactional=False))  # 7: supersedes the committed v1
    plog.roll()
    kept = clean_later(10)
    # v1 is gone; its batch stays, empty, as producer 9's last (Kafka's RETAIN_EMPTY),
    # and a read transactional batch keeps its marker
    assert 1 not in [r.offset for b in plog.iter_batches() for r in b.records()]
    assert (3, True) in kept
    # once producer 9 expires (producer.id.expiration.ms, a day) its batch goes; the
    # clean after that stamps the marker's horizon, the one past it removes it
    for ms in (86_400_001, 10, 2_000):
        plog.append(data(-1, b"v", key=b"other", transactional=False))
        plog.roll()
        kept = clean_later(ms)
    assert (3, True) not in kept
    end = plog.high_watermark
    assert plog.last_stable_offset == end
    m.close()
    m = LogManager(data_dir, clock=lambda: now[0])
    try:
        plog = m.get_log("t", 0)
        assert plog.last_stable_offset == plog.high_watermark == end
    finally:
        m.close()


def cleaned_with_kept_abort(data_dir: Path, clock: ManualClock) -> tuple[Path, dict, dict]:
    """A log whose first segment holds aborted data and its ABORT marker, copied before
    a clean; returns (partition dir, the files of the original first segment, the files
    of the cleaned one that replaced it), so a test can lay out any crash point."""
    m = LogManager(data_dir, clock=clock)
    cfg = {"cleanup.policy": "compact", "segment.bytes": "200", "file.delete.delay.ms": "0"}
    m.create_topic("t", 1, cfg)
    plog = m.get_log("t", 0)
    plog.append(data(7, b"x" * 40, key=b"a"))  # 0 aborted
    plog.append(marker(7, CONTROL_ABORT))  # 1
    for i, key in enumerate((b"b", b"b", b"c")):  # 2, 3, 4: later segments
        plog.append(data(-1, b"y%d" % i * 30, key=key, transactional=False))
    part = plog.dir

    def first_segment() -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in part.iterdir() if p.name.startswith("0" * 20)}

    before = first_segment()
    Cleaner(m).clean_partition(plog)
    after = first_segment()
    m.close()
    return part, before, after


def test_crash_after_cleaned_to_swap_completes_the_swap_with_its_txnindex(
    data_dir: Path, clock: ManualClock
) -> None:
    """Kafka ``LogLoader``: a ``.swap`` segment replaces the ones it covers and is renamed
    to its final name; its ``.txnindex.swap`` goes with it (crash right after
    ``.cleaned -> .swap``, old files still live)."""
    part, before, after = cleaned_with_kept_abort(data_dir, clock)
    assert "00000000000000000000.txnindex" in after
    for name, raw in before.items():
        (part / name).write_bytes(raw)
    for name, raw in after.items():
        (part / (name + ".swap")).write_bytes(raw)
    m = reopen(data_dir, clock)
    try:
        plog = m.get_log("t", 0)
        assert not [p.name for p in part.iterdir() if p.name.endswith(".swap")]
        assert (part / "00000000000000000000.txnindex").read_bytes() == after[
            "00000000000000000000.txnindex"
        ]
        assert plog.collect_aborted_transactions(0, 5) == [AbortedTxn(7, 0, 1, 2)]
    finally:
        m.close()


def test_crash_with_only_cleaned_files_keeps_the_old_txnindex(
    data_dir: Path, clock: ManualClock
) -> None:
    """Kafka ``LogLoader``: ``.cleaned`` files, the ``.txnindex.cleaned`` too, are deleted
    and the old segment with its own ``.txnindex`` stays (crash before the swap)."""
    part, before, after = cleaned_with_kept_abort(data_dir, clock)
    for name, raw in before.items():
        (part / name).write_bytes(raw)
    for name, raw in after.items():
        (part / (name + ".cleaned")).write_bytes(raw)
    m = reopen(data_dir, clock)
    try:
        plog = m.get_log("t", 0)
        assert not [p.name for p in part.iterdir() if p.name.endswith(".cleaned")]
        assert (part / "00000000000000000000.txnindex").read_bytes() == before[
            "00000000000000000000.txnindex"
        ]
        records = [r.value for b in plog.iter_batches() for r in b.records()]
        assert b"x" * 40 in records  # the aborted data is back: the clean never happened
    finally:
        m.close()


def test_consumer_records_read_as_kafkas_consumer_skips_markers_and_aborted_batches(
    manager: LogManager,
) -> None:
    """Kafka's consumer (``CompletedFetch``): control batches are never records, a
    READ_COMMITTED reader drops the batches of aborted transactions and stops at the
    last stable offset, a READ_UNCOMMITTED one reads every data record up to ``end``;
    records before ``begin`` inside the first batch are left out."""
    manager.create_topic("t", 1, {})
    plog = manager.get_log("t", 0)
    plog.append(data(7, b"a", b"b"))  # 0-1: aborted
    plog.append(data(8, b"c", b"d"))  # 2-3: committed
    plog.append(marker(7, CONTROL_ABORT))  # 4
    plog.append(marker(8, CONTROL_COMMIT))  # 5
    plog.append(data(-1, b"e", transactional=False))  # 6
    plog.append(data(9, b"f"))  # 7: still open, so the LSO is 7
    lso = plog.last_stable_offset
    assert lso == 7
    aborted = aborted_by_producer(plog.collect_aborted_transactions(0, lso))
    left_out = []
    committed = consumer_records(plog.iter_batches(0), 0, lso, aborted, left_out.append)
    assert [(r.offset, r.value) for r in committed] == [(2, b"c"), (3, b"d"), (6, b"e")]
    assert [h.base_offset for h in left_out] == [0]
    everything = consumer_records(plog.iter_batches(1), 1, plog.log_end_offset, {})
    assert [r.offset for r in everything] == [1, 2, 3, 6, 7]
    assert [r.offset for r in consumer_records(plog.iter_batches(3), 3, 6, {})] == [3]
