"""Several log dirs, as Kafka's ``log.dirs``: placement, reload, foreign dirs, failure.

Kafka's rules checked here: every dir has its own ``meta.properties`` and they must agree
(``MetaPropertiesEnsemble.verify``: "Invalid cluster.id in ..."); each dir keeps its own
offset checkpoints; a new partition goes to the online dir with the fewest partitions
(``LogManager.nextLogDirs``); a partition is found wherever it is at start; and a dir taken
offline by an I/O error (``LogDirFailureChannel``) answers KAFKA_STORAGE_ERROR for its
partitions while the other dirs keep serving, until a restart recovers it.
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from kompakt.broker.config import BrokerConfig
from kompakt.errors import InconsistentClusterIdError, InvalidConfigError, KafkaStorageError
from kompakt.log.checkpoint import OffsetCheckpointFile
from kompakt.log.dir_failure import disk_error, disk_error_in_text
from kompakt.log.manager import (
    CLEAN_SHUTDOWN_FILE,
    CLEANER_CHECKPOINT,
    LOG_START_CHECKPOINT,
    META_FILE,
    RECOVERY_POINT_CHECKPOINT,
    LogManager,
)
from kompakt.record.encode import build_simple_batch


def _batch(key: bytes, value: bytes = b"v") -> bytes:
    return build_simple_batch([(key, value)], timestamp=1)


def _props(path: Path) -> dict[str, str]:
    lines = path.read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))


def test_new_partitions_go_to_the_dir_with_fewest_partitions_like_kafka_next_log_dirs(
    tmp_path, clock
):
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    with LogManager([a, b, c], clock=clock) as m:
        m.create_topic("t", 5)  # one by one: a, b, c, a, b
        m.create_topic("u", 1)  # c has the fewest (1 against 2, 2)
        where = {
            (t, p): m.log_dir_of(t, p) for t in ("t", "u") for p in range(5 if t == "t" else 1)
        }
        assert [where[("t", p)] for p in range(5)] == [a, b, c, a, b]
        assert where[("u", 0)] == c
        for p in range(5):
            assert (where[("t", p)] / f"t-{p}").is_dir()
        # the broker's own files stay in the first dir only
        assert (a / "kompakt-topics.json").exists() and not (b / "kompakt-topics.json").exists()


def test_every_dir_has_its_own_meta_properties_checkpoints_and_marker(tmp_path, clock):
    a, b = tmp_path / "a", tmp_path / "b"
    with LogManager([a, b], {"node.id": "7"}, clock=clock) as m:
        m.create_topic("t", 2, {"cleanup.policy": "compact"})
        m.get_log("t", 0).append(_batch(b"k0"))
        m.get_log("t", 1).append(_batch(b"k1"))
        m.get_log("t", 1).append(_batch(b"k1"))
        m.cleaner_checkpoint().write({("t", 0): 1, ("t", 1): 2})
    pa, pb = _props(a / META_FILE), _props(b / META_FILE)
    assert pa["cluster.id"] == pb["cluster.id"] and pa["node.id"] == pb["node.id"] == "7"
    assert pa["directory.id"] != pb["directory.id"]
    for d, tp, end in ((a, ("t", 0), 1), (b, ("t", 1), 2)):
        assert (d / CLEAN_SHUTDOWN_FILE).exists()
        assert OffsetCheckpointFile(d / RECOVERY_POINT_CHECKPOINT).read() == {tp: end}
        assert OffsetCheckpointFile(d / LOG_START_CHECKPOINT).read() == {tp: 0}
        assert OffsetCheckpointFile(d / CLEANER_CHECKPOINT).read() == {tp: end}


def test_partitions_are_found_wherever_they_are_at_start(tmp_path, clock):
    a, b = tmp_path / "a", tmp_path / "b"
    with LogManager([a, b], clock=clock) as m:
        m.create_topic("t", 4)
        for p in range(4):
            m.get_log("t", p).append(_batch(b"k%d" % p))
        placed = {p: m.log_dir_of("t", p) for p in range(4)}
    # listed the other way round, each partition is still where it was
    with LogManager([b, a], clock=clock) as m:
        assert {p: m.log_dir_of("t", p) for p in range(4)} == placed
        assert [m.get_log("t", p).log_end_offset for p in range(4)] == [1, 1, 1, 1]
        assert m.cleaner_checkpoint().read() == {}


def test_a_dir_of_another_cluster_is_refused(tmp_path, clock):
    a, b = tmp_path / "a", tmp_path / "b"
    LogManager(a, clock=clock).close()
    LogManager(b, clock=clock).close()  # a second, unrelated cluster
    with pytest.raises(InconsistentClusterIdError, match="Invalid cluster.id in: .*meta.prop"):
        LogManager([a, b], clock=clock)
    # refused before anything was written, and the locks are free again
    LogManager(a, clock=clock).close()


def test_a_dir_of_another_node_is_refused(tmp_path, clock):
    a, b = tmp_path / "a", tmp_path / "b"
    LogManager([a, b], {"node.id": "1"}, clock=clock).close()
    meta = b / META_FILE
    meta.write_text(meta.read_text().replace("node.id=1", "node.id=2"))
    with pytest.raises(InconsistentClusterIdError, match="node id"):
        LogManager([a, b], clock=clock)


def test_the_same_partition_in_two_dirs_is_refused_like_kafka(tmp_path, clock):
    a, b = tmp_path / "a", tmp_path / "b"
    with LogManager([a, b], clock=clock) as m:
        m.create_topic("t", 1)
    (b / "t-0").mkdir()
    with pytest.raises(KafkaStorageError, match="Duplicate log directories for t-0"):
        LogManager([a, b], clock=clock)


def test_log_dirs_config_is_a_comma_separated_list_and_log_dir_still_works(tmp_path):
    cfg = BrokerConfig.from_mapping({"log.dirs": f"{tmp_path}/a, {tmp_path}/b"})
    assert cfg.data_dirs == [tmp_path / "a", tmp_path / "b"]
    assert cfg.data_dir == tmp_path / "a"
    assert BrokerConfig.from_mapping({"log.dir": str(tmp_path)}).data_dirs == [tmp_path]
    with pytest.raises(InvalidConfigError, match="listed twice"):
        BrokerConfig.from_mapping({"log.dirs": f"{tmp_path}/a,{tmp_path}/a"})
    with pytest.raises(InvalidConfigError, match="empty"):
        BrokerConfig.from_mapping({"log.dirs": f"{tmp_path}/a,"})


def test_an_offline_dir_answers_kafka_storage_error_and_the_other_keeps_serving(tmp_path, clock):
    """LogDirFailureChannel.maybeAddOfflineLogDir: the first I/O error takes the dir
    offline once; its logs leave the manager's working set; the restart recovers it."""
    a, b = tmp_path / "a", tmp_path / "b"
    m = LogManager([a, b], clock=clock)
    m.create_topic("t", 2)
    for p in range(2):
        m.get_log("t", p).append(_batch(b"before"))
    seen = []
    m.failures.listeners.append(lambda path, reason: seen.append(path))
    failed_log = m.get_log("t", 1)
    assert m.log_dir_of("t", 1) == b
    failed_log.io_failed(OSError(errno.EIO, "Input/output error"), "appending to t-1")
    failed_log.io_failed(OSError(errno.EIO, "Input/output error"), "appending to t-1")
    assert seen == [b]  # told once
    assert m.offline_dirs() == {b: "appending to t-1: Input/output error"}
    with pytest.raises(KafkaStorageError, match="offline"):
        m.get_log("t", 1)
    with pytest.raises(KafkaStorageError):
        failed_log.append(_batch(b"late"))
    assert [p.partition for p in m.logs()] == [0]
    m.get_log("t", 0).append(_batch(b"after"))
    m.create_topic("u", 2)  # only the online dir takes new partitions
    assert {m.log_dir_of("u", p) for p in range(2)} == {a}
    m.checkpoint()
    m.close()
    assert (a / CLEAN_SHUTDOWN_FILE).exists() and not (b / CLEAN_SHUTDOWN_FILE).exists()
    with LogManager([a, b], clock=clock) as again:  # the disk is fine again: recovered
        assert again.offline_dirs() == {}
        assert again.get_log("t", 1).log_end_offset == 1
        assert again.get_log("t", 0).log_end_offset == 2
        again.get_log("t", 1).append(_batch(b"back"))


