"""Injected read I/O errors in a running broker, with libfiu (Debian's ``fiu-utils``).

The broker is started under ``fiu-run`` (libfiu's run-time preload: it initialises
libfiu and serves the control pipes ``<prefix>-<pid>.in/.out``), and ``fiu-ctrl``
switches failure points on and off at run time; ``scripts/ensure-fiu.sh`` installs the
tools. Without them (or without a C compiler) :func:`missing` says why and the callers
skip the fault.

The two points are in ``fiu_segment_reads.c``, compiled here at run time and preloaded
after libfiu's library; each asks libfiu (``fiu_fail``) only for a call on a ``.log``
file and fails it with EIO:

* :data:`PREAD` (``pread``): how a Fetch reads a segment
  (:meth:`kompakt.log.segment.LogSegment.read_at` and its neighbours, which also load a
  segment's tail when a clean's result is opened) and how batch headers are walked
  (``kompakt.pipeline.layout``).
* :data:`SEGMENT_MMAP` (``mmap`` of a file): how a clean reads a segment
  (``kompakt.cleaner.segment_io.segment_buffer``). The page faults that read a mapped
  file later are not calls anything can wrap: a real disk error there is a SIGBUS,
  which no Python process survives (the campaign's SIGKILL during a clean stands for
  it). The mapping call failing is the read error a clean can get and handle.

libfiu's own POSIX points (``fiu-run -x``: ``posix/io/rw/pread``, ``posix/mm/mmap``) are
not used, although they reach the same calls: that library wraps malloc and ~150 other
calls and consults libfiu in each even with nothing enabled, and a broker under it
deadlocked (pyarrow's jemalloc thread allocating its TLS under glibc's loader lock while
the malloc wrapper's lazy ``dlsym`` waited for that lock); and ``posix/mm/mmap`` fails
every mapping (CPython's thread and arena memory, numba's LLVM JIT, which aborts the
process), which no failing disk does. ``read``/``readinto`` are not failed: the
interpreter's imports and pipes use them.

Only the broker process gets the preload: :data:`LAUNCHER` takes ``LD_PRELOAD`` out of
its environment once it has started, so Spark's JVM and Python workers run without
libfiu (under libfiu's POSIX preload the JVM could not start its Python daemon, EBUSY;
and the workers, forked and reused by ``pyspark.daemon``, have no control thread). A
read-io-error during a Spark clean fails the broker's side of it (the producer
summary, the swap) through libfiu, the executors' reads through :class:`WorkerReads`
below. The control pipes go under a directory of
the caller's (``fiu-run -f``) so a SIGKILL leaves nothing in ``/tmp``.

The executors' reads are failed by a second build of the same file with
``-DFLAG_SWITCH`` (:class:`WorkerReads`), which needs no libfiu: Spark starts its Python daemon with it
(``spark.executorEnv.LD_PRELOAD``), the forked workers inherit it, and a switch file
(created with the probability in it, then removed) turns the failures on and off in
every worker at once.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

PREAD = "kompakt/segment/pread"
SEGMENT_MMAP = "kompakt/segment/mmap"
SEGMENT_READS = (PREAD, SEGMENT_MMAP)
FIU_LIB = Path("/usr/lib/fiu")  # where Debian's libfiu0 puts its preload libraries
SHIM_SOURCE = Path(__file__).with_name("fiu_segment_reads.c")
FLAG_ENV = (
    "KOMPAKT_FAIL_READS_FLAG"  # the switch file fiu_segment_reads.c looks for (-DFLAG_SWITCH)
)
# python -c LAUNCHER SCRIPT ARGS... (or PYTHON -m MODULE ARGS...): run the Python
# script SCRIPT (``kompakt``) or MODULE in this process, libfiu already loaded, without
# handing the preload to its children
LAUNCHER = (
    "import faulthandler, os, runpy, signal, sys\n"
    "faulthandler.register(signal.SIGUSR2, all_threads=True)\n"  # Fiu.dump
    "for k in ('LD_PRELOAD', 'FIU_CTRL_FIFO', 'FIU_ENABLE'):\n"
    "    os.environ.pop(k, None)\n"
    "args = sys.argv[1:]\n"
    "if args[1:2] == ['-m']:\n"  # python -m module ARGS
    "    sys.argv = args[2:]\n"
    "    runpy.run_module(args[2], run_name='__main__', alter_sys=True)\n"
    "else:\n"
    "    sys.argv = args\n"
    "    runpy.run_path(args[0], run_name='__main__')\n"
)


def missing() -> str | None:
    """Why read errors cannot be injected here (None: they can)."""
    absent = [t for t in ("fiu-run", "fiu-ctrl") if shutil.which(t) is None]
    if absent:
        return f"{' and '.join(absent)} not found (scripts/ensure-fiu.sh installs fiu-utils)"
    if not (FIU_LIB / "fiu_run_preload.so").exists():
        return f"libfiu's fiu_run_preload.so is not in {FIU_LIB}"
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        return "no C compiler to build the segment read points (fiu_segment_reads.c)"
    return None


class FiuError(RuntimeError):
    """``fiu-ctrl`` could not reach the process or refused a command."""


def build_segment_reads(out_dir: Path) -> Path:
    """Compile ``fiu_segment_reads.c`` into ``out_dir`` (raises :class:`FiuError`)."""
    return _compile(SHIM_SOURCE, Path(out_dir) / "fiu_segment_reads.so", ["-l:libfiu.so.0"])


def _compile(source: Path, out: Path, libs: list[str]) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise FiuError(f"no C compiler to build {source.name}")
    args = [cc, "-shared", "-fPIC", "-O2", "-o", str(out), str(source), *libs, "-ldl"]
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        raise FiuError(f"building {source.name} failed: {r.stderr.strip()[:300]}")
    return out


class WorkerReads:
    """Segment read errors in Spark's Python workers (``fiu_segment_reads.c`` -DFLAG_SWITCH),
    switched by a file rather than by pid: :meth:`spark_overrides` go into the broker's
    config, :meth:`enable` and :meth:`disable` flip every worker at once."""

    def __init__(self, work_dir: Path):
        self.dir = Path(work_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        # the same points, switched by a file instead of libfiu (FLAG_SWITCH)
        self.shim = _compile(SHIM_SOURCE, self.dir / "worker_segment_reads.so", ["-DFLAG_SWITCH"])
        self.flag = self.dir / "fail-reads"
        self.flag.unlink(missing_ok=True)

    def spark_overrides(self) -> dict[str, str]:
        """Broker config: Spark's ``spark.executorEnv.*`` reach its Python daemon and the
        workers it forks (local mode too)."""
        return {
            "spark.executorEnv.LD_PRELOAD": str(self.shim),
            f"spark.executorEnv.{FLAG_ENV}": str(self.flag),
        }

    def enable(self, probability: float) -> None:
        tmp = self.flag.with_name(self.flag.name + ".tmp")
        tmp.write_text(f"{probability:.3f}")
        os.replace(tmp, self.flag)  # a worker reads the whole value or none

    def disable(self) -> None:
        self.flag.unlink(missing_ok=True)


class Fiu:
    """The segment read points (:data:`SEGMENT_READS`) of processes started with
    :meth:`wrapper`, switched by pid."""

    def __init__(self, ctrl_dir: Path):
        self.ctrl_dir = Path(ctrl_dir)
        self.ctrl_dir.mkdir(parents=True, exist_ok=True)
        self.prefix = str(self.ctrl_dir / "fiu-ctrl")
        self.shim = build_segment_reads(self.ctrl_dir)
        self.points = SEGMENT_READS

    def wrapper(self, python_script: bool = True) -> list[str]:
        """The command prefix that starts a program with the points available:
        ``fiu-run`` (libfiu, control pipes under our prefix), ``env`` to add the
        segment read points to the preload list fiu-run set, then (``python_script``:
        the command is a Python script such as ``kompakt``) :data:`LAUNCHER`, so the
        program's children do not inherit the preload."""
        libs = [FIU_LIB / "fiu_run_preload.so", self.shim]
        cmd = ["fiu-run", "-f", self.prefix, "env", "LD_PRELOAD=" + " ".join(map(str, libs))]
        if python_script:
            cmd += [sys.executable, "-c", LAUNCHER]
        return cmd

    def reachable(self, pid: int) -> bool:
        """``pid`` serves libfiu's control pipes (started under :meth:`wrapper`)."""
        return Path(f"{self.prefix}-{pid}.out").exists()

    def _ctrl(self, pid: int, commands: list[str], timeout: float) -> None:
        args = ["fiu-ctrl", "-f", self.prefix]
        for c in commands:
            args += ["-c", c]
        # fiu-ctrl blocks opening the pipe of a process that died meanwhile: bounded
        proc = subprocess.Popen(
            [*args, str(pid)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # its echo/cat children go with it on a timeout
        )
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise FiuError(f"fiu-ctrl got no answer from pid {pid} in {timeout} s") from None
        if "error" in out.lower():
            raise FiuError(f"fiu-ctrl {commands} on pid {pid}: {out.strip()}")

    def enable(
        self,
        pid: int,
        points: tuple[str, ...] | None = None,
        probability: float = 1.0,
        err: int = errno.EIO,
        timeout: float = 10.0,
    ) -> None:
        """Make ``points`` (default :attr:`points`) fail with ``err``, each call with
        ``probability``."""
        points = self.points if points is None else points
        if probability >= 1.0:
            cmds = [f"enable name={p},failinfo={err}" for p in points]
        else:
            cmds = [
                f"enable_random name={p},probability={probability:.3f},failinfo={err}"
                for p in points
            ]
        self._ctrl(pid, cmds, timeout)

    def disable(
        self, pid: int, points: tuple[str, ...] | None = None, timeout: float = 10.0
    ) -> None:
        points = self.points if points is None else points
        self._ctrl(pid, [f"disable name={p}" for p in points], timeout)

    def dump(self, pid: int, out: Path) -> Path:
        """Evidence of a process that stopped answering: its Python stacks (SIGUSR2 to
        the faulthandler :data:`LAUNCHER` registered, written to its log) and its native
        threads' stacks (``gdb``, when installed) in ``out``."""
        os.kill(pid, signal.SIGUSR2)
        text = "gdb not installed"
        if shutil.which("gdb"):
            try:
                text = subprocess.run(
                    ["gdb", "-p", str(pid), "-batch", "-ex", "thread apply all bt 30"],
                    capture_output=True,
                    text=True,
                    timeout=60,
                ).stdout
            except subprocess.TimeoutExpired:
                text = "gdb timed out"
        out.write_text(text)
        return out
