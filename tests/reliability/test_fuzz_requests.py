"""Schema-driven request fuzzing against a real broker.

Kafka's rule for a request it cannot handle (``SocketServer``/``KafkaApis``): answer it
with an error or close that one connection, never stop serving others. The fuzzer
(:mod:`reliability.fuzz_kit`) sends every advertised API at every version plus wrong
versions, with random field values and huge declared counts; afterwards the broker must
still answer, a real confluent-kafka client must produce and consume, memory must not
have grown by more than 200 MB, and nothing may exist outside the data dir.

``KOMPAKT_FUZZ_SECONDS`` (default 20) and ``KOMPAKT_FUZZ_SEED`` (default random, printed)
control the random phase (e.g. ``KOMPAKT_FUZZ_SECONDS=600`` for a long run).
"""

from __future__ import annotations

import os
import random
import resource
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from reliability.fuzz_kit import huge_count_frames, run_fuzz
from reliability.wire_kit import call, connect, recv_frame, rss_bytes, tree
from shared_kit import consume_until

from kompakt.broker.app import start_test_broker

MB = 1 << 20


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


@pytest.fixture(scope="module")
def fuzz_broker(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("fuzz")
    data = root / "outer" / "data"
    data.mkdir(parents=True)
    before = tree(root, skip=data)
    b = start_test_broker(data)
    b.logs.create_topic("fz", 2)
    b.logs.create_topic("fzc", 1, {"cleanup.policy": "compact"})
    yield b, root, data, before
    b.stop()


def _advertised(port: int) -> list[tuple[int, int, int]]:
    with connect(port) as s:
        resp = call(s, 18, 3, {"client_software_name": "fuzz", "client_software_version": "1"})
    return [(k.api_key, k.min_version, k.max_version) for k in resp.api_keys]


def _assert_healthy(broker, root: Path, data: Path, before: set[str]) -> None:
    """The broker answers, a real client round-trips, nothing escaped the data dir."""
    assert _advertised(broker.port)
    topic = f"after-fuzz-{time.monotonic_ns()}"
    p = Producer({"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 20000})
    errors: list = []
    for i in range(10):
        p.produce(topic, b"v%d" % i, key=b"k%d" % i, on_delivery=lambda e, m: errors.append(e))
    assert p.flush(30) == 0
    assert errors == [None] * 10
    c = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": topic,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    c.subscribe([topic])
    try:
        got = [m.value() for m in consume_until(c, lambda out: len(out) >= 10, what="10 records")]
    finally:
        c.close()
    assert sorted(got) == sorted(b"v%d" % i for i in range(10))
    assert tree(root, skip=data) == before


def test_compact_array_count_of_26_billion_closes_the_connection_not_the_broker(
    fuzz_broker,
) -> None:
    """Regression (found by the fuzzer, seed 1): DeleteTopics v5 whose topic_names
    declares ~2.6e10 names in a 23-byte request made kio's native reader ask for 200 GB
    and abort the process. Kafka refuses a collection larger than the bytes remaining;
    kompakt now checks declared sizes first (kompakt.broker.bounds) and closes the
    connection."""
    broker, root, data, before = fuzz_broker
    body = bytes.fromhex("001400050000032e0002667a00fffffffe620000005600")
    with connect(broker.port, timeout=5) as s:
        s.sendall(len(body).to_bytes(4, "big") + body)
        assert recv_frame(s) is None  # closed
    _assert_healthy(broker, root, data, before)


def test_huge_declared_counts_are_refused_without_allocating(fuzz_broker) -> None:
    """Kafka checks a declared array/string size against the bytes left in the request
    before allocating (``ByteBufferAccessor``/``MessageUtil``): each advertised API and
    version, with its first array or string field declaring 2^31-1 elements in an
    otherwise valid frame, is answered or closed quickly and memory stays flat."""
    broker, root, data, before = fuzz_broker
    apis = _advertised(broker.port)
    frames = huge_count_frames(apis, "fz")
    assert len(frames) > 50
    rss0, peak0 = rss_bytes(), _peak_rss()
    slow = []
    for what, frame in frames:
        with connect(broker.port, timeout=5) as s:
            t0 = time.monotonic()
            s.sendall(frame)
            try:
                recv_frame(s)
            except TimeoutError:
                slow.append(what)
            if time.monotonic() - t0 > 2:
                slow.append(what)
    assert not slow, slow
    assert rss_bytes() - rss0 < 200 * MB
    assert _peak_rss() - peak0 < 200 * MB
    _assert_healthy(broker, root, data, before)


def test_random_requests_from_kio_schemas_never_take_the_broker_down(fuzz_broker) -> None:
    broker, root, data, before = fuzz_broker
    seed = int(os.environ.get("KOMPAKT_FUZZ_SEED") or random.randrange(2**32))
    seconds = float(os.environ.get("KOMPAKT_FUZZ_SECONDS") or 20)
    print(f"fuzz seed {seed} for {seconds:.0f} s (KOMPAKT_FUZZ_SEED={seed} to replay)")
    apis = _advertised(broker.port)
    topics = ["fz", "fzc", "new-fz", "__consumer_offsets", "fz2"]
    rss0, peak0 = rss_bytes(), _peak_rss()
    stats = run_fuzz(broker.port, apis, topics, seed, seconds)
    print(f"fuzz stats: {stats}")
    assert stats.sent > 100
    assert stats.answered > stats.sent // 4, stats
    grown = max(rss_bytes() - rss0, _peak_rss() - peak0)
    assert grown < 200 * MB, f"RSS grew by {grown / MB:.0f} MB (seed {seed})"
    _assert_healthy(broker, root, data, before)


def test_partitions_beyond_kafkas_10000_records_per_operation_are_a_policy_violation(
    fuzz_broker,
) -> None:
    """Regression (fuzzer): CreatePartitions to 10001 partitions opened 30000 files and
    left the broker out of file descriptors. Kafka's controller refuses an operation
    making more than MAX_RECORDS_PER_USER_OP (10000) records with POLICY_VIOLATION."""
    broker, root, data, before = fuzz_broker
    broker.logs.create_topic("cap", 2)
    with connect(broker.port) as s:
        topics = [{"name": "too-big", "num_partitions": 10_001, "replication_factor": 1}]
        r = call(s, 19, 7, {"topics": topics, "timeout": 5000})
        assert [t.error_code for t in r.topics] == [44]
        r = call(s, 37, 3, {"topics": [{"name": "cap", "count": 10_003}], "timeout": 5000})
        assert [t.error_code for t in r.results] == [44]
    assert not broker.logs.has_topic("too-big")
    assert broker.logs.partition_count("cap") == 2
    assert not (data / "too-big-0").exists() and not (data / "cap-2").exists()


def test_metadata_topic_without_name_or_id_is_invalid_request(fuzz_broker) -> None:
    """Regression (fuzzer): Metadata v10 naming a topic with null name and zero id made
    the response unencodable and the connection drop; Kafka answers INVALID_REQUEST."""
    broker, _root, _data, _before = fuzz_broker
    with connect(broker.port) as s:
        r = call(s, 3, 10, {"topics": [{"name": None}], "allow_auto_topic_creation": True})
        assert [t.error_code for t in r.topics] == [42]
        assert call(s, 18, 3, {})  # same connection still served
