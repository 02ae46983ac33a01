"""Spark compaction engine against the in-process engine and ``cp``, and the
"more keys than the offset map" case.

Builds a data dir (one compacted partition, segment.bytes=64 MiB, batches of 1000
records with 100-byte values, rolled so nothing is in the active segment), then cleans
copies of it with (a) the Spark engine on ``local[2]`` (JVM start and a tiny warm-up
clean timed separately), (b) the in-process ``LocalEngine`` (128 MiB dedupe buffer),
and (c) ``cp`` of the same segment bytes. Prints MB/s (segment bytes read), ratios, and
memory: this process's peak RSS (``ru_maxrss``; the Spark driver's Python side), the
JVM's used heap (``totalMemory - freeMemory``, sampled; in local mode the executor is
the driver JVM), the JVM process RSS and the summed PSS of the PySpark Python workers
(``/proc`` scan, sampled in a thread).

Then, on D distinct keys (one record each; default 10M, beyond the default 128 MiB
map), the ``LocalEngine`` needs several partial passes (timed until done, and a 1 MiB
buffer capped at ``--max-passes``), while the Spark engine cleans the whole dirty range
in one pass.

Fixed costs (issue 14): a cold first clean of a ~3 KB topic (``kompakt compact
--data-dir`` in a new process: JVM, session and clean, wall) beside a warm clean of the
same topic in this process's session and Spark's own session start; and "cold first
clean - session start", both timed in one new process (its session start, then its
first clean: the Python workers, the first job), which should stay within ~2 s. The
crossover:
both engines on a few dirty-range sizes (``--crossover``, records, keys = records / 10),
and the size where the Spark engine's time drops below the in-process engine's,
interpolated linearly between the two sizes around it.

Which engine when (issue 25, ``--engines 16,160,1000``): logs of those sizes in MB, each
with few keys (``--few-keys``, 10 updates or more per key) and with all keys distinct
(beyond the default 128 MiB offset map's ~5M keys at 1 GB, where the in-process engine
needs partial passes), cleaned by both engines warm (the Spark session already up, as
in a broker) and cold (``kompakt compact --data-dir D --engine X`` in a new process,
wall time), with the load average beside each row.
Run: ``.venv/bin/python benchmarks/bench_spark.py [--keys N --updates U --distinct D]``.
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from kompakt.cleaner import Cleaner, LocalEngine
from kompakt.log.manager import LogManager
from kompakt.record.encode import build_simple_batch

TOPIC = "bench"
VALUE = b"v" * 100
BATCH = 1000
MASTER = "local[2]"


def build(data_dir: Path, keys: int, updates: int) -> tuple[int, int]:
    """K keys x U updates (round-robin) into one rolled partition; (records, bytes)."""
    now_ms = int(time.time() * 1000)
    records = keys * updates
    with LogManager(data_dir) as m:
        m.create_topic(TOPIC, 1, {"cleanup.policy": "compact", "segment.bytes": str(64 << 20)})
        plog = m.get_log(TOPIC, 0)
        for start in range(0, records, BATCH):
            items = [
                (b"key-%010d" % (i % keys), VALUE)
                for i in range(start, min(records, start + BATCH))
            ]
            plog.append(build_simple_batch(items, timestamp=now_ms))
        plog.roll()
        plog.flush()
        nbytes = sum(s.size for s in plog.segments_snapshot())
    return records, nbytes


def build_fast(data_dir: Path, keys: int, updates: int) -> tuple[int, int]:
    """The same log as :func:`build` (same bytes), made from one encoded batch whose key
    digits and CRC are patched per batch: the scale runs need 100M records, which the
    per-record encoder takes ~6 min to make on an idle machine."""
    import struct

    import crc32c
    import numpy as np

    from kompakt.record.header import ATTRIBUTES_POS, CRC_POS

    now_ms = int(time.time() * 1000)
    records = keys * updates
    assert records % BATCH == 0 and keys <= 10**10
    template = np.frombuffer(
        bytearray(
            build_simple_batch([(b"key-%010d" % j, VALUE) for j in range(BATCH)], timestamp=now_ms)
        ),
        np.uint8,
    ).copy()
    raw = template.tobytes()
    starts, at = [], 0
    for j in range(BATCH):
        at = raw.index(b"key-%010d" % j, at) + 4
        starts.append(at)
    slots = np.asarray(starts)[:, None] + np.arange(10)
    scale = 10 ** np.arange(9, -1, -1, dtype=np.int64)
    step = np.arange(BATCH, dtype=np.int64)
    with LogManager(data_dir) as m:
        m.create_topic(TOPIC, 1, {"cleanup.policy": "compact", "segment.bytes": str(64 << 20)})
        plog = m.get_log(TOPIC, 0)
        for start in range(0, records, BATCH):
            ks = (start + step) % keys
            template[slots] = (ks[:, None] // scale % 10 + 48).astype(np.uint8)
            crc = crc32c.crc32c(template[ATTRIBUTES_POS:])
            struct.pack_into(">I", template, CRC_POS, crc)
            plog.append(template.tobytes())
        plog.roll()
        plog.flush()
        nbytes = sum(s.size for s in plog.segments_snapshot())
    return records, nbytes


def copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    (dst / ".lock").unlink(missing_ok=True)
    return dst


def cp_seconds(data_dir: Path, scratch: Path) -> float:
    files = sorted(p for p in data_dir.rglob("*.log") if p.stat().st_size)
    t0 = time.perf_counter()
    for f in files:
        shutil.copyfile(f, scratch)
        os.unlink(scratch)
    return time.perf_counter() - t0


# -- memory sampling ----------------------------------------------------------------------
def _status_kb(pid: int | str, field: str = "VmRSS:") -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _pss_bytes(pid: int) -> int:
    """Proportional set size (shared pages split between sharers); RSS if unavailable."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return _status_kb(pid) * 1024


