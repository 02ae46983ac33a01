"""Full disk: produce and clean on a data dir that fills, then free space and go on.

Two ways to fill a disk. The portable one caps the broker's file size with
``RLIMIT_FSIZE`` (writes past it fail with EFBIG; Python ignores SIGXFSZ); it runs
everywhere. The real one puts the data dir on a small tmpfs (ENOSPC for every file); it
needs ``mount`` (root here, often not in CI) and is skipped when that fails.

What must hold (Kafka's contract, plus "do better" where Kafka halts the broker):
a produce that cannot be written answers KAFKA_STORAGE_ERROR (56) and leaves nothing
behind; nothing acknowledged before is lost; a clean that runs out of space leaves the
old segments (no ``.cleaned`` file survives, the partition is not marked uncleanable,
the cleaner logs the I/O error); SIGTERM on a full disk still stops the broker; once
space is back, produce works again and the next clean succeeds.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer
from reliability.kit import (
    BrokerProcess,
    Model,
    check_compacted,
    check_data_dir,
    check_delete_policy,
    create_topic,
    leftovers,
    read_partition,
)
from shared_kit import wait_for

STORAGE_ERROR = 56
assert KafkaError.KAFKA_STORAGE_ERROR == STORAGE_ERROR
OVERRIDES = {
    "kompakt.cleaner.engine": "local",
    "log.cleaner.backoff.ms": "200",
    "log.segment.delete.delay.ms": "100",  # a clean's old segments free their space soon
    "log.index.size.max.bytes": "4096",  # preallocated indexes stay under the file cap
}


def producer(bootstrap: str) -> Producer:
    """acks=all without retries, so each delivery report shows the broker's answer."""
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": False,
            "retries": 0,
            "linger.ms": 2,
            "log_level": 2,
        }
    )


def produce(
    p: Producer,
    model: Model,
    topic: str,
    keys: range,
    n: int,
    value_size: int = 500,
    stop_after_errors: int | None = None,
) -> tuple[int, int]:
    """Produce ``n`` records in small flushed batches; (acked, storage errors)."""
    acked = errors = 0
    codes: list[int] = []
    for i in range(0, n, 20):
        for j in range(i, min(n, i + 20)):
            key = b"k%d" % keys[j % len(keys)]
            value = b"%s-%d-%d-" % (topic.encode(), time.monotonic_ns(), j) + b"x" * value_size
            w = model.add(topic, 0, key, value)

            def done(err, _msg, w=w):
                model.report(w, err)
                codes.append(0 if err is None else err.code())

            p.produce(topic, value, key, partition=0, on_delivery=done)
        assert p.flush(30) == 0
        acked = codes.count(0)
        errors = codes.count(STORAGE_ERROR)
        assert set(codes) <= {0, STORAGE_ERROR}, f"unexpected error codes {set(codes)}"
        if stop_after_errors is not None and errors >= stop_after_errors:
            break
    return acked, errors


def check_failed_writes_absent(model: Model, topic: str, records: list) -> None:
    """A write refused with KAFKA_STORAGE_ERROR left nothing in the log."""
    failed = {w.value for ws in model.writes[(topic, 0)].values() for w in ws if w.acked is False}
    present = {v for _o, _k, v in records}
    assert not failed & present, "a refused write is in the log"


