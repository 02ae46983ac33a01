"""One read, one shuffle of key digests: which records of a clean's range are superseded.

Every answer is checked against a brute-force model of Kafka's rule: a record in
[start, end) is superseded iff a later record of its key feeds the offset map from the
dirty range [first_dirty, end) — not a control batch, not data of an aborted
transaction (read_committed: the producer's next marker is an ABORT), not unkeyed
(``Cleaner.buildOffsetMap`` / ``shouldRetainRecord``).
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kompakt.cleaner import rule
from kompakt.cleaner.rewrite import RoundContext, clean_group
from kompakt.cleaner.segment_io import summarize_producers, tracker_states
from kompakt.log.manager import LogManager
from kompakt.pipeline import exchange, survivors
from kompakt.pipeline.layout import segment_path
from kompakt.pipeline.survivors import (
    ReadTask,
    Superseded,
    digest_rows,
    plan_reads,
    superseded,
    superseded_bits,
)
from kompakt.record import codecs
from kompakt.record.batch import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    build_control_batch,
    build_simple_batch,
)
from kompakt.record.scan import scan_records

NOW = 1_700_000_000_000


@pytest.fixture
def logs(tmp_path):
    """A data dir whose clock is the records' time (no time-based segment rolls)."""
    with LogManager(tmp_path / "data", clock=lambda: NOW) as m:
        yield m


class Writer:
    """Appends plain batches, transactional batches and markers to one partition."""

    def __init__(self, plog):
        self.plog = plog
        self.seq: dict[int, int] = {}

    def plain(self, items, compression=codecs.NONE):
        self.plog.append(build_simple_batch(items, timestamp=NOW, compression=compression))

    def txn(self, pid, items):
        seq = self.seq.get(pid, 0)
        self.seq[pid] = seq + len(items)
        self.plog.append(
            build_simple_batch(
                items,
                timestamp=NOW,
                producer_id=pid,
                producer_epoch=0,
                base_sequence=seq,
                transactional=True,
            )
        )

    def marker(self, pid, kind):
        self.plog.append(
            build_control_batch(kind, producer_id=pid, producer_epoch=0, timestamp=NOW)
        )


def model_latest(plog, first_dirty: int, end: int) -> dict[bytes, int]:
    """Kafka's offset map over [first_dirty, end): key -> its latest feeding offset."""
    batches = list(plog.iter_batches())
    markers = [
        (b.header.base_offset, b.header.producer_id, b.control_record().type)
        for b in batches
        if b.header.is_control
    ]

    def aborted(b) -> bool:
        if not b.header.is_transactional:
            return False
        after = [m for m in markers if m[1] == b.header.producer_id and m[0] > b.header.last_offset]
        return bool(after) and min(after)[2] == CONTROL_ABORT

    latest: dict[bytes, int] = {}
    for b in batches:
        if b.header.is_control or aborted(b):
            continue
        for r in b.records():
            if r.key is not None and first_dirty <= r.offset < end:
                latest[r.key] = r.offset
    return latest


def model(plog, start: int, first_dirty: int, end: int) -> set[int]:
    """Offsets in [start, end) superseded by a later map-feeding record of their key."""
    latest = model_latest(plog, first_dirty, end)
    return {
        r.offset
        for b in plog.iter_batches()
        if not b.header.is_control
        for r in b.records()
        if start <= r.offset < end and r.key is not None and latest.get(r.key, -1) > r.offset
    }


def run(spark, plog, first_dirty: int, group_size: int = 2, **kwargs) -> tuple[Superseded, set]:
    """Roll, group the segments, compute both answers over [0, log end)."""
    plog.roll()
    segments = plog.segments_snapshot()
    end = plog.log_end_offset
    bases = [s.base_offset for s in segments if s.base_offset < end]
    groups = [bases[i : i + group_size] for i in range(0, len(bases), group_size)]
    aborted = plog.collect_aborted_transactions(0, end)
    got = superseded(spark, str(plog.dir), 0, first_dirty, end, groups, aborted, **kwargs)
    return got, model(plog, 0, first_dirty, end)


def as_set(s: Superseded) -> set[int]:
    offsets = np.arange(s.start, s.end)
    return set(offsets[s.mask(offsets)].tolist())


