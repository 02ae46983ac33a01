"""Producer-state snapshot files (Kafka's ``<offset>.snapshot``): the format, read with an
independent reader written here from Kafka's schema, and which files a log keeps.

Kafka's ``ProducerStateManager``: ``PID_SNAPSHOT_MAP_SCHEMA`` is version (INT16), crc
(UNSIGNED_INT32, CRC32C of the bytes after it) and ``producer_entries`` (ARRAY: INT32
count) of ``PRODUCER_SNAPSHOT_ENTRY_SCHEMA`` = producer_id INT64, epoch INT16,
last_sequence INT32, last_offset INT64, offset_delta INT32, timestamp INT64,
coordinator_epoch INT32, current_txn_first_offset INT64; ``PRODUCER_SNAPSHOT_VERSION``
is 1; files are ``LogFileUtils.producerSnapshotFile``: 20-digit offset + ``.snapshot``.
"""

from __future__ import annotations

import logging
import struct
from pathlib import Path

import pytest
from kafka.record.util import calc_crc32c  # kafka-python's own CRC32C: not the one we use

from kompakt.log.manager import LogManager
from kompakt.log.producer_snapshot import (
    CorruptSnapshotError,
    ProducerSnapshotFile,
    SnapshotEntry,
    decode,
    delete_snapshots_above,
    delete_snapshots_at,
    delete_snapshots_before,
    list_snapshots,
    load_latest,
)
from kompakt.record.encode import build_simple_batch

ENTRIES = [
    SnapshotEntry(4242, 3, 9, 109, 4, 1_700_000_000_123, 7, -1),
    SnapshotEntry(2**40 + 5, 0, -1, -1, 0, 1_700_000_000_999, -1, -1),  # a marker only
    SnapshotEntry(77, 32767, 2**31 - 1, 2**50, 0, -1, 2, 200),  # open transaction
]


def kafka_read_snapshot(data: bytes) -> tuple[int, list[tuple]]:
    """An independent reader of Kafka's schema: fields one by one, as Kafka's
    ``Schema.read`` walks them, and the CRC as ``readSnapshot`` checks it."""
    pos = 0

    def take(fmt: str):
        nonlocal pos
        (v,) = struct.unpack_from(">" + fmt, data, pos)
        pos += struct.calcsize(">" + fmt)
        return v

    version = take("h")
    crc = take("I")
    assert crc == calc_crc32c(data[6:]) & 0xFFFFFFFF, "CRC32C over the entries field"
    count = take("i")
    entries = []
    for _ in range(count):
        entries.append(
            (take("q"), take("h"), take("i"), take("q"), take("i"), take("q"), take("i"), take("q"))
        )
    assert pos == len(data), "nothing after the entries"
    return version, entries


def kafka_write_snapshot(entries: list[tuple]) -> bytes:
    """Kafka's ``writeSnapshot`` as the schema says, written independently."""
    body = struct.pack(">i", len(entries)) + b"".join(struct.pack(">qhiqiqiq", *e) for e in entries)
    return struct.pack(">hI", 1, calc_crc32c(body) & 0xFFFFFFFF) + body


def test_snapshot_file_is_kafkas_producer_snapshot_schema_version_1(tmp_path: Path):
    snap = ProducerSnapshotFile(tmp_path, 1234)
    snap.write(ENTRIES)
    assert snap.path.name == "00000000000000001234.snapshot"  # producerSnapshotFile
    version, entries = kafka_read_snapshot(snap.path.read_bytes())
    assert version == 1
    assert entries == [
        (
            e.producer_id,
            e.epoch,
            e.last_sequence,
            e.last_offset,
            e.offset_delta,
            e.timestamp,
            e.coordinator_epoch,
            e.current_txn_first_offset,
        )
        for e in ENTRIES
    ]
    assert not list(tmp_path.glob("*.tmp")), "written through a temporary file, renamed"


