"""Where the broker's time goes per MB on bench_broker's request path: py-spy samples
this process (broker threads and the client's loop) while one case runs, and the top
functions by self and cumulative time are printed for the broker's threads. ``--sink``
profiles the same case against the protocol sink (the client's ceiling) instead.

Cases: ``produce`` (100 B values, acks=1, as bench_broker's; ``--acks all``, ``--size``) and ``consume`` (1 KiB
values from the beginning; the topic is filled before sampling starts). py-spy is not a
project dependency: ``.venv/bin/pip install py-spy``.

Run: ``.venv/bin/python benchmarks/profile_broker.py produce [--records 500000]``
"""

from __future__ import annotations

import argparse
import collections
import gc
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench_throughput import bench_produce
from broker_kit import consume_from_start, create_topic, load_average, produce_all, producer
from protocol_sink import ProtocolSink

from kompakt.broker.app import start_test_broker

CLIENT_THREAD = threading.main_thread().native_id
# path prefixes dropped from frame locations: the venv's, the repo's, the stdlib's
CUTS = (
    "site-packages/",
    f"{Path(__file__).resolve().parents[1]}/",
    f"lib/python{sys.version_info.major}.{sys.version_info.minor}/",
)
# frames every broker sample passes through (thread start, event loop, executor): left
# out of the cumulative ranking, where they would only fill the top
WRAPPERS = (
    "Thread.",
    "BaseEventLoop.run_",
    "BaseEventLoop._run_once",
    "BrokerThread._run",
    "Handle._run",
    "_worker ",
    "_WorkItem.run",
)


def sample(out: Path, rate: int, gil: bool) -> subprocess.Popen:
    """py-spy recording this process until SIGINT (raw collapsed stacks, per thread);
    with ``gil``, only the samples of the thread holding the GIL (Python's CPU time,
    which the client's own loop competes for)."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    proc = subprocess.Popen(
        [spy, "record", "--pid", str(os.getpid()), "--rate", str(rate), "--threads"]
        + ["--format", "raw", "--output", str(out), "--nonblocking"]
        + (["--gil"] if gil else []),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    time.sleep(1.0)  # pacing: py-spy attaches before the case starts
    return proc


def thread_cpu() -> dict[str, float]:
    """CPU seconds (user + system, from ``/proc/self/task``) per thread group:
    librdkafka's threads (``rdk:...``), the client's Python thread, the broker's (or
    sink's) event loop thread with its other threads, its worker threads (handlers,
    fsyncs: ``kompakt-io_N``, and asyncio's ``asyncio_N``). Counts what py-spy cannot see: native code and system calls
    (writes, fsync, socket I/O)."""
    tick = os.sysconf("SC_CLK_TCK")
    workers = {
        t.native_id for t in threading.enumerate() if t.name.startswith(("kompakt-io_", "asyncio_"))
    }
    out: collections.Counter[str] = collections.Counter()
    for task in Path("/proc/self/task").iterdir():
        try:
            stat = (task / "stat").read_text()
            name = (task / "comm").read_text().strip()
        except OSError:
            continue  # the thread ended meanwhile
        fields = stat.rpartition(")")[2].split()
        seconds = (int(fields[11]) + int(fields[12])) / tick  # utime, stime
        if int(task.name) == CLIENT_THREAD:
            out["client Python thread"] += seconds
        elif int(task.name) in workers:
            out["broker/sink worker threads"] += seconds
        elif not name.startswith("rdk:"):
            out["broker/sink event loop and other threads"] += seconds
    # the client's librdkafka threads end with its producer or consumer, inside the case:
    # what the process used beyond the threads counted above
    out["librdkafka threads"] = time.process_time() - sum(out.values())
    return out


class GcClock:
    """Garbage collections during a case, by generation: how many and their seconds
    (a full one holds the interpreter lock for every thread of the process while it
    walks every tracked object)."""

    def __init__(self) -> None:
        self.count: collections.Counter[int] = collections.Counter()
        self.seconds: collections.Counter[int] = collections.Counter()
        self._t0 = 0.0
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
        else:
            self.count[info["generation"]] += 1
            self.seconds[info["generation"]] += time.perf_counter() - self._t0

    def line(self, mb: float) -> str:
        return "garbage collections: " + ", ".join(
            f"gen{g} {self.count[g]} ({self.seconds[g] * 1000 / mb:.2f} ms/MB)" for g in range(3)
        )


def report(raw: Path, rate: int, mb: float, top: int) -> None:
    """Self (tottime) and cumulative (cumtime) seconds per function, broker (or sink)
    threads apart from the client's thread, and each per MB of payload."""
    own: collections.Counter[str] = collections.Counter()
    cum: collections.Counter[str] = collections.Counter()
    per_thread: collections.Counter[str] = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        thread, frames = frames[0], frames[1:]
        n = int(count)
        client = f"{CLIENT_THREAD:#x}" in thread or f"({CLIENT_THREAD})" in thread
        per_thread["client (main thread)" if client else "broker threads"] += n
        if client or not frames:
            continue
        own[_short(frames[-1])] += n
        for f in {_short(f) for f in frames}:
            if not f.startswith(WRAPPERS):
                cum[f] += n
    print(
        "CPU seconds sampled: "
        + ", ".join(
            f"{k} {v / rate:.2f} s ({v / rate / mb * 1000:.1f} ms/MB)"
            for k, v in per_thread.items()
        )
    )
    for title, counter in (("tottime", own), ("cumtime", cum)):
        print(f"top {top} broker functions by {title} (s, ms per MB):")
        for name, n in counter.most_common(top):
            print(f"  {n / rate:7.2f} {n / rate / mb * 1000:7.2f}  {name}")


