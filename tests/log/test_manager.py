"""The data dir: lock, topic lifecycle, configs that persist, Kafka-named files."""

from __future__ import annotations

import pytest

from kompakt.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    TopicExistsError,
    UnknownTopicError,
)
from kompakt.log.checkpoint import OffsetCheckpointFile
from kompakt.log.manager import LogManager
from kompakt.record.encode import build_simple_batch


def test_second_process_opening_the_dir_gets_a_clear_lock_error(tmp_path):
    import subprocess
    import sys

    m = LogManager(tmp_path / "d")
    code = (
        "import sys\nfrom kompakt.log.manager import LogManager\n"
        "from kompakt.errors import LogDirLockedError\n"
        f"try:\n    LogManager({str(tmp_path / 'd')!r})\nexcept LogDirLockedError as e:\n"
        "    print(e); sys.exit(3)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 3 and "locked" in res.stdout
    m.close()
    m = LogManager(tmp_path / "d")  # released on close: reopening works
    m.close()


@pytest.mark.parametrize("name", ["../x", ".", "..", "a/b", "x" * 250, "", "spa ce"])
def test_topic_names_that_could_escape_the_data_dir_are_refused(manager, name):
    with pytest.raises(InvalidTopicError):
        manager.create_topic(name, 1)


def test_create_topic_twice_and_unknown_topic_errors(manager):
    manager.create_topic("t", 2)
    with pytest.raises(TopicExistsError):
        manager.create_topic("t", 1)
    with pytest.raises(UnknownTopicError):
        manager.get_log("nope", 0)
    with pytest.raises(UnknownTopicError):
        manager.get_log("t", 2)


def test_bad_config_is_refused_and_nothing_created(manager):
    with pytest.raises(InvalidConfigError):
        manager.create_topic("t", 1, {"cleanup.policy": "compactt"})
    with pytest.raises(InvalidConfigError):
        manager.create_topic("t", 1, {"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"})
    assert manager.topics() == []


def test_validate_only_creates_nothing(manager):
    manager.create_topic("t", 3, {"cleanup.policy": "compact"}, validate_only=True)
    assert manager.topics() == []


def test_topic_configs_and_partitions_survive_restart(tmp_path):
    m = LogManager(tmp_path / "d")
    m.create_topic("users", 3, {"cleanup.policy": "compact", "segment.bytes": "1024"})
    m.alter_topic_config("users", {"min.cleanable.dirty.ratio": "0.1"})
    m.create_partitions("users", 4)
    m.get_log("users", 3).append(build_simple_batch([(b"k", b"v")], timestamp=1))
    m.close()
    m2 = LogManager(tmp_path / "d")
    cfg = m2.topic_config("users")
    assert cfg.compact and cfg.segment_bytes == 1024 and cfg.min_cleanable_dirty_ratio == 0.1
    assert m2.partition_count("users") == 4
    assert m2.get_log("users", 3).log_end_offset == 1
    assert {p.name for p in (tmp_path / "d").iterdir() if p.is_dir()} == {
        f"users-{i}" for i in range(4)
    }
    m2.close()


def test_alter_config_delete_returns_to_default(manager):
    manager.create_topic("t", 1, {"retention.ms": "1000"})
    cfg = manager.alter_topic_config("t", delete=["retention.ms"])
    assert cfg.retention_ms == 604800000
    assert manager.get_log("t", 0).config.retention_ms == 604800000


def test_create_partitions_must_grow(manager):
    manager.create_topic("t", 2)
    with pytest.raises(InvalidPartitionsError):
        manager.create_partitions("t", 2)


def test_broker_log_defaults_override_builtin_defaults(tmp_path):
    m = LogManager(
        tmp_path / "d", broker_config={"log.segment.bytes": "4096", "log.cleanup.policy": "compact"}
    )
    m.create_topic("t", 1)
    cfg = m.topic_config("t")
    assert cfg.segment_bytes == 4096 and cfg.compact
    m.close()


def test_delete_topic_removes_its_directories(manager):
    manager.create_topic("t", 2)
    manager.delete_topic("t")
    assert manager.topics() == []
    assert not [p for p in manager.dir.iterdir() if p.name.startswith("t-")]


def test_checkpoint_files_use_kafka_format(manager):
    manager.create_topic("t", 2)
    manager.get_log("t", 1).append(build_simple_batch([(b"k", b"v")], timestamp=1))
    manager.flush_all()  # the recovery point is the flushed offset
    text = (manager.dir / "recovery-point-offset-checkpoint").read_text()
    assert text.splitlines()[:2] == ["0", "2"]
    assert "t 1 1" in text.splitlines()
    assert (
        OffsetCheckpointFile(manager.dir / "recovery-point-offset-checkpoint").read()[("t", 1)] == 1
    )


def test_opens_a_kafka_written_log_dir_without_kompakt_metadata(tmp_path):
    m = LogManager(tmp_path / "d")
    m.create_topic("legacy", 2)
    m.get_log("legacy", 1).append(build_simple_batch([(b"k", b"v")], timestamp=1))
    m.close()
    (tmp_path / "d" / "kompakt-topics.json").unlink()
    m2 = LogManager(tmp_path / "d")
    assert m2.topics() == ["legacy"] and m2.partition_count("legacy") == 2
    assert m2.get_log("legacy", 1).log_end_offset == 1
    m2.close()


def test_concurrent_checkpoint_writes_are_serialized_like_kafkas_checkpoint_file(manager):
    """Kafka's ``CheckpointFile.write`` is ``synchronized``. The broker's checkpoint timer
    and its retention thread both call ``LogManager.checkpoint``; unserialized they
    shared ``recovery-point-offset-checkpoint.tmp`` and one rename failed with ENOENT
    (found by the fault campaign, seed 2, right after a restart)."""
    import threading

    manager.create_topic("t", 4, {})
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            for _ in range(200):
                manager.checkpoint()
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=writer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(OffsetCheckpointFile(manager.dir / "recovery-point-offset-checkpoint").read()) == 4
