"""export_latest writes what folding the topic into a dict gives: latest value per key."""

from __future__ import annotations

import base64

import pyarrow.parquet as pq
import pytest

from kompakt.log.manager import LogManager
from kompakt.pipeline.export import FILE_BYTES, ExportTargetError, export_latest, output_files
from kompakt.record.encode import build_simple_batch


def test_export_keeps_latest_value_per_key_and_drops_tombstoned_keys(
    spark, manager, data_dir, tmp_path
):
    manager.create_topic("users", 2, {"cleanup.policy": "compact", "segment.bytes": "120"})
    history = [
        (0, b"alice", b"London"),
        (1, b"bob", b"Paris"),
        (0, b"alice", b"Rome"),
        (0, b"carol", b"Oslo"),
        (1, b"bob", None),  # tombstone: bob is gone
        (0, b"carol", b"Lima"),
        (1, b"dave", b"Kyiv"),
    ]
    for part, key, value in history:
        manager.get_log("users", part).append(build_simple_batch([(key, value)], timestamp=5))
    out = tmp_path / "users.parquet"
    assert export_latest(spark, data_dir, "users", out) == 3
    table = pq.read_table(out)
    got = {
        r["key"]: (r["value"], r["partition"], r["offset"])
        for r in table.select(["key", "value", "partition", "offset"]).to_pylist()
    }
    assert got == {b"alice": (b"Rome", 0, 1), b"carol": (b"Lima", 0, 3), b"dave": (b"Kyiv", 1, 2)}
    assert set(table.schema.names) == {
        "key",
        "value",
        "partition",
        "offset",
        "timestamp",
        "headers",
    }


def _users(manager) -> None:
    manager.create_topic("users", 1, {"cleanup.policy": "compact"})
    for key, value in [(b"alice", b"London"), (b"bob", b"Paris"), (b"alice", b"Rome")]:
        manager.get_log("users", 0).append(build_simple_batch([(key, value)], timestamp=5))
    manager.get_log("users", 0).append(build_simple_batch([(b"bob", None)], timestamp=6))
    manager.flush_all()


def test_export_cli_writes_json_and_csv(spark, manager, data_dir, tmp_path):
    from typer.testing import CliRunner

    from kompakt.cli.main import app

    _users(manager)
    manager.close()  # the CLI takes the data dir's lock, as against a broker
    for fmt in ("json", "csv"):
        out = tmp_path / f"users-{fmt}"
        res = CliRunner().invoke(
            app,
            ["export", "users", "--data-dir", str(data_dir), "--out", str(out), "--format", fmt],
        )
        assert res.exit_code == 0, res.output
        assert "Exported 1 key(s) of users" in res.output
        text = "".join(p.read_text() for p in sorted(out.glob("part-*")))
        assert "Rome" in text or base64.b64encode(b"Rome").decode() in text
        assert "Paris" not in text and base64.b64encode(b"Paris").decode() not in text


def test_export_cli_errors_are_one_line(spark, manager, data_dir, tmp_path):
    from typer.testing import CliRunner

    from kompakt.cli.main import app

    _users(manager)
    manager.close()
    cases = [
        (
            ["export", "nope", "--data-dir", str(data_dir), "--out", str(tmp_path / "o")],
            "unknown topic",
        ),
        (
            [
                "export",
                "users",
                "--data-dir",
                str(data_dir),
                "--out",
                str(tmp_path / "o"),
                "--format",
                "xml",
            ],
            "unknown format",
        ),
        (
            [
                "export",
                "users",
                "--data-dir",
                str(tmp_path / "missing"),
                "--out",
                str(tmp_path / "o"),
            ],
            "does not exist",
        ),
    ]
    for args, message in cases:
        res = CliRunner().invoke(app, args)
        assert res.exit_code != 0
        assert message in res.output and "Traceback" not in res.output


def test_export_of_a_corrupt_batch_is_one_line(spark, manager, data_dir, tmp_path):
    """A task's CorruptRecordError came out as 82 lines of traceback (an output folder
    Spark cannot make as 317, 242 of them Java frames: the same handler); it is one
    ``error:`` line, and no temporary folder is left."""
    _users(manager)
    manager.close()
    seg = data_dir / "users-0" / "00000000000000000002.log"  # Rome's segment
    raw = bytearray(seg.read_bytes())
    raw[raw.index(b"Rome")] ^= 0xFF  # under the batch's CRC
    seg.write_bytes(bytes(raw))
    res = _cli("export", "users", "--data-dir", str(data_dir), "--out", str(tmp_path / "o"))
    assert res.exit_code == 1 and "Traceback" not in res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: export failed: CRC mismatch"), lines
    assert not (tmp_path / "o").exists() and _siblings(tmp_path / "o") == []