def _short(frame: str) -> str:
    """``func (path/to/file.py:line)`` -> ``func (file.py)`` below the repo/venv."""
    name, _, where = frame.partition(" (")
    where = where.rstrip(")").rpartition(":")[0] or where
    for cut in CUTS:
        if cut in where:
            where = where.split(cut, 1)[1]
    return f"{name} ({where})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("case", choices=("produce", "consume"))
    ap.add_argument("--records", type=int, default=0, help="default 500k (100 B), 100k (1 KiB)")
    ap.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--acks", default="1", choices=("1", "all"), help="produce acks")
    ap.add_argument("--size", type=int, default=0, help="value bytes (100 produce, 1024 consume)")
    ap.add_argument("--gil", action="store_true", help="only samples holding the GIL")
    ap.add_argument(
        "--sink", action="store_true", help="the same case against the protocol sink instead"
    )
    ap.add_argument("--raw", default="", help="keep py-spy's collapsed stacks in this file")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="kompakt-profile-broker-")
    if args.sink:
        b = ProtocolSink().start()
        b.add_topic("warm", 1, 100)
        b.add_topic("profiled", 1, args.size or (100 if args.case == "produce" else 1024))
    else:
        b = start_test_broker(
            tmp, **{"kompakt.cleaner.engine": "local", "log.cleaner.enable": "false"}
        )
    raw = Path(args.raw or f"{tmp}/stacks.txt")
    try:
        if args.case == "produce":
            size = args.size or 100
            n = args.records or 50_000_000 // size
            create_topic(b.bootstrap, "warm")
            produce_all(producer(b.bootstrap, "1"), "warm", b"w" * size, 1000)
            spy = sample(raw, args.rate, args.gil)
            gcs = GcClock()
            cpu0 = thread_cpu()
            dt = bench_produce(b.bootstrap, "profiled", size, n, args.acks)
        else:
            size = args.size or 1024
            n = args.records or 100_000_000 // size
            create_topic(b.bootstrap, "profiled")
            produce_all(producer(b.bootstrap, "1"), "profiled", b"x" * size, n)
            spy = sample(raw, args.rate, args.gil)
            gcs = GcClock()
            cpu0 = thread_cpu()
            dt, _ = consume_from_start({"bootstrap.servers": b.bootstrap}, "profiled", n)
        cpu = thread_cpu()
        spy.send_signal(signal.SIGINT)
        _out, err = spy.communicate(timeout=60)
        mb = n * size / 1e6
        print(
            f"{args.case} {n} x {size} B: {mb:.1f} MB in {dt:.2f} s = {mb / dt:.1f} MB/s; "
            f"{load_average()}"
        )
        print(
            "CPU per thread group (/proc, whole case): "
            + ", ".join(
                f"{k} {cpu[k] - cpu0[k]:.2f} s ({(cpu[k] - cpu0[k]) / mb * 1000:.1f} ms/MB)"
                for k in sorted(cpu)
            )
        )
        print(gcs.line(mb))
        if not raw.exists():
            raise SystemExit(f"py-spy wrote nothing: {err.decode(errors='replace')[-500:]}")
        report(raw, args.rate, mb, args.top)
    finally:
        b.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