def compact_now(broker: BrokerProcess, topic: str) -> tuple[int, dict]:
    req = urllib.request.Request(
        f"http://127.0.0.1:{broker.admin_port}/v1/compact",
        data=json.dumps({"topic": topic, "partition": 0}).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def partition_row(broker: BrokerProcess, topic: str) -> dict:
    rows = json.loads(broker.admin_get("/v1/partitions"))
    rows = rows["partitions"] if isinstance(rows, dict) else rows
    return next(r for r in rows if r["topic"] == topic and r["partition"] == 0)


def verify(broker: BrokerProcess, model: Model) -> None:
    users = read_partition(broker.bootstrap, "users", 0)
    check_compacted(model, ("users", 0), users)
    check_failed_writes_absent(model, "users", users)
    if ("events", 0) in model.writes:
        events = read_partition(broker.bootstrap, "events", 0)
        check_delete_policy(model, ("events", 0), events)
        check_failed_writes_absent(model, "events", events)


# -- portable: RLIMIT_FSIZE ----------------------------------------------------------------------

FSIZE = 96 * 1024


def test_produce_past_file_size_limit_is_a_storage_error(tmp_path: Path) -> None:
    data = tmp_path / "data"
    broker = BrokerProcess(data, dict(OVERRIDES), fsize_limit=FSIZE)
    model = Model()
    try:
        broker.start()
        # segments larger than the cap: the active segment hits EFBIG before it rolls
        big = {"segment.bytes": str(1 << 20), "segment.index.bytes": "4096"}
        create_topic(broker.bootstrap, "users", 1, {"cleanup.policy": "compact", **big})
        create_topic(broker.bootstrap, "events", 1, {"cleanup.policy": "delete", **big})
        p = producer(broker.bootstrap)
        for topic in ("users", "events"):
            acked, errors = produce(p, model, topic, range(300), 1000, stop_after_errors=20)
            assert acked > 50 and errors >= 20, (topic, acked, errors)
        assert broker.alive()
        verify(broker, model)  # reads work on a full disk; nothing acked is lost
        assert broker.stop() == 0, broker.log_tail()
        broker.fsize_limit = None  # space freed
        broker.start()
        verify(broker, model)
        for topic in ("users", "events"):
            acked, errors = produce(p, model, topic, range(300), 100)
            assert (acked, errors) == (100, 0)
        verify(broker, model)
        assert broker.stop() == 0, broker.log_tail()
    finally:
        broker.kill()
    check_data_dir(data)


def test_clean_past_file_size_limit_keeps_the_old_segments(tmp_path: Path) -> None:
    """Raising ``segment.bytes`` makes the next clean merge the log into one ``.cleaned``
    file larger than the cap: the write fails with EFBIG half-way."""
    data = tmp_path / "data"
    broker = BrokerProcess(data, dict(OVERRIDES), fsize_limit=FSIZE)
    model = Model()
    try:
        broker.start()
        create_topic(
            broker.bootstrap,
            "users",
            1,
            {
                "cleanup.policy": "compact",
                "segment.bytes": "16384",
                "segment.index.bytes": "4096",
                "min.cleanable.dirty.ratio": "0.01",
            },
        )
        p = producer(broker.bootstrap)
        assert produce(p, model, "users", range(400), 400) == (400, 0)  # ~220 KB, all keys
        wait_for(lambda: broker.log_text().count("Cleaned users-0") >= 1, what="a first clean")
        _alter(broker.bootstrap, "users", {"segment.bytes": str(4 << 20), "segment.ms": "300"})
        assert produce(p, model, "users", range(20), 20) == (20, 0)  # dirty again ...
        time.sleep(0.5)  # scenario time: segment.ms=300 passes, so the next append rolls
        assert produce(p, model, "users", range(20, 40), 20) == (20, 0)  # ... and rolled
        wait_for(
            lambda: "I/O error while cleaning users-0" in broker.log_text(),
            what="the clean to fail",
        )
        assert "File too large" in broker.log_text()
        row = partition_row(broker, "users")
        assert row["uncleanable_reason"] is None
        status, body = compact_now(broker, "users")
        # a disk error: 503 KAFKA_STORAGE_ERROR with the errno's text, no traceback
        assert status == 503 and "KAFKA_STORAGE_ERROR" in body["error"], (status, body)
        assert "File too large" in body["error"], (status, body)
        verify(broker, model)
        assert broker.stop() == 0, broker.log_tail()
        assert not leftovers(data), "a half-written .cleaned file survived"
        check_data_dir(data)
        cleans = broker.log_text().count("Cleaned users-0")
        broker.fsize_limit = None
        broker.start()
        wait_for(
            lambda: broker.log_text().count("Cleaned users-0") > cleans,
            what="the background cleaner's next clean",
        )
        assert partition_row(broker, "users")["segments"] <= 3  # merged past the old cap
        verify(broker, model)
        assert broker.stop() == 0, broker.log_tail()
    finally:
        broker.kill()
    check_data_dir(data)


def _alter(bootstrap: str, topic: str, config: dict[str, str]) -> None:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    entries = [
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in config.items()
    ]
    res = ConfigResource("topic", topic, incremental_configs=entries)
    for fut in admin.incremental_alter_configs([res]).values():
        fut.result(30)


# -- real: a small tmpfs --------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 3 MiB tmpfs; resized with ``remount`` to free space. Skipped without mount."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    if shutil.which("mount") is None or os.geteuid() != 0:
        pytest.skip("needs root and mount for a tmpfs")
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mnt)], capture_output=True
    )
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {r.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def fill(path: Path) -> None:
    """Take every free byte left on the file system of ``path``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    finally:
        os.close(fd)


def test_full_tmpfs_produce_clean_shutdown_and_recovery(small_disk: Path, tmp_path: Path) -> None:
    data = small_disk / "data"
    # cleans only when asked (POST /v1/compact), so one is due when the disk is full
    overrides = {**OVERRIDES, "log.cleaner.enable": "false"}
    broker = BrokerProcess(data, overrides, log_path=tmp_path / "broker.log")
    model = Model()
    try:
        broker.start()
        cfg = {"segment.bytes": "8192", "segment.index.bytes": "4096"}
        create_topic(
            broker.bootstrap,
            "users",
            1,
            {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01", **cfg},
        )
        create_topic(broker.bootstrap, "events", 1, {"cleanup.policy": "delete", **cfg})
        p = producer(broker.bootstrap)
        # compacted writes with few keys (a clean would reclaim most), then the disk fills up
        produce(p, model, "users", range(100), 600)
        verify(broker, model)  # also creates __consumer_offsets while there is space
        acked, errors = produce(p, model, "events", range(10**6), 10_000, stop_after_errors=20)
        assert acked > 100 and errors >= 20
        fill(small_disk / "filler")
        acked, errors = produce(p, model, "users", range(100), 200, stop_after_errors=20)
        assert errors >= 20
        status, body = compact_now(broker, "users")
        assert status == 503 and "No space left on device" in body["error"], (status, body)
        assert partition_row(broker, "users")["uncleanable_reason"] is None
        assert not leftovers(data), "a half-written .cleaned file survived"
        verify(broker, model)
        # SIGTERM on a full disk: the broker stops (stop() fails on a hang). Clean only
        # if its close could flush everything (cutting the active segments' zeros
        # written ahead frees some space): exit 0 with the marker, else 1 without it
        code = broker.stop(timeout=30)
        assert code in (0, 1), broker.log_tail()
        assert (data / ".kafka_cleanshutdown").exists() == (code == 0)
        # space comes back
        (small_disk / "filler").unlink()
        subprocess.run(["mount", "-o", "remount,size=16m", str(small_disk)], check=True)
        broker.start()
        verify(broker, model)
        assert produce(p, model, "users", range(100), 200) == (200, 0)
        assert produce(p, model, "events", range(10**6), 100) == (100, 0)
        status, body = compact_now(broker, "users")
        assert status == 200 and body["results"][0]["status"] == "cleaned", body
        verify(broker, model)
        assert broker.stop() == 0, broker.log_tail()
    finally:
        broker.kill()
    check_data_dir(data)


# -- in-process regressions for the fixes these scenarios found ----------------------------------


def _enospc(*_a: object, **_k: object) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_close_on_io_error_releases_the_dir_and_skips_the_clean_marker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was: the first ENOSPC in ``LogManager.close`` left logs open and the dir locked, and
    the broker's stop raised, so SIGTERM on a full disk hung the process forever."""
    from kompakt.log.checkpoint import OffsetCheckpointFile
    from kompakt.log.manager import LogManager
    from kompakt.record.encode import build_simple_batch

    logs = LogManager(tmp_path)
    logs.create_topic("t", 2)
    logs.get_log("t", 0).append(
        build_simple_batch([(b"k", b"v")], timestamp=int(time.time() * 1000))
    )
    with monkeypatch.context() as m:
        m.setattr(OffsetCheckpointFile, "write", _enospc)
        with pytest.raises(OSError):
            logs.close()
    assert not (tmp_path / ".kafka_cleanshutdown").exists()
    with LogManager(tmp_path) as again:  # the lock was released
        assert not again.was_clean_shutdown
        assert [r.value for b in again.get_log("t", 0).iter_batches() for r in b.records()] == [
            b"v"
        ]


def test_failed_topic_creation_leaves_no_half_made_topic(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was: an ENOSPC while creating partition 3 of 5 left partitions 0-2 open and on disk;
    the next start loaded them as a 3-partition topic with default configs."""
    from kompakt.errors import KafkaStorageError
    from kompakt.log import manager as manager_mod
    from kompakt.log.manager import LogManager

    real = manager_mod.PartitionLog
    opened: list[object] = []

    def flaky(directory, *a, **k):
        if len(opened) == 3:
            _enospc()
        opened.append(directory)
        return real(directory, *a, **k)

    with LogManager(tmp_path) as logs:
        with monkeypatch.context() as m:
            m.setattr(manager_mod, "PartitionLog", flaky)
            with pytest.raises(KafkaStorageError):
                logs.create_topic("half", 5, {"cleanup.policy": "compact"})
        assert not logs.has_topic("half")
        assert not any(p.topic == "half" for p in logs.logs())
        assert not list(tmp_path.glob("half-*"))
        logs.create_topic("half", 5, {"cleanup.policy": "compact"})  # space is back
    with LogManager(tmp_path) as again:
        assert again.partition_count("half") == 5
        assert again.topic_config("half").compact


def test_failed_rewrite_leaves_no_cleaned_file_and_stays_cleanable(tmp_path: Path, caplog) -> None:
    """Was: a rewrite that failed after some groups were written (a Spark job with one
    task out of space) left their ``.cleaned`` files on disk, and an error that reached
    the cleaner as a non-OSError (the Spark task's text) marked the log uncleanable."""
    from kompakt.cleaner import Cleaner, LocalEngine
    from kompakt.log.manager import LogManager
    from kompakt.record.encode import build_simple_batch

    class OutOfSpaceAfterOneGroup(LocalEngine):
        def rewrite(self, plog, groups, dirty, ctx, dry_run, progress):
            assert len(groups) > 1
            for _stats, dest, _group in super().rewrite(
                plog, groups[:1], dirty, ctx, dry_run, progress
            ):
                dest.close()
            raise RuntimeError("PythonException: OSError: [Errno 28] No space left on device")

    with LogManager(tmp_path) as logs:
        logs.create_topic("c", 1, {"cleanup.policy": "compact", "segment.bytes": "1024"})
        plog = logs.get_log("c", 0)
        for i in range(40):
            plog.append(
                build_simple_batch(
                    [(b"k%d" % (i % 30), b"v%d" % i + b"x" * 100)],
                    timestamp=int(time.time() * 1000),
                )
            )
        assert len(plog.segments) > 3
        cleaner = Cleaner(logs, engine=OutOfSpaceAfterOneGroup())
        assert cleaner.clean_once() is False
        assert not leftovers(tmp_path)
        assert plog.uncleanable_reason is None
        assert "I/O error while cleaning c-0" in caplog.text
        cleaner.engine = LocalEngine()
        assert cleaner.clean_once() is True
        state = {r.key: r.value for b in plog.iter_batches() for r in b.records()}
        assert state == {b"k%d" % (i % 30): b"v%d" % i + b"x" * 100 for i in range(40)}


def test_acks_all_fsync_failure_answers_storage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was: an fsync error after an acks=all append answered UNKNOWN_SERVER_ERROR (-1),
    and the producer's retry was answered as a success without the fsync."""
    from kompakt.broker.app import start_test_broker
    from kompakt.log.segment import LogSegment

    real_flush = LogSegment.flush
    failing = {"on": False}

    def flush(self, *args):
        if failing["on"] and "durable-0" in str(self.log_path):
            _enospc()
        return real_flush(self, *args)

    monkeypatch.setattr(LogSegment, "flush", flush)
    broker = start_test_broker(tmp_path, log_cleaner_enable="false")
    try:
        broker.logs.create_topic("durable", 1)
        p = producer(broker.bootstrap)
        codes: list[int] = []

        def send(value: bytes) -> None:
            p.produce(
                "durable", value, b"k", on_delivery=lambda e, _m: codes.append(e.code() if e else 0)
            )
            assert p.flush(10) == 0

        failing["on"] = True
        send(b"a")
        failing["on"] = False
        send(b"b")
        assert codes == [STORAGE_ERROR, 0]
    finally:
        broker.stop()
