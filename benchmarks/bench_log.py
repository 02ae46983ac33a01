"""Log layer throughput: append, sequential read and the columnar segment scan.

Prints each figure and its ratio to ``cp`` of the same bytes on the same disk, so the
numbers travel between machines. Run: ``.venv/bin/python benchmarks/bench_log.py``.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from kompakt.cleaner.segment_io import segment_buffer
from kompakt.log.manager import LogManager
from kompakt.record.decode import iter_batches
from kompakt.record.encode import build_simple_batch
from kompakt.record.scan import scan_records


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=500, help="records per batch")
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3, help="rounds; each figure is the best")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="kompakt-bench-"))
    try:
        value = b"v" * args.value_size
        now_ms = int(
            time.time() * 1000
        )  # old timestamps would roll a segment per append (segment.ms)
        batches = [
            build_simple_batch(
                [(b"key-%08d" % ((i + j) % args.keys), value) for j in range(args.batch)],
                timestamp=now_ms,
            )
            for i in range(0, args.records, args.batch)
        ]
        total = sum(map(len, batches))
        # load the compiled kernels (validation, scan) outside the timings
        warm = LogManager(tmp / "warm")
        warm.create_topic("warm", 1)
        warm.get_log("warm", 0).append(batches[0])
        warm_path = warm.get_log("warm", 0).segments[0].log_path
        warm.close()  # a closed segment's file ends at its last batch (the scan reads files)
        scan_records(segment_buffer(warm_path))

        best: dict[str, float] = {}
        for rep in range(args.repeat):  # the fastest of each: one figure a noisy machine moves less
            for name, secs in _one_round(tmp / f"r{rep}", batches).items():
                best[name] = min(best.get(name, secs), secs)
        t_append, t_read, t_scan, t_cp = (best[k] for k in ("append", "read", "scan", "cp"))
        cpu_append, cpu_cp = best["append cpu"], best["cp cpu"]
        read_bytes, scanned = total, args.records
        cp_mbs = total / t_cp / 1e6

        mb = total / 1e6
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
        print(
            f"data: {args.records:,} records, {mb:.1f} MB, {args.batch} records/batch, "
            f"best of {args.repeat} rounds; load average {load} (wall figures move with it)"
        )
        print(f"cp of the same bytes:  {cp_mbs:8.1f} MB/s  (page cache, no fsync; nor for append)")
        rows = [
            ("append", mb / t_append, args.records / t_append),
            ("sequential read", read_bytes / 1e6 / t_read, args.records / t_read),
            ("segment scan", mb / t_scan, scanned / t_scan),
        ]
        for name, mbs, rps in rows:
            print(f"{name:22s} {mbs:8.1f} MB/s  {rps:12,.0f} records/s  {mbs / cp_mbs:5.2f}x cp")
        # CPU seconds hold on a busy machine, where both wall clocks mostly wait for a core
        print(
            f"append CPU {cpu_append:.3f} s, cp CPU {cpu_cp:.3f} s (same bytes): "
            f"{cpu_cp / cpu_append:.2f}x cp by CPU"
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _one_round(where: Path, batches: list[bytes]) -> dict[str, float]:
    """Seconds to append ``batches`` to a new log (validation on), read it back, scan
    its segments and cp its bytes."""
    m = LogManager(where / "data")
    m.create_topic("bench", 1, {"segment.bytes": str(256 * 1024 * 1024)})
    plog = m.get_log("bench", 0)
    t0, c0 = time.perf_counter(), time.process_time()
    for b in batches:
        plog.append(b)
    t_append = time.perf_counter() - t0
    cpu_append = time.process_time() - c0

    t0 = time.perf_counter()
    offset = 0
    while offset < plog.log_end_offset:
        offset = _next_offset(plog.read(offset, 1 << 20))
    t_read = time.perf_counter() - t0

    seg_paths = [s.log_path for s in plog.segments]
    m.close()  # the active segment's file is written ahead of its size until closed
    t0 = time.perf_counter()
    for p in seg_paths:  # memory-mapped, as the cleaner reads a segment
        scan_records(segment_buffer(p))
    t_scan = time.perf_counter() - t0

    t0, c0 = time.perf_counter(), _children_cpu()
    subprocess.run(["cp", str(seg_paths[0]), str(where / "copy.log")], check=True)
    # cp's seconds for all the bytes appended, at the pace it copied the first segment
    scale = sum(p.stat().st_size for p in seg_paths) / seg_paths[0].stat().st_size
    t_cp = (time.perf_counter() - t0) * scale
    cpu_cp = (_children_cpu() - c0) * scale
    shutil.rmtree(where, ignore_errors=True)
    return {
        "append": t_append,
        "read": t_read,
        "scan": t_scan,
        "cp": t_cp,
        "append cpu": cpu_append,
        "cp cpu": cpu_cp,
    }


def _children_cpu() -> float:
    """User and system CPU seconds of the finished child processes (cp)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _next_offset(data: bytes) -> int:
    last = 0
    for b in iter_batches(data):
        last = b.header.next_offset
    return last


if __name__ == "__main__":
    main()
