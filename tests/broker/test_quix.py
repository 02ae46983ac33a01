"""Quix Streams with ``processing_guarantee="exactly-once"`` against a kompakt broker
process (issue 15's must-show): a stateful count per key whose state store's changelog is
a compacted topic written inside Quix's transactions.

The broker is SIGKILLed while the application is in the middle of the input and started
again on the same data dir and port; the application, whose librdkafka producer does
not recover from that restart (see the comment in the test), is SIGKILLed as well and
started again, as its deployment would. Exactly-once means the ``counts`` topic, read
READ_COMMITTED, holds for every key the counts 1, 2, ..., n once each, n being the
key's input records: no count is repeated (a replay after the crash counted from
restored state) and none is missing. Then the changelog is compacted through the admin
endpoint, the application's local state dir deleted, and one more record per key
processed: the counts continue from n, so the state was restored from the compacted
changelog.
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from shared_kit import free_port, wait_for, wait_for_port

pytest.importorskip("quixstreams")

REPO = Path(__file__).resolve().parents[2]
APP = Path(__file__).with_name("quix_count_app.py")
TIMEOUT = 30
KEYS = [b"k%d" % i for i in range(10)]
GROUP = "quix-count"
CHANGELOG = f"changelog__{GROUP}--words--default"  # Quix's name for the store's topic


class BrokerProcess:
    def __init__(self, data_dir: Path):
        self.data_dir = data_dir
        self.port, self.admin_port = free_port(), free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        args = [sys.executable, "-m", "kompakt.broker"]
        for k, v in {
            "listeners": f"PLAINTEXT://{self.bootstrap}",
            "log.dirs": str(self.data_dir),
            "kompakt.admin.listener": f"http://127.0.0.1:{self.admin_port}",
            "kompakt.cleaner.engine": "local",
            "log.cleaner.enable": "false",  # the clean this test checks is the one it asks
            "group.initial.rebalance.delay.ms": "0",
            # a killed run's transaction is aborted soon after its 5 s timeout
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
            "transaction.state.log.num.partitions": "2",
            "offsets.topic.num.partitions": "2",
        }.items():
            args += ["--override", f"{k}={v}"]
        with open(self.data_dir.parent / "broker.log", "a") as log:  # read on failure
            self.proc = subprocess.Popen(args, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        wait_for_port(self.port, self.proc)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(TIMEOUT)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(TIMEOUT)


def produce(bootstrap: str, per_key: int, start: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i in range(per_key):
        for k in KEYS:
            p.produce("words", key=k, value=b"w%d" % (start + i))
    assert p.flush(TIMEOUT) == 0


def app(bootstrap: str, state_dir: Path, idle_timeout: float) -> subprocess.Popen:
    args = [sys.executable, str(APP), bootstrap, "words", "counts", GROUP, str(state_dir)]
    return subprocess.Popen(
        [*args, str(idle_timeout)], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )


def end_offsets(bootstrap: str, topic: str) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "peek"})
    try:
        return [
            c.get_watermark_offsets(TopicPartition(topic, q), TIMEOUT, cached=False)[1]
            for q in range(2)
        ]
    finally:
        c.close()


def stable(bootstrap: str) -> bool:
    """No transaction open on ``counts``: its LSO is its high watermark."""
    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "peek", "isolation.level": "read_committed"}
    )
    try:
        lso = [
            c.get_watermark_offsets(TopicPartition("counts", q), TIMEOUT, cached=False)[1]
            for q in range(2)
        ]
    finally:
        c.close()
    return lso == end_offsets(bootstrap, "counts")


def counts(bootstrap: str) -> dict[bytes, list[int]]:
    """Every count per key in the output, in order, as a READ_COMMITTED reader sees it
    once no transaction is open (a killed run's is aborted at its timeout)."""
    wait_for(lambda: stable(bootstrap), "the counts topic's transactions to close", TIMEOUT)
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "check",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    tps = [TopicPartition("counts", q) for q in range(2)]
    ends = [c.get_watermark_offsets(tp, TIMEOUT, cached=False)[1] for tp in tps]
    c.assign([TopicPartition("counts", q, 0) for q in range(2)])
    out: dict[bytes, list[int]] = collections.defaultdict(list)

    def done() -> bool:
        for m in c.consume(1000, 0.2):
            if m.error() is None:
                out[m.key()].append(json.loads(m.value()))
        return all(
            end == 0 or pos.offset >= end for pos, end in zip(c.position(tps), ends, strict=True)
        )

    try:
        wait_for(done, "the counts topic read to its LSO", TIMEOUT)
    finally:
        c.close()
    return dict(out)


def run_to_idle(bootstrap: str, state_dir: Path) -> None:
    """Run the application until it has been idle 12 s (longer than the 6 s session
    timeout a killed run's member needs to leave the group); again if it exited with an
    error (a crash its deployment would restart)."""
    for _ in range(3):
        proc = app(bootstrap, state_dir, 12)
        _out, err = proc.communicate(timeout=120)
        if proc.returncode == 0:
            return
    raise AssertionError(f"the Quix application kept failing:\n{err.decode()[-3000:]}")


def test_quix_exactly_once_count_survives_broker_sigkill_and_restores_from_compacted_changelog(
    tmp_path: Path,
) -> None:
    broker = BrokerProcess(tmp_path / "data")
    state = tmp_path / "state"
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        # the changelog made before Quix would: small segments, so the clean below has
        # closed segments to work on (the active one is never cleaned; Quix writes a
        # key's state once per checkpoint, so the changelog stays small)
        changelog = NewTopic(
            CHANGELOG, 2, 1, config={"cleanup.policy": "compact", "segment.bytes": "256"}
        )
        topics = [NewTopic(t, 2, 1) for t in ("words", "counts")] + [changelog]
        for f in admin.create_topics(topics).values():
            f.result(TIMEOUT)
        produce(broker.bootstrap, 150, 0)
        running = app(broker.bootstrap, state, 6)
        # mid-stream: the first counts are committed, most of the input is not read yet
        wait_for(lambda: sum(end_offsets(broker.bootstrap, "counts")) > 0, "first counts")
        broker.kill()
        broker.start()
        produce(broker.bootstrap, 50, 150)
        # librdkafka (2.16) does not recover this producer: after the restart its
        # send_offsets_to_transaction never sends FindCoordinator/TxnOffsetCommit for the
        # group (librdkafka issues 5511/5456: coordinator request stuck on a cached,
        # decommissioned coordinator, its timeout unchecked), so Quix retries for ever.
        # A deployment's liveness check would kill it: so do we, mid-transaction, which
        # exactly-once must survive too (the next InitProducerId aborts its transaction)
        running.send_signal(signal.SIGKILL)
        running.wait(TIMEOUT)
        run_to_idle(broker.bootstrap, state)
        got = counts(broker.bootstrap)
        assert {k: got.get(k) for k in KEYS} == {k: list(range(1, 201)) for k in KEYS}

        # compact the changelog: each key's 200 updates become its last one
        req = urllib.request.Request(
            f"http://127.0.0.1:{broker.admin_port}/v1/compact",
            data=json.dumps({"topic": CHANGELOG}).encode(),
            headers={"content-type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=120) as r:
            results = json.loads(r.read())
        stats = [
            p.get("stats") or {}
            for p in (results if isinstance(results, list) else results.get("results", []))
        ]
        read = sum(st.get("records_read", 0) for st in stats)
        written = sum(st.get("records_written", 0) for st in stats)
        assert 0 < written < read, results  # superseded states removed
        shutil.rmtree(state)  # the state must come back from the changelog
        produce(broker.bootstrap, 1, 200)
        run_to_idle(broker.bootstrap, state)
        got = counts(broker.bootstrap)
        assert {k: got[k][-1] for k in KEYS} == dict.fromkeys(KEYS, 201)
        assert {k: len(got[k]) for k in KEYS} == dict.fromkeys(KEYS, 201)
    finally:
        broker.stop()
        if os.environ.get("KOMPAKT_KEEP_QUIX"):
            shutil.copytree(tmp_path, "/tmp/quix-kept", dirs_exist_ok=True)