def _descendants(root: int) -> list[tuple[int, str]]:
    """(pid, cmdline) of ``root``'s descendants, through ``/proc/PID/task/TID/children``:
    a scan of every process of the (busy, shared) machine each 0.1 s took the driver
    ~3 s of CPU during a 10M-record Spark clean, CPU the clean itself then lacked."""
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    kids = [int(k) for k in f.read().split()]
            except OSError:
                continue
            for kid in kids:
                try:
                    with open(f"/proc/{kid}/cmdline", "rb") as f:
                        cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    continue
                out.append((kid, cmd))
                todo.append(kid)
    return out


class MemSampler(threading.Thread):
    """Peaks of: own RSS, JVM used heap, JVM RSS, summed PySpark worker RSS (bytes)."""

    def __init__(self, spark=None, interval: float = 0.1):
        super().__init__(daemon=True)
        self.spark = spark
        self.interval = interval
        self.peak = {"self_rss": 0, "jvm_heap_used": 0, "jvm_rss": 0, "py_workers_rss": 0}
        self.max_workers = 0
        self._done = threading.Event()
        self._rt = spark.sparkContext._jvm.java.lang.Runtime.getRuntime() if spark else None

    def sample(self) -> None:
        me = os.getpid()
        pk = self.peak
        pk["self_rss"] = max(pk["self_rss"], _status_kb(me) * 1024)
        if self._rt is None:
            return
        try:
            used = self._rt.totalMemory() - self._rt.freeMemory()
            pk["jvm_heap_used"] = max(pk["jvm_heap_used"], int(used))
        except Exception:
            pass
        procs = _descendants(me)
        jvm = [p for p, cmd in procs if "java" in cmd.split(" ", 1)[0]]
        pk["jvm_rss"] = max(pk["jvm_rss"], sum(_status_kb(p) * 1024 for p in jvm))
        # the Python workers' daemon (the JVM's, its stand-in and the ready daemon
        # started beside the JVM: kompakt.pipeline.zygote) and the workers it forks;
        # forked workers share pages, so sum PSS rather than RSS
        daemons = (" -m pyspark.", " -m kompakt.pipeline.")
        workers = [p for p, cmd in procs if any(d in cmd for d in daemons)]
        self.max_workers = max(self.max_workers, len(workers))
        pss = sum(_pss_bytes(p) for p in workers)
        pk["py_workers_rss"] = max(pk["py_workers_rss"], pss)

    def run(self) -> None:
        while not self._done.wait(self.interval):
            self.sample()

    def stop(self) -> dict[str, int]:
        self._done.set()
        self.join()
        self.sample()
        return self.peak


def maxrss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


# -- engines ------------------------------------------------------------------------------
def spark_engine():
    from kompakt.pipeline.engine import SparkEngine

    return SparkEngine({"kompakt.spark.master": MASTER})


