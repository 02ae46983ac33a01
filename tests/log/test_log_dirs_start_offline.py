"""A log dir that is unusable at start goes offline alone, as in Kafka.

Kafka's rules checked here: ``LogManager.createAndValidateLogDirs`` and ``loadLogs`` hand
a dir that cannot be made, read or loaded to the ``LogDirFailureChannel`` and start with
the others; only when none is usable does the broker stop ("None of the specified log
dirs from ... can be created or validated"). A replica whose directory is offline stays
offline and is never created again elsewhere: KIP-858 records each replica's directory
id in the metadata, as ``kompakt-topics.json`` records each partition's ``directory.id``
here. The first dir (kompakt's metadata: topics, groups, transactions) is fatal, as
Kafka's ``metadata.log.dir`` is.

A regular file in place of a dir (or of a partition's folder) makes it unusable even for
root, where ``chmod 000`` would not.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kompakt.errors import KafkaStorageError, UnknownTopicError
from kompakt.log.manager import META_FILE, TOPICS_FILE, LogManager
from kompakt.record.encode import build_simple_batch


def _batch(key: bytes, value: bytes = b"v") -> bytes:
    return build_simple_batch([(key, value)], timestamp=1)


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` and its bytes (None for a folder)."""
    out: dict[str, bytes | None] = {}
    if root.is_file():
        return {".": root.read_bytes()}
    for p in sorted(root.rglob("*")):
        out[str(p.relative_to(root))] = p.read_bytes() if p.is_file() else None
    return out


def _two_dirs_with_data(tmp_path: Path, clock) -> tuple[Path, Path]:
    """``t`` with t-0 in ``a`` and t-1 in ``b``, three records each, closed cleanly."""
    a, b = tmp_path / "a", tmp_path / "b"
    with LogManager([a, b], clock=clock) as m:
        m.create_topic("t", 2, {"cleanup.policy": "compact"})
        assert m.log_dir_of("t", 1) == b
        for p in range(2):
            for i in range(3):
                m.get_log("t", p).append(_batch(b"k%d" % i, b"p%d-%d" % (p, i)))
    return a, b


def _put_a_file_in_place_of(path: Path) -> Path:
    """Move the dir aside and leave a regular file where it was; the dir's new place."""
    away = path.with_name(path.name + ".away")
    path.rename(away)
    path.write_bytes(b"not a directory\n")
    return away


def _put_back(path: Path, away: Path) -> None:
    path.unlink()
    away.rename(path)


def _check_offline_partition(m: LogManager, a: Path, b: Path) -> None:
    assert list(m.offline_dirs()) == [b]
    assert m.is_offline("t", 1) and not m.is_offline("t", 0)
    with pytest.raises(KafkaStorageError, match="offline"):  # not UNKNOWN_TOPIC_OR_PARTITION
        m.get_log("t", 1)
    assert m.partition_count("t") == 2
    assert [(p.topic, p.partition) for p in m.logs()] == [("t", 0)]
    stand_in = {(p.topic, p.partition): p for p in m.all_logs()}[("t", 1)]
    assert stand_in.offline is not None and stand_in.dir.parent == b
    assert not (a / "t-1").exists()  # no empty copy in the online dir
    # the online dir serves
    m.get_log("t", 0).append(_batch(b"k9", b"later"))
    assert m.get_log("t", 0).log_end_offset == 4


