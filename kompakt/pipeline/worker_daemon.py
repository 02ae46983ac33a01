"""PySpark's worker daemon with kompakt's modules and numba kernels loaded before it forks.

PySpark starts one daemon per executor (``python -m pyspark.daemon``) and forks a Python
worker from it for each task slot; an idle worker exits after a minute, so a broker's
background clean usually gets fresh workers. Each fresh worker used to import numba
and kompakt and load every numba kernel from its on-disk cache on its first task:
measured on the 2-core machine, the first map task of a 10M-record clean took 1.7-1.9 s
against 0.2-0.3 s for the next ones, on each worker. ``spark.python.daemon.module``
points here (set by :func:`kompakt.pipeline.spark_conf`), so the daemon pays that once
per executor and every forked worker inherits the loaded code.

Nothing may reach stdout before :func:`pyspark.daemon.manager` runs: the JVM reads the
daemon's port from it.

A worker whose socket the JVM has closed (its task was cancelled: a Ctrl-C, a clean
aborted; or the executor is gone) ends quietly: PySpark's daemon printed a
``BrokenPipeError`` traceback for the final flush to the JVM (its
``killWorkerOnFlushFailure`` path), which the driver forwards to the user's terminal.
Nobody reads that socket any more and the JVM reports the task's end itself, so the
traceback said nothing; every other error still prints as before.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import os
import select
import signal
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


def preload() -> None:
    """Import the task-side modules and run each numba kernel once on a throwaway
    topic: the map side (scan, digests, bucket packing), the reduce side (superseded
    bits) and the group rewrite, through the same functions a clean calls."""
    import numpy as np

    from kompakt.cleaner import Cleaner, LocalEngine
    from kompakt.log.manager import LogManager
    from kompakt.pipeline import exchange, groups, survivors  # noqa: F401  (task-side imports)
    from kompakt.pipeline.engine import throwaway_topic

    with tempfile.TemporaryDirectory(prefix="kompakt-worker-preload-") as tmp:
        with LogManager(Path(tmp)) as logs:
            plog = throwaway_topic(logs, "preload")
            bases = [s.base_offset for s in plog.segments_snapshot()]
            reads = survivors.plan_reads(plog.dir, bases)
            rows = np.concatenate([survivors.digest_rows(t, 0, 0, 40, []) for t in reads])
            exchange.by_bucket(rows, 2)
            survivors.superseded_bits(rows, 0, 40)
            Cleaner(logs, engine=LocalEngine()).compact_now("preload")  # the rewrite kernels


def _quiet_when_the_jvm_hung_up(worker: Callable[..., int]) -> Callable[..., int]:
    """PySpark's ``worker(sock, authenticated)``, ending with a non-zero code (the
    daemon then lets the worker go, as it does for a failed one) instead of raising when
    its socket to the JVM is broken or reset: the peer that would read the result, or
    an error report, has gone."""

    @functools.wraps(worker)
    def run(*args: Any) -> int:
        try:
            return worker(*args)
        except (BrokenPipeError, ConnectionResetError):
            return 1

    return run


def warm() -> None:
    """The preload, as a daemon does it before it serves: nothing on stdout (the JVM
    reads the daemon's port there), and a failure only costs the workers time."""
    try:
        with contextlib.redirect_stdout(sys.stderr):
            preload()
    except Exception as exc:  # a worker still loads what it needs itself, only slower
        print(f"kompakt worker preload skipped: {exc!r}", file=sys.stderr)


def serve() -> None:
    """PySpark's daemon loop on this process's standard streams.

    The objects loaded so far (PySpark, numba's compiled kernels and its compiler,
    pyarrow, kompakt) are moved out of the garbage collector's sight
    (:func:`gc.freeze`) before the daemon forks workers: PySpark's worker runs a full
    ``gc.collect()`` after every task, which walked those ~145k objects each time,
    70-150 ms per task (a 10M-record clean's 44 tasks spent 3-4 s of the workers'
    CPU there, more than its map side), and each walk also wrote to their pages,
    un-sharing the memory the forks share with the daemon."""
    from pyspark import daemon

    # the manager calls the module's ``worker`` by name in each forked worker
    daemon.worker = _quiet_when_the_jvm_hung_up(daemon.worker)
    gc.collect()
    gc.freeze()
    daemon.manager()


def stand_in(pid: int) -> None:
    """This process handed the daemon's part to the ready daemon ``pid``
    (:mod:`kompakt.pipeline.zygote`): stay until it ends, as the JVM watches this
    process, and pass it the JVM's ``SIGTERM`` (how the JVM stops its daemon)."""

    def forward(signum: int, _frame: Any) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)
        os._exit(0)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    select.select([fd], [], [])  # readable once the process has ended


def main() -> None:
    """The JVM starts one daemon per worker module (``python -m <daemon> <worker module>``):
    only the task workers' daemon (``pyspark.worker``) runs kompakt's code; the data
    source planning ones (``pyspark.sql.worker.*``) do not need the preload. A ready
    daemon started beside the JVM (:mod:`kompakt.pipeline.zygote`) takes the task
    workers' part over when there is one."""
    from kompakt.pipeline import zygote

    if sys.argv[1:2] == [zygote.READY]:  # the ready daemon, started beside the JVM
        path = sys.argv[2]
        listener = zygote.listen(path)
        sys.argv[1:] = ["pyspark.worker"]  # the worker module PySpark's daemon forks into
        warm()
        if zygote.wait_for_stand_in(listener, path):
            serve()
        return
    if sys.argv[1:2] in ([], ["pyspark.worker"]):
        ready = os.environ.get(zygote.ENV)
        pid = zygote.hand_over(ready) if ready else None
        if pid is not None:
            stand_in(pid)
            return
        warm()
    serve()


if __name__ == "__main__":
    main()
