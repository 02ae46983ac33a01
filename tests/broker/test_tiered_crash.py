"""SIGKILL while a broker tiers: the remote log manager copies and deletes every 20 ms
while acks=all records keep coming, and the broker process is killed at arbitrary
points of that work (upload, commit, local deletion), several times. Afterwards every
acknowledged record is read back from offset 0 unchanged, no manifest names a missing
object, and after a sweep (asked as if the grace period had passed) every object in the
tier is one a manifest names: the crash-safe order of upload, commit, local delete."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from shared_kit import consume_until, free_port, wait_for, wait_for_port

from kompakt.remote import open_store
from kompakt.remote.layout import segments_folder
from kompakt.remote.metadata import ORPHAN_GRACE_MS, RemoteLogMetadataManager
from tests.remote.broker_kit import EARLIEST_LOCAL, list_offset

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 30
ROUNDS = 4
PER_ROUND = 150


def start(data: Path, remote: Path, port: int) -> subprocess.Popen:
    overrides = {
        "listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "log.dirs": str(data),
        "kompakt.admin.listener": "http://127.0.0.1:0",
        "remote.log.storage.system.enable": "true",
        "remote.log.manager.task.interval.ms": "20",
        "kompakt.remote.storage.url": remote.as_uri(),
        "log.cleaner.enable": "false",
    }
    cmd = [sys.executable, "-m", "kompakt.broker"]
    for k, v in overrides.items():
        cmd += ["--override", f"{k}={v}"]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for_port(port, proc, 60)
    return proc


def test_sigkill_during_tiering_loses_nothing_and_leaves_no_orphans(tmp_path: Path) -> None:
    rng = random.Random(29)
    data, remote, port = tmp_path / "data", tmp_path / "remote", free_port()
    bootstrap = f"127.0.0.1:{port}"
    acked: dict[int, bytes] = {}
    for round_ in range(ROUNDS):
        proc = start(data, remote, port)
        try:
            if round_ == 0:
                admin = AdminClient({"bootstrap.servers": bootstrap})
                configs = {
                    "cleanup.policy": "compact",
                    "remote.storage.enable": "true",
                    "segment.bytes": "2048",
                    "local.retention.bytes": "2048",
                }
                admin.create_topics([NewTopic("k", 1, 1, config=configs)])["k"].result(TIMEOUT)
            p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "batch.num.messages": 3})

            def on_ack(err: object, msg: object) -> None:
                if err is None:
                    acked[msg.offset()] = msg.value()  # type: ignore[attr-defined]

            for i in range(PER_ROUND):
                value = b"r%d-%d-" % (round_, i) + b"x" * rng.randrange(60)
                p.produce("k", key=b"key%d" % (i % 17), value=value, on_delivery=on_ack)
            assert p.flush(TIMEOUT) == 0
            # the task is copying and deleting every 20 ms: kill somewhere in it
            time.sleep(rng.uniform(0.0, 0.3))  # injected fault: the kill's moment
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    assert len(acked) == ROUNDS * PER_ROUND
    proc = start(data, remote, port)
    try:
        store = open_store(remote.as_uri())
        meta = RemoteLogMetadataManager(store)
        wait_for(lambda: meta.load_partition("k", 0), "a manifest")
        c = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "check",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
            }
        )
        c.assign([TopicPartition("k", 0, 0)])
        got = {m.offset(): m.value() for m in consume_until(c, timeout=TIMEOUT)}
        c.close()
        assert got == acked
        # the records were read partly from the tier: local segments had been deleted
        assert list_offset(SimpleNamespace(port=port), "k", EARLIEST_LOCAL) > 0
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    manifest = meta.load_partition("k", 0)
    assert manifest is not None and manifest.value.segments
    present = {o.key for o in store.list(segments_folder("k", 0))}
    assert manifest.value.keys() <= present  # no manifest names a missing object
    meta.sweep_orphans(now_ms=int(time.time() * 1000) + 2 * ORPHAN_GRACE_MS)
    assert {o.key for o in store.list(segments_folder("k", 0))} == manifest.value.keys()
