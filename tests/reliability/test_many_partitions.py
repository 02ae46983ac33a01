"""A broker process with more partitions than its open-segment cap (issue 17).

``kompakt.log.max.open.segments=32`` under 300 compacted partitions of small segments:
produce to every partition and fetch every record back, and the process's descriptors
(``/proc/PID/fd``) stay within 5 per open segment plus a constant whatever the partition
count. A restart after SIGTERM is a clean one (Kafka's ``.kafka_cleanshutdown``: no
recovery), after SIGKILL an unclean one that recovers; both serve every record.
"""

from __future__ import annotations

import os
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from reliability.kit import BrokerProcess, create_topic, process_stats

CAP = 32
PARTITIONS = 300
PER_PARTITION = 12
# besides the segments: the .lock, logging, the event loop, listening and client sockets
CONSTANT = 64
IN_USE = 2  # segments a request or the log flusher may hold open beyond the cap
TOPIC = "many"


def produce_all(bootstrap: str) -> dict[tuple[int, int], bytes]:
    """Every partition in turn, one round at a time, acks=all; the model is built from
    delivery reports."""
    model: dict[tuple[int, int], bytes] = {}
    errors: list[str] = []

    def done(err, msg) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            model[(msg.partition(), msg.offset())] = msg.value()

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "log_level": 2})
    for i in range(PARTITIONS * PER_PARTITION):
        part = i % PARTITIONS
        key = b"k%d" % (i // PARTITIONS % 3)
        p.produce(TOPIC, b"v%d-%d" % (part, i) + b"x" * 90, key, partition=part, on_delivery=done)
        if part == PARTITIONS - 1:  # a round per batch: segments of several batches
            assert p.flush(60) == 0
    assert errors == []
    return model


def fetch_all(bootstrap: str, want: int) -> dict[tuple[int, int], bytes]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "many-partitions",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 50,
            "log_level": 2,
        }
    )
    got: dict[tuple[int, int], bytes] = {}
    try:
        c.assign([TopicPartition(TOPIC, q, OFFSET_BEGINNING) for q in range(PARTITIONS)])
        for _ in range(600):  # bounded: each round waits at most 0.2 s for records
            for m in c.consume(1000, timeout=0.2):
                assert m.error() is None, m.error()
                got[(m.partition(), m.offset())] = m.value()
            if len(got) >= want:
                break
    finally:
        c.close()
    return got


def fds_within_cap(broker: BrokerProcess) -> int:
    """Descriptors of the broker; those on partition folders are segment files (its
    stdout goes to a ``...-broker.log`` beside the data dir, which is not one)."""
    _rss, fds, _pending, _ = process_stats(broker.pid)
    data = str(broker.data_dir.resolve()) + "/"
    segment_fds = 0
    for name in os.listdir(f"/proc/{broker.pid}/fd"):
        try:
            target = os.readlink(f"/proc/{broker.pid}/fd/{name}")
        except OSError:
            continue
        if target.startswith(data) and "/" in target[len(data) :]:
            segment_fds += 1
    # the cap yields to segments in use at that instant (a fetch, a flush): IN_USE of them
    limit = 5 * (CAP + IN_USE)
    assert segment_fds <= limit, f"{segment_fds} segment fds for a cap of {CAP} segments"
    assert fds <= limit + CONSTANT, f"{fds} fds for a cap of {CAP} segments"
    return fds


def test_fds_stay_bounded_by_the_open_segment_cap_with_300_partitions_and_restarts(
    tmp_path: Path,
):
    broker = BrokerProcess(
        tmp_path / "data",
        {
            "kompakt.cleaner.engine": "local",
            "log.cleaner.enable": "false",
            "kompakt.log.max.open.segments": str(CAP),
        },
    )
    broker.start(timeout=60)
    try:
        create_topic(
            broker.bootstrap,
            TOPIC,
            PARTITIONS,
            {"cleanup.policy": "compact", "segment.bytes": "1024"},
        )
        fds_within_cap(broker)
        model = produce_all(broker.bootstrap)
        segments = sum(1 for d in (tmp_path / "data").glob(f"{TOPIC}-*") for _ in d.glob("*.log"))
        assert segments > PARTITIONS > 5 * CAP
        fds_within_cap(broker)
        assert fetch_all(broker.bootstrap, len(model)) == model
        fds_within_cap(broker)

        assert broker.stop() == 0
        broker.start(timeout=60)
        assert "(clean shutdown)" in broker.log_tail(40)
        fds_within_cap(broker)
        assert fetch_all(broker.bootstrap, len(model)) == model
        fds_within_cap(broker)

        broker.kill()
        broker.start(timeout=60)
        assert "(unclean shutdown)" in broker.log_tail(40)
        fds_within_cap(broker)
        assert fetch_all(broker.bootstrap, len(model)) == model
        fds_within_cap(broker)
    finally:
        broker.kill()
