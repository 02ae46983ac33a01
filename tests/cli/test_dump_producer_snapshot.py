"""``kompakt dump`` of a producer-state ``.snapshot`` (Kafka's ``DumpLogSegments``
``dumpProducerIdSnapshot``: producerId, producerEpoch, coordinatorEpoch,
currentTxnFirstOffset, lastTimestamp, then the last batch's firstSequence,
lastSequence, lastOffset, offsetDelta, timestamp); and the offline verbs that rewrite
segments (``kompakt compact``) leave the snapshot files alone."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from kompakt.cli.main import app
from kompakt.log.manager import LogManager
from kompakt.log.producer_snapshot import ProducerSnapshotFile, SnapshotEntry, list_snapshots
from kompakt.record.encode import build_simple_batch

runner = CliRunner()


def test_dump_snapshot_prints_kafkas_producer_fields(tmp_path: Path) -> None:
    snap = ProducerSnapshotFile(tmp_path, 372)
    snap.write(
        [
            SnapshotEntry(1004, 0, 371, 371, 1, 1706471404037),
            SnapshotEntry(7, 2, -1, -1, 0, 55, 3, 360),
        ]
    )
    r = runner.invoke(app, ["dump", str(snap.path)])
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[1:] == [
        "producerId: 1004 producerEpoch: 0 coordinatorEpoch: -1 currentTxnFirstOffset: -1 "
        "lastTimestamp: 1706471404037 firstSequence: 370 lastSequence: 371 lastOffset: 371 "
        "offsetDelta: 1 timestamp: 1706471404037",
        "producerId: 7 producerEpoch: 2 coordinatorEpoch: 3 currentTxnFirstOffset: 360 "
        "lastTimestamp: 55",
    ]
    (f,) = json.loads(runner.invoke(app, ["dump", str(snap.path), "--json"]).stdout)["files"]
    assert f["type"] == "snapshot" and f["baseOffset"] == 372 and f["errors"] == []
    assert [e["producerId"] for e in f["entries"]] == [1004, 7]


def test_dump_corrupt_snapshot_is_one_error_line_and_exit_1(tmp_path: Path) -> None:
    snap = ProducerSnapshotFile(tmp_path, 5)
    snap.write([SnapshotEntry(1, 0, 0, 4, 0, 9)])
    snap.path.write_bytes(snap.path.read_bytes()[:-1] + b"\x07")
    r = runner.invoke(app, ["dump", str(snap.path)])
    assert r.exit_code == 1
    assert "CRC is no longer valid" in r.stderr


def test_offline_compact_never_rewrites_producer_snapshots(tmp_path: Path) -> None:
    """A snapshot describes offsets, which a clean never changes: the cleaner's swap
    renames ``.log``/``.index``/``.timeindex``/``.txnindex`` only, and the snapshots of
    the segments it merged away are deleted (Kafka's ``UnifiedLog.replaceSegments`` ->
    ``deleteProducerSnapshots``), the newest kept; the others stay byte for byte."""
    data = tmp_path / "data"
    with LogManager(data) as logs:
        logs.create_topic("kv", 1, {"cleanup.policy": "compact", "segment.bytes": "1024"})
        plog = logs.get_log("kv", 0)
        for i in range(60):
            plog.append(build_simple_batch([(b"k%d" % (i % 3), b"v" * 40)], timestamp=1))
        assert len(plog.segments) > 2
        bases = [s.base_offset for s in plog.segments]
        for off in bases[1:]:
            ProducerSnapshotFile(plog.dir, off).write([SnapshotEntry(9, 0, off - 1, off - 1, 0, 1)])
    before = {s.path.name: s.path.read_bytes() for s in list_snapshots(data / "kv-0")}
    r = runner.invoke(app, ["compact", "--data-dir", str(data), "--engine", "local", "kv"])
    assert r.exit_code == 0, r.output
    with LogManager(data) as logs:
        plog = logs.get_log("kv", 0)
        assert sum(1 for _ in plog.iter_batches(0)) < 60, "a clean ran"
        now = {s.base_offset for s in plog.segments}
    after = {s.path.name: s.path.read_bytes() for s in list_snapshots(data / "kv-0")}
    newest = max(before)
    assert newest in after
    assert {n: b for n, b in before.items() if int(n.split(".")[0]) in now or n == newest} == after
