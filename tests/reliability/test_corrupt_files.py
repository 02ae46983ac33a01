"""Torn and corrupt files on a real data dir, across real broker restarts.

Kafka's rules followed: ``LogLoader.recoverLog`` re-validates segments after an unclean
shutdown and truncates the active segment at the first invalid batch; index files are
sanity-checked at load (``LogSegment.sanityCheck``) and rebuilt when they fail. Beyond
Kafka (DESIGN "Beyond Kafka"): a batch that fails its CRC is answered as CORRUPT_MESSAGE
(2) for its partition only, and the cleaner skips that partition as uncleanable while it
keeps cleaning the others. Positions and bits are seeded (``KOMPAKT_CORRUPT_SEED``).
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import time
import urllib.request
from pathlib import Path

import pytest
from reliability.wire_kit import call, connect
from shared_kit import wait_for

from kompakt.broker.app import start_test_broker
from kompakt.log.manager import CLEAN_SHUTDOWN_FILE
from kompakt.record.decode import iter_batches
from kompakt.record.encode import build_simple_batch

SEED = int(os.environ.get("KOMPAKT_CORRUPT_SEED") or 20240611)
# recent timestamps: a segment rolls once segment.ms has passed since its first record
T0 = int(time.time() * 1000) - 60_000
CORRUPT_MESSAGE = 2


def _batch(key: bytes, value: bytes, ts: int) -> bytes:
    return build_simple_batch([(key, value)], timestamp=ts)


def _fetch(port: int, parts: list[tuple[str, int, int]]) -> dict[tuple[str, int], tuple]:
    """{(topic, partition): (error_code, records bytes)} from one Fetch v12."""
    topics: dict[str, list] = {}
    for t, p, off in parts:
        topics.setdefault(t, []).append(
            {"partition": p, "fetch_offset": off, "partition_max_bytes": 1 << 20}
        )
    body = {
        "replica_id": -1,
        "max_wait": 0,
        "min_bytes": 0,
        "max_bytes": 8 << 20,
        "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
    }
    with connect(port) as s:
        r = call(s, 1, 12, body)
    return {
        (t.topic, p.partition_index): (int(p.error_code), bytes(p.records or b""))
        for t in r.responses
        for p in t.partitions
    }


def _records(data: bytes) -> list[tuple[int, bytes | None]]:
    return [(r.offset, r.value) for b in iter_batches(data) for r in b.records()]


def _read_all(port: int, topic: str, start: int = 0) -> list[tuple[int, bytes | None]]:
    out: list[tuple[int, bytes | None]] = []
    offset = start
    while True:
        code, data = _fetch(port, [(topic, 0, offset)])[(topic, 0)]
        assert code == 0, code
        recs = [r for r in _records(data) if r[0] >= offset]
        if not recs:
            return out
        out += recs
        offset = recs[-1][0] + 1


# -- torn active segment --------------------------------------------------------------


def test_torn_active_segment_is_cut_to_the_last_whole_batch_like_kafka_recover_log(
    tmp_path: Path,
) -> None:
    """After an unclean stop the active segment is recovered (Kafka LogLoader): a tail
    cut at any byte is truncated to the last valid batch, every flushed record before
    the tear reads back, and the next append gets the next offset."""
    pristine = tmp_path / "pristine"
    b = start_test_broker(pristine)
    b.logs.create_topic("torn")
    plog = b.logs.get_log("torn", 0)
    for i in range(40):
        plog.append(_batch(b"k%d" % i, b"v%d" % i * (i % 7 + 1), T0 + i))
    plog.flush()
    seg_path = plog.active_segment.log_path
    b.stop()  # the file at rest: a live segment's runs in zeros past its last batch
    ends = [bt.position + bt.header.size for bt in iter_batches(seg_path.read_bytes())]
    size = seg_path.stat().st_size
    rnd = random.Random(SEED)
    cuts = sorted({rnd.randrange(1, size) for _ in range(4)} | {ends[10] + 1, ends[-1] - 1})
    for cut in cuts:
        d = tmp_path / f"cut-{cut}"
        shutil.copytree(pristine, d)
        (d / CLEAN_SHUTDOWN_FILE).unlink()  # what a crash leaves
        with open(d / "torn-0" / seg_path.name, "r+b") as f:
            f.truncate(cut)
        whole = sum(1 for e in ends if e <= cut)
        b = start_test_broker(d)
        try:
            assert (d / "torn-0" / seg_path.name).stat().st_size == (
                ends[whole - 1] if whole else 0
            )
            got = _read_all(b.port, "torn")
            assert got == [(i, b"v%d" % i * (i % 7 + 1)) for i in range(whole)], cut
            info = b.logs.get_log("torn", 0).append(_batch(b"new", b"after", T0 + 5000))
            assert info.first_offset == whole
            assert _read_all(b.port, "torn", whole) == [(whole, b"after")]
        finally:
            b.stop()


def test_torn_tail_after_a_clean_shutdown_marker_is_cut_too(tmp_path: Path) -> None:
    """A tail torn after the clean-shutdown marker was written (file copied or restored
    mid-write): Kafka would skip recovery and append after the partial batch; kompakt
    notices that the active segment does not end on a batch boundary and recovers it."""
    b = start_test_broker(tmp_path / "d")
    b.logs.create_topic("t")
    plog = b.logs.get_log("t", 0)
    for i in range(5):
        plog.append(_batch(b"k", b"v%d" % i, T0 + i))
    seg = plog.active_segment.log_path
    b.stop()
    with open(seg, "r+b") as f:
        f.truncate(seg.stat().st_size - 3)
    b = start_test_broker(tmp_path / "d")
    try:
        assert b.logs.get_log("t", 0).append(_batch(b"k", b"new", T0 + 2000)).first_offset == 4
        assert [v for _o, v in _read_all(b.port, "t")] == [b"v0", b"v1", b"v2", b"v3", b"new"]
    finally:
        b.stop()


# -- bit flips in sealed segments -------------------------------------------------------


def test_read_of_a_crc_corrupt_batch_is_corrupt_message_naming_file_and_position(
    tmp_path: Path,
) -> None:
    """PartitionLog.read (the Fetch path) stops before a batch failing its CRC and
    raises CORRUPT_MESSAGE naming the file and position when the read starts there."""
    from kompakt.errors import CorruptRecordError
    from kompakt.log.manager import LogManager

    with LogManager(tmp_path / "d") as logs:
        logs.create_topic("t")
        plog = logs.get_log("t", 0)
        for i in range(5):
            plog.append(_batch(b"k", b"value-%d" % i, T0 + i))
        seg = plog.active_segment
        victim = list(seg.iter_batches())[3]
        with open(seg.log_path, "r+b") as f:
            f.seek(victim.position + 70)
            byte = f.read(1)[0]
            f.seek(victim.position + 70)
            f.write(bytes([byte ^ 0x10]))
        assert [r.offset for r in _records_of(plog.read(0, 1 << 20))] == [0, 1, 2]
        with pytest.raises(CorruptRecordError) as e:
            plog.read(3, 1 << 20)
        assert e.value.error_code == CORRUPT_MESSAGE
        assert seg.log_path.name in str(e.value) and f"position {victim.position}" in str(e.value)


def _records_of(data: bytes):
    return [r for b in iter_batches(data) for r in b.records()]


def _admin_json(port: int, path: str):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
        body = r.read()
    return json.loads(body) if path.startswith("/v1") else body.decode()


COMPACT = {
    "cleanup.policy": "compact",
    "segment.bytes": "1024",
    "min.cleanable.dirty.ratio": "0.01",
    "min.compaction.lag.ms": "0",
}


def test_flipped_bit_in_sealed_segment_is_corrupt_message_and_uncleanable_others_fine(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A CRC-breaking bit flip: Fetch of that batch answers CORRUPT_MESSAGE (2) for that
    partition only, the broker log names the file and position, the cleaner marks the
    partition uncleanable (admin /v1/partitions and the uncleanable metric) and still
    cleans the healthy partition; the broker stays up."""
    data = tmp_path / "d"
    b = start_test_broker(data, **{"log.cleaner.enable": "false"})
    now = int(time.time() * 1000)
    for t in ("bad", "good"):
        b.logs.create_topic(t, configs=COMPACT)
        plog = b.logs.get_log(t, 0)
        for i in range(60):
            plog.append(_batch(b"key%d" % (i % 5), b"value-%d" % i * 10, now + i))
        plog.flush()
    first = b.logs.get_log("bad", 0).segments[0]
    seg_path, raw = first.log_path, first.read_all()
    batches = list(iter_batches(raw))
    b.stop()
    rnd = random.Random(SEED)
    victim = rnd.choice(batches[1:])
    byte = victim.position + rnd.randrange(21, victim.header.size)  # CRC-covered bytes
    with open(seg_path, "r+b") as f:
        f.seek(byte)
        old = f.read(1)[0]
        f.seek(byte)
        f.write(bytes([old ^ (1 << rnd.randrange(8))]))
    caplog.set_level(logging.ERROR, logger="kompakt")
    b = start_test_broker(data, **{"log.cleaner.backoff.ms": "100"})
    try:
        bad_off = victim.header.base_offset
        got = _fetch(b.port, [("bad", 0, bad_off), ("good", 0, bad_off)])
        assert got[("bad", 0)][0] == CORRUPT_MESSAGE
        assert got[("good", 0)][0] == 0 and _records(got[("good", 0)][1])
        # the batches before the damaged one still read
        before = _fetch(b.port, [("bad", 0, 0)])[("bad", 0)]
        assert before[0] == 0
        assert [o for o, _v in _records(before[1])] == list(range(bad_off))
        logged = "\n".join(r.getMessage() for r in caplog.records)
        assert seg_path.name in logged and f"position {victim.position}" in logged

        def settled() -> dict | None:
            parts = {
                (p["topic"], p["partition"]): p
                for p in _admin_json(b.admin_port, "/v1/partitions")["partitions"]
            }
            bad, good = parts[("bad", 0)], parts[("good", 0)]
            return parts if bad["uncleanable_reason"] and good.get("last_compaction") else None

        parts = wait_for(settled, "bad-0 uncleanable and good-0 cleaned", 30)
        assert parts[("good", 0)]["uncleanable_reason"] is None
        metrics = _admin_json(b.admin_port, "/metrics")
        assert "kompakt_log_cleaner_uncleanable_partitions 1.0" in metrics
        assert _read_all(b.port, "good")[-1][1] == b"value-59" * 10
    finally:
        b.stop()


