"""The confluent-kafka client side shared by the broker benchmarks (bench_broker,
bench_groups, bench_security, bench_throttle, bench_partitions): one producer config,
one produce loop and one consume-from-the-start loop, so every figure is taken with
the same client settings."""

from __future__ import annotations

import os
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def create_topic(bootstrap: str, name: str, config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    fut = admin.create_topics([NewTopic(name, 1, 1, config=config or {})])[name]
    fut.result(30)


def producer_conf(acks: str, linger_ms: int = 5) -> dict[str, object]:
    """The benchmarks' producer: large batches, no compression, no idempotence."""
    return {
        "acks": acks,
        "linger.ms": linger_ms,
        "batch.size": 1 << 20,
        "message.max.bytes": 4 << 20,
        "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 1 << 20,
        "compression.type": "none",
        "enable.idempotence": False,
    }


def producer(bootstrap: str, acks: str, linger_ms: int = 5) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, **producer_conf(acks, linger_ms)})


def send(p: Producer, topic: str, value: bytes, key: bytes | None = None, **kw: object) -> None:
    """``p.produce``, waiting out a full queue (BufferError) by serving callbacks."""
    while True:
        try:
            p.produce(topic, value, key, **kw)
            return
        except BufferError:
            p.poll(0.05)


def produce_all(p: Producer, topic: str, value: bytes, n: int, key_mod: int = 0) -> None:
    errors = []

    def on_err(err, _msg) -> None:
        if err is not None:
            errors.append(err)

    for i in range(n):
        key = b"key-%08d" % (i % key_mod) if key_mod else None
        send(p, topic, value, key, on_delivery=on_err)
        if i % 1000 == 0:
            p.poll(0)
    left = p.flush(120)
    if left or errors:
        raise RuntimeError(f"{left} undelivered, errors: {errors[:3]}")


def consume_from_start(conf: dict[str, object], topic: str, n: int) -> tuple[float, int]:
    """(seconds, value bytes) to consume ``n`` records of partition 0 from the beginning
    (``assign``, no group). The connection (and any handshake) is made first, by a
    metadata request; the clock runs from ``assign`` to the ``n``-th record, so it holds
    the client's fetch-ahead as well as the records it hands out."""
    c = Consumer(
        {
            **conf,
            "group.id": "bench-unused",  # required by the client; assign() joins no group
            "enable.auto.commit": False,
            "fetch.max.bytes": 64 << 20,
            "max.partition.fetch.bytes": 16 << 20,
            # librdkafka (2.x) waits fetch.queue.backoff.ms (1 s by default) before the
            # next fetch once its queue holds queued.min.messages: a pause of the
            # client's own that came or not, per round, with either server
            "fetch.queue.backoff.ms": 5,
        }
    )
    c.list_topics(topic, timeout=30)
    got = nbytes = 0
    t0 = time.perf_counter()
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    deadline = t0 + 300
    while got < n and time.perf_counter() < deadline:
        # no more than are left: consume() waits its timeout for a count not there
        for m in c.consume(min(10_000, n - got), 1.0):
            if m.error():
                continue
            got += 1
            nbytes += len(m.value() or b"")
            if got == n:
                break
    dt = time.perf_counter() - t0
    c.close()
    if got < n:
        raise RuntimeError(f"consumed {got} of {n} from {topic}")
    return dt, nbytes


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def load_average() -> str:
    """The 1/5/15-minute load average (``uptime``'s), for the figures' context."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} ({os.cpu_count()} cores)"