def clean_once(data_dir: Path, engine, spark=None):
    """One clean_partition; (stats, seconds, memory peaks)."""
    with LogManager(data_dir) as m:
        cleaner = Cleaner(m, engine=engine)
        plog = m.get_log(TOPIC, 0)
        sampler = MemSampler(spark)
        sampler.start()
        t0 = time.perf_counter()
        stats = cleaner.clean_partition(plog)
        dt = time.perf_counter() - t0
        peaks = dict(sampler.stop(), max_workers=sampler.max_workers)
        return stats, dt, peaks


def clean_until_done(data_dir: Path, engine, max_passes: int = 10_000) -> tuple[list, float]:
    """clean_partition until a pass is not partial (or ``max_passes``); (stats, seconds)."""
    out = []
    with LogManager(data_dir) as m:
        cleaner = Cleaner(m, engine=engine)
        plog = m.get_log(TOPIC, 0)
        t0 = time.perf_counter()
        while True:
            stats = cleaner.clean_partition(plog)
            if stats is None:
                break
            out.append(stats)
            if not stats.partial or len(out) >= max_passes:
                break
        return out, time.perf_counter() - t0


def tiny_topic(data_dir: Path) -> int:
    """A ~3 KB compacted topic: 40 one-record batches of 4 keys, rolled; its bytes."""
    with LogManager(data_dir) as m:
        m.create_topic(TOPIC, 1, {"cleanup.policy": "compact", "segment.bytes": "1024"})
        plog = m.get_log(TOPIC, 0)
        now = int(time.time() * 1000)
        for i in range(40):
            plog.append(build_simple_batch([(b"k%d" % (i % 4), b"v%d" % i)], timestamp=now))
        plog.roll()
        return sum(s.size for s in plog.segments_snapshot())


def cold_clean_seconds(data_dir: Path, engine: str = "spark") -> float:
    """Wall time of ``kompakt compact --data-dir`` in a new process: what a user pays
    for a one-off clean (interpreter and, for Spark, JVM and session; then the clean)."""
    cli = Path(sys.executable).parent / "kompakt"
    t0 = time.perf_counter()
    subprocess.run(
        [str(cli), "compact", "--data-dir", str(data_dir), "--engine", engine],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return time.perf_counter() - t0


def cold_probe(data_dir: Path) -> None:
    """In a new process (``--cold-probe DIR``): start the session, then clean ``DIR``'s
    topic as ``kompakt compact`` does; prints the two times as JSON. What runs between
    the session's start and the first clean's end is the engine's fixed cost beyond
    the JVM: the Python workers, the first job, the data source."""
    import json

    from kompakt import pipeline
    from kompakt.engines import build_cleaner

    conf = {"kompakt.spark.master": MASTER, "spark.ui.showConsoleProgress": "false"}
    t0 = time.perf_counter()
    pipeline.session(conf)
    t1 = time.perf_counter()
    with LogManager(data_dir) as logs:
        build_cleaner(logs, conf, engine="spark").compact_now(TOPIC)
    print(json.dumps({"session": t1 - t0, "clean": time.perf_counter() - t1}), flush=True)


def cold_first_clean(data_dir: Path) -> tuple[float, float, float]:
    """(wall of a new process, its session start, its first clean after the session)."""
    import json

    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, __file__, "--cold-probe", str(data_dir)],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    ).stdout
    wall = time.perf_counter() - t0
    times = json.loads(out.strip().splitlines()[-1])
    return wall, times["session"], times["clean"]


def crossover(sizes: list[int], local_s: list[float], spark_s: list[float]) -> str:
    """Where ``spark - local`` changes sign from + to -, linearly between two sizes."""
    diff = [s - loc for s, loc in zip(spark_s, local_s, strict=True)]
    if diff[0] <= 0:
        return f"at or below {sizes[0]:,} records (Spark already faster)"
    for i in range(len(sizes) - 1):
        (n0, d0), (n1, d1) = (sizes[i], diff[i]), (sizes[i + 1], diff[i + 1])
        if d0 > 0 >= d1:
            return f"~{n0 + (n1 - n0) * d0 / (d0 - d1):,.0f} records (interpolated)"
    ratio = spark_s[-1] / local_s[-1]
    return f"beyond {sizes[-1]:,} records (Spark / in-process time there {ratio:.2f})"


