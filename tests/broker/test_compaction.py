"""The seeds' compaction story end to end through the broker, on the Spark engine.

Create a compacted topic with small segments, produce updates and tombstones for many
keys with confluent-kafka, let the background cleaner run, consume from the beginning
and rebuild exactly the latest state; metrics, /v1/partitions, `topic describe` and the
admin compact endpoint show the clean.
"""

from __future__ import annotations

import json
import urllib.request

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from shared_kit import consume_until, wait_for

from kompakt.broker.app import start_test_broker

KEYS = 200
ROUNDS = 6


@pytest.fixture(scope="module")
def spark_broker(tmp_path_factory):
    b = start_test_broker(
        tmp_path_factory.mktemp("compaction-data"),
        **{
            "kompakt.cleaner.engine": "spark",
            "kompakt.spark.master": "local[2]",
            "spark.sql.shuffle.partitions": "2",
            "log.cleaner.backoff.ms": "200",
        },
    )
    yield b
    b.stop()


def get_json(url: str):
    with urllib.request.urlopen(url, timeout=30) as resp:
        return json.loads(resp.read())


def consume_all(bootstrap: str, topic: str, end: int) -> list:
    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False}
    )
    c.assign([TopicPartition(topic, 0, 0)])
    try:
        return consume_until(c, lambda out: bool(out) and out[-1].offset() >= end - 1)
    finally:
        c.close()


def test_background_spark_cleaner_keeps_latest_state(spark_broker):
    bootstrap = spark_broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = "users-compacted"
    admin.create_topics(
        [
            NewTopic(
                topic,
                1,
                1,
                config={
                    "cleanup.policy": "compact",
                    "segment.bytes": "4096",
                    "min.cleanable.dirty.ratio": "0.01",
                    "delete.retention.ms": "0",
                },
            )
        ]
    )[topic].result(30)
    p = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all", "batch.num.messages": 20}
    )
    model: dict[bytes, bytes] = {}
    for r in range(ROUNDS):
        for k in range(KEYS):
            key = b"user-%04d" % k
            if r == ROUNDS - 1 and k % 10 == 0:
                p.produce(topic, key=key, value=None)  # tombstone
                model.pop(key, None)
            else:
                value = b"round-%d-of-%d" % (r, k)
                p.produce(topic, key=key, value=value)
                model[key] = value
    assert p.flush(30) == 0
    # wait for the background cleaner (Spark starts on the first clean)
    admin_url = f"http://127.0.0.1:{spark_broker.admin_port}"

    def cleaned() -> dict | None:
        partitions = get_json(admin_url + "/v1/partitions")["partitions"]
        status = next(s for s in partitions if s["topic"] == topic)
        return status if status.get("last_compaction") else None

    status = wait_for(cleaned, f"a background clean of {topic}", 180)
    # a second clean (forced through the admin endpoint) passes the tombstones' horizon
    req = urllib.request.Request(
        admin_url + "/v1/compact",
        data=json.dumps({"topic": topic}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=180) as resp:
        results = json.loads(resp.read())["results"]
    assert results[0]["topic"] == topic
    end = status["log_end_offset"]
    msgs = consume_all(bootstrap, topic, end)
    state: dict[bytes, bytes] = {}
    for m in msgs:
        if m.value() is None:
            state.pop(m.key(), None)
        else:
            state[m.key()] = m.value()
    assert state == model
    assert len(msgs) < KEYS * ROUNDS  # the log really shrank
    offsets = [m.offset() for m in msgs]
    assert offsets == sorted(set(offsets))
    metrics = urllib.request.urlopen(admin_url + "/metrics", timeout=30).read().decode()
    line = next(
        ln for ln in metrics.splitlines() if ln.startswith("kompakt_log_cleaner_compactions_total")
    )
    assert float(line.split()[-1]) >= 1
    assert f'kompakt_log_cleaner_dirty_ratio{{partition="0",topic="{topic}"}}' in metrics