def test_a_second_dir_that_is_a_file_at_start_goes_offline_like_kafka_create_and_validate_log_dirs(
    tmp_path, clock
):
    a, b = _two_dirs_with_data(tmp_path, clock)
    away = _put_a_file_in_place_of(b)
    with LogManager([a, b], clock=clock) as m:
        _check_offline_partition(m, a, b)
        # the reason names the mistake, not mkdir's "File exists"
        assert "a file is where the dir should be" in m.offline_dirs()[b]
        m.create_topic("u", 2)  # new partitions go to online dirs only
        assert {m.log_dir_of("u", p) for p in range(2)} == {a}
        by_dir = {d.path: [p.name for p in logs] for d, logs in m.logs_by_dir(online_only=False)}
        assert by_dir == {a: ["t-0", "u-0", "u-1"], b: ["t-1"]}
        m.checkpoint()
        m.flush_all()
        m.apply_retention()
    assert b.read_bytes() == b"not a directory\n"  # nothing written where the dir was
    # the recorded directory of t-1 survives the save made while it was offline
    saved = json.loads((a / TOPICS_FILE).read_text())["t"]["directories"]
    b_id = dict(
        line.split("=", 1) for line in (away / META_FILE).read_text().splitlines() if "=" in line
    )["directory.id"]
    assert saved[1] == b_id
    with LogManager([a, b], clock=clock) as m:  # a second start, still without the dir
        assert list(m.offline_dirs()) == [b] and m.is_offline("t", 1)
        assert not (a / "t-1").exists() and m.get_log("t", 0).log_end_offset == 4

    _put_back(b, away)
    with LogManager([a, b], clock=clock) as m:  # fixed: back with all its records
        assert m.offline_dirs() == {}
        plog = m.get_log("t", 1)
        assert m.log_dir_of("t", 1) == b
        values = [r.value for batch in plog.iter_batches() for r in batch.records()]
        assert values == [b"p1-0", b"p1-1", b"p1-2"]
        plog.append(_batch(b"k3"))


def test_a_partition_folder_that_cannot_be_loaded_takes_its_dir_offline_like_kafka_load_logs(
    tmp_path, clock
):
    """Kafka's ``loadLogs``: an IOException loading one log marks its whole dir offline."""
    a, b = _two_dirs_with_data(tmp_path, clock)
    folder = b / "t-1"
    folder.rename(b / "t-1.saved")
    folder.write_bytes(b"in the way\n")
    with LogManager([a, b], clock=clock) as m:
        _check_offline_partition(m, a, b)
    folder.unlink()
    (b / "t-1.saved").rename(folder)
    with LogManager([a, b], clock=clock) as m:
        assert m.offline_dirs() == {} and m.get_log("t", 1).log_end_offset == 3


def test_an_old_topics_file_without_directory_ids_still_loads_and_gets_them(tmp_path, clock):
    a, b = _two_dirs_with_data(tmp_path, clock)
    body = json.loads((a / TOPICS_FILE).read_text())
    for meta in body.values():
        del meta["directories"]
    (a / TOPICS_FILE).write_text(json.dumps(body))
    with LogManager([a, b], clock=clock) as m:  # found on disk: adopted where they are
        assert [m.log_dir_of("t", p) for p in range(2)] == [a, b]
        assert m.get_log("t", 1).log_end_offset == 3
    saved = json.loads((a / TOPICS_FILE).read_text())["t"]["directories"]
    assert len(saved) == 2 and all(isinstance(x, str) for x in saved) and saved[0] != saved[1]


def test_an_old_topics_file_and_an_offline_dir_never_recreate_a_missing_partition(tmp_path, clock):
    """Without a recorded directory, a partition found in no online dir may be on the
    offline one: it stays offline rather than becoming an empty log elsewhere."""
    a, b = _two_dirs_with_data(tmp_path, clock)
    body = json.loads((a / TOPICS_FILE).read_text())
    del body["t"]["directories"]
    (a / TOPICS_FILE).write_text(json.dumps(body))
    away = _put_a_file_in_place_of(b)
    with LogManager([a, b], clock=clock) as m:
        _check_offline_partition(m, a, b)
    _put_back(b, away)
    with LogManager([a, b], clock=clock) as m:
        assert m.get_log("t", 1).log_end_offset == 3 and m.log_dir_of("t", 1) == b


def test_a_missing_folder_in_its_online_recorded_dir_is_made_there(tmp_path, clock):
    a, b = _two_dirs_with_data(tmp_path, clock)
    for p in (b / "t-1").iterdir():
        p.unlink()
    (b / "t-1").rmdir()
    with LogManager([a, b], clock=clock) as m:
        assert m.log_dir_of("t", 1) == b and m.get_log("t", 1).log_end_offset == 0


