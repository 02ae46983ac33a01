"""Spark pipeline throughput: the ``kompakt`` data source read, and Spark compaction.

Generates a data dir (keyed records, many duplicates), then prints records/s and MB/s
(segment bytes) of: the source's executor-side decode alone (no Spark), a full Spark
read through the source, and a Spark compaction of the whole topic (when the cleaner's
engine interface is present). Run: ``.venv/bin/python benchmarks/bench_pipeline.py``.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from kompakt.log.manager import LogManager
from kompakt.pipeline.plan import plan_ranges
from kompakt.pipeline.read import read_range
from kompakt.record.encode import build_simple_batch


def generate(data_dir: Path, args: argparse.Namespace) -> int:
    """Write the bench topic; returns its size in bytes."""
    value = b"v" * args.value_size
    now_ms = int(time.time() * 1000)  # old timestamps would roll a segment per append
    with LogManager(data_dir) as m:
        m.create_topic(
            "bench",
            args.partitions,
            {"cleanup.policy": "compact", "segment.bytes": str(args.segment_mb << 20)},
        )
        per_part = args.records // args.partitions
        for p in range(args.partitions):
            plog = m.get_log("bench", p)
            for i in range(0, per_part, args.batch):
                items = [
                    (b"key-%08d" % ((i + j) % args.keys), value)
                    for j in range(min(args.batch, per_part - i))
                ]
                plog.append(build_simple_batch(items, timestamp=now_ms))
        return sum(plog.size_bytes() for plog in m.logs())


def report(name: str, records: int, nbytes: int, seconds: float) -> None:
    print(
        f"{name:<34} {records / seconds:>12,.0f} records/s {nbytes / seconds / 1e6:>9.1f} MB/s"
        f"   ({records:,} records, {seconds:.2f} s)"
    )


def bench_decode(data_dir: Path, nbytes: int) -> int:
    ranges = plan_ranges({"path": str(data_dir), "subscribe": "bench"})
    next(iter(read_range(ranges[0])), None)  # compile the numba kernels outside the timing
    t0 = time.perf_counter()
    n = sum(rb.num_rows for r in ranges for rb in read_range(r))
    report("source decode, 1 core, no Spark", n, nbytes, time.perf_counter() - t0)
    return n


def bench_spark_read(spark, data_dir: Path, nbytes: int, max_bytes: int) -> None:
    from pyspark.sql import functions as F

    def query():
        df = (
            spark.read.format("kompakt")
            .option("path", str(data_dir))
            .option("subscribe", "bench")
            .option("maxBytesPerPartition", str(max_bytes))
            .load()
        )
        return df, df.agg(F.count("*"), F.sum(F.length("value")), F.max("offset"))

    query()[1].collect()  # warm the Python workers
    df, q = query()
    t0 = time.perf_counter()
    n, value_bytes, _max = q.collect()[0]
    seconds = time.perf_counter() - t0
    assert value_bytes > 0
    report(f"Spark read ({df.rdd.getNumPartitions()} input partitions)", n, nbytes, seconds)


def bench_spark_compaction(spark, data_dir: Path, records: int, nbytes: int) -> None:
    try:
        from kompakt.pipeline.compaction import compact_topic
    except ImportError as exc:
        print(f"Spark compaction: skipped ({exc})")
        return
    t0 = time.perf_counter()
    compact_topic(spark, data_dir, "bench")
    report("Spark compaction", records, nbytes, time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--batch", type=int, default=500, help="records per batch")
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--keys", type=int, default=200_000)
    ap.add_argument("--segment-mb", type=int, default=32)
    ap.add_argument("--master", default="local[2]")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="kompakt-bench-pipeline-"))
    try:
        data_dir = tmp / "data"
        t0 = time.perf_counter()
        nbytes = generate(data_dir, args)
        print(
            f"generated {args.records:,} records, {nbytes / 1e6:.0f} MB in {time.perf_counter() - t0:.1f} s"
        )
        n = bench_decode(data_dir, nbytes)

        import kompakt.pipeline as pipeline

        spark = pipeline.session(
            {"kompakt.spark.master": args.master, "spark.sql.shuffle.partitions": "4"}
        )
        spark.sparkContext.setLogLevel("ERROR")
        bench_spark_read(spark, data_dir, nbytes, args.segment_mb << 20)
        bench_spark_compaction(spark, data_dir, n, nbytes)
        pipeline.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
