"""Issue 26, decompression bomb: a 32 KiB zstd Produce batch expanding to 1 GiB is
validated in bounded memory and accepted, as Kafka's ``LogValidator`` does (it walks a
compressed batch with a streaming iterator; the batch is under ``max.message.bytes``
compressed and valid, so Kafka appends it).

A real broker process gets the bomb as a raw Produce frame; its peak RSS (``VmHWM``) may
rise by at most 64 MiB, and another client's small produce keeps answering meanwhile.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from shared_kit import free_port, load_script

REPO = Path(__file__).resolve().parents[2]
bench = load_script("bench_bomb", REPO / "benchmarks" / "bench_bomb.py")

pytestmark = pytest.mark.timeout(300)
MIB = 1 << 20


@pytest.fixture
def broker_proc(tmp_path):
    port = free_port()
    proc = bench.start_broker(tmp_path / "data", port)
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
