"""Latest-state export: a compacted topic as a table, one row per live key.

This is what a consumer gets by folding the topic into a dict: per partition and key
the record with the highest offset, and keys whose latest record is a tombstone left
out. The dirty head is included (the export does not wait for the cleaner) and
aborted transactions are not (the source reads ``read_committed``).

Writing never costs data: the output is written to a hidden sibling folder and renamed
into place when complete, so a failed or interrupted export leaves no half output and
the previous one intact; and it never replaces a data dir, a folder holding or inside
one, a file, or anything but an earlier export (see :func:`check_export_target`).
Spark's own ``overwrite`` mode deletes whatever the path names before writing.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from kompakt.errors import KompaktError
from kompakt.log.names import validate_topic_name
from kompakt.pipeline import register

if TYPE_CHECKING:  # PySpark is imported on use: refusing an output needs no Spark
    from pyspark.sql import DataFrame, SparkSession

T = TypeVar("T")

COLUMNS = ("key", "value", "partition", "offset", "timestamp", "headers")


def latest_state(spark: SparkSession, data_dir: str | os.PathLike, topic: str) -> DataFrame:
    """DataFrame of the latest non-tombstone record per (partition, key)."""
    from pyspark.sql import functions as F

    validate_topic_name(topic)
    register(spark)
    df = (
        spark.read.format("kompakt")
        .option("path", str(data_dir))
        .option("subscribe", topic)
        .load()
        .where(F.col("key").isNotNull())
    )
    latest = df.groupBy("partition", "key").agg(
        F.max_by(F.struct(*[c for c in COLUMNS if c not in ("key", "partition")]), "offset").alias(
            "r"
        )
    )
    return latest.select(
        "key", "r.value", "partition", "r.offset", "r.timestamp", "r.headers"
    ).where(F.col("value").isNotNull())


class ExportTargetError(KompaktError):
    """The export's output path is one it must not write to or replace."""


# What Spark's file writers leave in an output folder: parts named by task and job
# (part-00000-<uuid>-c000.snappy.parquet), their checksums, the markers. A user's own
# part-00000-notes.csv is not one, and --overwrite keeps refusing it.
_PART = r"part-\d{5}-[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}(?:-c\d{3})?(?:\.\w+)*"
_SPARK_OUTPUT = re.compile(
    rf"^(?:{_PART}|_SUCCESS|_committed_\w+|_started_\w+|\.(?:{_PART}|_SUCCESS)\.crc)$"
)


def check_export_target(
    out_path: str | os.PathLike, data_dir: str | os.PathLike, overwrite: bool = False
) -> Path:
    """The resolved output folder, or :class:`ExportTargetError` when writing there could
    destroy or confuse data: the data dir itself, a folder holding it, a folder inside it
    (it would be taken for a topic), another data dir, a file, a symbolic link, a
    non-empty folder without ``overwrite``, or one holding anything but an earlier
    export's files even with it."""
    from kompakt.log.manager import is_data_dir

    out = Path(out_path)
    if out.is_symlink():
        raise ExportTargetError(f"output '{out}' is a symbolic link: give the folder itself")
    real_out, real_data = out.resolve(), Path(data_dir).resolve()
    if real_out == real_data:
        raise ExportTargetError(f"output '{out}' is the data dir: refusing to write over it")
    if real_data.is_relative_to(real_out):
        raise ExportTargetError(f"output '{out}' holds the data dir '{data_dir}': refusing")
    if real_out.is_relative_to(real_data):
        raise ExportTargetError(
            f"output '{out}' is inside the data dir '{data_dir}', where it would be taken "
            "for a topic: write it elsewhere"
        )
    if not out.exists():
        return real_out
    if not out.is_dir():
        raise ExportTargetError(f"output '{out}' is a file, not a folder: refusing to replace it")
    if is_data_dir(out):
        raise ExportTargetError(f"output '{out}' is a kompakt data dir: refusing to replace it")
    entries = sorted(os.listdir(out))
    if not entries:
        return real_out
    if not overwrite:
        raise ExportTargetError(
            f"output '{out}' is not empty: give --overwrite to replace an earlier export"
        )
    foreign = [n for n in entries if not (_SPARK_OUTPUT.match(n) and (out / n).is_file())]
    if foreign:
        raise ExportTargetError(
            f"output '{out}' holds '{foreign[0]}', which no export writes: refusing to "
            "replace it (remove it yourself if it must go)"
        )
    return real_out


