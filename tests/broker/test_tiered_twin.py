"""The issue's claim at a small scale, with a real broker and real clients: a compacted
topic with ``remote.storage.enable=true`` and a small ``local.retention.bytes`` keeps
its local log bounded while megabytes are produced, and after compaction (the remote
range cleaned in the tier, the untiered twin cleaned locally) a consumer from offset 0
reads the same records from both, in the same order.

Kafka's rules make the two identical here: both logs hold the same records at the same
offsets, both are cleaned over the same range (every record is in a rolled segment,
all of it tiered), by the same cleaner rules (latest value per key, tombstones kept for
``delete.retention.ms``), so the survivors are the same records. The bytes on disk may
differ (batching, segment boundaries); what a consumer reads may not.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from confluent_kafka import Producer
from shared_kit import wait_for

from kompakt.broker.app import BrokerThread
from kompakt.broker.tiering import Tiering, tiering_of
from kompakt.cleaner.cleaner import Cleaner
from kompakt.log.partition_log import PartitionLog
from tests.broker.test_tiered import read_all
from tests.remote.broker_kit import TIMEOUT, create_topic, tiered_broker

SEGMENT = 16 * 1024
LOCAL = 2 * SEGMENT  # local.retention.bytes
STEP = 128 * 1024  # bytes produced between two looks at the tier
TOTAL = 3 * 1024 * 1024
VALUE = 200
# what local retention keeps (LOCAL), the segment it may not delete yet, the active one
# and one step produced before the task's next pass: far below TOTAL
BOUND = LOCAL + 2 * SEGMENT + 2 * STEP
TWIN = {"cleanup.policy": "compact", "segment.bytes": str(SEGMENT)}
TIERED = {
    **TWIN,
    "remote.storage.enable": "true",
    "local.retention.bytes": str(LOCAL),
    # a deleted segment's renamed files go at once, not a minute later (Kafka's
    # default), so the disk is what local retention keeps
    "file.delete.delay.ms": "0",
}


def local_log_bytes(plog: PartitionLog) -> int:
    return sum(s.size for s in plog.segments_snapshot())


def disk_bytes(folder: Path) -> int:
    """What the partition's files take on disk (``du``: sparse index files count the
    blocks they use), renamed ``.deleted`` files included."""
    total = 0
    for e in os.scandir(folder):
        try:
            total += e.stat().st_blocks * 512
        except FileNotFoundError:
            pass  # deleted since the listing
    return total


def tier_caught_up(tiering: Tiering, plog: PartitionLog) -> bool:
    """Every rolled segment tiered and local retention applied (what is left: under
    LOCAL in tiered segments, the one it may not delete yet, the active one)."""
    top = plog.segments_snapshot()[-1].base_offset - 1
    return (
        tiering.highest_tiered_offset(plog) >= top and local_log_bytes(plog) <= LOCAL + 2 * SEGMENT
    )


def produce_watching(
    b: BrokerThread, tiering: Tiering, plog: PartitionLog
) -> tuple[int, int, dict]:
    """The same records to both topics in steps of ``STEP`` bytes, waiting between steps
    for the tier's task (a producer the tier keeps up with), while a thread samples the
    tiered partition's local ``.log`` bytes and its disk bytes; (peak ``.log`` bytes,
    peak disk bytes, latest value of each key)."""
    # batches well under a segment, so a segment is never one oversized batch
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5, "batch.size": 8192})
    peak = [0, 0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.01):
            peak[0] = max(peak[0], local_log_bytes(plog))
            peak[1] = max(peak[1], disk_bytes(plog.dir))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    latest: dict[bytes, bytes | None] = {}
    t0 = int(time.time() * 1000)
    n = TOTAL // VALUE
    try:
        for i in range(n):
            key = b"k%05d" % ((i * 31) % (n // 4))
            value = None if i % 50 == 49 else b"%06d-" % i + b"v" * (VALUE - 7)
            latest[key] = value
            for topic in ("tiered", "twin"):
                p.produce(topic, value, key, headers=[("i", b"%d" % i)], timestamp=t0 + i)
            if (i + 1) % (STEP // VALUE) == 0:
                assert p.flush(TIMEOUT) == 0
                wait_for(lambda: tier_caught_up(tiering, plog), "the tier's pass", TIMEOUT)
        assert p.flush(TIMEOUT) == 0
    finally:
        stop.set()
        sampler.join()
    return peak[0], peak[1], latest


def test_tiered_local_disk_stays_bounded_and_reads_match_the_untiered_twin(
    tmp_path: Path,
) -> None:
    b = tiered_broker(
        tmp_path / "data",
        **{"remote.log.manager.task.interval.ms": "50", "log.cleaner.enable": "false"},
    )
    try:
        create_topic(b, "tiered", TIERED)
        create_topic(b, "twin", TWIN)
        plog, twin = b.logs.get_log("tiered", 0), b.logs.get_log("twin", 0)
        tiering = tiering_of(b.broker.state)
        assert tiering is not None
        peak, disk_peak, latest = produce_watching(b, tiering, plog)
        assert local_log_bytes(twin) > TOTAL  # what the tiered one would hold untiered
        assert 0 < peak <= BOUND, f"local log reached {peak} bytes, bound {BOUND}"
        # the indexes, snapshots and files being deleted: some blocks beside the .log
        assert disk_peak <= 2 * BOUND, f"local disk reached {disk_peak} bytes"

        # every record in a rolled segment, all of it tiered: both clean the same range
        plog.roll()
        twin.roll()
        wait_for(lambda: tier_caught_up(tiering, plog), "the last segment tiered", TIMEOUT)
        assert plog.log_start_offset > 0  # the oldest records are only in the tier
        assert tiering.compact_remote_now(plog)
        Cleaner(b.logs).clean_partition(twin, force=True)
        m = tiering.manifest(plog)
        assert m is not None and m.clean_point == twin.log_end_offset

        tiered_read, twin_read = read_all(b.bootstrap, "tiered"), read_all(b.bootstrap, "twin")
        # (offset, key, value, headers, timestamp) of every record, in order
        assert tiered_read == twin_read
        # Kafka's compaction guarantee on both: the latest value of every key
        assert {r[1]: r[2] for r in tiered_read} == latest
        assert len(tiered_read) < TOTAL // VALUE  # the clean removed something
    finally:
        b.stop()
