"""acks=all on one node means on disk: a Produce with acks=-1 is answered only once an
fsync of its partition covers the record (Kafka's ``ProduceRequest.acks``: -1 waits for
the full set of in-sync replicas; kompakt's only replica is the disk), and the fsync is
a group commit: the requests that append while one fsync is in flight share one.

The disk is made slow or stalled (the partition's flush waits on the test), the broker
and the client are real.
"""

from __future__ import annotations

import threading

from confluent_kafka import Producer
from shared_kit import wait_for

from kompakt.broker.app import start_test_broker

TIMEOUT = 30


class StalledDisk:
    """A one-partition topic whose flush (its fsync) waits for :attr:`gate`, as a
    stalling disk would; :attr:`calls` has the log end offset each flush saw, and
    :attr:`seen` each delivery's (offset, recovery point when it was reported)."""

    def __init__(self, broker, topic: str):
        broker.logs.create_topic(topic, 1)
        self.plog = plog = broker.logs.get_log(topic, 0)
        self.gate = threading.Event()
        self.calls: list[int] = []
        self.seen: list[tuple[int, int]] = []
        flush = plog.flush

        def stalled(*args, **kwargs):
            self.calls.append(plog.log_end_offset)
            self.gate.wait(TIMEOUT)
            return flush(*args, **kwargs)

        plog.flush = stalled

    def delivered(self, err, msg) -> None:
        assert err is None, err
        self.seen.append((msg.offset(), self.plog.recovery_point))


def test_acks_all_answer_comes_after_the_fsync_that_covers_the_record(tmp_path):
    """Kafka's acks=-1: the answer means the write is durable. With the fsync stalled,
    no delivery report arrives; once it completes, each report finds its offset below
    the recovery point (the fsynced end of the log)."""
    b = start_test_broker(tmp_path)
    try:
        disk = StalledDisk(b, "durable")
        p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 0})
        p.produce("durable", b"v0", on_delivery=disk.delivered)
        wait_for(lambda: disk.calls, "the first fsync to start")
        p.poll(0.5)  # the answer would arrive now if it did not wait for the fsync
        assert disk.seen == []
        disk.gate.set()
        assert p.flush(TIMEOUT) == 0
        assert [off for off, _ in disk.seen] == [0]
        assert all(off < rp for off, rp in disk.seen)
    finally:
        b.stop()


def test_acks_all_requests_that_append_during_an_fsync_share_the_next_one(tmp_path):
    """Group commit: four more producers' acks=all requests append while the first
    one's fsync stalls; that fsync, which runs once the disk comes back, covers and
    answers all five (one flush, not five), each answer after its record was covered."""
    b = start_test_broker(tmp_path)
    producers: list[Producer] = []
    try:
        disk = StalledDisk(b, "grouped")
        for i in range(5):
            p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 0})
            p.produce("grouped", b"v%d" % i, on_delivery=disk.delivered)
            p.poll(0)
            producers.append(p)
            if i == 0:
                wait_for(lambda: disk.calls, "the first fsync to start")
        wait_for(lambda: disk.plog.log_end_offset == 5, "all five appends")
        disk.gate.set()
        for p in producers:
            assert p.flush(TIMEOUT) == 0
        assert sorted(off for off, _ in disk.seen) == [0, 1, 2, 3, 4]
        assert all(off < rp for off, rp in disk.seen)
        # one flush, started when the log ended at offset 1, covered all five records
        assert disk.calls == [1]
        assert disk.plog.recovery_point == 5
    finally:
        b.stop()