def fmt_mb(b: int) -> str:
    return f"{b / 2**20:,.0f} MiB"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--updates", type=int, default=10)
    ap.add_argument("--distinct", type=int, default=10_000_000, help="keys in the big-key case")
    ap.add_argument("--small-buffer", type=int, default=1 << 20, help="LocalEngine bytes there")
    ap.add_argument("--shuffle-partitions", type=int, default=4)
    ap.add_argument("--max-passes", type=int, default=40, help="cap on small-buffer passes")
    ap.add_argument("--skip-distinct", action="store_true")
    ap.add_argument("--cold-probe", type=Path, help=argparse.SUPPRESS)  # see cold_probe
    ap.add_argument(
        "--crossover",
        default="10000,100000,1000000,3000000",
        help="dirty-range sizes (records) to find the crossover at; empty to skip",
    )
    ap.add_argument(
        "--scale",
        default="",
        help="instead of the comparison: Spark-only cleans of these sizes in millions of "
        "records, 10 updates per key (e.g. 10,30,100: 100M records = 10M keys, ~12 GB)",
    )
    ap.add_argument(
        "--engines",
        default="",
        help="instead of the comparison: which engine when, on logs of these sizes in MB "
        "(e.g. 16,160,1000), few keys and all-distinct keys, warm and cold",
    )
    ap.add_argument("--few-keys", type=int, default=10_000, help="keys of --engines' few-keys logs")
    ap.add_argument(
        "--cold-max-mb", type=int, default=200, help="--engines: cold CLI calls up to this size"
    )
    ap.add_argument(
        "--shapes", default="few,distinct", help="--engines: key shapes (few, distinct)"
    )
    args = ap.parse_args()
    if args.cold_probe:
        cold_probe(args.cold_probe)
        return

    root = Path(tempfile.mkdtemp(prefix="kompakt-bench-spark-"))
    try:
        if args.engines:
            run_engines(root, [int(x) for x in args.engines.split(",") if x], args)
        elif args.scale:
            run_scale(root, [int(x) for x in args.scale.split(",") if x])
        else:
            run(root, args)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run(root: Path, args: argparse.Namespace) -> None:
    from kompakt import pipeline

    # -- JVM start and warm-up, timed apart ---------------------------------------------
    t0 = time.perf_counter()
    spark = pipeline.session(
        {
            "kompakt.spark.master": MASTER,
            "spark.sql.shuffle.partitions": str(args.shuffle_partitions),
            "spark.ui.showConsoleProgress": "false",
        }
    )
    spark.sparkContext.setLogLevel("ERROR")
    jvm_start = time.perf_counter() - t0
    from kompakt.pipeline.engine import warm_up

    _session_s, warm_clean = warm_up({"kompakt.spark.master": MASTER})  # as a broker's start
    build(root / "warm-local", 100, 3)
    clean_once(root / "warm-local", LocalEngine())  # compile the numba kernels untimed
    print(f"Spark {MASTER}: session start {jvm_start:.1f} s, warm-up clean {warm_clean:.1f} s")
    print(f"load average: {os.getloadavg()}")

    # -- fixed costs ----------------------------------------------------------------------
    tiny = tiny_topic(root / "tiny-cold")
    cold = cold_clean_seconds(root / "tiny-cold")
    tiny_topic(root / "tiny-warm")
    _st, warm, _mem = clean_once(root / "tiny-warm", spark_engine(), spark)
    print(
        f"fixed costs ({tiny:,} B topic): cold first clean (new process) {cold:.1f} s, "
        f"warm clean {warm:.2f} s, Spark session start {jvm_start:.1f} s"
    )
    tiny_topic(root / "tiny-probe")
    wall, probe_session, probe_clean = cold_first_clean(root / "tiny-probe")
    print(
        f"cold first clean - session start: {probe_clean:.2f} s (one new process: session "
        f"start {probe_session:.1f} s, then the first clean; process wall {wall:.1f} s, "
        f"{wall - probe_session:.1f} s beyond its session start with the interpreter, "
        f"imports and exit); load {os.getloadavg()[0]:.1f}"
    )

    # -- crossover ------------------------------------------------------------------------
    sizes = [int(x) for x in args.crossover.split(",") if x]
    if sizes:
        local_s, spark_s = [], []
        for n in sizes:
            build(root / f"x{n}", max(1, n // 10), 10)
            local_s.append(clean_once(copy(root / f"x{n}", root / "xl"), LocalEngine())[1])
            spark_s.append(clean_once(copy(root / f"x{n}", root / "xs"), spark_engine())[1])
            for d in (root / f"x{n}", root / "xl", root / "xs"):
                shutil.rmtree(d)
            print(f"  {n:>11,} records: in-process {local_s[-1]:.2f} s, Spark {spark_s[-1]:.2f} s")
        print(f"crossover (Spark overtakes in-process): {crossover(sizes, local_s, spark_s)}")

    # -- K keys x U updates -------------------------------------------------------------
    t0 = time.perf_counter()
    fast = args.keys * args.updates % BATCH == 0  # the same bytes, made ~15x faster
    records, nbytes = (build_fast if fast else build)(root / "src", args.keys, args.updates)
    print(
        f"data: {args.keys:,} keys x {args.updates} updates = {records:,} records, "
        f"{nbytes / 1e6:.1f} MB of segments (built in {time.perf_counter() - t0:.1f} s)"
    )
    t_cp = cp_seconds(root / "src", root / "cp.tmp")

    rss_before = maxrss()
    st_l, t_l, mem_l = clean_once(copy(root / "src", root / "local"), LocalEngine(128 << 20))
    rss_after_local = maxrss()
    st_s, t_s, mem_s = clean_once(copy(root / "src", root / "spark"), spark_engine(), spark)
    rss_after_spark = maxrss()
    assert st_l is not None and st_s is not None
    assert st_l.records_written == st_s.records_written == args.keys, (
        st_l.records_written,
        st_s.records_written,
    )

    cp_mbs = nbytes / 1e6 / t_cp
    hdr = f"{'engine':30} {'seconds':>8} {'MB/s':>8} {'rec/s':>11} {'x cp':>7} {'x local':>8}"
    print(hdr)
    print("-" * len(hdr))
    loc_mbs = nbytes / 1e6 / t_l
    for name, t in (
        ("(a) Spark engine, " + MASTER, t_s),
        ("(b) in-process LocalEngine", t_l),
        ("(c) cp of the segment bytes", t_cp),
    ):
        mbs = nbytes / 1e6 / t
        print(
            f"{name:30} {t:>8.2f} {mbs:>8.1f} {records / t:>11,.0f} "
            f"{mbs / cp_mbs:>7.3f} {mbs / loc_mbs:>8.2f}"
        )
    print(
        f"records written: {st_s.records_written:,} (both engines); "
        f"passes: spark partial={st_s.partial}, local partial={st_l.partial}"
    )
    print("memory:")
    print(
        f"  this process peak RSS (ru_maxrss): {fmt_mb(rss_before)} before cleans, "
        f"{fmt_mb(rss_after_local)} after local, {fmt_mb(rss_after_spark)} after Spark"
    )
    print(f"  local clean: sampled peak RSS of this process {fmt_mb(mem_l['self_rss'])}")
    print(
        f"  Spark clean: driver Python RSS {fmt_mb(mem_s['self_rss'])}, "
        f"driver/executor JVM heap used {fmt_mb(mem_s['jvm_heap_used'])} "
        f"(JVM process RSS {fmt_mb(mem_s['jvm_rss'])}), "
        f"Python workers PSS {fmt_mb(mem_s['py_workers_rss'])} "
        f"({mem_s['max_workers']} daemon + forked worker processes at peak)"
    )

    if args.skip_distinct:
        return
    # -- more keys than the map -----------------------------------------------------------
    t0 = time.perf_counter()
    drecords, dbytes = build(root / "dsrc", args.distinct, 1)
    print()
    print(
        f"distinct keys: {drecords:,} records, {dbytes / 1e6:.1f} MB "
        f"(built in {time.perf_counter() - t0:.1f} s)"
    )
    t_dcp = cp_seconds(root / "dsrc", root / "cp.tmp")
    dcp_mbs = dbytes / 1e6 / t_dcp
    default = LocalEngine(128 << 20)
    dpasses, t_ld = clean_until_done(copy(root / "dsrc", root / "ddefault"), default)
    small = LocalEngine(args.small_buffer)
    passes, t_lp = clean_until_done(
        copy(root / "dsrc", root / "dlocal"), small, max_passes=args.max_passes
    )
    st_d, t_sd, mem_d = clean_once(copy(root / "dsrc", root / "dspark"), spark_engine(), spark)
    assert st_d is not None
    print(f"{'engine':44} {'passes':>6} {'seconds':>8} {'MB/s':>8} {'x cp':>7} {'x spark':>8}")
    sd_mbs = dbytes / 1e6 / t_sd
    for name, n, t in (
        (f"(a) Spark engine, {MASTER}", 1, t_sd),
        (f"(b) LocalEngine 128 MiB ({default.map.max_entries:,} keys)", len(dpasses), t_ld),
        ("(c) cp of the segment bytes", 1, t_dcp),
    ):
        mbs = dbytes / 1e6 / t
        print(f"{name:44} {n:>6} {t:>8.2f} {mbs:>8.1f} {mbs / dcp_mbs:>7.3f} {mbs / sd_mbs:>8.2f}")
    last = passes[-1] if passes else None
    print(
        f"LocalEngine({args.small_buffer:,} B dedupe buffer, max {small.map.max_entries:,} "
        f"keys): {len(passes)} passes (cap {args.max_passes}), {t_lp:.2f} s, "
        f"last partial={last.partial if last else None}, "
        f"reached offset {last and last.end_offset:,} of {drecords:,}"
    )
    ends = [s.end_offset for s in passes]
    shown = ends if len(ends) <= 8 else ends[:4] + ["..."] + ends[-3:]
    print(f"  end_offset after each pass: {shown}")
    print(
        f"Spark engine: 1 pass, {t_sd:.2f} s ({sd_mbs:.1f} MB/s), "
        f"partial={st_d.partial}, end_offset={st_d.end_offset:,}, "
        f"first uncleanable offset={st_d.first_uncleanable_offset:,}, "
        f"one pass covers it: {not st_d.partial and st_d.end_offset == st_d.first_uncleanable_offset}"
    )
    print(
        f"  JVM heap used peak {fmt_mb(mem_d['jvm_heap_used'])}, "
        f"Python workers PSS {fmt_mb(mem_d['py_workers_rss'])}"
    )


def run_scale(root: Path, millions: list[int]) -> None:
    """One Spark clean per size, in place (no copy: 100M records are ~12 GB); the time
    per record should not grow with the size, nor the JVM heap and worker memory."""
    from kompakt import pipeline

    spark = pipeline.session({"kompakt.spark.master": MASTER})
    build(root / "warm", 100, 3)
    clean_once(root / "warm", spark_engine(), spark)
    shutil.rmtree(root / "warm")
    print(f"Spark {MASTER}, default driver memory; 10 updates per key, 100 B values")
    hdr = (
        f"{'records':>12} {'keys':>11} {'GB':>6} {'build s':>8} {'clean s':>8} {'MB/s':>7} "
        f"{'passes':>6} {'JVM heap':>9} {'JVM RSS':>9} {'workers PSS':>12} {'driver RSS':>11} "
        f"{'load':>5}"
    )
    print(hdr)
    print("-" * len(hdr))
    sizes, seconds = [], []
    for m in millions:
        records = m * 1_000_000
        data = root / f"scale-{m}"
        t0 = time.perf_counter()
        _n, nbytes = build_fast(data, records // 10, 10)
        t_build = time.perf_counter() - t0
        st, t, mem = clean_once(data, spark_engine(), spark)
        assert st is not None and st.records_written == records // 10, st
        passes = 1 if not st.partial else "partial"
        print(
            f"{records:>12,} {records // 10:>11,} {nbytes / 1e9:>6.2f} {t_build:>8.1f} {t:>8.1f} "
            f"{nbytes / 1e6 / t:>7.1f} {passes:>6} {fmt_mb(mem['jvm_heap_used']):>9} "
            f"{fmt_mb(mem['jvm_rss']):>9} {fmt_mb(mem['py_workers_rss']):>12} "
            f"{fmt_mb(mem['self_rss']):>11} {os.getloadavg()[0]:>5.1f}",
            flush=True,
        )
        shutil.rmtree(data)
        sizes.append(records)
        seconds.append(t)
    if len(sizes) >= 2:
        n = len(sizes)
        mx, my = sum(sizes) / n, sum(seconds) / n
        slope = sum((x - mx) * (y - my) for x, y in zip(sizes, seconds, strict=True)) / sum(
            (x - mx) ** 2 for x in sizes
        )
        per = [t / r * 1e7 for r, t in zip(sizes, seconds, strict=True)]
        print(
            f"slope: {slope * 1e7:.2f} s per 10M records (least squares, intercept "
            f"{my - slope * mx:.1f} s); seconds per 10M records at each size: "
            + ", ".join(f"{p:.2f}" for p in per)
        )


RECORD_BYTES = 124  # one record of build_fast's logs (14 B key, 100 B value) in its batch


def run_engines(root: Path, sizes_mb: list[int], args: argparse.Namespace) -> None:
    """Both engines on each size x key shape: warm (this process's Spark session, the
    in-process engine cleaning until no pass is partial) and cold (a new CLI process,
    wall; only up to ``--cold-max-mb``: beyond, the cold cost is the warm one plus the
    session start printed first)."""
    from kompakt import pipeline
    from kompakt.cleaner.config import DEDUPE_BUFFER_SIZE_DEFAULT

    t0 = time.perf_counter()
    spark = pipeline.session(
        {"kompakt.spark.master": MASTER, "spark.ui.showConsoleProgress": "false"}
    )
    spark.sparkContext.setLogLevel("ERROR")
    session_s = time.perf_counter() - t0
    build(root / "warm", 100, 3)
    clean_once(root / "warm", spark_engine())
    build(root / "warm-local", 100, 3)
    clean_once(root / "warm-local", LocalEngine())  # compile the numba kernels untimed
    shutil.rmtree(root / "warm")
    shutil.rmtree(root / "warm-local")
    fits = LocalEngine(DEDUPE_BUFFER_SIZE_DEFAULT).map.max_entries
    print(
        f"Spark {MASTER}: session start {session_s:.1f} s (load {os.getloadavg()[0]:.1f}); "
        f"in-process offset map at the default log.cleaner.dedupe.buffer.size "
        f"({DEDUPE_BUFFER_SIZE_DEFAULT >> 20} MiB): {fits:,} keys"
    )
    hdr = (
        f"{'MB':>6} {'records':>11} {'keys':>11} {'local s':>8} {'passes':>6} {'spark s':>8} "
        f"{'spark/local':>11} {'cold local':>10} {'cold spark':>10} {'load':>5}"
    )
    print(hdr)
    print("-" * len(hdr))
    few_mb, few_local, few_spark = [], [], []
    for mb in sizes_mb:
        unit = math.lcm(BATCH, args.few_keys)  # few keys x whole updates, whole batches
        records = max(1, round(mb * 1e6 / RECORD_BYTES / unit)) * unit
        shapes = {"few": min(args.few_keys, records), "distinct": records}
        for keys in (shapes[name] for name in args.shapes.split(",")):
            src = root / "src"
            _n, nbytes = build_fast(src, keys, records // keys)
            passes, t_l = clean_until_done(copy(src, root / "l"), LocalEngine())
            shutil.rmtree(root / "l")
            st, t_s, _mem = clean_once(copy(src, root / "s"), spark_engine(), spark)
            shutil.rmtree(root / "s")
            assert st is not None and not st.partial, st
            cold_l = cold_s = "-"
            if mb <= args.cold_max_mb:
                cold_l = f"{cold_clean_seconds(copy(src, root / 'cl'), 'local'):.1f}"
                cold_s = f"{cold_clean_seconds(copy(src, root / 'cs'), 'spark'):.1f}"
                shutil.rmtree(root / "cl")
                shutil.rmtree(root / "cs")
            shutil.rmtree(src)
            if keys < records:
                few_mb.append(round(nbytes / 1e6))
                few_local.append(t_l)
                few_spark.append(t_s)
            print(
                f"{nbytes / 1e6:>6.0f} {records:>11,} {keys:>11,} {t_l:>8.2f} {len(passes):>6} "
                f"{t_s:>8.2f} {t_s / t_l:>11.2f} {cold_l:>10} {cold_s:>10} "
                f"{os.getloadavg()[0]:>5.1f}",
                flush=True,
            )
    if few_mb:
        where = crossover(few_mb, few_local, few_spark).replace("records", "MB")
        print(f"crossover, warm, few keys (Spark overtakes in-process): {where}")


if __name__ == "__main__":
    main()