def test_deleting_a_topic_with_a_partition_on_an_offline_dir_is_refused_and_loses_nothing(
    tmp_path, clock
):
    """Kafka's TopicDeletionManager keeps a deletion pending while a replica is offline;
    kompakt answers KAFKA_STORAGE_ERROR and changes nothing."""
    a, b = _two_dirs_with_data(tmp_path, clock)
    away = _put_a_file_in_place_of(b)
    with LogManager([a, b], clock=clock) as m:
        m.create_topic("u", 1)
        with pytest.raises(KafkaStorageError, match="offline log dirs"):
            m.delete_topic("t")
        assert m.has_topic("t") and m.get_log("t", 0).log_end_offset == 3
        m.delete_topic("u")  # a topic all online is deleted as before
        with pytest.raises(UnknownTopicError):
            m.get_log("u", 0)
    _put_back(b, away)
    with LogManager([a, b], clock=clock) as m:
        assert [m.get_log("t", p).log_end_offset for p in range(2)] == [3, 3]
        m.delete_topic("t")
        assert not (a / "t-0").exists() and not (b / "t-1").exists()


def test_every_dir_unusable_stops_with_kafkas_message_and_writes_nothing(tmp_path, clock):
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_bytes(b"file a\n")
    b.write_bytes(b"file b\n")
    before = _tree(tmp_path)
    with pytest.raises(KafkaStorageError, match="None of the specified log dirs from") as err:
        LogManager([a, b], clock=clock)
    assert str(a) in str(err.value) and "\n" not in str(err.value)
    assert _tree(tmp_path) == before


def test_the_first_dir_unusable_is_fatal_and_the_others_are_left_untouched(tmp_path, clock):
    """The first dir holds kompakt-topics.json and the broker's files (Kafka's
    metadata.log.dir): without it the broker cannot know its topics."""
    a, b = _two_dirs_with_data(tmp_path, clock)
    away = _put_a_file_in_place_of(a)
    before = _tree(tmp_path)
    with pytest.raises(KafkaStorageError, match="the first log dir") as err:
        LogManager([a, b], clock=clock)
    assert str(a) in str(err.value) and TOPICS_FILE in str(err.value)
    assert _tree(tmp_path) == before  # not even a .lock in b
    _put_back(a, away)
    with LogManager([a, b], clock=clock) as m:
        assert m.get_log("t", 1).log_end_offset == 3


def test_nothing_outside_the_log_dirs_is_touched(tmp_path, clock):
    a, b = _two_dirs_with_data(tmp_path / "data", clock)
    (tmp_path / "neighbour").mkdir()
    (tmp_path / "neighbour" / "t-1").mkdir()  # looks like a partition: never taken
    away = _put_a_file_in_place_of(b)
    outside = {k: v for k, v in _tree(tmp_path).items() if not k.startswith("data/a/")}
    with LogManager([a, b], clock=clock) as m:
        m.get_log("t", 0).append(_batch(b"x"))
        m.create_topic("v", 3)
    assert {k: v for k, v in _tree(tmp_path).items() if not k.startswith("data/a/")} == outside
    assert away.is_dir()


def test_a_meta_properties_without_a_directory_id_gets_one_as_kafka_adds_it(tmp_path, clock):
    a = tmp_path / "a"
    a.mkdir()
    (a / META_FILE).write_text("version=1\nnode.id=1\ncluster.id=abc")  # no newline at end
    with LogManager([a], clock=clock) as m:
        assert m.cluster_id == "abc"
        m.create_topic("t", 1)
    lines = (a / META_FILE).read_text().splitlines()
    assert lines[:3] == ["version=1", "node.id=1", "cluster.id=abc"]
    assert lines[3].startswith("directory.id=") and len(lines) == 4
    dir_id = lines[3].split("=", 1)[1]
    assert json.loads((a / TOPICS_FILE).read_text())["t"]["directories"] == [dir_id]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a chmod 000 dir")
def test_a_second_dir_without_permission_goes_offline(tmp_path, clock):
    a, b = _two_dirs_with_data(tmp_path, clock)
    b.chmod(0)
    try:
        with LogManager([a, b], clock=clock) as m:
            assert list(m.offline_dirs()) == [b] and m.is_offline("t", 1)
    finally:
        b.chmod(0o755)
    with LogManager([a, b], clock=clock) as m:
        assert m.get_log("t", 1).log_end_offset == 3
