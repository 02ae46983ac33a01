"""The Spark engine cleaning a tiered partition's remote range in executors.

The driver plans from the manifest (:mod:`kompakt.pipeline.remote_plan`: the cleaner's
own planning over the manifest, the producers from the tiered snapshot and
``.txnindex``; any producer batches above the newest snapshot are read by a task per
segment), the executors fetch, clean and upload (:mod:`kompakt.pipeline.remote_tasks`),
and the driver commits the returned segments by one manifest swap
(:meth:`kompakt.cleaner.remote_clean.RemoteCleaner.commit`, shared with the in-process
engine). No shared filesystem: executors read and write the bucket with the same client
the broker uses, so it runs on a Spark cluster whose workers know nothing of the
broker's data dir. The output is byte for byte the in-process engine's.

A range of at most ``single_task_bytes`` (the Spark engine's
:data:`~kompakt.pipeline.survivors.SINGLE_TASK_BYTES`) is cleaned in one Spark task, as
the Spark engine cleans a small local range
(:func:`kompakt.pipeline.groups.run_groups_in_one_task`): key map, transaction pass and
every group's rewrite and upload in order (:func:`remote_tasks.clean_in_one_task`). A
bigger one is read by a task per segment and rewritten by a task per group
(:mod:`kompakt.pipeline.remote_spread`). Both give the same bytes.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from pyspark.accumulators import AccumulatorParam

from kompakt.cleaner.manager import CleaningAbortedError
from kompakt.cleaner.remote_clean import CLEANED, FETCHED, UPLOADED, CleanedRange
from kompakt.errors import KompaktError
from kompakt.pipeline.remote_plan import plan
from kompakt.pipeline.remote_tasks import StoreAddress, clean_in_one_task, executor_headers
from kompakt.remote.manifest import PartitionManifest
from kompakt.remote.storage import RemoteStorageManager, TransferStats
from kompakt.remote.store import RemoteStorageError


def task_error(exc: BaseException) -> str:
    """The worker's own error line (``module.Name: message``) out of a Spark task
    failure, whose text is a Python traceback wrapped in JVM frames; else its first
    line."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    for line in reversed(lines):
        if _ERROR_LINE.match(line):
            return line[:500]
    return (lines or [type(exc).__name__])[0][:300]


_ERROR_LINE = re.compile(r"^[\w.]+(Error|Exception|Mismatch\w*): ")


class _Counts(AccumulatorParam):
    """Requests and bytes by kind, summed over the tasks (:func:`transfer_counts`)."""

    def zero(self, value: dict) -> dict:
        return {}

    def addInPlace(self, a: dict, b: dict) -> dict:  # noqa: N802 (Spark's name)
        for kind, (n, nbytes) in b.items():
            got = a.setdefault(kind, [0, 0])
            got[0] += n
            got[1] += nbytes
        return a


def add_transfers(stats: TransferStats, counts: Mapping[str, list[int]]) -> None:
    """The executors' requests and bytes added to the driver's counters."""
    for kind, (n, nbytes) in counts.items():
        for i in range(n):
            stats.count(kind, nbytes if i == 0 else 0)


class SparkRemoteEngine:
    """A :class:`~kompakt.cleaner.remote_clean.RemoteCleanEngine` on
    :func:`kompakt.pipeline.session` (``config``: the broker's, with its ``spark.*`` keys
    and ``kompakt.spark.master``). ``segments`` is the driver's own store client (it
    reads the snapshot and ``.txnindex`` files); ``address`` is the store as the
    executors open it."""

    name = "spark"

    def __init__(
        self,
        segments: RemoteStorageManager,
        address: StoreAddress,
        config: Mapping[str, str] | None = None,
        single_task_bytes: int | None = None,
        task_bytes: int | None = None,
    ):
        from kompakt.pipeline.survivors import SINGLE_TASK_BYTES, TASK_BYTES

        self.segments = segments
        self.address = address
        self.config = dict(config or {})
        self.single_task_bytes = (
            SINGLE_TASK_BYTES if single_task_bytes is None else single_task_bytes
        )
        self.task_bytes = TASK_BYTES if task_bytes is None else task_bytes  # per read task
        self._cv = threading.Condition()  # guards the two below
        self._stopped: str | None = None  # guarded by _cv: why :meth:`cancel` stopped it
        self._running: set[str] = set()  # guarded by _cv: job groups of the cleans now

    def cancel(self, why: str, wait_s: float = 10.0) -> None:
        """Stop (the broker shutting down, as Kafka's ``LogCleaner.shutdown`` interrupts a
        clean): refuse new cleans and cancel the Spark job group of each running one
        (``SparkContext.cancelJobGroup``; its tasks are killed, it commits nothing, the
        manifest stays the one it started from). Cancelled again every 0.2 s, up to
        ``wait_s``, until those cleans return: a job submitted just after a cancel (or
        the next of a spread clean's jobs) goes too."""
        with self._cv:
            self._stopped = why
            deadline = time.monotonic() + wait_s
            while self._running and time.monotonic() < deadline:
                sc = self._session().sparkContext
                for group in self._running:
                    sc.cancelJobGroup(group)
                self._cv.wait(0.2)

    def clean_range(
        self,
        m: PartitionManifest,
        overrides: Mapping[str, str],
        force: bool,
        now: int,
        fault: Callable[[str], None],
    ) -> CleanedRange | None:
        """Plan on the driver, clean and upload in the executors; the cleaned segments
        (new objects nothing names yet) and the clean point they reach."""
        name = f"{m.topic}-{m.partition}"
        group = f"kompakt-remote-{name}"
        with self._cv:
            if self._stopped is not None:
                raise CleaningAbortedError((m.topic, m.partition), self._stopped)
            self._running.add(group)
        spark = self._session()
        address = self.address
        sc = spark.sparkContext
        sc.setJobGroup(group, f"kompakt remote clean {name}")
        transfers = sc.accumulator({}, _Counts())
        try:
            headers = executor_headers(sc, address, transfers)
            p = plan(self.segments, m, overrides, self.config, now, force, read_headers=headers)
            if p is None:
                return None
            if sum(s.size for g in p.groups for s in g.segments) <= self.single_task_bytes:

                def run(_: Any) -> list:
                    return clean_in_one_task(address, p, transfers)

                pieces = sc.parallelize([0], 1).flatMap(run).collect()
            else:
                from kompakt.pipeline.remote_spread import clean_spread

                pieces = clean_spread(spark, address, p, self.task_bytes, transfers)
        except KompaktError:  # the driver's own (its plan's reads): as it is
            raise
        except Exception as exc:  # a task's error arrives as the worker's traceback text
            with self._cv:
                stopped = self._stopped
            if stopped is not None:
                raise CleaningAbortedError((m.topic, m.partition), stopped) from exc
            raise RemoteStorageError(
                f"{name}: the remote clean failed in a Spark task: {task_error(exc)}"
            ) from exc
        finally:
            with self._cv:
                self._running.discard(group)
                self._cv.notify_all()
            add_transfers(self.segments.stats, transfers.value)
        fault(FETCHED)  # the executors fetched, cleaned and uploaded
        fault(CLEANED)
        fault(UPLOADED)
        return CleanedRange(sorted(pieces, key=lambda c: c.remote.base_offset), p.clean_point)

    def _session(self) -> Any:
        from kompakt.pipeline import session

        return session(self.config)
