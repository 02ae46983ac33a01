"""Peak memory of the broker validating a decompression bomb, next to an honest batch.

A zstd Produce batch of 32 KiB can expand to 1 GiB (records of zeros). Kafka's
``LogValidator`` walks a compressed batch with a streaming iterator and never holds its
expansion; so does kompakt's (:mod:`kompakt.record.stream_scan`). This starts a real
broker process, produces an honest batch and a bomb of the same compressed size, and
prints the rise of the broker's peak RSS (``VmHWM``, reset between runs through
``/proc/PID/clear_refs``) per GiB of expansion, and the worst latency of another
client's small produce meanwhile. Run: ``.venv/bin/python benchmarks/bench_bomb.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import zstandard

from kompakt.record import codecs
from kompakt.record.encode import assemble_batch, encode_record
from kompakt.record.header import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # raw_kafka: Kafka frames with kio's schemas
GIB = 1 << 30


def zstd_batch(values, timestamp: int) -> bytes:
    """One zstd batch of records (key ``k<i>``, value from ``values``), compressed as it
    is encoded so that a 1 GiB expansion is never held by the builder either."""
    comp = zstandard.ZstdCompressor(level=3).compressobj()
    out = []
    n = 0
    for i, value in enumerate(values):
        body = bytearray()
        encode_record(body, i, 0, b"k%d" % i, value, ())
        out.append(comp.compress(bytes(body)))
        n += 1
    out.append(comp.flush())
    payload = b"".join(out)
    return assemble_batch(
        0, -1, codecs.ZSTD, n - 1, timestamp, timestamp,
        NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE, n, payload,
    )  # fmt: skip


def bomb(expansion: int, record_size: int = 1 << 20) -> bytes:
    """Records of ``record_size`` zeros adding up to ``expansion`` bytes."""
    zeros = bytes(record_size)
    return zstd_batch((zeros for _ in range(expansion // record_size)), _now())


def honest(compressed: int) -> tuple[bytes, int]:
    """A batch of incompressible 1 KiB values of about ``compressed`` bytes, and its
    expansion."""
    values = [os.urandom(1024) for _ in range(max(1, compressed // 1040))]
    return zstd_batch(values, _now()), sum(map(len, values))


def _now() -> int:
    return int(time.time() * 1000)


def start_broker(data_dir: Path, port: int, *overrides: str) -> subprocess.Popen:
    """``python -m kompakt.broker`` on 127.0.0.1:``port`` (and ``key=value`` overrides),
    waited for."""
    extra = [arg for kv in overrides for arg in ("--override", kv)]
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "kompakt.broker",
            "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
            "--override", f"log.dirs={data_dir}",
            "--override", "kompakt.admin.listener=http://127.0.0.1:0",
            *extra,
        ],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError("the broker exited at start") from None
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the broker did not listen in 60 s")


@contextlib.contextmanager
def broker_process(*overrides: str) -> Iterator[tuple[int, subprocess.Popen]]:
    """(port, process) of a broker in a fresh data dir, stopped and removed after."""
    tmp = Path(tempfile.mkdtemp(prefix="kompakt-bench-"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = start_broker(tmp / "data", port, *overrides)
    try:
        yield port, proc
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)


def peak_rss(pid: int) -> int:
    """The process's peak resident set (``VmHWM``), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM")


def reset_peak(pid: int) -> None:
    """Start ``VmHWM`` again from the current RSS (Linux: ``clear_refs`` value 5)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def produce(port: int, topic: str, records: bytes, timeout: float = 60.0):
    """One raw Produce (v9, acks=all) of ``records`` to partition 0 of ``topic``: its
    partition answer (a raw frame: a client would re-batch or refuse the bomb)."""
    from raw_kafka import API, decode_response, encode_request

    body = {
        "acks": -1,
        "timeout": 30000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}],
    }
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(encode_request(API.produce, 9, body))
        f = s.makefile("rb")
        (n,) = struct.unpack(">i", f.read(4))
        resp = decode_response(API.produce, 9, f.read(n))[1]
    return resp.responses[0].partition_responses[0]


def create_topics(port: int, names: list[str], config: dict[str, str] | None = None) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
    topics = [NewTopic(n, 1, 1, config=config or {}) for n in names]
    for f in admin.create_topics(topics).values():
        f.result(30)


def measure(port: int, pid: int, topic: str, other: str, batch: bytes) -> tuple[int, float, int]:
    """(peak RSS rise, worst latency of another client's small produce meanwhile, the
    produce's error code) while ``batch`` is produced to ``topic``."""
    small = zstd_batch([b"x" * 100], _now())
    worst = [0.0]
    done = threading.Event()

    def other_client() -> None:
        while not done.is_set():
            t0 = time.perf_counter()
            produce(port, other, small)
            worst[0] = max(worst[0], time.perf_counter() - t0)
            time.sleep(0.02)

    time.sleep(0.5)  # let the broker settle before the peak is reset
    reset_peak(pid)
    before = peak_rss(pid)
    t = threading.Thread(target=other_client, daemon=True)
    t.start()
    time.sleep(0.2)
    answer = produce(port, topic, batch)
    time.sleep(0.2)
    done.set()
    t.join()
    return peak_rss(pid) - before, worst[0], answer.error_code


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gib", type=float, default=1.0, help="expansion of the bomb, GiB")
    args = ap.parse_args()
    with broker_process("kompakt.cleaner.engine=local") as (port, proc):  # no Spark warm-up
        create_topics(port, ["bomb", "honest", "other"])
        b = bomb(int(args.gib * GIB))
        h, h_expansion = honest(len(b))
        produce(port, "other", bomb(64 << 20))  # warm up (imports, compiled kernels)
        big, big_expansion = honest(1000 * 1024)  # about max.message.bytes (1 MiB)
        rows = [
            ("honest", h, h_expansion),
            ("honest", big, big_expansion),
            ("bomb", b, int(args.gib * GIB) >> 20 << 20),
        ]
        print(f"{'batch':8s} {'compressed':>11s} {'expansion':>12s} {'peak RSS rise':>14s}"
              f" {'per GiB expanded':>17s} {'other produce max':>18s}")  # fmt: skip
        for name, batch, expansion in rows:
            rise, worst, code = measure(port, proc.pid, name, "other", batch)
            per_gib = rise / (expansion / GIB) / (1 << 20)
            print(
                f"{name:8s} {len(batch) / 1024:7.1f} KiB {expansion / (1 << 20):8.2f} MiB "
                f"{rise / (1 << 20):10.1f} MiB {per_gib:13.1f} MiB {worst * 1000:14.0f} ms"
                + (f"  (error {code})" if code else "")
            )


if __name__ == "__main__":
    main()
