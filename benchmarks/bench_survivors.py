"""The Spark engine's "which records are superseded" stage: one read and one shuffle of
128-bit key digests.

Builds one rolled partition of K keys x U updates (default 1M x 10 = 10M records,
100-byte values, 64 MiB segments, batches of 1000; ``bench_spark.build``), then on
``local[2]`` times, dirty range = the whole partition, (b) ``survivors.superseded``: one
read of the segments in RDD map tasks, one shuffle of (hi, lo, offset) rows, a
packed bitmap per reduce partition to the driver. (The engine's former two-pass plan,
(a) ``groupBy(partition, key).max(offset)`` then the range read again and joined with
that map, was removed with issue 14; it measured 62.7 s against (b)'s 7.3 s at 2M
records, see :mod:`kompakt.pipeline.survivors`.)

Prints records/s and MB/s (segment bytes); the bytes the driver collected beside what sorted superseded offsets would have cost; peak memory
(``bench_spark.MemSampler``: driver JVM heap, Python workers PSS); and, with
``--profile``, cProfile of (b)'s worker functions on one segment in this process.
Run: ``.venv/bin/python benchmarks/bench_survivors.py [--keys N --updates U]``.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_spark import MASTER, TOPIC, MemSampler, build, fmt_mb

from kompakt.log.manager import LogManager


def segments(data_dir: Path) -> tuple[str, list[int], int]:
    """(partition dir, segment bases, log end offset) of the built partition."""
    with LogManager(data_dir) as m:
        plog = m.get_log(TOPIC, 0)
        bases = [s.base_offset for s in plog.segments_snapshot() if s.size]
        return str(plog.dir), bases, plog.log_end_offset


def one_pass(spark, part_dir: str, bases: list[int], end: int):
    from kompakt.pipeline.survivors import superseded

    return superseded(spark, part_dir, 0, 0, end, [[b] for b in bases])


def timed(fn, spark):
    sampler = MemSampler(spark)
    sampler.start()
    t0 = time.perf_counter()
    out = fn()
    dt = time.perf_counter() - t0
    return out, dt, dict(sampler.stop(), max_workers=sampler.max_workers)


def stage_times(spark, since: int) -> list[str]:
    """Spark UI (REST) timings of the stages with an id >= ``since``: wall, summed task
    run time and CPU, shuffle bytes written."""
    import json
    import urllib.request

    sc = spark.sparkContext
    url = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}/stages?status=complete"
    try:
        with urllib.request.urlopen(url, timeout=120) as resp:
            stages = json.load(resp)
    except OSError as e:  # a loaded machine's UI may not answer: the timings still print
        return [f"  (Spark UI did not answer: {e})"]
    out = []
    for st in sorted(stages, key=lambda s: s["stageId"]):
        if st["stageId"] < since:
            continue
        wall = "?"
        if st.get("submissionTime") and st.get("completionTime"):
            from datetime import datetime

            fmt = "%Y-%m-%dT%H:%M:%S.%f%Z"
            t0 = datetime.strptime(st["submissionTime"].replace("GMT", "UTC"), fmt)
            t1 = datetime.strptime(st["completionTime"].replace("GMT", "UTC"), fmt)
            wall = f"{(t1 - t0).total_seconds():.1f}"
        out.append(
            f"  stage {st['stageId']:>3} {st['numTasks']:>4} tasks, wall {wall:>6} s, "
            f"task time {st['executorRunTime'] / 1e3:>7.1f} s, "
            f"CPU {st['executorCpuTime'] / 1e9:>7.1f} s, "
            f"shuffle write {st['shuffleWriteBytes'] / 1e6:>7.1f} MB  {st['name'][:40]}"
        )
    return out


def next_stage_id(spark) -> int:
    import json
    import urllib.request

    sc = spark.sparkContext
    url = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}/stages"
    try:
        with urllib.request.urlopen(url, timeout=120) as resp:
            return max((s["stageId"] for s in json.load(resp)), default=-1) + 1
    except OSError:
        return 0


def profile_workers(part_dir: str, base: int, end: int) -> None:
    """cProfile of the map and reduce functions of (b) on one segment, in this process."""
    from kompakt.pipeline.exchange import by_bucket
    from kompakt.pipeline.layout import segment_path
    from kompakt.pipeline.survivors import digest_rows, plan_reads, superseded_bits

    path = str(segment_path(part_dir, base))
    (task,) = plan_reads(part_dir, [base], task_bytes=1 << 40)

    rows = digest_rows(task, 0, 0, end, ())  # compile the kernels outside the profile
    superseded_bits(rows[:10], 0, end)
    prof = cProfile.Profile()
    prof.enable()
    rows = digest_rows(task, 0, 0, end, ())
    by_bucket(rows, 4)
    superseded_bits(rows, 0, end)
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(14)
    print(f"cProfile, one segment ({os.stat(path).st_size / 1e6:.0f} MB, {len(rows):,} rows):")
    print("\n".join(line for line in out.getvalue().splitlines() if line.strip())[:4000])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--updates", type=int, default=10)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kompakt-bench-survivors-") as tmp:
        run(Path(tmp), args)


def run(root: Path, args: argparse.Namespace) -> None:
    from kompakt import pipeline

    print(f"load average at start: {os.getloadavg()}")
    t0 = time.perf_counter()
    spark = pipeline.session(
        {
            "kompakt.spark.master": MASTER,
            "spark.sql.shuffle.partitions": "4",
            "spark.ui.showConsoleProgress": "false",
            "spark.ui.enabled": "true",  # stage timings through the UI's REST API
        }
    )
    spark.sparkContext.setLogLevel("ERROR")
    print(f"Spark {MASTER}: session start {time.perf_counter() - t0:.1f} s")
    build(root / "warm", 100, 3)  # warm both paths (workers, numba, the data source)
    wdir, wbases, wend = segments(root / "warm")
    one_pass(spark, wdir, wbases, wend)

    t0 = time.perf_counter()
    records, nbytes = build(root / "src", args.keys, args.updates)
    part_dir, bases, end = segments(root / "src")
    print(
        f"data: {args.keys:,} keys x {args.updates} updates = {records:,} records, "
        f"{nbytes / 1e6:.1f} MB in {len(bases)} segments (built in {time.perf_counter() - t0:.1f} s)"
    )
    if args.profile:
        profile_workers(part_dir, bases[0], end)

    rows = []
    stages = {}
    first = next_stage_id(spark)
    got, t_b, mem_b = timed(lambda: one_pass(spark, part_dir, bases, end), spark)
    stages["(b)"] = stage_times(spark, first)
    superseded_count = int(np.unpackbits(got.bits, count=end).sum())
    assert superseded_count == records - args.keys, (superseded_count, records - args.keys)
    rows.append(("(b) survivors.superseded, one pass", t_b, mem_b))

    print(f"load average after: {os.getloadavg()}")
    hdr = f"{'stage':42} {'seconds':>8} {'rec/s':>12} {'MB/s':>8} {'JVM heap':>10} {'py PSS':>10}"
    print(hdr)
    print("-" * len(hdr))
    for name, t, mem in rows:
        print(
            f"{name:42} {t:>8.2f} {records / t:>12,.0f} {nbytes / 1e6 / t:>8.1f} "
            f"{fmt_mb(mem['jvm_heap_used']):>10} {fmt_mb(mem['py_workers_rss']):>10}"
        )
    for name, lines in stages.items():
        print(f"Spark stages of {name}:")
        print("\n".join(lines))
    print(
        f"(b) shuffled {got.rows:,} rows ({got.rows * 24 / 1e6:.0f} MB); driver collected "
        f"{got.collected_bytes / 1e6:.2f} MB of lz4 bitmaps (final bitmap "
        f"{len(got.bits) / 1e6:.2f} MB) vs {superseded_count * 8 / 1e6:.1f} MB as sorted "
        f"int64 superseded offsets"
    )


if __name__ == "__main__":
    main()
