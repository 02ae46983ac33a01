"""A broker cleans a tiered compacted partition's remote range (its remote log
manager's pass, with ``log.cleaner.enable``): real producers and consumers, the local
copies deleted by ``local.retention.bytes``, and a consumer from offset 0 afterwards
sees the latest value of every key, each key once in the cleaned remote range (Kafka's
compaction guarantee), served from the cleaned objects."""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from shared_kit import consume_until, wait_for

from kompakt.broker.tiering import tiering_of
from tests.remote.broker_kit import TIMEOUT, create_topic, tiered_broker

N, KEYS = 800, 37
TOPIC = "tiered"
CONFIGS = {
    "cleanup.policy": "compact",
    "remote.storage.enable": "true",
    "segment.bytes": "4096",
    "local.retention.bytes": "8192",
    "min.cleanable.dirty.ratio": "0.01",
    "file.delete.delay.ms": "0",
}


def test_broker_cleans_the_remote_range(tmp_path: Path) -> None:
    b = tiered_broker(tmp_path / "data", **{"remote.log.manager.task.interval.ms": "100"})
    try:
        create_topic(b, TOPIC, CONFIGS)
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5, "batch.num.messages": 7})
        latest: dict[bytes, bytes | None] = {}
        for i in range(N):
            key = b"k%d" % (i % KEYS)
            value = None if i % 50 == 49 else b"v%d-" % i + b"x" * 40
            p.produce(TOPIC, key=key, value=value)
            latest[key] = value
        assert p.flush(TIMEOUT) == 0
        plog = b.logs.get_log(TOPIC, 0)
        tiering = tiering_of(b.broker.state)
        assert tiering is not None

        def cleaned() -> bool:
            m = tiering.manifest(plog)
            top = plog.active_segment.base_offset
            return m is not None and m.end_offset == top and m.clean_point == top

        wait_for(cleaned, "the whole remote range tiered and cleaned", TIMEOUT)
        m = tiering.manifest(plog)
        assert plog.log_start_offset > 0  # the local copies are gone: reads are remote
        c = Consumer(
            {
                "bootstrap.servers": b.bootstrap,
                "group.id": f"g-{time.monotonic_ns()}",
                "enable.partition.eof": True,
            }
        )
        c.assign([TopicPartition(TOPIC, 0, 0)])
        try:
            msgs = consume_until(c, timeout=TIMEOUT)
        finally:
            c.close()
        seen = {}
        for msg in msgs:
            seen[msg.key()] = msg.value()
        assert {k: v for k, v in seen.items() if v is not None} == {
            k: v for k, v in latest.items() if v is not None
        }
        below = [msg.key() for msg in msgs if msg.offset() < m.clean_point]
        assert len(below) == len(set(below))
    finally:
        b.stop()