def export_latest(
    spark: SparkSession,
    data_dir: str | os.PathLike,
    topic: str,
    out_path: str | os.PathLike,
    format: str = "parquet",
    overwrite: bool = False,
    *,
    quiet_interrupt: bool = False,
) -> int:
    """Write the latest state of ``topic`` to ``out_path``; returns the rows written.

    ``out_path`` must be missing or empty, or with ``overwrite`` an earlier export
    (:func:`check_export_target`). The rows go to a hidden sibling folder first and
    replace ``out_path`` in two renames once complete; on any error or interrupt the
    sibling is removed and ``out_path`` is as it was. Ctrl-C cancels the export's own
    Spark jobs (not others of the session) and raises ``KeyboardInterrupt`` once they
    stopped; ``quiet_interrupt`` silences Spark's log of the cancelled jobs.

    CSV has no binary or nested types: there ``key``/``value`` are base64 (lossless, as
    Spark's JSON writer already does) and ``headers`` a JSON string. The rows are
    written as one file per :data:`FILE_BYTES` of data begun (:func:`output_files`), not
    one per shuffle partition.
    """
    out = check_export_target(out_path, data_dir, overwrite)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.kompakt-export-{uuid.uuid4().hex}.tmp"
    from pyspark.sql import functions as F

    table = latest_state(spark, data_dir, topic)
    if format == "csv":
        table = table.select(
            F.base64("key").alias("key"),
            F.base64("value").alias("value"),
            "partition",
            "offset",
            "timestamp",
            F.to_json("headers").alias("headers"),
        )
    table = table.cache()

    def write() -> int:
        rows, size = table.agg(F.count("*"), F.sum(_row_bytes(table))).first()
        files = output_files(size or 0)
        table.coalesce(files).write.format(format).mode("errorifexists").save(str(tmp))
        return rows

    try:
        rows = _cancellable(spark, write, quiet=quiet_interrupt)
        check_export_target(out_path, data_dir, overwrite)  # it may have changed meanwhile
        _move_into_place(tmp, out)
    except KeyboardInterrupt:
        _remove_settled(tmp)
        raise ExportInterrupted(tmp) from None
    finally:
        table.unpersist()
        shutil.rmtree(tmp, ignore_errors=True)
    return rows


# Bytes an output file holds at most (before the format's compression): Spark's
# spark.sql.files.maxPartitionBytes, so that reading the export back takes one task per
# file. Without it every export had spark.sql.shuffle.partitions (200) files, most of
# them a few kilobytes, because the latest value per key is a shuffle's output.
FILE_BYTES = 128 * 1024 * 1024
_ROW_OVERHEAD = 32  # partition, offset, timestamp and the row's framing, roughly


