"""Issue 26, decompression bomb: a 32 KiB zstd Produce batch expanding to 1 GiB is
validated in bounded memory and accepted, as Kafka's ``LogValidator`` does (it walks a
compressed batch with a streaming iterator; the batch is under ``max.message.bytes``
compressed and valid, so Kafka appends it).

A real broker process gets the bomb as a raw Produce frame; its peak RSS (``VmHWM``) may
rise by at most 64 MiB, and another client's small produce keeps answering meanwhile.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from shared_kit import consume_until, free_port, load_script

from kompakt.log.syncs import file_batches
from kompakt.record import codecs

REPO = Path(__file__).resolve().parents[2]
bench = load_script("bench_bomb", REPO / "benchmarks" / "bench_bomb.py")

pytestmark = pytest.mark.timeout(300)
MIB = 1 << 20
RECORD_TOO_LARGE = 10  # Kafka's error code


@pytest.fixture
def broker_proc(tmp_path):
    port = free_port()
    # the local cleaner: a Spark session warming up in the broker would be measured too
    proc = bench.start_broker(tmp_path / "data", port, "kompakt.cleaner.engine=local")
    try:
        yield port, proc
    finally:
        proc.terminate()
        proc.wait(30)


def test_a_1_gib_zstd_bomb_is_accepted_in_bounded_memory_like_kafkas_streaming_validator(
    broker_proc,
):
    """LogValidator.validateMessagesAndAssignOffsetsCompressed: the records are walked
    a chunk at a time; the batch is appended as received."""
    port, proc = broker_proc
    bench.create_topics(port, ["bomb", "other"])
    bomb = bench.bomb(1 << 30)
    assert len(bomb) < 64 * 1024  # well under max.message.bytes (1 MiB)
    warm = bench.produce(port, "other", bench.bomb(64 * MIB))  # imports, compiled kernels
    assert warm.error_code == 0

    rise, worst, code = bench.measure(port, proc.pid, "bomb", "other", bomb)

    assert code == 0, "Kafka accepts a valid batch under max.message.bytes"
    assert rise <= 64 * MIB, f"peak RSS rose by {rise / MIB:.0f} MiB"
    assert worst < 1.0, f"another client's produce took {worst:.2f} s"
    c = Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": "g"})
    try:
        lo, hi = c.get_watermark_offsets(TopicPartition("bomb", 0), timeout=10)
    finally:
        c.close()
    assert (lo, hi) == (0, 1024)  # the 1024 records of 1 MiB, appended as sent


def test_a_bomb_recompressed_to_the_topics_codec_streams_in_bounded_memory(broker_proc, tmp_path):
    """compression.type=lz4 and a zstd bomb: Kafka's LogValidator recompresses to the
    topic's codec (a MemoryRecordsBuilder fed record by record), and UnifiedLog.append
    refuses a recompressed batch over max.message.bytes (RECORD_TOO_LARGE). Here the
    payload is decompressed and compressed again a chunk at a time: 160 MiB of records
    become a 0.7 MiB lz4 batch, appended; 1 GiB would be a 4 MiB one, refused as soon as
    it grows past the limit. Neither raises the peak RSS by more than 64 MiB (before,
    the batch's whole expansion was decoded and re-encoded)."""
    port, proc = broker_proc
    bench.create_topics(port, ["lz4", "other"], {"compression.type": "lz4"})
    warm = bench.produce(port, "other", bench.bomb(64 * MIB))  # imports, compiled kernels
    assert warm.error_code == 0

    rise, _worst, code = bench.measure(port, proc.pid, "lz4", "other", bench.bomb(160 * MIB))
    assert code == 0, "recompressed under max.message.bytes: appended"
    assert rise <= 64 * MIB, f"peak RSS rose by {rise / MIB:.0f} MiB"
    (segment,) = (tmp_path / "data" / "lz4-0").glob("*.log")
    (batch,) = file_batches(segment.read_bytes())  # a live segment: zeros follow its batch
    assert batch.header.compression == codecs.LZ4 and batch.header.record_count == 160
    assert sum(len(r.value) for r in batch.records()) == 160 * MIB  # read back whole

    rise, _worst, code = bench.measure(port, proc.pid, "lz4", "other", bench.bomb(1 << 30))
    assert code == RECORD_TOO_LARGE
    assert rise <= 64 * MIB, f"peak RSS rose by {rise / MIB:.0f} MiB"


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd", "uncompressed"])
def test_a_batch_recompressed_a_chunk_at_a_time_is_read_back_by_a_kafka_client(broker_proc, codec):
    """Each codec's stream, written a chunk at a time (several 1 MiB chunks), is one
    that librdkafka decodes back to the records sent (zstd from the producer)."""
    port, _proc = broker_proc
    bench.create_topics(port, ["t"], {"compression.type": codec})
    size = 300 * 1024 if codec == "uncompressed" else MIB  # under max.message.bytes
    values = [os.urandom(1000) * (size // 1000) + bytes([i]) for i in range(3)]
    assert (
        bench.produce(port, "t", bench.zstd_batch(values, int(time.time() * 1000))).error_code == 0
    )
    c = Consumer(
        {
            "bootstrap.servers": f"127.0.0.1:{port}",
            "group.id": "g",
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
        }
    )
    try:
        c.assign([TopicPartition("t", 0, 0)])
        got = consume_until(c, what=f"the records of the {codec} topic")
    finally:
        c.close()
    assert [(m.key(), m.value()) for m in got] == [(b"k%d" % i, v) for i, v in enumerate(values)]