def test_a_full_last_online_dir_is_not_taken_offline(tmp_path, clock):
    """Kafka halts the broker when its last dir fails; a full disk there only fails the
    writes that do not fit (KAFKA_STORAGE_ERROR) and serves again when space is back."""
    with LogManager(tmp_path / "a", clock=clock) as m:
        m.create_topic("t", 1)
        plog = m.get_log("t", 0)
        plog.io_failed(OSError(errno.ENOSPC, "No space left on device"), "appending to t-0")
        assert m.offline_dirs() == {}
        plog.append(_batch(b"k"))
        plog.io_failed(OSError(errno.EIO, "Input/output error"), "appending to t-0")
        assert list(m.offline_dirs()) == [tmp_path / "a"]


def test_disk_errors_are_found_in_chains_and_in_spark_task_text():
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as exc:
            raise RuntimeError("clean failed") from exc
    except RuntimeError as wrapped:
        assert disk_error(wrapped).errno == errno.ENOSPC
    spark = (
        "PythonException: An exception was thrown from the Python worker.\n"
        "OSError: [Errno 28] No space left on device: '/d/t-0/00000000000000000000.log.cleaned'"
    )
    assert disk_error_in_text(spark).errno == errno.ENOSPC
    assert disk_error(OSError(errno.EMFILE, "Too many open files")) is None  # not the disk
    assert disk_error_in_text("[Errno 24] Too many open files") is None


def test_the_same_dir_twice_is_refused(tmp_path, clock):
    with pytest.raises(InvalidConfigError, match="listed twice"):
        LogManager([tmp_path / "a", tmp_path / "x" / ".." / "a"], clock=clock)
