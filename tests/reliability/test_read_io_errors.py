"""Read I/O errors (issue 17): segment reads fail with EIO while a consumer fetches and
while a clean runs, injected into a real ``kompakt serve`` with libfiu
(:mod:`reliability.fiu`: libfiu points on ``pread`` and ``mmap`` of ``.log`` files).

What must hold, whichever of Kafka's answers the broker gives: it keeps serving (the
request fails, as Kafka answers a failed read) or takes the log dir offline
(KAFKA_STORAGE_ERROR, Kafka's ``LogDirFailureChannel``) or exits on its own (Kafka halts
when no log dir is left); never does it die of a signal or serve a record other than the
one acknowledged at that offset (readers check CRCs). A clean that cannot read leaves
its segments as they were and no ``.cleaned``/``.swap`` file. Once reads work again (and
after a restart if the dir went offline or the broker exited), every acknowledged record
is read back where it was acknowledged, and the next clean succeeds.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from reliability.fault_campaign import check_partition, storage_error_partitions
from reliability.fiu import PREAD, Fiu, WorkerReads, missing
from reliability.kit import (
    BrokerProcess,
    Model,
    check_compacted,
    check_data_dir,
    create_topic,
    leftovers,
    read_partition,
)
from shared_kit import wait_for

pytestmark = pytest.mark.skipif(missing() is not None, reason=str(missing()))

FETCH_TOPIC, CLEAN_TOPIC = "rio-fetch", "rio-clean"
OVERRIDES = {
    "kompakt.cleaner.engine": "local",
    "log.cleaner.backoff.ms": "50",
    "log.segment.delete.delay.ms": "100",
    "log.index.size.max.bytes": "65536",
}


@pytest.fixture(scope="module")
def fiu(tmp_path_factory: pytest.TempPathFactory) -> Fiu:
    return Fiu(tmp_path_factory.mktemp("fiu"))


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, fiu: Fiu) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("rio") / "data", OVERRIDES, wrapper=fiu.wrapper())
    with b:
        wait_for(lambda: fiu.reachable(b.pid), "libfiu's control pipe")
        yield b


def produce(
    b: BrokerProcess, model: Model, topic: str, keys: int, n: int, strict: bool = True
) -> None:
    """``n`` records (values unique) acks=all, idempotent; offsets from delivery reports.
    ``strict``: every one must be acknowledged (else the model keeps only those that were)."""
    p = Producer(
        {
            "bootstrap.servers": b.bootstrap,
            "enable.idempotence": True,
            "linger.ms": 5,
            "batch.num.messages": 10,  # many small batches: segments roll, cleans have work
        }
    )
    for i in range(n):
        key = b"k%d" % (i % keys)
        value = b"%s-%d-" % (topic.encode(), i) + b"v" * 200
        w = model.add(topic, 0, key, value)
        p.produce(
            topic, value, key, partition=0, on_delivery=lambda e, m, w=w: model.report(w, e, m)
        )
        if i % 100 == 99:
            p.poll(0)
    left = p.flush(60 if strict else 10)
    if strict:
        assert left == 0
        assert model.failed == 0, model.errors


def read_during(b: BrokerProcess, topic: str, seconds: float) -> tuple[list, Counter[str]]:
    """Records and error names a CRC-checking consumer got from ``topic`` in ``seconds``
    (re-reading from the start each time it reaches the end)."""
    c = Consumer(
        {
            "bootstrap.servers": b.bootstrap,
            "group.id": "rio-reader",
            # nothing to commit: a close committing offsets to a broker that halted
            # meanwhile waited out its timeout (45 s) when records had been read
            "enable.auto.commit": False,
            "check.crcs": True,
            "fetch.wait.max.ms": 20,
            "log_level": 2,
        }
    )
    got: list[tuple[int, bytes | None, bytes | None]] = []
    errors: Counter[str] = Counter()
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            msgs = c.consume(500, timeout=0.1)
            for m in msgs:
                if m.error() is None:
                    got.append((m.offset(), m.key(), m.value()))
                else:
                    errors[m.error().name()] += 1
            if not msgs:
                c.seek(TopicPartition(topic, 0, OFFSET_BEGINNING))
    finally:
        c.close()
    return got, errors


def settle(b: BrokerProcess, topics: list[str], mark: int) -> str:
    """Once reads work again: the broker is up, or it exited on its own (never by a
    signal), or its dir is offline (KAFKA_STORAGE_ERROR); restarted in the last two."""
    if "Shutdown broker because all log dirs" in b.log_text()[mark:]:  # Kafka's halt, under way
        wait_for(lambda: not b.alive(), "the broker's halt with no log dir left", timeout=60)
    if not b.alive():
        assert b.proc is not None and b.proc.returncode >= 0, (
            f"the broker died of a signal on read errors:\n{b.log_tail()}"
        )
        b.start(60)
        return "exited"
    if storage_error_partitions(b.port, [(t, 0) for t in topics]):
        b.stop()
        b.start(60)
        return "offline"
    return "up"


def compact(b: BrokerProcess, topic: str, engine: str = "local") -> tuple[int, dict]:
    req = urllib.request.Request(
        f"http://127.0.0.1:{b.admin_port}/v1/compact",
        data=json.dumps({"topic": topic, "partition": 0, "engine": engine}).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=300) as resp:  # a Spark start, loaded
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def writes_of(model: Model, topic: str) -> dict[bytes, list[Any]]:
    return {k: list(ws) for k, ws in model.writes[(topic, 0)].items()}


def test_fetch_during_pread_errors_serves_acknowledged_bytes_or_an_error(
    broker: BrokerProcess, fiu: Fiu
) -> None:
    """Kafka answers a Fetch whose read fails with an error for that partition
    (KAFKA_STORAGE_ERROR once its dir is offline), never with other bytes; after the
    window every acknowledged record is at its offset (delete policy: all are kept)."""
    create_topic(broker.bootstrap, FETCH_TOPIC, 1, {"segment.bytes": "16384"})
    model = Model()
    produce(broker, model, FETCH_TOPIC, keys=10**6, n=1500)
    mark = len(broker.log_text())
    fiu.enable(broker.pid, points=(PREAD,), probability=0.5)
    try:
        got, errors = read_during(broker, FETCH_TOPIC, 3.0)
    finally:
        if broker.alive():
            fiu.disable(broker.pid, points=(PREAD,))
    assert "Input/output error" in broker.log_text()[mark:], "no read failed in the broker"
    assert "_BAD_MSG" not in errors, f"a batch failed its CRC: {errors}"
    acked = {w.offset: (k, w.value) for k, ws in writes_of(model, FETCH_TOPIC).items() for w in ws}
    wrong = [(o, k, v) for o, k, v in got if acked.get(o) != (k, v)]
    assert not wrong, f"served during the window but not acknowledged there: {wrong[:3]}"
    outcome = settle(broker, [FETCH_TOPIC], mark)
    read_ms = int(time.time() * 1000)
    records = read_partition(broker.bootstrap, FETCH_TOPIC, 0, timeout=60)
    bad = check_partition(
        (FETCH_TOPIC, 0), writes_of(model, FETCH_TOPIC), records, compact=False, read_ms=read_ms
    )
    assert bad == [], bad[:5]
    assert len(records) == 1500
    print(f"broker {outcome}; during the window {len(got)} records read, errors {dict(errors)}")


def test_clean_during_segment_read_errors_changes_nothing_and_cleans_after(
    broker: BrokerProcess, fiu: Fiu
) -> None:
    """A clean that cannot read a segment fails as Kafka's cleaner does on an
    IOException: its segments stay, its ``.cleaned`` files go (Kafka deletes them before
    marking the dir offline), nothing acknowledged changes; the next clean succeeds."""
    config = {
        "cleanup.policy": "compact",
        "segment.bytes": "4096",
        "min.cleanable.dirty.ratio": "0.01",
        "min.compaction.lag.ms": "0",
        "delete.retention.ms": "600000",
    }
    create_topic(broker.bootstrap, CLEAN_TOPIC, 1, config)
    model = Model()
    produce(broker, model, CLEAN_TOPIC, keys=40, n=1200)
    mark = len(broker.log_text())
    # the segment reads of every clean fail half the time: some before a .cleaned file
    # exists, some while one is being written. Kafka's cleaner takes the log dir offline
    # on an IOException, and with no dir left the broker halts: what is produced in the
    # window may fail, and only what was acknowledged is judged
    fiu.enable(broker.pid, probability=0.5)
    try:
        produce(broker, model, CLEAN_TOPIC, keys=40, n=1200, strict=False)
        wait_for(
            lambda: (
                sum(
                    "Input/output error" in line and "clean" in line.lower()
                    for line in broker.log_text()[mark:].splitlines()
                )
                >= 3
                or not broker.alive()
            ),
            "three cleans failing on read errors",
            timeout=60,
        )
    finally:
        if broker.alive():
            fiu.disable(broker.pid)
    outcome = settle(broker, [CLEAN_TOPIC, FETCH_TOPIC], mark)
    status, doc = compact(broker, CLEAN_TOPIC)
    assert status == 200, doc
    assert doc["results"][0]["status"] in ("cleaned", "skipped"), doc
    read_ms = int(time.time() * 1000)
    records = read_partition(broker.bootstrap, CLEAN_TOPIC, 0, timeout=60)
    check_compacted(model, (CLEAN_TOPIC, 0), records)
    bad = check_partition(
        (CLEAN_TOPIC, 0), writes_of(model, CLEAN_TOPIC), records, compact=True, read_ms=read_ms
    )
    assert bad == [], bad[:5]
    assert len(records) < len(model.acked_records((CLEAN_TOPIC, 0))), "nothing was ever cleaned"
    assert broker.stop() == 0
    assert leftovers(broker.data_dir) == []
    check_data_dir(broker.data_dir)
    broker.start(60)  # the module's broker outlives the test
    print(f"broker {outcome} after the window; {len(records)} records left")


def test_injection_reaches_segment_reads_only(tmp_path: Path, fiu: Fiu) -> None:
    """The points fail what a failing data disk fails (``pread`` and ``mmap`` of a
    ``.log`` file) and leave alone the rest (an index mapping, another file's ``pread``,
    anonymous memory: a new thread, numba's JIT)."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import mmap, os, sys, threading\n"
        "for name in ('0.log', '0.index'):\n"
        "    open(name, 'wb').write(b'x' * 8192)\n"
        "sys.stdout.write('ready\\n'); sys.stdout.flush(); sys.stdin.readline()\n"
        "def mm(p):\n"
        "    try:\n"
        "        with open(p, 'rb') as f:\n"
        "            mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)\n"
        "        return 'ok'\n"
        "    except OSError as e:\n"
        "        return str(e.errno)\n"
        "def pr(p):\n"
        "    fd = os.open(p, os.O_RDONLY)\n"
        "    try:\n"
        "        return 'ok' if os.pread(fd, 10, 0) else 'empty'\n"
        "    except OSError as e:\n"
        "        return str(e.errno)\n"
        "    finally:\n"
        "        os.close(fd)\n"
        "t = threading.Thread(target=lambda: None); t.start(); t.join()\n"
        "import numba\n"
        "jit = numba.njit(lambda x: x + 1)(1)\n"
        "print(pr('0.log'), mm('0.log'), pr('0.index'), mm('0.index'), jit)\n"
    )
    proc = subprocess.Popen(
        [*fiu.wrapper(python_script=False), sys.executable, str(probe)],
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdin is not None
    assert proc.stdout.readline() == "ready\n"
    fiu.enable(proc.pid)
    proc.stdin.write("go\n")
    proc.stdin.flush()
    out = proc.stdout.readline().split()
    assert proc.wait(60) == 0
    assert out == ["5", "5", "ok", "ok", "2"], out  # EIO twice, the rest untouched


@pytest.mark.timeout(600)
def test_a_spark_worker_that_cannot_read_a_segment_takes_the_dir_offline(
    tmp_path: Path,
) -> None:
    """The executors read segments themselves (``mmap`` in the survivors digest): a read
    error there reaches the broker as the Python worker's traceback text, and the clean
    fails as Kafka's cleaner does on an IOException, taking the log dir offline (here the
    only dir, so the broker halts with exit code 1). Nothing acknowledged changes, no
    ``.cleaned``/``.swap`` file is left, and after the restart a Spark clean succeeds.
    The workers get the read errors from :class:`reliability.fiu.WorkerReads` (Spark's
    ``spark.executorEnv.LD_PRELOAD``), switched by a file."""
    reads = WorkerReads(tmp_path / "fiu")
    b = BrokerProcess(
        tmp_path / "data",
        {**OVERRIDES, "log.cleaner.enable": "false", **reads.spark_overrides()},
    )
    config = {"cleanup.policy": "compact", "segment.bytes": "4096", "min.compaction.lag.ms": "0"}
    with b:
        create_topic(b.bootstrap, CLEAN_TOPIC, 1, config)
        model = Model()
        produce(b, model, CLEAN_TOPIC, keys=20, n=300)
        status, doc = compact(b, CLEAN_TOPIC, "spark")  # Spark warm, workers forked
        assert status == 200, doc
        produce(b, model, CLEAN_TOPIC, keys=20, n=300)
        mark = len(b.log_text())
        reads.enable(1.0)
        try:
            status, doc = compact(b, CLEAN_TOPIC, "spark")
        finally:
            reads.disable()
        assert status == 503 and "KAFKA_STORAGE_ERROR" in doc["error"], (status, doc)
        log_text = b.log_text()[mark:]
        assert "Input/output error" in log_text and "offline" in log_text
        wait_for(lambda: not b.alive(), "the broker's halt with no log dir left", timeout=60)
        assert b.proc is not None and b.proc.returncode == 1, b.log_tail()
        assert leftovers(b.data_dir) == []
        check_data_dir(b.data_dir)
        b.start(60)
        status, doc = compact(b, CLEAN_TOPIC, "spark")
        assert status == 200 and doc["results"][0]["status"] == "cleaned", doc
        records = read_partition(b.bootstrap, CLEAN_TOPIC, 0, timeout=60)
        check_compacted(model, (CLEAN_TOPIC, 0), records)
