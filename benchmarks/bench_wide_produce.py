"""Another client's produce latency while one Produce names 100,000 partitions.

Kafka serves connections on separate network threads, so one huge request does not hold
the others. kompakt decodes a large request and encodes every answer on a worker thread,
off the event loop that serves all connections. This starts a real broker process, has
one client produce a batch every 10 ms (acks=1) and another send one Produce naming N
partitions (9 MB in, 7 MB out for 100,000), and prints the other client's worst latency
while the big request runs, next to its worst outside it.
Run: ``.venv/bin/python benchmarks/bench_wide_produce.py [N]``.
"""

from __future__ import annotations

import socket
import struct
import sys
import threading
import time

from bench_bomb import REPO, broker_process, create_topics, zstd_batch

sys.path.insert(0, str(REPO / "tests"))  # raw_kafka: Kafka frames with kio's schemas


def produce_frame(topic: str, partitions: int, records: bytes) -> bytes:
    """A raw Produce (v9, acks=1) of ``records`` to partitions 0..n-1 of ``topic``."""
    from raw_kafka import API, encode_request

    data = [{"index": i, "records": records} for i in range(partitions)]
    body = {"acks": 1, "timeout": 30000, "topic_data": [{"name": topic, "partition_data": data}]}
    return encode_request(API.produce, 9, body)


def roundtrip(sock: socket.socket, reader, frame: bytes) -> bytes:
    """Send ``frame``, return the answer's bytes (not decoded: the bench's own GIL)."""
    sock.sendall(frame)
    (n,) = struct.unpack(">i", reader.read(4))
    return reader.read(n)


def run(port: int, big: bytes, one: bytes) -> tuple[float, int, float, float, int]:
    """(the big request's time, its answer's size, the other client's worst latency
    during it and outside it, the other client's produces during it)."""
    lat: list[tuple[float, float]] = []
    done = threading.Event()

    def other() -> None:
        with socket.create_connection(("127.0.0.1", port)) as s:
            f = s.makefile("rb")
            while not done.is_set():
                t0 = time.perf_counter()
                roundtrip(s, f, one)
                lat.append((t0, time.perf_counter() - t0))
                time.sleep(0.01)

    t = threading.Thread(target=other, daemon=True)
    t.start()
    time.sleep(1.0)
    with socket.create_connection(("127.0.0.1", port)) as s:
        w0 = time.perf_counter()
        answer = roundtrip(s, s.makefile("rb"), big)
        w1 = time.perf_counter()
    time.sleep(1.0)
    done.set()
    t.join()
    during = [d for t0, d in lat if t0 + d >= w0 and t0 <= w1]
    outside = [d for t0, d in lat if not (t0 + d >= w0 and t0 <= w1)]
    return w1 - w0, len(answer), max(during), max(outside), len(during)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    # the local cleaner: a Spark session warming up would take the CPU this measures
    with broker_process("kompakt.cleaner.engine=local") as (port, _proc):
        create_topics(port, ["wide", "other"])
        small = zstd_batch([b"x" * 100], int(time.time() * 1000))
        one, big = produce_frame("other", 1, small), produce_frame("wide", n, small)
        for i in range(3):
            took, size, during, outside, count = run(port, big, one)
            print(
                f"run {i}: {n} partitions ({len(big) / 1e6:.1f} MB in, {size / 1e6:.1f} MB "
                f"out) answered in {took:.2f} s; other client: worst {during * 1000:.0f} ms "
                f"over {count} produces meanwhile, worst {outside * 1000:.0f} ms outside",
                flush=True,
            )


if __name__ == "__main__":
    main()