# -- damaged index files --------------------------------------------------------------


def _damage(path: Path, how: str, rnd: random.Random) -> None:
    raw = bytearray(path.read_bytes())
    if how == "flip" and raw:
        for _ in range(3):
            i = rnd.randrange(len(raw))
            raw[i] ^= 1 << rnd.randrange(8)
    elif how == "truncate":
        raw = raw[: rnd.randrange(len(raw) + 1)] if raw else raw
    elif how == "odd":
        raw = raw[: max(0, len(raw) - 3)]
    elif how == "garbage":
        raw = bytearray(rnd.randbytes(len(raw) or 64))
    elif how == "zeros":
        raw = bytearray(len(raw) or 64)
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("how", ["flip", "truncate", "odd", "garbage", "zeros"])
def test_damaged_index_files_are_rebuilt_on_restart_and_lookups_stay_right(
    tmp_path: Path, how: str
) -> None:
    """Kafka sanity-checks .index/.timeindex at load and rebuilds them from the log;
    afterwards every offset lookup (Fetch) and time lookup (ListOffsets) is right."""
    data = tmp_path / "d"
    b = start_test_broker(data)
    b.logs.create_topic("ix", configs={"segment.bytes": "4096", "index.interval.bytes": "128"})
    plog = b.logs.get_log("ix", 0)
    for i in range(120):
        plog.append(_batch(b"k%d" % i, b"x" * 40, T0 + 10 * i))
    nseg = len(plog.segments)
    b.stop()
    assert nseg >= 3
    rnd = random.Random(f"{SEED}-{how}")
    for p in sorted((data / "ix-0").iterdir()):
        if p.suffix in (".index", ".timeindex"):
            _damage(p, how, rnd)
    b = start_test_broker(data)
    try:
        plog = b.logs.get_log("ix", 0)
        for off in range(0, 120, 7):
            first = next(iter_batches(plog.read(off, 1 << 16)))
            assert first.header.base_offset <= off <= first.header.last_offset, off
        for i in range(0, 120, 11):
            assert plog.offset_for_timestamp(T0 + 10 * i) == (i, T0 + 10 * i)
            assert plog.offset_for_timestamp(T0 + 10 * i - 5) == (i, T0 + 10 * i)
        assert plog.max_timestamp_offset() == (119, T0 + 1190)
        assert [o for o, _v in _read_all(b.port, "ix")] == list(range(120))
        assert plog.append(_batch(b"k", b"v", T0 + 99_999)).first_offset == 120
    finally:
        b.stop()
