"""kafka-python, aiokafka and kcat against the broker."""

import asyncio
import subprocess

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewPartitions, NewTopic

KCAT = "/usr/bin/kcat"


def test_kafka_python(broker, topic_name):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    try:
        admin.create_topics([NewTopic(topic_name, 2, 1, topic_configs={"retention.ms": "60000"})])
        assert topic_name in admin.list_topics()
        cfg = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic_name)])
        assert "retention.ms" in repr(cfg)
        admin.create_partitions({topic_name: NewPartitions(3)})
        assert broker.logs.partition_count(topic_name) == 3
    finally:
        admin.close()

    producer = KafkaProducer(
        bootstrap_servers=broker.bootstrap, acks="all", compression_type="gzip", linger_ms=5
    )
    for i in range(50):
        producer.send(topic_name, key=b"k%d" % i, value=b"v%d" % i, partition=1)
    producer.flush(10)
    producer.close()

    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        enable_auto_commit=False,
        consumer_timeout_ms=3000,
        fetch_max_wait_ms=100,
    )
    tp = TopicPartition(topic_name, 1)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    got = []
    for msg in consumer:
        got.append((msg.offset, msg.key, msg.value))
        if len(got) == 50:
            break
    consumer.close()
    assert got == [(i, b"k%d" % i, b"v%d" % i) for i in range(50)]

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    try:
        admin.delete_topics([topic_name])
    finally:
        admin.close()
    assert not broker.logs.has_topic(topic_name)


def test_aiokafka(broker, topic_name):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as ATP

    async def main():
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=True)
        await producer.start()
        try:
            for i in range(20):
                await producer.send_and_wait(topic_name, b"v%d" % i, key=b"k")
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            bootstrap_servers=broker.bootstrap, enable_auto_commit=False, fetch_max_wait_ms=100
        )
        await consumer.start()
        try:
            tp = ATP(topic_name, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            out = []
            while len(out) < 20:
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=500), 10)
                for msgs in batch.values():
                    out += [m.value for m in msgs]
            return out
        finally:
            await consumer.stop()

    assert asyncio.run(main()) == [b"v%d" % i for i in range(20)]  # auto-created topic


def test_kcat(broker, topic_name):
    md = subprocess.run(
        [KCAT, "-b", broker.bootstrap, "-L", "-m", "5"], capture_output=True, text=True, timeout=20
    )
    assert md.returncode == 0, md.stderr
    assert f"broker 1 at {broker.bootstrap} (controller)" in md.stdout
    lines = "".join(f"key{i}:value{i}\n" for i in range(10))
    prod = subprocess.run(
        [KCAT, "-b", broker.bootstrap, "-P", "-t", topic_name, "-K:"],
        input=lines,
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert prod.returncode == 0, prod.stderr
    cons = subprocess.run(
        [
            KCAT,
            "-b",
            broker.bootstrap,
            "-C",
            "-t",
            topic_name,
            "-e",
            "-o",
            "beginning",
            "-f",
            "%k=%s\n",
        ],
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert cons.returncode == 0, cons.stderr
    assert cons.stdout.splitlines() == [f"key{i}=value{i}" for i in range(10)]
