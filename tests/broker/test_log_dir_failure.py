"""A log dir whose disk fills goes offline alone, as with Kafka's LogDirFailureChannel.

A broker process with two log dirs: ``good`` and ``bad``, the second on a small tmpfs
(root mounts one; where mounting fails the broker's ``RLIMIT_FSIZE`` is lowered with
``prlimit(2)`` instead, as ``tests/reliability/fault_campaign.py`` does, and writes past it
fail with EFBIG). The disk fills during a produce, and in the second test during a clean.
Kafka's contract, checked with confluent-kafka and raw requests: the failed dir's
partitions answer KAFKA_STORAGE_ERROR (56) in Produce, Fetch, ListOffsets and Metadata,
DescribeLogDirs gives the dir's error, the metrics and ``/v1/partitions`` say offline,
the ERROR is logged once; the other dir's topics keep serving; nothing acknowledged is
lost, and after space is freed a restart brings the partitions back.
"""

from __future__ import annotations

import errno
import json
import os
import resource
import subprocess
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient
from raw_kafka import call
from reliability.kit import BrokerProcess, create_topic, read_partition
from shared_kit import wait_for

from kompakt.broker.coordinator.records import partition_for

STORAGE_ERROR = 56
assert KafkaError.KAFKA_STORAGE_ERROR == STORAGE_ERROR
NODE = 1
FSIZE_LIMIT = 8192  # the RLIMIT_FSIZE fallback: a "disk" that takes no file past 8 KiB
OVERRIDES = {
    "kompakt.cleaner.engine": "local",
    "log.cleaner.enable": "false",  # the clean below is the one POST /v1/compact asks for
    "log.index.size.max.bytes": "4096",  # preallocated indexes stay small
    "log.segment.delete.delay.ms": "100",
    "log.flush.offset.checkpoint.interval.ms": "500",
    "node.id": str(NODE),
    "offsets.topic.num.partitions": "2",  # one in each dir
}
SAFE = {"segment.bytes": "4096"}  # the good dir's files stay under the fallback's cap


@dataclass
class Disk:
    """The ``bad`` log dir and how its disk is filled and fixed."""

    path: Path
    mounted: bool

    def fill(self, broker: BrokerProcess, leave: int) -> None:
        """Leave about ``leave`` bytes free (tmpfs), or cap every file (the fallback)."""
        if self.mounted:
            st = os.statvfs(self.path)
            with open(self.path / "filler", "wb") as f:
                f.write(b"\0" * max(0, st.f_bavail * st.f_frsize - leave))
        else:
            _soft, hard = resource.prlimit(broker.pid, resource.RLIMIT_FSIZE)
            resource.prlimit(broker.pid, resource.RLIMIT_FSIZE, (FSIZE_LIMIT, hard))

    def fix(self) -> None:
        """Space is back: the filler removed and the tmpfs grown (the broker restarts
        without the file-size cap in the fallback)."""
        if self.mounted:
            (self.path / "filler").unlink(missing_ok=True)
            subprocess.run(["mount", "-o", "remount,size=16m", str(self.path)], check=True)


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Disk]:
    bad = tmp_path / f"bad-{uuid.uuid4().hex[:6]}"
    bad.mkdir()
    res = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(bad)], capture_output=True
    )
    try:
        yield Disk(bad, res.returncode == 0)
    finally:
        if res.returncode == 0:  # always unmounted, whatever the test did
            subprocess.run(["umount", "-l", str(bad)], check=False)


def start(tmp_path: Path, disk: Disk, engine: str = "local", **ports: int) -> BrokerProcess:
    good = tmp_path / "good"
    overrides = {
        **OVERRIDES,
        "log.dirs": f"{good},{disk.path}",
        "kompakt.cleaner.engine": engine,
        "kompakt.spark.master": "local[1]",
    }
    broker = BrokerProcess(good, overrides, log_path=tmp_path / "broker.log", **ports)
    return broker.start(timeout=120)


def produce(bootstrap: str, topic: str, n: int, size: int, keys: int | None = None):
    """acks=all, no retries: each delivery report is the broker's answer. Returns the
    acknowledged (offset, key, value) and the error codes."""
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": False,
            "retries": 0,
            "linger.ms": 2,
            "message.timeout.ms": 20000,
            "log_level": 2,
        }
    )
    acked: list[tuple[int, bytes, bytes]] = []
    codes: list[int] = []

    def done(err, msg):
        if err is None:
            acked.append((msg.offset(), msg.key(), msg.value()))
        codes.append(0 if err is None else err.code())

    for i in range(0, n, 20):
        for j in range(i, min(n, i + 20)):
            key = b"k%d" % (j % keys if keys else j)
            p.produce(topic, b"%d-" % j + b"x" * size, key, partition=0, on_delivery=done)
        assert p.flush(30) == 0
        if STORAGE_ERROR in codes:
            break
    return acked, codes


