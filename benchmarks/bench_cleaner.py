"""In-process cleaner throughput on four shapes of dirty log.

For each scenario: cleaned MB/s and records/s, peak anonymous-memory growth per distinct key during
the clean, and the ratio to ``cp`` of the same segment bytes in the same run. Each
scenario runs in its own process so peak RSS is its own.
Run: ``.venv/bin/python benchmarks/bench_cleaner.py [--scale 0.1]``.

``--head-case``: a clean of the same 10-segment dirty range behind a clean head of 10
and of 1,000 segments, after a restart. What a clean asks of its producers (their last
records, Kafka's ``lastRecordsOfActiveProducers``, and the ``.txnindex``) must cost the
same on both (ratio ~1: no walk over every segment's batch headers); the whole clean
still rewrites the head, as Kafka's ``Cleaner.doClean`` does from the log start.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

SCENARIOS = {
    # name: (distinct keys, records, tombstone fraction)
    "1M keys x 10 updates": (1_000_000, 10_000_000, 0.0),
    "all-unique keys": (5_000_000, 5_000_000, 0.0),
    "10% tombstones": (1_000_000, 10_000_000, 0.1),
    "1 key x 1M updates": (1, 1_000_000, 0.0),
}
VALUE = b"x" * 100
BATCH = 1000


class AnonPeak(threading.Thread):
    """Peak anonymous RSS (heap, numpy arrays; not the page cache of mmapped segments)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak = 0
        self._done = threading.Event()

    @staticmethod
    def read() -> int:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
        return 0

    def run(self) -> None:
        while not self._done.wait(0.005):
            self.peak = max(self.peak, self.read())

    def stop(self) -> int:
        self._done.set()
        self.join()
        return max(self.peak, self.read())


def run_one(name: str, scale: float, workdir: Path) -> dict:
    import numpy as np

    from kompakt.cleaner import Cleaner, LocalEngine
    from kompakt.log.manager import LogManager
    from kompakt.record.encode import build_simple_batch

    keys, records, tomb = SCENARIOS[name]
    keys = max(1, int(keys * scale))
    records = max(1, int(records * scale))
    rng = np.random.default_rng(7)
    now = int(time.time() * 1000)
    m = LogManager(workdir / "data", {"log.cleaner.dedupe.buffer.size": str(256 << 20)})
    m.create_topic("b", 1, {"cleanup.policy": "compact", "segment.bytes": str(256 << 20)})
    plog = m.get_log("b", 0)
    order = np.arange(records) % keys
    if keys > 1 and keys == records:
        rng.shuffle(order)
    tombs = rng.random(records) < tomb
    key_names = [b"key-%010d" % k for k in range(keys)] if keys < 2_000_000 else None
    for start in range(0, records, BATCH):
        items = []
        for i in range(start, min(records, start + BATCH)):
            k = key_names[order[i]] if key_names else b"key-%010d" % order[i]
            items.append((k, None if tombs[i] else VALUE))
        plog.append(build_simple_batch(items, timestamp=now))
    plog.roll()
    plog.flush()
    seg_bytes = sum(s.size for s in plog.segments)
    # cp of the same bytes, same page cache state
    t0 = time.perf_counter()
    for s in plog.segments:
        if s.size:
            shutil.copyfile(s.log_path, workdir / "cp.tmp")
            os.unlink(workdir / "cp.tmp")
    t_cp = time.perf_counter() - t0
    cleaner = Cleaner(m, engine=LocalEngine(256 << 20))
    sampler = AnonPeak()
    rss0 = sampler.read()
    sampler.start()
    t0 = time.perf_counter()
    stats = cleaner.clean_partition(plog)
    t_clean = time.perf_counter() - t0
    rss1 = sampler.stop()
    m.close()
    return {
        "scenario": name,
        "records": records,
        "distinct_keys": keys,
        "bytes": seg_bytes,
        "clean_s": t_clean,
        "clean_mb_s": seg_bytes / 1e6 / t_clean,
        "records_s": records / t_clean,
        "cp_mb_s": seg_bytes / 1e6 / t_cp,
        "ratio_to_cp": (seg_bytes / t_clean) / (seg_bytes / t_cp),
        "peak_rss_growth_per_key": (rss1 - rss0) / keys,
        "records_written": stats.records_written,
        "map_utilization": stats.map_utilization,
    }


HEAD_CASE = (10, 1000)  # clean-head segments of the two logs
DIRTY_SEGMENTS = 10
RECORDS_PER_SEGMENT = 100