def write_every_case(w: Writer) -> None:
    """Head-only keys, null keys, tombstones, a committed and an aborted transaction,
    a compressed batch, across many small segments."""
    w.plain([(b"head-only", b"1"), (b"a", b"1"), (b"head-only", b"2")])  # 0-2
    w.plain([(None, b"unkeyed"), (b"b", b"1"), (b"a", b"2")])  # 3-5
    w.txn(7, [(b"a", b"aborted"), (b"c", b"aborted")])  # 6-7, aborted below
    w.txn(8, [(b"b", b"committed")])  # 8, committed below
    w.marker(7, CONTROL_ABORT)  # 9
    w.plain([(b"c", b"1"), (b"d", None)], compression=codecs.GZIP)  # 10-11: d tombstone
    w.marker(8, CONTROL_COMMIT)  # 12
    w.plain([(b"d", b"2"), (None, b"x"), (b"e", b"1")])  # 13-15
    w.txn(7, [(b"e", b"aborted-again")])  # 16, aborted below
    w.marker(7, CONTROL_ABORT)  # 17
    w.plain([(b"c", None), (b"f", b"1"), (b"f", b"2")])  # 18-20


def test_superseded_is_the_brute_force_model_on_every_record_kind(spark, logs):
    logs.create_topic("t", 1, {"segment.bytes": "200"})
    plog = logs.get_log("t", 0)
    write_every_case(Writer(plog))
    assert len(plog.segments_snapshot()) > 4
    for first_dirty in (0, 4, 7, 14):  # mid-segment, inside a transaction, ...
        got, want = run(spark, plog, first_dirty)
        assert as_set(got) == want, first_dirty
    # keys seen only before first_dirty are never superseded; an aborted record of a key
    # is superseded by its committed successor but supersedes nothing
    got, want = run(spark, plog, 4)
    assert {0, 2} & as_set(got) == set()
    assert 7 in as_set(got)  # aborted c@7, committed c@10
    assert {5, 15} & as_set(got) == set()  # a@5 and e@15: only aborted records follow


def exact_latest(plog, first_dirty: int, end: int) -> dict[int, int]:
    """offset -> the latest map-feeding offset of its key (absent: key not in the map)."""
    got = model_latest(plog, first_dirty, end)
    return {
        r.offset: got[r.key]
        for b in plog.iter_batches()
        if not b.header.is_control
        for r in b.records()
        if r.key in got
    }


def test_group_rewrite_from_the_bitmap_equals_rewrite_from_exact_latest_offsets(spark, logs):
    """What the bitmap hands each group's rewrite decides every batch and record as
    Kafka's offset map would (``Cleaner.cleanSegments`` on the same log, dry run)."""
    logs.create_topic("t", 1, {"segment.bytes": "200"})
    plog = logs.get_log("t", 0)
    write_every_case(Writer(plog))
    first_dirty = 4
    got, _want = run(spark, plog, first_dirty)
    end = plog.log_end_offset
    exact = exact_latest(plog, first_dirty, end)
    segments = [s for s in plog.segments_snapshot() if s.base_offset < end]
    aborted = plog.collect_aborted_transactions(0, end)
    ctx = RoundContext(end - 1, end, NOW + 1, 1000, summarize_producers(plog, segments, NOW))
    states = tracker_states([segments[i : i + 2] for i in range(0, len(segments), 2)], aborted)

    def exact_lookup(scan):
        return np.array([exact.get(int(o), -1) for o in scan.offset], np.int64)

    for i in range(0, len(segments), 2):
        group = segments[i : i + 2]
        g_end = segments[i + 2].base_offset if i + 2 < len(segments) else end
        sources = [s.log_path.read_bytes() for s in group]
        bits = got.slice(group[0].base_offset, g_end)
        state = states[i // 2]
        want = clean_group(sources, exact_lookup, ctx, None, state.copy())
        assert clean_group(sources, bits.latest_lookup(), ctx, None, state.copy()) == want
        assert want.records_read > 0


def test_many_small_tasks_and_reduce_partitions_give_the_same_answer(spark, logs):
    logs.create_topic("t", 1, {"segment.bytes": "4000", "index.interval.bytes": "1"})
    plog = logs.get_log("t", 0)
    w = Writer(plog)
    rng = random.Random(3)
    for _ in range(60):
        w.plain([(b"k%d" % rng.randrange(15), b"v" * rng.randrange(30)) for _ in range(3)])
    plog.roll()
    bases = [s.base_offset for s in plog.segments_snapshot()]
    assert len(plan_reads(plog.dir, bases, 300)) > 2 * len(bases)  # split at index entries
    got, want = run(spark, plog, 50, group_size=1, task_bytes=300, rows_per_reduce=7)
    assert as_set(got) == want and want


ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("plain"),
            st.lists(
                st.tuples(st.sampled_from([b"a", b"b", b"c", None]), st.booleans()),
                min_size=1,
                max_size=3,
            ),
        ),
        st.tuples(st.just("txn"), st.sampled_from([5, 6]), st.sampled_from([b"a", b"b", b"c"])),
        st.tuples(st.just("marker"), st.sampled_from([5, 6]), st.booleans()),
    ),
    min_size=1,
    max_size=14,
)


@settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck))
@given(ops, st.integers(0, 20))
def test_superseded_equals_the_model_on_random_logs(spark, tmp_path_factory, steps, first_dirty):
    root = tmp_path_factory.mktemp("s") / "data"
    with LogManager(root, clock=lambda: NOW) as logs:
        logs.create_topic("t", 1, {"segment.bytes": "200"})
        plog = logs.get_log("t", 0)
        w = Writer(plog)
        open_txn: set[int] = set()
        for step in steps:
            if step[0] == "plain":
                w.plain([(k, b"v" if live else None) for k, live in step[1]])
            elif step[0] == "txn":
                w.txn(step[1], [(step[2], b"t")])
                open_txn.add(step[1])
            elif step[1] in open_txn:
                w.marker(step[1], CONTROL_COMMIT if step[2] else CONTROL_ABORT)
                open_txn.discard(step[1])
        for pid in sorted(open_txn):  # the cleanable range ends before open transactions
            w.marker(pid, CONTROL_ABORT)
        first_dirty = min(first_dirty, plog.log_end_offset)
        got, want = run(spark, plog, first_dirty)
        assert as_set(got) == want


def test_a_stale_offset_index_falls_back_to_walking_the_batches(logs):
    """The index is derived data (Kafka rebuilds it): a task never trusts a position
    whose batch header does not carry the offset the index named."""
    logs.create_topic("t", 1, {"index.interval.bytes": "1"})
    plog = logs.get_log("t", 0)
    for i in range(10):
        Writer(plog).plain([(b"k%d" % (i % 3), b"v")])
    plog.roll()
    path = str(segment_path(plog.dir, 0))
    tasks = plan_reads(plog.dir, [0], 200)
    assert len(tasks) > 2
    whole = digest_rows(ReadTask(path, 0, -1, tasks[-1].hi_position, 1 << 62), 0, 0, 10, ())
    good = [digest_rows(t, 0, 0, 10, ()) for t in tasks]
    lied = [
        digest_rows(
            ReadTask(t.path, t.lo_position + 1, t.lo_offset, t.hi_position, t.hi_offset),
            0,
            0,
            10,
            (),
        )
        if t.lo_position
        else digest_rows(t, 0, 0, 10, ())
        for t in tasks
    ]
    for parts in (good, lied):
        assert np.concatenate(parts).tolist() == whole.tolist()


def test_the_bitmap_decides_retention_as_the_exact_latest_offset_does():
    """Kafka ``shouldRetainRecord`` compares offset >= latest: the bitmap's lookup must
    keep and drop exactly the same records, tombstones and unkeyed ones included."""
    rng = np.random.default_rng(5)
    keys = rng.integers(0, 20, 400)
    key_null = rng.random(400) < 0.1
    value_null = rng.random(400) < 0.2
    offsets = np.arange(100, 500, dtype=np.int64)
    first_dirty = 250
    latest = {}
    for k, o, null in zip(keys, offsets, key_null, strict=True):
        if not null and o >= first_dirty:
            latest[int(k)] = int(o)
    exact = np.array([latest.get(int(k), -1) for k in keys], np.int64)
    exact[key_null] = -1
    hi = keys[~key_null].astype(np.int64)
    rows_off = np.where(offsets >= first_dirty, offsets, ~offsets)[~key_null]
    bits = superseded_bits(np.stack([hi, hi * 7919, rows_off], axis=1), 100, 500)
    s = Superseded(100, 500, bits)

    class Scan:
        offset = offsets

    horizon = np.where(rng.random(400) < 0.5, -1, 1_000)
    for now in (0, 2_000):
        args = (offsets, key_null, value_null, horizon)
        want = rule.retain_records(args[0], exact, *args[1:], map_latest_offset=499, now=now)
        got = rule.retain_records(
            args[0], s.latest_lookup()(Scan), *args[1:], map_latest_offset=499, now=now
        )
        assert (got == want).all()
    assert (s.mask(offsets) == (exact > offsets)).all()


def test_a_group_slice_holds_the_same_bits_as_the_whole():
    rng = np.random.default_rng(1)
    flags = rng.random(1000) < 0.4
    s = Superseded(37, 1037, np.packbits(flags))
    part = s.slice(120, 531)
    offsets = np.arange(0, 1100)
    inside = (offsets >= 120) & (offsets < 531)
    assert (part.mask(offsets) == (s.mask(offsets) & inside)).all()
    assert len(part.bits) == (531 - 120 + 7) // 8