def raw_errors(port: int) -> dict[str, int]:
    """The doomed partition's error code in Metadata, ListOffsets and Fetch (raw)."""
    md = call(port, 3, 12, {"topics": [{"name": "doomed"}], "allow_auto_topic_creation": False})
    part = md.topics[0].partitions[0]
    assert list(part.offline_replicas) == [NODE]
    lo = call(
        port,
        2,
        7,
        {"replica_id": -1, "topics": [{"name": "doomed", "partitions": [{"timestamp": -1}]}]},
    )
    fetch = call(
        port,
        1,
        11,
        {
            "replica_id": -1,
            "max_bytes": 1 << 20,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": "doomed",
                    "partitions": [{"fetch_offset": 0, "partition_max_bytes": 1 << 20}],
                }
            ],
        },
    )
    return {
        "metadata": int(part.error_code),
        "list_offsets": int(lo.topics[0].partitions[0].error_code),
        "fetch": int(fetch.responses[0].partitions[0].error_code),
    }


def check_offline(broker: BrokerProcess, disk: Disk) -> None:
    """Every report of the failed dir, and the good dir still serving."""
    assert broker.alive()
    assert raw_errors(broker.port) == dict.fromkeys(("metadata", "list_offsets", "fetch"), 56)
    _acked, codes = produce(broker.bootstrap, "doomed", 3, 10)
    assert codes == [STORAGE_ERROR] * 3  # at once, no retry loop
    dirs = call(broker.port, 35, 4, {"topics": None}).results
    by_dir = {Path(r.log_dir): r for r in dirs}
    assert int(by_dir[disk.path.resolve()].error_code) == STORAGE_ERROR
    good = by_dir[(broker.data_dir).resolve()]
    assert int(good.error_code) == 0
    assert "safe" in {t.name for t in good.topics} and "doomed" not in {t.name for t in good.topics}
    metrics = broker.admin_get("/metrics").decode()
    assert f'kompakt_log_dir_offline{{dir="{disk.path}"}} 1.0' in metrics
    assert "kompakt_log_dir_offline_count 1.0" in metrics
    rows = json.loads(broker.admin_get("/v1/partitions"))
    rows = rows["partitions"] if isinstance(rows, dict) else rows
    row = {r["topic"]: r for r in rows}
    assert row["doomed"]["offline"] is True and "KAFKA_STORAGE_ERROR" in row["doomed"]["error"]
    assert row["safe"]["offline"] is False
    # the other dir keeps serving: produce, fetch, metadata
    acked, codes = produce(broker.bootstrap, "safe", 40, 20)
    assert set(codes) == {0}
    assert read_partition(broker.bootstrap, "safe", 0)[-40:] == acked
    md = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics("safe", timeout=10)
    assert md.topics["safe"].partitions[0].error is None
    if disk.mounted:  # (the fallback's cap also stops the broker's own log file)
        lines = [ln for ln in broker.log_text().splitlines() if " is offline: " in ln]
        assert len(lines) == 1 and "ERROR" in lines[0] and str(disk.path) in lines[0], lines


def restart_and_check(broker: BrokerProcess, tmp_path: Path, disk: Disk, acked: list) -> None:
    """Space back, restart: the partitions come back and every acknowledged record is
    where it was acknowledged."""
    assert broker.stop() == 0  # the good dir closes cleanly; the failed one is recovered
    disk.fix()
    again = start(tmp_path, disk, port=broker.port, admin_port=broker.admin_port)
    try:
        assert raw_errors_none(again.port)
        got = {off: (k, v) for off, k, v in read_partition(again.bootstrap, "doomed", 0)}
        lost = [(off, k) for off, k, v in acked if got.get(off) != (k, v)]
        assert not lost, f"{len(lost)} acknowledged records lost, e.g. {lost[:3]}"
        more, codes = produce(again.bootstrap, "doomed", 5, 10)
        assert set(codes) == {0} and more[0][0] == max(got) + 1
        assert "kompakt_log_dir_offline_count 0.0" in again.admin_get("/metrics").decode()
    finally:
        again.stop()


# a group id whose offsets go to each of the two __consumer_offsets partitions
GROUPS = {p: next(f"g{i}" for i in range(100) if partition_for(f"g{i}", 2) == p) for p in (0, 1)}


def commit(port: int, group: str) -> int:
    """A simple OffsetCommit (generation -1, no member) of safe-0; its error code."""
    wait_for(
        lambda: int(call(port, 10, 3, {"key": group, "key_type": 0}).error_code) == 0,
        "the group coordinator",
    )
    resp = call(
        port,
        8,
        8,
        {
            "group_id": group,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "topics": [
                {"name": "safe", "partitions": [{"partition_index": 0, "committed_offset": 0}]}
            ],
        },
    )
    return int(resp.topics[0].partitions[0].error_code)