def _cli(*args: str):
    from typer.testing import CliRunner

    from kompakt.cli.main import app

    return CliRunner().invoke(app, list(args))


def _export_rows(out) -> dict[bytes, bytes]:
    table = pq.read_table(out)
    return {r["key"]: r["value"] for r in table.select(["key", "value"]).to_pylist()}


def _siblings(out) -> list[str]:
    return sorted(p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}."))


def test_overwrite_replaces_an_earlier_export_whole_and_leaves_no_temp(
    spark, manager, data_dir, tmp_path
):
    """--overwrite swaps the new export in by rename: no part file of the old one
    survives beside the new ones, and no hidden temporary folder is left."""
    _users(manager)
    manager.close()
    out = tmp_path / "latest"
    assert _cli("export", "users", "-d", str(data_dir), "-o", str(out)).exit_code == 0
    assert _export_rows(out) == {b"alice": b"Rome"}
    with LogManager(data_dir) as logs:
        logs.get_log("users", 0).append(build_simple_batch([(b"eve", b"Bern")], timestamp=7))
    r = _cli("export", "users", "-d", str(data_dir), "-o", str(out))
    assert r.exit_code == 1 and "--overwrite" in r.stderr
    assert _export_rows(out) == {b"alice": b"Rome"}
    r = _cli("export", "users", "-d", str(data_dir), "-o", str(out), "--overwrite")
    assert r.exit_code == 0, r.output
    assert _export_rows(out) == {b"alice": b"Rome", b"eve": b"Bern"}
    assert _siblings(out) == []


def test_a_failed_export_leaves_the_earlier_one_and_no_temp(spark, manager, data_dir, tmp_path):
    _users(manager)
    out = tmp_path / "latest"
    export_latest(spark, data_dir, "users", out)
    before = sorted((p.name, p.read_bytes()) for p in out.iterdir())
    with pytest.raises(Exception, match="no-such-format"):
        export_latest(spark, data_dir, "users", out, format="no-such-format", overwrite=True)
    assert sorted((p.name, p.read_bytes()) for p in out.iterdir()) == before
    assert _siblings(out) == []


def test_export_latest_refuses_the_data_dir_as_output(spark, manager, data_dir):
    """The Python API is as safe as the CLI: Spark's overwrite mode would have deleted
    every topic."""
    _users(manager)
    with pytest.raises(ExportTargetError, match="is the data dir"):
        export_latest(spark, data_dir, "users", data_dir, overwrite=True)
    assert manager.topics() == ["users"]
    assert (data_dir / "users-0").is_dir()


def test_a_small_export_is_one_file_not_one_per_shuffle_partition(
    spark, manager, data_dir, tmp_path
):
    """5,000 keys were 200 Parquet files (spark.sql.shuffle.partitions) of a few KB each;
    an export is one file per 128 MB begun (Spark's spark.sql.files.maxPartitionBytes,
    so reading it back is a task per file)."""
    manager.create_topic("many", 4, {"cleanup.policy": "compact"})
    for part in range(4):
        batch = [(f"k{part}-{i}".encode(), b"v" * 20) for i in range(500)]
        manager.get_log("many", part).append(build_simple_batch(batch, timestamp=5))
    assert int(spark.conf.get("spark.sql.shuffle.partitions")) > 1
    for fmt in ("parquet", "csv"):
        out = tmp_path / f"many-{fmt}"
        assert export_latest(spark, data_dir, "many", out, format=fmt) == 2000
        assert len(list(out.glob("part-*"))) == 1, fmt
    assert pq.read_table(tmp_path / "many-parquet").num_rows == 2000


def test_output_files_is_one_per_128_mb_begun():
    assert [output_files(n) for n in (0, 1, FILE_BYTES, FILE_BYTES + 1, 5 * FILE_BYTES)] == [
        1,
        1,
        1,
        2,
        5,
    ]
