"""The broker's remote tier on an S3 server (moto, through obstore's real client; see
conftest.py for what moto does not prove): a tiered compacted topic is copied up,
deleted locally and read back from the bucket, the same records as before tiering."""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from shared_kit import consume_until

from kompakt.broker.tiering import tiering_of
from kompakt.remote import open_store
from kompakt.remote.layout import manifest_key, topic_key
from tests.remote.broker_kit import (
    EARLIEST_LOCAL,
    TIMEOUT,
    create_topic,
    list_offset,
    tiered_broker,
)


def test_tiered_topic_served_from_an_s3_bucket(
    tmp_path: Path, s3_url: str, s3_endpoint: str
) -> None:
    b = tiered_broker(
        tmp_path / "data",
        **{
            "kompakt.remote.storage.url": s3_url,
            "kompakt.remote.storage.s3.endpoint.url": s3_endpoint,
            "remote.log.manager.task.interval.ms": 3_600_000,
            "log.cleaner.enable": "false",
        },
    )
    try:
        configs = {
            "cleanup.policy": "compact",
            "remote.storage.enable": "true",
            "segment.bytes": "4096",
            "local.retention.bytes": "4096",
        }
        create_topic(b, "s3t", configs)
        p = Producer({"bootstrap.servers": b.bootstrap, "batch.num.messages": 5})
        for i in range(300):
            p.produce("s3t", key=b"k%d" % (i % 31), value=b"v%d-" % i + b"s" * (i % 50))
        assert p.flush(TIMEOUT) == 0
        c = Consumer(
            {
                "bootstrap.servers": b.bootstrap,
                "group.id": f"g-{time.monotonic_ns()}",
                "enable.partition.eof": True,
            }
        )

        def read() -> list[tuple[int, bytes | None, bytes | None]]:
            c.assign([TopicPartition("s3t", 0, 0)])
            return [(m.offset(), m.key(), m.value()) for m in consume_until(c, timeout=TIMEOUT)]

        before = read()
        tiering = tiering_of(b.broker.state)
        assert tiering is not None
        tiering.run_once()
        plog = b.logs.get_log("s3t", 0)
        local_start = plog.log_start_offset
        assert local_start > 0  # run_once copied, committed, then deleted locally
        assert list_offset(b, "s3t", EARLIEST_LOCAL) == local_start
        assert read() == before
        c.close()
        store = open_store(s3_url, s3_endpoint)
        assert store.get(topic_key("s3t"))[0] and store.get(manifest_key("s3t", 0))[0]
    finally:
        b.stop()
