"""Stopping a broker while its Spark engine cleans a tiered partition's remote range
(:mod:`kompakt.pipeline.remote_engine`): the clean's Spark job group is cancelled
(``SparkContext.cancelJobGroup``, as Kafka's ``LogCleaner.shutdown`` interrupts its
threads' cleans), so the remote log manager's thread ends instead of waiting on the
executors, and the manifest is the one the clean started from, naming only existing
objects. The executors' bucket is a real TCP endpoint that accepts and never answers
(a hung S3), so the clean cannot end on its own."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from confluent_kafka import Producer
from shared_kit import wait_for

from kompakt.broker.tiering import tiering_of
from kompakt.pipeline.remote_tasks import StoreAddress
from kompakt.remote.layout import segments_folder
from tests.remote.broker_kit import TIMEOUT, create_topic
from tests.remote.test_spark_remote_clean_broker import CONFIGS, TOPIC, spark_broker


@pytest.mark.slow
def test_stopping_the_broker_cancels_a_running_spark_remote_clean(spark, tmp_path: Path) -> None:
    hung = socket.create_server(("127.0.0.1", 0))  # listens, never accepts: no answer
    b = spark_broker(tmp_path / "data", spark)
    try:
        tiering = tiering_of(b.broker.state)
        assert tiering is not None and tiering.remote_cleaner.engine is not None
        port = hung.getsockname()[1]
        creds = {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "AWS_REGION": "us-east-1"}
        tiering.remote_cleaner.engine.address = StoreAddress(
            "s3://hung/tier", f"http://127.0.0.1:{port}", creds
        )
        create_topic(b, TOPIC, CONFIGS)
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5, "batch.num.messages": 7})
        for i in range(400):
            p.produce(TOPIC, key=b"k%d" % (i % 23), value=b"v%d-" % i + b"x" * 40)
        assert p.flush(TIMEOUT) == 0
        tracker = spark.sparkContext.statusTracker()

        def cleaning() -> bool:
            group = set(tracker.getJobIdsForGroup(f"kompakt-remote-{TOPIC}-0"))
            return bool(group & set(tracker.getActiveJobsIds()))

        wait_for(cleaning, "a Spark remote clean running on the hung bucket", TIMEOUT)
        before = tiering.tier.metadata.load_partition(TOPIC, 0)
        assert before is not None and before.value.segments
        thread = next(t for t in b.broker.background.threads if t.name.endswith("log-manager"))
        b.stop()
        assert not thread.thread.is_alive()  # ended, not left behind by the join's timeout
        after = tiering.tier.metadata.load_partition(TOPIC, 0)
        assert after.value == before.value  # the old manifest, nothing committed
        present = {o.key for o in tiering.tier.store.list(segments_folder(TOPIC, 0))}
        assert after.value.keys() <= present
        assert not cleaning()
    finally:
        b.stop()
        hung.close()