def output_files(data_bytes: int, file_bytes: int = FILE_BYTES) -> int:
    """How many files an export of ``data_bytes`` is written as: one per ``file_bytes``
    begun, at least one (an empty export is one file holding the schema)."""
    return max(1, -(-data_bytes // file_bytes))


def _row_bytes(table: DataFrame) -> Any:
    """A row's size for :func:`output_files`: key, value and headers as written (CSV's
    headers are JSON text already), plus the fixed columns."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    headers = F.col("headers")
    if not isinstance(table.schema["headers"].dataType, StringType):
        headers = F.to_json(headers)
    return (
        F.coalesce(F.length("key"), F.lit(0))
        + F.coalesce(F.length("value"), F.lit(0))
        + F.coalesce(F.length(headers), F.lit(0))
        + F.lit(_ROW_OVERHEAD)
    )


class ExportInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped an export. ``tmp`` is its temporary folder, already removed; a
    caller that owns the session removes it once more after stopping Spark, since a
    write command's JVM thread on a loaded machine can make it again later than any
    quiet period :func:`_remove_settled` waits for."""

    def __init__(self, tmp: Path):
        super().__init__(str(tmp))
        self.tmp = tmp


def _remove_settled(path: Path, quiet_s: float = 0.5, timeout_s: float = 10.0) -> None:
    """Remove ``path`` until it stays gone for ``quiet_s``: the JVM side of an
    interrupted write (Spark 4 runs it on a thread of its own) can still set up the
    job's folders a moment after the Python call returned."""
    deadline = time.monotonic() + timeout_s
    gone_since: float | None = None
    while time.monotonic() < deadline:
        if os.path.lexists(path):
            shutil.rmtree(path, ignore_errors=True)
            gone_since = None
        elif gone_since is None:
            gone_since = time.monotonic()
        elif time.monotonic() - gone_since >= quiet_s:
            return
        time.sleep(0.05)


def _cancellable(spark: SparkSession, action: Callable[[], T], *, quiet: bool = False) -> T:
    """Run Spark ``action`` on a worker thread in a job group of its own, so Ctrl-C
    cancels exactly its jobs and is then raised here.

    A ``KeyboardInterrupt`` is delivered to the main thread; waiting in a ``join``
    rather than inside a py4j call, that thread can still talk to the JVM (PySpark's
    own SIGINT handler calls back into the JVM from inside the blocked call and fails
    with a reentrant-call traceback, leaving the jobs running). After cancelling, it
    waits for the worker, so no task writes on once the caller cleans up. ``quiet``
    turns Spark's logging off first: the ERROR lines (with Java stack traces) a
    cancelled job logs are noise to a user who asked to stop.
    """
    group = f"kompakt-export-{uuid.uuid4().hex}"
    outcome: dict[str, Any] = {}

    def work() -> None:
        spark.sparkContext.setJobGroup(group, "kompakt export", interruptOnCancel=True)
        spark.addTag(group)  # Spark 4: the SQL executions (the write command) too
        try:
            outcome["value"] = action()
        except BaseException as exc:  # handed to the waiting thread
            outcome["error"] = exc

    worker = threading.Thread(target=work, name="kompakt-export", daemon=True)
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, signal.default_int_handler) if main else None
    try:
        worker.start()
        try:
            while worker.is_alive():
                worker.join(0.2)
        except KeyboardInterrupt:
            if quiet:
                spark.sparkContext.setLogLevel("OFF")
            spark.interruptTag(group)
            spark.sparkContext.cancelJobGroup(group)
            worker.join()
            _wait_for_killed_tasks(spark)
            raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _wait_for_killed_tasks(spark: SparkSession, timeout_s: float = 60.0) -> None:
    """Wait until no task runs: a cancelled job fails at once on the driver while its
    tasks are killed asynchronously, and a task still writing would make the output
    folder again after the caller removed it."""
    tracker = spark.sparkContext._jsc.sc().statusTracker()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not any(e.numRunningTasks() for e in tracker.getExecutorInfos()):
            return
        time.sleep(0.1)


def _move_into_place(tmp: Path, out: Path) -> None:
    """Rename the finished ``tmp`` to ``out``; an existing ``out`` is renamed aside first
    and put back if the second rename fails, then removed. No moment leaves ``out``
    half-written; a crash between the renames leaves the old one under a hidden name
    beside it."""
    if not os.path.lexists(out):
        os.rename(tmp, out)
        return
    aside = out.parent / f".{out.name}.kompakt-replaced-{uuid.uuid4().hex}"
    os.rename(out, aside)
    try:
        os.rename(tmp, out)
    except BaseException:
        os.rename(aside, out)
        raise
    shutil.rmtree(aside, ignore_errors=True)
