"""The offline ``kompakt`` CLI: topic admin, produce/consume, dump, and one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from cli_kit import assert_one_line_error, kompakt_cmd
from typer.testing import CliRunner

from kompakt.cli.main import app
from kompakt.log.manager import LogManager
from kompakt.record.partitioner import murmur2, partition_for_key

runner = CliRunner()


def run(*args: str | Path, input: str | bytes | None = None):
    return runner.invoke(app, [str(a) for a in args], input=input)


def consume_json(data_dir: Path, topic: str, *extra: str) -> list[dict]:
    r = run("consume", topic, "--data-dir", data_dir, "--json", *extra)
    assert r.exit_code == 0, r.output
    return [json.loads(line) for line in r.stdout.splitlines()]


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


# -- topics --------------------------------------------------------------------------------


def test_topic_create_describe_list_alter_delete_round_trip(data_dir: Path):
    r = run("topic", "create", "users", "--data-dir", data_dir, "--partitions", "3",
            "--config", "cleanup.policy=compact", "--config", "segment.bytes=2000")  # fmt: skip
    assert r.exit_code == 0, r.output
    assert run("topic", "create", "events", "-d", data_dir).exit_code == 0

    r = run("topic", "list", "--data-dir", data_dir)
    assert r.stdout.splitlines() == ["events", "users"]
    listed = json.loads(run("topic", "list", "-d", data_dir, "--json").stdout)
    assert [(t["name"], t["partitions"]) for t in listed] == [("events", 1), ("users", 3)]

    [desc] = json.loads(run("topic", "describe", "users", "-d", data_dir, "--json").stdout)
    assert desc["partition_count"] == 3
    configs = {c["name"]: c for c in desc["configs"]}
    assert configs["cleanup.policy"]["value"] == "compact"
    assert configs["cleanup.policy"]["override"] is True
    assert configs["segment.bytes"]["value"] == "2000"
    assert configs["retention.ms"]["override"] is False
    assert [p["partition"] for p in desc["partitions"]] == [0, 1, 2]
    p0 = desc["partitions"][0]
    assert (p0["start_offset"], p0["end_offset"], p0["size_bytes"], p0["segments"]) == (0, 0, 0, 1)

    text = run("topic", "describe", "users", "-d", data_dir).stdout
    assert "PartitionCount: 3" in text
    assert any(line.split()[:2] == ["*", "cleanup.policy"] for line in text.splitlines())
    assert not any(line.split()[:2] == ["*", "retention.ms"] for line in text.splitlines())
    everything = json.loads(run("topic", "describe", "-d", data_dir, "--json").stdout)
    assert [t["name"] for t in everything] == ["events", "users"]

    r = run("topic", "alter", "users", "-d", data_dir, "--config", "retention.ms=1000",
            "--delete-config", "segment.bytes")  # fmt: skip
    assert r.exit_code == 0, r.output
    [desc] = json.loads(run("topic", "describe", "users", "-d", data_dir, "--json").stdout)
    overrides = {c["name"]: c["value"] for c in desc["configs"] if c["override"]}
    assert overrides == {"cleanup.policy": "compact", "retention.ms": "1000"}

    assert run("topic", "delete", "users", "-d", data_dir).exit_code == 0
    assert run("topic", "list", "-d", data_dir).stdout.splitlines() == ["events"]
    assert not (data_dir / "users-0").exists()
    assert (data_dir / ".kafka_cleanshutdown").exists()  # the LogManager was closed


def test_describe_reports_offsets_size_and_segments_after_produce(data_dir: Path):
    run("topic", "create", "t", "-d", data_dir, "--config", "segment.bytes=100")
    lines = "".join(f"k{i}\tvalue-{i}\n" for i in range(10))
    assert run("produce", "t", "-d", data_dir, "--batch-size", "2", input=lines).exit_code == 0
    [desc] = json.loads(run("topic", "describe", "t", "-d", data_dir, "--json").stdout)
    [p] = desc["partitions"]
    assert (p["start_offset"], p["end_offset"]) == (0, 10)
    assert p["segments"] > 1
    assert p["size_bytes"] == sum(f.stat().st_size for f in (data_dir / "t-0").glob("*.log"))


# -- produce and consume ---------------------------------------------------------------------


def test_produce_consume_round_trip_with_tombstone_and_json_fields(data_dir: Path):
    run("topic", "create", "users", "-d", data_dir, "--config", "cleanup.policy=compact")
    stdin = "alice\tLondon\nbob\tParis\n\nbob\t__DEL__\ncarol\tcaf\u00e9\n"
    r = run("produce", "users", "-d", data_dir, "--tombstone", "__DEL__", input=stdin)
    assert r.exit_code == 0, r.output

    r = run("consume", "users", "-d", data_dir)
    assert r.stdout.splitlines() == ["alice\tLondon", "bob\tParis", "bob\t", "carol\tcaf\u00e9"]

    records = consume_json(data_dir, "users", "--from-beginning")
    assert [set(r) for r in records] == [
        {"topic", "partition", "offset", "timestamp", "key", "value", "headers"}
    ] * 4
    assert [(r["offset"], r["key"], r["value"]) for r in records] == [
        (0, "alice", "London"), (1, "bob", "Paris"), (2, "bob", None), (3, "carol", "caf\u00e9"),
    ]  # fmt: skip
    assert all(r["topic"] == "users" and r["partition"] == 0 for r in records)
    assert all(r["headers"] == [] and r["timestamp"] > 0 for r in records)

    assert [r["offset"] for r in consume_json(data_dir, "users", "--offset", "2")] == [2, 3]
    assert [r["offset"] for r in consume_json(data_dir, "users", "--max-messages", "1")] == [0]


def test_produce_options_separator_partition_batch_size_and_compression(data_dir: Path):
    run("topic", "create", "t", "-d", data_dir, "--partitions", "2")
    stdin = "".join(f"k{i}=v{i}\n" for i in range(5)) + "no-key-line\n"
    r = run("produce", "t", "-d", data_dir, "--key-separator", "=", "--partition", "1",
            "--batch-size", "2", "--compression", "zstd", "--json", input=stdin)  # fmt: skip
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    assert (summary["records"], summary["batches"]) == (6, 3)
    assert summary["partitions"] == [
        {"partition": 1, "firstOffset": 0, "lastOffset": 5, "records": 6}
    ]
    records = consume_json(data_dir, "t", "--partition", "1")
    assert [(r["key"], r["value"]) for r in records][-2:] == [("k4", "v4"), (None, "no-key-line")]
    assert consume_json(data_dir, "t", "--partition", "0") == []
    dumped = json.loads(run("dump", data_dir / "t-1" / f"{0:020d}.log", "--json").stdout)
    assert {b["codec"] for b in dumped["files"][0]["batches"]} == {"zstd"}


def test_default_partitioner_matches_kafka_murmur2(data_dir: Path):
    kafka_default = pytest.importorskip("kafka.partitioner.default")
    run("topic", "create", "t", "-d", data_dir, "--partitions", "7")
    keys = [f"key-{i}" for i in range(60)] + ["", "a", "ab", "abc", "\u00fcber-\u00e9"]
    stdin = "".join(f"{k}\tv\n" for k in keys)
    assert run("produce", "t", "-d", data_dir, input=stdin).exit_code == 0
    placed = {r["key"]: r["partition"] for r in consume_json(data_dir, "t")}
    assert set(placed) == set(keys)
    for key, part in placed.items():
        expected = (kafka_default.murmur2(key.encode()) & 0x7FFFFFFF) % 7
        assert part == expected, key
    assert len(set(placed.values())) > 1


def test_murmur2_is_javas_signed_hash():
    kafka_default = pytest.importorskip("kafka.partitioner.default")
    for n in range(40):
        data = os.urandom(n)
        assert murmur2(data) & 0x7FFFFFFF == kafka_default.murmur2(data) & 0x7FFFFFFF
        assert -(2**31) <= murmur2(data) < 2**31
    assert partition_for_key(b"abc", 1) == 0


def test_null_keys_go_round_robin(data_dir: Path):
    run("topic", "create", "t", "-d", data_dir, "--partitions", "3")
    assert run("produce", "t", "-d", data_dir, input="a\nb\nc\nd\n").exit_code == 0
    parts = sorted((r["partition"], r["value"]) for r in consume_json(data_dir, "t"))
    assert parts == [(0, "a"), (0, "d"), (1, "b"), (2, "c")]


def test_null_key_on_compacted_topic_is_refused_and_nothing_written(data_dir: Path):
    run("topic", "create", "c", "-d", data_dir, "--config", "cleanup.policy=compact")
    r = run("produce", "c", "-d", data_dir, input="k1\tv1\nno key here\nk2\tv2\n")
    assert_one_line_error(r, "without key", "nothing was written")
    assert consume_json(data_dir, "c") == []


def test_consume_skips_control_batches_and_records_below_requested_offset(data_dir: Path):
    from kompakt.record.encode import build_control_batch, build_simple_batch
    from kompakt.record.header import CONTROL_COMMIT

    with LogManager(data_dir) as logs:
        logs.create_topic("t")
        plog = logs.get_log("t", 0)
        plog.append(build_simple_batch([(b"a", b"1"), (b"b", b"2")], timestamp=1000))
        plog.append(build_control_batch(CONTROL_COMMIT, producer_id=1, producer_epoch=0,
                                        timestamp=1001))  # fmt: skip
        plog.append(build_simple_batch([(b"c", b"3", [("h", b"x")])], timestamp=1002))
    records = consume_json(data_dir, "t", "--offset", "1")
    assert [(r["offset"], r["key"]) for r in records] == [(1, "b"), (3, "c")]
    assert records[1]["headers"] == [{"key": "h", "value": "x"}]
    assert records[1]["timestamp"] == 1002


# -- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "config, fragment",
    [("segment.bytes=abc", "segment.bytes"), ("no.such=1", "no.such"), ("novalue", "key=value")],
)
def test_bad_config_is_one_line_error(data_dir: Path, config: str, fragment: str):
    r = run("topic", "create", "t", "-d", data_dir, "--config", config)
    assert_one_line_error(r, fragment)
    assert run("topic", "list", "-d", data_dir).stdout == ""


def test_unknown_topic_is_one_line_error(data_dir: Path):
    run("topic", "create", "t", "-d", data_dir)
    assert_one_line_error(run("consume", "nope", "-d", data_dir), "unknown topic 'nope'")
    assert_one_line_error(run("topic", "describe", "nope", "-d", data_dir), "'nope'")
    assert_one_line_error(run("topic", "delete", "nope", "-d", data_dir), "'nope'")
    assert_one_line_error(run("produce", "nope", "-d", data_dir, input="a\tb\n"), "'nope'")
    assert_one_line_error(run("consume", "t", "-d", data_dir, "-p", "4"), "partition 4")
    assert_one_line_error(run("topic", "create", "t", "-d", data_dir), "already exists")


def test_missing_data_dir_is_an_error_and_not_created(tmp_path: Path):
    missing = tmp_path / "missing"
    assert_one_line_error(run("topic", "list", "-d", missing), "does not exist")
    assert not missing.exists()


def test_errors_in_a_subprocess_have_no_traceback(data_dir: Path):
    r = subprocess.run(
        [
            *kompakt_cmd(),
            "topic",
            "create",
            "t",
            "--data-dir",
            str(data_dir),
            "--config",
            "segment.bytes=abc",
        ],  # fmt: skip
        capture_output=True,
        text=True,
        timeout=60,  # fmt: skip
    )
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == [
        "error: Invalid value abc for configuration segment.bytes: Not a number of type INT"
    ]


def test_locked_data_dir_gives_clear_message(data_dir: Path):
    with LogManager(data_dir) as logs:
        logs.create_topic("t")
        r = subprocess.run(
            [*kompakt_cmd(), "topic", "list", "--data-dir", str(data_dir)],
            capture_output=True,
            text=True,
            timeout=60,  # fmt: skip
        )
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    [line] = r.stderr.strip().splitlines()
    assert line.startswith("error: ") and "locked by another process" in line


# -- dump ------------------------------------------------------------------------------------


def _segment(data_dir: Path, topic: str = "t") -> Path:
    return data_dir / f"{topic}-0" / f"{0:020d}.log"


def test_dump_lists_batches_and_records(data_dir: Path):
    run("topic", "create", "t", "-d", data_dir)
    run("produce", "t", "-d", data_dir, "--batch-size", "2", "--tombstone", "X",
        input="a\t1\nb\t2\na\tX\n")  # fmt: skip
    r = run("dump", _segment(data_dir))
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    batch_lines = [line for line in lines if line.startswith("baseOffset:")]
    assert len(batch_lines) == 2
    assert "baseOffset: 0 lastOffset: 1 count: 2" in batch_lines[0]
    assert "position: 0" in batch_lines[0] and "crcValid: true" in batch_lines[0]
    assert not any(line.startswith("|") for line in lines)

    deep = run("dump", _segment(data_dir), "--deep").stdout.splitlines()
    recs = [line for line in deep if line.startswith("| offset:")]
    assert len(recs) == 3
    assert "key: a payload: 1" in recs[0] and "valueSize: -1" in recs[2]

    doc = json.loads(run("dump", _segment(data_dir), "--deep", "--json").stdout)
    [f] = doc["files"]
    assert [b["baseOffset"] for b in f["batches"]] == [0, 2]
    assert f["batches"][1]["records"][0]["value"] is None
    assert {"producerId", "producerEpoch", "baseSequence", "isTransactional", "isControl",
            "codec", "size", "position", "crcValid", "count", "lastOffset"} <= set(f["batches"][0])  # fmt: skip
    assert f["errors"] == []


def test_dump_index_files(data_dir: Path):
    run("topic", "create", "t", "-d", data_dir, "--config", "index.interval.bytes=1")
    run("produce", "t", "-d", data_dir, "--batch-size", "1", input="a\t1\nb\t2\nc\t3\n")
    index = _segment(data_dir).with_suffix(".index")
    timeindex = _segment(data_dir).with_suffix(".timeindex")
    doc = json.loads(run("dump", index, timeindex, "--json").stdout)
    entries = doc["files"][0]["entries"]
    # like Kafka, an entry is added once more than index.interval.bytes were appended
    assert [e["offset"] for e in entries] == [1, 2]
    assert 0 < entries[0]["position"] < entries[1]["position"]
    assert all(set(e) == {"timestamp", "offset"} for e in doc["files"][1]["entries"])
    line = f"offset: 1 position: {entries[0]['position']}"
    assert run("dump", index).stdout.splitlines()[1] == line


def test_dump_reports_corrupt_batch_and_exits_nonzero(data_dir: Path):
    run("topic", "create", "t", "-d", data_dir)
    run("produce", "t", "-d", data_dir, "--batch-size", "1", input="a\t1\nb\t2\nc\t3\n")
    seg = _segment(data_dir)
    data = bytearray(seg.read_bytes())
    first_size = int.from_bytes(data[8:12], "big") + 12
    data[first_size + 64] ^= 0xFF  # a record byte of the second batch: its CRC fails
    seg.write_bytes(bytes(data))

    r = run("dump", seg, "--deep")
    assert r.exit_code == 1
    batch_lines = [line for line in r.stdout.splitlines() if line.startswith("baseOffset:")]
    assert ["crcValid: true" in b for b in batch_lines] == [True, False, True]
    assert "Traceback" not in r.output
    assert f"position {first_size}" in r.stderr and "CRC" in r.stderr

    doc = json.loads(run("dump", seg, "--json").stdout)
    assert [b["crcValid"] for b in doc["files"][0]["batches"]] == [True, False, True]
    assert doc["files"][0]["errors"][0]["position"] == first_size

    data[first_size + 8 : first_size + 12] = (5).to_bytes(4, "big")  # impossible length
    seg.write_bytes(bytes(data))
    r = run("dump", seg)
    assert r.exit_code == 1
    assert len([x for x in r.stdout.splitlines() if x.startswith("baseOffset:")]) == 1
    assert f"position {first_size}" in r.stderr and "length 5" in r.stderr


def test_dump_of_a_crashed_segment_stops_at_the_zeros_it_was_written_ahead_with(data_dir: Path):
    """A live segment's file runs in zeros to the next 64 KiB boundary (cut at a roll or a
    close, kompakt.log.syncs.WRITE_AHEAD): a crash leaves them, and they are no batch.
    Zeros as long as that or longer are not a written-ahead tail: reported as ever."""
    from kompakt.log.syncs import WRITE_AHEAD

    run("topic", "create", "t", "-d", data_dir)
    run("produce", "t", "-d", data_dir, "--batch-size", "1", input="a\t1\nb\t2\n")
    seg = _segment(data_dir)
    clean = seg.read_bytes()
    seg.write_bytes(clean + bytes(WRITE_AHEAD - len(clean)))
    doc = json.loads(run("dump", seg, "--json").stdout)
    assert [b["baseOffset"] for b in doc["files"][0]["batches"]] == [0, 1]
    assert doc["files"][0]["errors"] == []
    seg.write_bytes(clean + bytes(WRITE_AHEAD))
    r = run("dump", seg)
    assert r.exit_code == 1 and "length 0" in r.stderr


def test_dump_missing_and_unsupported_files_exit_nonzero_after_the_rest(data_dir: Path):
    run("topic", "create", "t", "-d", data_dir)
    run("produce", "t", "-d", data_dir, input="a\t1\n")
    other = data_dir / "notes.txt"
    other.write_text("x")
    r = run("dump", data_dir / "missing.log", _segment(data_dir), other)
    assert r.exit_code == 1
    assert "baseOffset: 0" in r.stdout
    assert len(r.stderr.strip().splitlines()) == 2
    assert "No such file" in r.stderr and "unsupported file type" in r.stderr


def test_dump_shows_delete_horizon_and_control_markers(tmp_path: Path):
    from kompakt.record.decode import Record
    from kompakt.record.encode import build_batch, build_control_batch
    from kompakt.record.header import CONTROL_ABORT

    seg = tmp_path / f"{0:020d}.log"
    seg.write_bytes(
        build_batch([Record(0, 1000, b"k", None)], delete_horizon=5000)
        + build_control_batch(
            CONTROL_ABORT, producer_id=7, producer_epoch=1, timestamp=1001, base_offset=1
        )
    )
    doc = json.loads(run("dump", seg, "--deep", "--json").stdout)
    first, marker = doc["files"][0]["batches"]
    assert first["deleteHorizon"] == 5000 and "deleteHorizon" not in marker
    assert first["records"][0]["timestamp"] == 1000
    assert marker["isControl"] and marker["isTransactional"] and marker["producerId"] == 7
    assert marker["records"][0]["controlType"] == "ABORT"
    text = run("dump", seg, "--deep").stdout
    assert "deleteHorizon: 5000" in text and "endTxnMarker: ABORT" in text


def test_internal_topics_cannot_be_deleted_like_kafka_topics_sh(data_dir: Path):
    """kafka-topics.sh: "Topic __consumer_offsets is a kafka internal topic and is not
    allowed to be marked for deletion" (Topic.isInternal)."""
    with LogManager(data_dir) as logs:
        logs.create_topic("__consumer_offsets", 1, {"cleanup.policy": "compact"})
    r = run("topic", "delete", "__consumer_offsets", "--data-dir", data_dir)
    assert_one_line_error(r, "internal topic")
    assert (data_dir / "__consumer_offsets-0").is_dir()
