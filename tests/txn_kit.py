"""Transactional batches for log-level tests: a producer's data batch and its markers."""

from __future__ import annotations

from kompakt.record.encode import build_control_batch, build_simple_batch

TS = 1_700_000_000_000


def data(pid: int, *values: bytes, key: bytes = b"k", transactional: bool = True) -> bytes:
    """One batch of ``values`` under ``key`` from producer ``pid`` (transactional unless
    told otherwise; ``pid=-1`` with ``transactional=False`` is a plain batch)."""
    return build_simple_batch(
        [(key, v) for v in values],
        timestamp=TS,
        producer_id=pid,
        producer_epoch=0,
        base_sequence=0,
        transactional=transactional,
    )


def marker(pid: int, kind: int) -> bytes:
    """Producer ``pid``'s COMMIT or ABORT control batch."""
    return build_control_batch(kind, producer_id=pid, producer_epoch=0, timestamp=TS)


def read_committed(plog) -> list[tuple[int, bytes, bytes | None]]:
    """(offset, key, value) of what a READ_COMMITTED consumer receives from ``plog``,
    by the consumer's own algorithm: the fetch answers batches below the last stable
    offset with the log's aborted transactions over them (``.txnindex``), and the
    consumer (librdkafka's / Kafka's ``Fetcher``) skips a transactional batch of a
    producer from an aborted transaction's first offset until that producer's ABORT
    marker. Markers a clean removed change nothing here: the index decides."""
    from kompakt.record.header import CONTROL_ABORT, CONTROL_KEY

    lso = plog.last_stable_offset
    pending = sorted(
        plog.collect_aborted_transactions(plog.log_start_offset, lso), key=lambda t: t.first_offset
    )
    aborting: set[int] = set()
    out = []
    for b in plog.iter_batches():
        h = b.header
        if h.base_offset >= lso:
            break
        while pending and pending[0].first_offset <= h.last_offset:
            aborting.add(pending.pop(0).producer_id)
        if h.is_control:
            recs = b.records()
            if recs and CONTROL_KEY.unpack(bytes(recs[0].key))[1] == CONTROL_ABORT:
                aborting.discard(h.producer_id)
            continue
        if h.is_transactional and h.producer_id in aborting:
            continue
        for r in b.records():
            if r.offset >= plog.log_start_offset:
                out.append((r.offset, bytes(r.key), None if r.value is None else bytes(r.value)))
    return out


def fold(items) -> dict[bytes, bytes]:
    """Fold (key, value) pairs in offset order into the table a consumer keeps: a None
    value (a tombstone) deletes its key."""
    table: dict[bytes, bytes] = {}
    for k, v in items:
        if v is None:
            table.pop(k, None)
        else:
            table[k] = v
    return table


def intended_table(appended: dict, fate: dict, lso: int) -> dict[bytes, bytes]:
    """What producers meant a read_committed consumer to see: plain and committed
    records (``fate``: offset -> plain / open / commit / abort) below the last stable
    offset, folded in offset order."""
    return fold(
        appended[off] for off in sorted(appended) if off < lso and fate[off] in ("plain", "commit")
    )


def model_lso(open_offsets: dict, log_end: int) -> int:
    """Kafka's last stable offset: the first offset of the earliest open transaction
    (``open_offsets``: producer -> its open transaction's offsets), else the log end."""
    firsts = [offs[0] for offs in open_offsets.values()]
    return min(firsts) if firsts else log_end
