"""``kompakt dump`` of a ``.txnindex``: each entry as Kafka's ``DumpLogSegments`` prints
an ``AbortedTxn`` (version, producerId, firstOffset, lastOffset, lastStableOffset)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from typer.testing import CliRunner

from kompakt.cli.main import app
from kompakt.log.manager import LogManager
from kompakt.record.encode import build_control_batch, build_simple_batch
from kompakt.record.header import CONTROL_ABORT

runner = CliRunner()


def txnindex(data_dir: Path) -> Path:
    now = int(time.time() * 1000)  # recent: an old timestamp would roll at segment.ms
    with LogManager(data_dir) as logs:
        logs.create_topic("t", 1, {})
        plog = logs.get_log("t", 0)
        for pid in (7, 9):
            plog.append(
                build_simple_batch(
                    [(b"k", b"v")],
                    timestamp=now,
                    producer_id=pid,
                    producer_epoch=0,
                    base_sequence=0,
                    transactional=True,
                )
            )
            plog.append(
                build_control_batch(
                    CONTROL_ABORT, producer_id=pid, producer_epoch=0, timestamp=1001
                )
            )
        return plog.segments[0].txn_index.path


def test_dump_txnindex_prints_kafkas_aborted_txn_fields(tmp_path: Path) -> None:
    path = txnindex(tmp_path / "data")
    r = runner.invoke(app, ["dump", str(path)])
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[1:] == [
        "version: 0 producerId: 7 firstOffset: 0 lastOffset: 1 lastStableOffset: 2",
        "version: 0 producerId: 9 firstOffset: 2 lastOffset: 3 lastStableOffset: 4",
    ]
    doc = json.loads(runner.invoke(app, ["dump", str(path), "--json"]).stdout)
    (f,) = doc["files"]
    assert f["type"] == "txnindex" and f["baseOffset"] == 0 and f["errors"] == []
    assert [e["producerId"] for e in f["entries"]] == [7, 9]


def test_dump_torn_txnindex_prints_the_whole_entries_and_exits_1(tmp_path: Path) -> None:
    """Bad input: the entries before a torn tail are printed, then one error line naming
    the byte where the partial entry starts, and a non-zero exit."""
    path = txnindex(tmp_path / "data")
    path.write_bytes(path.read_bytes()[:-4])
    r = runner.invoke(app, ["dump", str(path)])
    assert r.exit_code == 1
    assert "producerId: 7" in r.stdout and "producerId: 9" not in r.stdout
    assert "at position 34: file size is not a whole number of entries" in r.stderr