def test_a_snapshot_written_by_kafkas_schema_decodes():
    raw = [(9, 1, 41, 1000, 9, 55, 3, 990), (10, 0, -1, -1, 0, -1, -1, -1)]
    assert decode(kafka_write_snapshot(raw)) == [SnapshotEntry(*e) for e in raw]
    assert decode(kafka_write_snapshot([])) == []


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b[:20] + bytes([b[20] ^ 1]) + b[21:],  # a flipped bit: CRC
        lambda b: b"\x00\x02" + b[2:],  # an unknown version
        lambda b: b[:-3],  # torn: CRC, then framing
        lambda b: b[:4],  # shorter than the header
    ],
)
def test_a_damaged_snapshot_is_corrupt_snapshot_exception(damage):
    """Kafka's ``readSnapshot`` throws ``CorruptSnapshotException``."""
    with pytest.raises(CorruptSnapshotError):
        decode(damage(kafka_write_snapshot([(9, 1, 41, 1000, 9, 55, 3, 990)])))


def test_load_takes_the_latest_at_or_below_the_log_end_and_deletes_a_corrupt_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    """Kafka's ``loadFromSnapshot``: a corrupt latest snapshot is logged, deleted and
    the one before it loaded."""
    for off in (10, 20, 30, 40):
        ProducerSnapshotFile(tmp_path, off).write([SnapshotEntry(off, 0, 0, off - 1, 0, 5)])
    bad = ProducerSnapshotFile(tmp_path, 30).path
    bad.write_bytes(bad.read_bytes()[:-1] + b"\x01")
    with caplog.at_level(logging.WARNING):
        offset, entries = load_latest(tmp_path, upto=35)
    assert offset == 20 and entries[0].producer_id == 20
    assert "CRC is no longer valid" in caplog.text
    assert [s.offset for s in list_snapshots(tmp_path)] == [10, 20, 40]
    assert load_latest(tmp_path, upto=9) is None


def test_snapshots_below_the_log_start_go_but_the_newest_one(tmp_path: Path):
    """Kafka's ``deleteSnapshotsBefore`` and ``removeStraySnapshots`` (which keeps the
    latest)."""
    for off in (10, 20, 30):
        ProducerSnapshotFile(tmp_path, off).write([])
    delete_snapshots_before(tmp_path, 25)
    assert [s.offset for s in list_snapshots(tmp_path)] == [30]
    delete_snapshots_before(tmp_path, 100)
    assert [s.offset for s in list_snapshots(tmp_path)] == [30]
    delete_snapshots_above(tmp_path, 29)
    assert list_snapshots(tmp_path) == []


def test_a_clean_deletes_the_snapshots_of_merged_away_segments_but_the_newest(tmp_path: Path):
    """Kafka's ``UnifiedLog.replaceSegments`` -> ``deleteProducerSnapshots``."""
    for off in (10, 20, 30):
        ProducerSnapshotFile(tmp_path, off).write([])
    delete_snapshots_at(tmp_path, [10, 30])
    assert [s.offset for s in list_snapshots(tmp_path)] == [20, 30]


def test_recovery_that_truncates_the_log_deletes_snapshots_past_the_new_end(tmp_path: Path):
    """Kafka's ``LogLoader``: snapshots above the recovered log end describe batches
    the log no longer has (``truncateAndReload``)."""
    data = tmp_path / "d"
    m = LogManager(data)
    m.create_topic("t", 1, {"segment.bytes": "200"})
    plog = m.get_log("t", 0)
    for i in range(8):
        plog.append(build_simple_batch([(b"k%d" % i, b"v" * 60)], timestamp=1))
    first = plog.segments[0]
    kept = first.next_offset
    for off in (first.base_offset, kept, plog.log_end_offset):
        ProducerSnapshotFile(plog.dir, off).write([])
    m._release_lock()  # a crash, then a torn first segment: the later ones are dropped
    with open(first.log_path, "r+b") as f:
        f.seek(first.size - 3)
        f.write(b"\xff\xff\xff")
    m2 = LogManager(data)
    plog2 = m2.get_log("t", 0)
    end = plog2.log_end_offset
    # on first use (the open transactions are rebuilt), before an append moves the end
    plog2.append(build_simple_batch([(b"after", b"crash")], timestamp=1))
    assert end < kept
    assert all(s.offset <= end for s in list_snapshots(plog2.dir))
    m2.close()