def raw_errors_none(port: int) -> bool:
    md = call(port, 3, 12, {"topics": [{"name": "doomed"}], "allow_auto_topic_creation": False})
    return int(md.topics[0].partitions[0].error_code) == 0


def test_disk_full_during_produce_takes_that_log_dir_offline_the_other_keeps_serving(
    tmp_path, disk
):
    broker = start(tmp_path, disk)
    try:
        create_topic(broker.bootstrap, "safe", 1, SAFE)  # the dir with fewest: good
        create_topic(broker.bootstrap, "doomed", 1, {"segment.bytes": str(1 << 20)})
        assert (disk.path / "doomed-0").is_dir() and (broker.data_dir / "safe-0").is_dir()
        # __consumer_offsets is placed like any topic: partition 0 here, 1 in the bad dir
        assert commit(broker.port, GROUPS[1]) == 0
        assert (broker.data_dir / "__consumer_offsets-0").is_dir()
        assert (disk.path / "__consumer_offsets-1").is_dir()
        disk.fill(broker, leave=200_000)
        size = 1000 if disk.mounted else 200  # a first batch under the fallback's cap
        acked, codes = produce(broker.bootstrap, "doomed", 2000, size)
        assert STORAGE_ERROR in codes and acked, (len(acked), set(codes))
        check_offline(broker, disk)
        # a group whose offsets live in the failed dir cannot commit; the other can
        assert commit(broker.port, GROUPS[1]) == STORAGE_ERROR
        assert commit(broker.port, GROUPS[0]) == 0
    except BaseException:
        print(broker.log_tail())
        broker.kill()
        raise
    restart_and_check(broker, tmp_path, disk, acked)


def test_disk_full_during_a_clean_takes_that_log_dir_offline_the_other_keeps_serving(
    tmp_path, disk
):
    clean_fills_the_disk(tmp_path, disk, "local")


def test_disk_full_during_a_spark_clean_takes_that_log_dir_offline(tmp_path, disk):
    """The Spark engine's task failure arrives as text ("[Errno 28] ..."): the same dir
    goes offline (Kafka's cleaner reports an IOException to the LogDirFailureChannel)."""
    clean_fills_the_disk(tmp_path, disk, "spark")


def clean_fills_the_disk(tmp_path: Path, disk: Disk, engine: str) -> None:
    broker = start(tmp_path, disk, engine)
    try:
        create_topic(broker.bootstrap, "safe", 1, SAFE)
        create_topic(
            broker.bootstrap,
            "doomed",
            1,
            {
                "cleanup.policy": "compact",
                "segment.bytes": "65536",
                "min.cleanable.dirty.ratio": "0.01",
            },
        )
        # 120 keys of 1 kB written three times: the clean keeps about 120 kB
        acked, codes = produce(broker.bootstrap, "doomed", 360, 1000, keys=120)
        assert set(codes) == {0}
        disk.fill(broker, leave=40_000)
        status, body = compact_now(broker, "doomed")
        assert status >= 400, body  # the clean failed on the full disk
        wait_for(lambda: b"kompakt_log_dir_offline_count 1.0" in broker.admin_get("/metrics"))
        check_offline(broker, disk)
    except BaseException:
        print(broker.log_tail())
        broker.kill()
        raise
    restart_and_check(broker, tmp_path, disk, acked)


def compact_now(broker: BrokerProcess, topic: str) -> tuple[int, dict]:
    req = urllib.request.Request(
        f"http://127.0.0.1:{broker.admin_port}/v1/compact",
        data=json.dumps({"topic": topic, "partition": 0}).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=300) as resp:  # Spark's first job
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_the_broker_stops_when_every_log_dir_is_offline_as_kafka_halts(tmp_path, caplog):
    """Kafka's LogDirFailureHandler: "Shutdown broker because all log dirs in ... have
    failed". An I/O error (EIO) in each dir, as the failure channel receives it."""
    from kompakt.broker.app import start_test_broker

    a, b = tmp_path / "a", tmp_path / "b"
    broker = start_test_broker(str(a), log_dirs=f"{a},{b}")
    try:
        broker.logs.fail_dir(a, OSError(errno.EIO, "Input/output error"), "flushing t-0")
        assert broker._thread.is_alive()  # the other dir still serves
        broker.logs.fail_dir(b, OSError(errno.EIO, "Input/output error"), "flushing t-1")
        wait_for(lambda: not broker._thread.is_alive(), "the broker to stop")
        assert "all log dirs in" in str(broker.broker.stop_error)
        assert any("Shutdown broker because all log dirs" in r.message for r in caplog.records)
    finally:
        broker.stop()
