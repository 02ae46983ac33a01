"""The key explanation (kompakt.cleaner.explain) is the engine's own dry run: for every
key, the records it says the next clean removes are exactly those a real clean then
removes, with transactions (Kafka's CleanedTransactionMetadata: aborted data goes, a
COMMIT marker's data stays) and tombstones (KIP-534: kept with a delete horizon by the
first clean, removed by the first clean after it)."""

from __future__ import annotations

from cleaner_kit import append

from kompakt.cleaner import Cleaner, LocalEngine
from kompakt.cleaner.explain import ABORTED, HORIZON_PASSED, SUPERSEDED, explain_key
from kompakt.record import codecs
from kompakt.record.encode import build_control_batch, build_simple_batch
from kompakt.record.header import CONTROL_ABORT, CONTROL_COMMIT

CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": "400",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "1000",
    "file.delete.delay.ms": "0",
}
KEYS = [b"a", b"b", b"c", b"d"]


def txn(plog, clock, pid: int, items, commit: bool) -> None:
    """One transaction of producer ``pid``: its data batch, then its marker."""
    plog.append(
        build_simple_batch(
            items,
            timestamp=clock(),
            producer_id=pid,
            producer_epoch=0,
            base_sequence=0,
            transactional=True,
        )
    )
    kind = CONTROL_COMMIT if commit else CONTROL_ABORT
    plog.append(build_control_batch(kind, producer_id=pid, producer_epoch=0, timestamp=clock()))


def data_offsets(plog, key: bytes) -> set[int]:
    return {
        r.offset
        for b in plog.iter_batches()
        if not b.header.is_control
        for r in b.records()
        if r.key == key
    }


def explained(manager, plog, clock) -> dict[bytes, dict[int, object]]:
    checkpoint = manager.cleaner_checkpoint().read().get((plog.topic, plog.partition))
    return {
        k: {
            v.offset: v
            for v in explain_key(plog, k, checkpoint, clock(), max_scan_bytes=1 << 30).verdicts
        }
        for k in KEYS
    }


def check_clean_matches(manager, plog, clock) -> dict[bytes, dict[int, object]]:
    """Explain every key, clean, and compare the survivors with the verdicts."""
    before = explained(manager, plog, clock)
    for k in KEYS:
        assert set(before[k]) == data_offsets(plog, k), k
    Cleaner(manager, engine=LocalEngine(1 << 20)).clean_partition(plog)
    for k in KEYS:
        kept = {o for o, v in before[k].items() if not v.removed}
        assert data_offsets(plog, k) == kept, (k, before[k])
    return before


def test_explanation_matches_the_clean_with_transactions_and_tombstones(manager, clock):
    manager.create_topic("t", 1, CONFIG)
    plog = manager.get_log("t", 0)
    append(plog, [(b"a", b"a0"), (b"b", b"b0")])
    txn(plog, clock, 7, [(b"a", b"a-committed")], commit=True)
    txn(plog, clock, 8, [(b"c", b"c-aborted"), (b"a", b"a-aborted")], commit=False)
    append(plog, [(b"b", None)])  # a tombstone: kept and stamped by the first clean
    append(plog, [(b"c", b"c1"), (b"d", b"d" * 300)])
    txn(plog, clock, 9, [(b"d", b"d-committed")], commit=True)
    plog.roll()
    append(plog, [(b"a", b"a-active")])  # the active segment: never cleaned

    first = check_clean_matches(manager, plog, clock)
    a, b, c = first[b"a"], first[b"b"], first[b"c"]
    assert [v.reason for v in a.values() if v.removed] == [SUPERSEDED, ABORTED]
    assert sorted(v.offset for v in a.values() if not v.removed)[0] == 2  # committed stays
    assert [v.reason for v in c.values() if v.removed] == [ABORTED]
    tomb = max(b.values(), key=lambda v: v.offset)
    assert not tomb.removed and tomb.stamps_horizon

    # past the tombstone's delete horizon, with new dirty data for a second clean
    clock.advance(5000)
    append(plog, [(b"c", b"c2")])
    plog.roll()
    second = check_clean_matches(manager, plog, clock)
    assert [v.reason for v in second[b"b"].values()] == [HORIZON_PASSED]
    assert data_offsets(plog, b"b") == set()


def test_a_segment_expanding_past_the_budget_ends_what_the_dry_run_reads(manager, clock):
    """Kafka bounds only a batch's compressed size, so a few KiB of zstd may take a dry
    run through GiB: a segment whose batches expand past what the look may decompress
    ends the read there, and the answer says so."""
    manager.create_topic("t", 1, {**CONFIG, "max.message.bytes": "1000000"})
    plog = manager.get_log("t", 0)
    append(plog, [(b"a", b"a0"), (b"b", b"b0")])
    plog.roll()
    wide = plog.log_end_offset
    append(plog, [(b"a", b"\0" * 50_000)], compression=codecs.ZSTD)
    plog.roll()
    append(plog, [(b"a", b"a-active")])
    ex = explain_key(plog, b"a", None, clock(), max_scan_bytes=1 << 30, max_expanded_bytes=10_000)
    assert (ex.complete, ex.expansion_spent, ex.read_until) == (False, True, wide)
    assert [v.offset for v in ex.verdicts] == [0]
    whole = explain_key(plog, b"a", None, clock(), max_scan_bytes=1 << 30)
    assert whole.complete and [v.offset for v in whole.verdicts] == [0, wide, wide + 1]
    assert whole.bytes_expanded >= 50_000