def test_digest_rows_mark_records_that_do_not_feed_the_map(tmp_path: Path):
    data = build_simple_batch(
        [(b"a", b"1"), (None, b"2"), (b"b", None)], timestamp=NOW
    ) + build_control_batch(CONTROL_COMMIT, producer_id=3, producer_epoch=0, timestamp=NOW)
    seg = tmp_path / "00000000000000000000.log"
    seg.write_bytes(data)
    rows = digest_rows(ReadTask(str(seg), 0, -1, len(data), 1 << 62), 0, 2, 4, ())
    # unkeyed record 1 and the marker's record are left out; offset 0 is clean head
    assert rows[:, 2].tolist() == [~0, 2]
    assert len(scan_records(data).offset) == 3


def test_spilled_buckets_hold_every_row_once_and_a_digest_in_one_bucket(tmp_path: Path):
    rng = np.random.default_rng(9)
    rows = rng.integers(-(2**63), 2**63 - 1, (1000, 3), dtype=np.int64)
    rows[500:, :2] = rows[:500, :2]  # every digest twice
    spills = [exchange.spill(rows[:600], 4, tmp_path), exchange.spill(rows[600:], 4, tmp_path)]
    seen: dict[tuple[int, int], set[int]] = {}
    total = 0
    for bucket, parts in enumerate(exchange.bucket_parts(spills, 4)):
        part = exchange.read_bucket(parts)
        total += len(part)
        for hi, lo, _off in part.tolist():
            assert np.uint64(np.int64(hi)) % np.uint64(4) == bucket  # hi mod n, unsigned
            seen.setdefault((hi, lo), set()).add(bucket)
    assert total == 1000
    assert all(len(b) == 1 for b in seen.values()) and len(seen) == 500
    assert exchange.spill(rows[:0], 4, tmp_path) == exchange.Spill("", (0, 0, 0, 0))


def test_a_truncated_exchange_file_is_a_clear_error_not_fewer_rows(tmp_path: Path):
    rows = np.arange(30, dtype=np.int64).reshape(10, 3)
    s = exchange.spill(rows, 1, tmp_path)
    with open(s.path, "r+b") as f:
        f.truncate(5 * exchange.ROW_BYTES)
    with pytest.raises(OSError, match="5 rows at row 0, expected 10"):
        exchange.read_bucket(exchange.bucket_parts([s], 1)[0])


def test_the_exchange_folder_is_removed_after_the_clean_and_leaves_others(tmp_path: Path):
    part_dir = tmp_path / "data" / "t-0"
    part_dir.mkdir(parents=True)
    with exchange.scratch(part_dir) as folder:
        exchange.spill(np.ones((3, 3), np.int64), 2, folder)
        assert folder.parent.name == ".kompakt-staging"
    assert not (tmp_path / "data" / ".kompakt-staging").exists()
    (tmp_path / "data" / ".kompakt-staging" / "a-write").mkdir(parents=True)
    with exchange.scratch(part_dir) as folder:
        pass
    assert not folder.exists() and (tmp_path / "data" / ".kompakt-staging" / "a-write").exists()


def test_a_killed_cleans_exchange_folder_goes_with_the_next_process_first_clean(tmp_path: Path):
    """A SIGKILL mid-clean leaves ``clean-*`` behind; the next process's first clean in
    that data dir removes it, and leaves a write's staging folder alone."""
    part_dir = tmp_path / "data" / "t-0"
    part_dir.mkdir(parents=True)
    staging = tmp_path / "data" / ".kompakt-staging"
    killed = staging / "clean-0123"
    killed.mkdir(parents=True)
    (killed / "rows").write_bytes(b"x" * 24)
    (staging / "a-write").mkdir()
    with exchange.scratch(part_dir) as folder:
        assert not killed.exists() and folder.exists()
        other = staging / "clean-of-a-running-clean"
        other.mkdir()
        with exchange.scratch(part_dir):  # a second clean of the same process
            assert other.exists()
    assert (staging / "a-write").exists()


def test_the_reduce_side_split_into_small_tables_marks_the_same_bits(monkeypatch):
    rng = np.random.default_rng(4)
    digests = rng.integers(-(2**63), 2**63 - 1, (50, 2), dtype=np.int64)
    rows = np.empty((1000, 3), np.int64)
    rows[:, :2] = digests[rng.integers(0, 50, 1000)]
    offsets = rng.permutation(1000)
    rows[:, 2] = np.where(rng.random(1000) < 0.3, ~offsets, offsets)  # some do not feed
    whole = superseded_bits(rows, 0, 1000)
    monkeypatch.setattr(survivors, "TABLE_ROWS", 16)  # 62 tables of about 16 rows
    assert (superseded_bits(rows, 0, 1000) == whole).all() and whole.any()
