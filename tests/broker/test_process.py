"""The broker as a process: SIGTERM shuts down cleanly; acks=all survives SIGKILL."""

import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from shared_kit import consume_until, free_port, wait_for_port

REPO = Path(__file__).resolve().parents[2]


def start(data_dir, port, preexec_fn=None):
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kompakt.broker",
            "--override",
            f"listeners=PLAINTEXT://127.0.0.1:{port}",
            "--override",
            f"log.dirs={data_dir}",
            "--override",
            "kompakt.admin.listener=http://127.0.0.1:0",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=preexec_fn,
    )
    try:
        wait_for_port(port, proc, 20)
    except AssertionError:
        proc.kill()
        raise AssertionError(proc.stdout.read()) from None
    return proc


def read_all(bootstrap, topic, n):
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "x",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
        }
    )
    c.assign([TopicPartition(topic, 0, 0)])
    try:
        return [m.value() for m in consume_until(c, lambda out: len(out) >= n, what=f"{n} records")]
    finally:
        c.close()


def test_sigterm_is_a_clean_shutdown(tmp_path):
    port = free_port()
    proc = start(tmp_path, port)
    try:
        p = Producer({"bootstrap.servers": f"127.0.0.1:{port}"})
        p.produce("t", b"v", b"k")
        assert p.flush(10) == 0
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    assert "kompakt broker listening on" in out
    assert (tmp_path / ".kafka_cleanshutdown").exists()


def test_acks_all_survives_sigkill(tmp_path):
    port = free_port()
    proc = start(tmp_path, port)
    bootstrap = f"127.0.0.1:{port}"
    try:
        p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
        for i in range(20):
            p.produce("durable", b"v%d" % i, b"k")
        assert p.flush(10) == 0
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not (tmp_path / ".kafka_cleanshutdown").exists()
    proc = start(tmp_path, port)
    try:
        assert read_all(bootstrap, "durable", 20) == [b"v%d" % i for i in range(20)]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=20)
    assert proc.returncode == 0


def test_metrics_and_admin_endpoint(broker, topic_name):
    p = Producer({"bootstrap.servers": broker.bootstrap})
    p.produce(topic_name, b"v", b"k")
    assert p.flush(10) == 0
    base = f"http://127.0.0.1:{broker.admin_port}"
    text = urllib.request.urlopen(base + "/metrics", timeout=5).read().decode()
    assert 'kompakt_requests_total{api="Produce"}' in text
    assert 'kompakt_request_latency_seconds_bucket{api="Metadata"' in text
    assert (
        f'kompakt_partition_size_bytes{{cleanup_policy="delete",partition="0",topic="{topic_name}"}}'
        in text
    )
    parts = urllib.request.urlopen(base + "/v1/partitions", timeout=5).read().decode()
    assert topic_name in parts


def test_partitions_endpoint_counts_pending_tombstones(broker, topic_name):
    import json

    broker.logs.create_topic(topic_name, 1, {"cleanup.policy": "compact", "segment.bytes": "200"})
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})

    def produce(*items):
        for key, value in items:
            p.produce(topic_name, value, key)
            p.flush(10)

    def pending() -> int:
        url = f"http://127.0.0.1:{broker.admin_port}/v1/partitions"
        rows = json.loads(urllib.request.urlopen(url, timeout=5).read())
        rows = rows["partitions"] if isinstance(rows, dict) else rows
        return next(r for r in rows if r["topic"] == topic_name)["tombstones_pending"]

    produce((b"a", b"1"), (b"b", b"2"), (b"a", None), (b"c", b"3"), (b"b", None))
    assert pending() == 2
    assert pending() == 2  # sealed segments come from the cache, the count is the same
    produce((b"c", None))
    assert pending() == 3


def _soft_nofile(pid: int) -> int:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[3])
    raise AssertionError("no 'Max open files' line")


def test_a_low_open_files_limit_is_raised_to_what_the_segment_cap_needs(tmp_path):
    """A soft ``ulimit -n`` of 256 (below the 5 x 1,000 + 1,024 descriptors the default
    ``kompakt.log.max.open.segments`` may need) is raised at start, up to the hard limit,
    instead of the broker failing with EMFILE once many partitions are busy."""
    import resource

    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 5 * 1000 + 1024 if hard == resource.RLIM_INFINITY else min(hard, 5 * 1000 + 1024)

    def low_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))

    proc = start(tmp_path / "data", free_port(), preexec_fn=low_limit)
    try:
        assert _soft_nofile(proc.pid) == max(256, want)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    assert f"open files limit raised from 256 to {want}" in out or want <= 256
