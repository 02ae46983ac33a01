"""Overlapping cleans of one partition in a broker: two ``POST /v1/compact`` at once, a
request while the background cleaner is on the partition, and a shutdown mid-clean.

Kafka's ``LogCleanerManager`` puts a partition in ``inProgress`` before its clean is
planned and ``grabFilthiestCompactedLog`` skips it; kompakt's "compact now" waits for
the running clean of the partition and then plans afresh, so it reports its own
figures ("nothing to clean" when the other clean did it all) instead of redoing the
range. A shutdown aborts a running clean (``LogCleaningAbortedException``): the request
is answered 503 and the partition is left as it was.

The engines' injected fault (``CleanFaults.hold_dir``) holds a clean mid-rewrite.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from shared_kit import wait_for

from kompakt.broker.app import BrokerThread, start_test_broker
from kompakt.cleaner.segment_io import CleanFaults

ONLY_ON_DEMAND = {"min.cleanable.dirty.ratio": "1"}  # the background never picks it


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    b = start_test_broker(
        str(tmp_path_factory.mktemp("data")),
        **{"log.cleaner.backoff.ms": "100", "kompakt.cleaner.engine": "local"},
    )
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def hold(tmp_path: Path, monkeypatch) -> Path:
    d = tmp_path / "hold"
    d.mkdir()
    monkeypatch.setattr(CleanFaults, "hold_dir", str(d))
    yield d
    (d / "release").touch()  # never leave a clean waiting


def make_topic(b: BrokerThread, name: str, **config: str) -> None:
    b.logs.create_topic(name, 1, {"cleanup.policy": "compact", "segment.bytes": "1024", **config})
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0})
    for i in range(200):  # one batch per flush: the 1 KiB segments roll
        p.produce(name, key=b"k%d" % (i % 10), value=b"v%d" % i + b"x" * 40)
        if i % 10 == 9:
            assert p.flush(30) == 0


def post(b: BrokerThread, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(
        f"http://127.0.0.1:{b.admin_port}/v1/compact",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


class Post(threading.Thread):
    def __init__(self, b: BrokerThread, body: dict):
        super().__init__(daemon=True)
        self.b, self.body, self.answer = b, body, None

    def run(self) -> None:
        self.answer = post(self.b, self.body)


def held(hold: Path) -> bool:
    return any(hold.glob("held-*"))


def test_two_concurrent_compacts_second_waits_and_reports_fresh_figures(broker, hold):
    make_topic(broker, "twice", **ONLY_ON_DEMAND)
    first = Post(broker, {"topic": "twice"})
    first.start()
    wait_for(lambda: held(hold), "the first clean to start")
    second = Post(broker, {"topic": "twice"})
    second.start()
    (hold / "release").touch()
    first.join(60)
    second.join(60)
    (s1, d1), (s2, d2) = first.answer, second.answer
    assert s1 == s2 == 200, (d1, d2)
    [r1], [r2] = d1["results"], d2["results"]
    assert r1["status"] == "cleaned" and r1["stats"]["first_dirty_offset"] == 0
    assert r2["status"] == "skipped" and r2["reason"] == "nothing to clean", r2
    assert r2["first_dirty_offset"] == r1["stats"]["end_offset"]


def test_compact_during_a_background_clean_waits_for_it(broker, hold):
    make_topic(broker, "busy", **{"min.cleanable.dirty.ratio": "0.01"})
    wait_for(lambda: held(hold), "the background cleaner to pick the partition")
    request = Post(broker, {"topic": "busy"})
    request.start()
    (hold / "release").touch()
    request.join(60)
    status, doc = request.answer
    assert status == 200, doc
    [r] = doc["results"]
    assert r["status"] == "skipped" and r["reason"] == "nothing to clean", r
    cleaner = broker.broker.background.cleaner()
    last = cleaner.last_stats[("busy", 0)]
    assert r["first_dirty_offset"] == last.end_offset  # the background clean's result


def test_shutdown_aborts_a_running_compact_and_leaves_the_partition(tmp_path: Path, hold):
    data = tmp_path / "data"
    b = start_test_broker(str(data), **{"kompakt.cleaner.engine": "local"})
    try:
        make_topic(b, "stop", **ONLY_ON_DEMAND)
        seg_dir = data / "stop-0"
        request = Post(b, {"topic": "stop"})
        request.start()
        wait_for(lambda: held(hold), "the clean to start")
        before = sorted(p.name for p in seg_dir.iterdir() if not p.name.endswith(".cleaned"))
        b.stop()
    finally:
        b.stop()
    request.join(60)
    status, doc = request.answer
    assert status == 503, doc
    assert doc["error"] == "broker shutting down: compaction of stop-0 cancelled, nothing changed"
    after = sorted(p.name for p in seg_dir.iterdir())
    assert after == before  # no .cleaned/.swap/.deleted, no segment replaced
    checkpoint = data / "cleaner-offset-checkpoint"
    assert not checkpoint.exists() or "stop 0" not in checkpoint.read_text()


def test_shutdown_aborts_the_background_clean_and_leaves_the_partition(tmp_path: Path, hold):
    """Kafka's LogCleaner.shutdown interrupts its cleaner threads mid-clean."""
    data = tmp_path / "data"
    b = start_test_broker(
        str(data), **{"kompakt.cleaner.engine": "local", "log.cleaner.backoff.ms": "100"}
    )
    try:
        make_topic(b, "bg", **{"min.cleanable.dirty.ratio": "0.01"})
        seg_dir = data / "bg-0"
        wait_for(lambda: held(hold), "the background clean to start")
        before = sorted(p.name for p in seg_dir.iterdir() if not p.name.endswith(".cleaned"))
        b.stop()
        assert not b.broker.background.cleaner_thread.thread.is_alive()
    finally:
        b.stop()
    assert sorted(p.name for p in seg_dir.iterdir()) == before
    checkpoint = data / "cleaner-offset-checkpoint"
    assert not checkpoint.exists() or "bg 0" not in checkpoint.read_text()