def run_head(head: int, workdir: Path) -> dict:
    """A log of ``head`` cleaned segments then a 10-segment dirty range, written by 5
    idempotent producers, reopened (a restart); times what the clean asks of its
    producers, then the whole clean."""
    from kompakt.cleaner import Cleaner, LocalEngine
    from kompakt.cleaner.segment_io import summarize_producers
    from kompakt.log.manager import LogManager
    from kompakt.record.encode import build_simple_batch

    now = int(time.time() * 1000)
    config = {"cleanup.policy": "compact", "segment.bytes": "4096"}
    seqs = [0] * 5

    def append_segments(plog, first: int, n: int) -> None:
        for i in range(first, first + n):
            pid = i % 5
            items = [(b"key-%d-%d" % (i, r), b"v" * 10) for r in range(RECORDS_PER_SEGMENT)]
            plog.append(
                build_simple_batch(
                    items,
                    timestamp=now,
                    producer_id=1000 + pid,
                    producer_epoch=0,
                    base_sequence=seqs[pid],
                )
            )
            seqs[pid] += RECORDS_PER_SEGMENT
            plog.roll()

    m = LogManager(workdir / "data")
    m.create_topic("h", 1, config)
    plog = m.get_log("h", 0)
    with plog.lock:  # kept, as a broker keeps it for its idempotent producers
        _ = plog.producers
    append_segments(plog, 0, head)
    Cleaner(m, engine=LocalEngine(64 << 20)).clean_partition(plog)  # the clean head
    append_segments(plog, head, DIRTY_SEGMENTS)
    m.close()
    m = LogManager(workdir / "data")  # a restart: nothing is cached
    try:
        plog = m.get_log("h", 0)
        segments = plog.segments_snapshot()
        t0 = time.perf_counter()
        summary = summarize_producers(plog, segments, now)
        t_first = time.perf_counter() - t0  # builds the state from its latest snapshot
        t0 = time.perf_counter()
        summarize_producers(plog, segments, now)
        t_summary = time.perf_counter() - t0
        t0 = time.perf_counter()
        stats = Cleaner(m, engine=LocalEngine(64 << 20)).clean_partition(plog)
        t_clean = time.perf_counter() - t0
    finally:
        m.close()
    return {
        "head": head,
        "segments": len(segments),
        "producers": len(summary.last_records),
        "first_ask_s": t_first,
        "summary_s": t_summary,
        "clean_s": t_clean,
        "records_read": stats.records_read if stats else 0,
    }


def head_case() -> None:
    """Print the two logs' figures and their ratio (see the module's docstring)."""
    rows = []
    for head in HEAD_CASE:
        tmp = Path(tempfile.mkdtemp(prefix="kompakt-bench-cleaner-"))
        try:
            out = subprocess.run(
                [sys.executable, __file__, "--head", str(head), "--workdir", str(tmp)],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            rows.append(json.loads(out.strip().splitlines()[-1]))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    print(
        f"{'clean head':>10} {'segments':>9} {'producers':>9} {'1st ask ms':>10} "
        f"{'ask ms':>8} {'clean s':>8}"
    )
    for r in rows:
        print(
            f"{r['head']:>10} {r['segments']:>9} {r['producers']:>9} "
            f"{r['first_ask_s'] * 1000:>10.2f} {r['summary_s'] * 1000:>8.2f} {r['clean_s']:>8.2f}"
        )
    small, large = rows
    print(
        f"ratio {large['head']}/{small['head']} head: producer facts first ask after a restart "
        f"{large['first_ask_s'] / small['first_ask_s']:.2f}x, each later clean "
        f"{large['summary_s'] / small['summary_s']:.2f}x (no batch header read on either); "
        f"whole clean {large['clean_s'] / small['clean_s']:.2f}x (rewrites the head, as "
        "Kafka's doClean does)"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of the full sizes")
    ap.add_argument("--scenario", help=argparse.SUPPRESS)
    ap.add_argument("--workdir", help=argparse.SUPPRESS)
    ap.add_argument("--head-case", action="store_true", help="the clean-head case only")
    ap.add_argument("--head", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.head is not None:
        print(json.dumps(run_head(args.head, Path(args.workdir))))
        return
    if args.head_case:
        head_case()
        return
    if args.scenario:
        print(json.dumps(run_one(args.scenario, args.scale, Path(args.workdir))))
        return
    # warm the numba cache once so no scenario pays for compilation
    subprocess.run([sys.executable, "-c", "import kompakt.cleaner.rewrite"], check=True)
    print(
        f"{'scenario':24} {'records':>10} {'MB':>8} {'clean MB/s':>10} {'rec/s':>11} "
        f"{'cp MB/s':>8} {'x cp':>6} {'peak MB':>8} {'B/key':>10}"
    )
    for name in SCENARIOS:
        tmp = Path(tempfile.mkdtemp(prefix="kompakt-bench-cleaner-"))
        try:
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--scenario",
                    name,
                    "--scale",
                    str(args.scale),
                    "--workdir",
                    str(tmp),
                ],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            r = json.loads(out.strip().splitlines()[-1])
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        print(
            f"{name:24} {r['records']:>10} {r['bytes'] / 1e6:>8.0f} {r['clean_mb_s']:>10.1f} "
            f"{r['records_s']:>11.0f} {r['cp_mb_s']:>8.0f} {r['ratio_to_cp']:>6.2f} "
            f"{r['peak_rss_growth_per_key'] * r['distinct_keys'] / 1e6:>8.0f} "
            f"{r['peak_rss_growth_per_key']:>10.1f}"
        )


if __name__ == "__main__":
    main()
