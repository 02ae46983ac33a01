"""The Spark side of kompakt: data source, compaction engine, exports.

``session()`` is the one SparkSession kompakt uses in a process, created on first use
from broker-style config (``kompakt.spark.master``, ``spark.*`` pass-through) with the
``kompakt`` source registered. ``register(spark)`` registers the source on a session
the caller built. PySpark is imported lazily so importing kompakt stays cheap.

Quiet by default: Spark's console progress bar is off and the driver JVM gets a log4j2
configuration of kompakt's (root level ERROR, a failed task's executor and scheduler
lines only at a level the user chose, see :data:`LOG4J2_PROPERTIES`) through
``-Dlog4j2.configurationFile``, which also silences what Spark prints before a session
exists ("Using Spark's default log4j profile", ``WARN NativeCodeLoader``, the hostname
warnings). The notices printed straight to the JVM's stderr ("WARNING: Using incubator
modules" for the ``--add-modules`` of Spark's launcher, Spark's "Setting default log
level" shell hint) are dropped from it; every other line still reaches our stderr. A user's own
``spark.driver.extraJavaOptions`` with ``-Dlog4j2.configurationFile``, a
``log4j2.properties`` in ``$SPARK_CONF_DIR``, ``spark.ui.showConsoleProgress=true`` or
``kompakt.spark.log.level`` (e.g. ``WARN``, ``INFO``) bring Spark's output back.

A session that is still starting can be given up (:func:`abandon_start`, for the
CLI's Ctrl-C): nothing waits for the JVM, which dies with the process, as when a broker
stops during its warm-up (Spark's gateway exits when its stdin, our pipe, closes).
"""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from kompakt.log.manager import LogManager
    from kompakt.pipeline.commit import Attachment

MASTER_KEY = "kompakt.spark.master"
DEFAULT_MASTER = "local[*]"
APP_NAME = "kompakt"
LOG_LEVEL_KEY = "kompakt.spark.log.level"
DEFAULT_LOG_LEVEL = "ERROR"

# Spark's driver logging when the user has not configured log4j: errors only, on stderr.
LOG4J2_PROPERTIES = """\
# written by kompakt (kompakt.pipeline): Spark's driver logs, errors only
rootLogger.level = {level}
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n%ex
# a task that fails (a corrupt batch's CorruptRecordError) reaches the driver, which
# gives the user its one-line verdict: the executor's copy with the worker's traceback
# and the scheduler's "aborting job" are for a level the user asked for
logger.executor.name = org.apache.spark.executor.Executor
logger.executor.level = {task_level}
logger.tasks.name = org.apache.spark.scheduler.TaskSetManager
logger.tasks.level = {task_level}
"""
# Printed on the JVM's stderr, not through log4j: the JVM's notice for Spark's
# --add-modules=jdk.incubator.vector, and Spark's shell hint (pyspark counts as a shell).
_JVM_NOTICES = (
    b"WARNING: Using incubator modules",
    b'Setting default log level to "',
    b"To adjust logging level use sc.setLogLevel(",
)

_lock = threading.Lock()
_session: SparkSession | None = None
_starting: int | None = None  # the thread creating the session, while it does


class SparkStartAbandonedError(KeyboardInterrupt):
    """The session was given up while it started (:func:`abandon_start`). A
    ``KeyboardInterrupt``, as a Ctrl-C is, so no caller takes it for a failed clean."""


def attach_manager(manager: LogManager) -> Attachment:
    """Let Spark writes to ``manager``'s data dir commit through this process.

    Use as ``with attach_manager(logs): ...`` to detach at the end of the block.
    """
    from kompakt.pipeline.commit import attach_manager as attach

    return attach(manager)


def detach_manager(manager: LogManager) -> None:
    from kompakt.pipeline.commit import detach_manager as detach

    detach(manager)


def register(spark: SparkSession) -> SparkSession:
    """Register the ``kompakt`` format on ``spark`` (idempotent); returns ``spark``."""
    from kompakt.pipeline.source import KompaktDataSource

    spark.dataSource.register(KompaktDataSource)
    return spark


def spark_conf(config: Mapping[str, str] | None = None) -> dict[str, str]:
    """The Spark settings ``session()`` applies: master, Python executable, ``spark.*``."""
    config = dict(config or {})
    conf = {
        "spark.master": config.get(MASTER_KEY, DEFAULT_MASTER),
        "spark.app.name": APP_NAME,
        # workers would start `python3` from PATH, which may lack kompakt and its deps
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.ui.enabled": "false",
        "spark.sql.session.timeZone": "UTC",
        # kompakt reports progress itself (the CLI's bar, the broker's log lines)
        "spark.ui.showConsoleProgress": "false",
        # workers fork from a daemon that has kompakt's numba kernels loaded already
        "spark.python.daemon.module": "kompakt.pipeline.worker_daemon",
    }
    conf.update({k: str(v) for k, v in config.items() if k.startswith("spark.")})
    java_opts = conf.get("spark.driver.extraJavaOptions", "")
    if "log4j2.configurationFile" not in java_opts and not _conf_dir_log4j():
        level = str(config.get(LOG_LEVEL_KEY) or DEFAULT_LOG_LEVEL).upper()
        java_opts += f" -Dlog4j2.configurationFile=file:{log4j2_file(level)}"
    if conf["spark.master"].startswith("local"):
        java_opts += "".join(f" {opt}" for opt in _local_jvm_opts(java_opts))
    if java_opts:
        conf["spark.driver.extraJavaOptions"] = java_opts.strip()
    return conf


# On a local master the driver JVM is the executor too and shares the machine's cores
# with the Python workers, which do the compaction's computing; the JVM only moves
# their bytes (the shuffle, the tasks). Its C2 compiler threads and G1's parallel GC
# threads were the JVM's largest CPU users: a 10M-record Spark clean took 7.0-9.3 s of
# JVM CPU by default, 2.6-2.7 s with C1 only and serial GC (2 cores, load ~5), the
# clean 7.5-9.5 s instead of 13.6-19.1 s; the session's start compiles less too.
LOCAL_JVM_OPTS = {
    "-XX:TieredStopAtLevel=1": "Tiered",  # unless the user's options set the JIT's tiers
    "-XX:+UseSerialGC": "GC",  # or any GC option
}


def _local_jvm_opts(java_opts: str) -> list[str]:
    """:data:`LOCAL_JVM_OPTS` the user's own driver options do not already decide."""
    return [opt for opt, user_says in LOCAL_JVM_OPTS.items() if user_says not in java_opts]


def _conf_dir_log4j() -> bool:
    """A ``log4j2.properties`` in ``$SPARK_CONF_DIR`` is the user's choice: keep it."""
    conf_dir = os.environ.get("SPARK_CONF_DIR")
    return bool(conf_dir) and os.path.isfile(os.path.join(conf_dir, "log4j2.properties"))


def log4j2_file(level: str = DEFAULT_LOG_LEVEL) -> str:
    """The path of kompakt's log4j2 configuration at ``level`` (written once, by content)."""
    task_level = "FATAL" if level == DEFAULT_LOG_LEVEL else level
    text = LOG4J2_PROPERTIES.format(level=level, task_level=task_level)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    path = os.path.join(tempfile.gettempdir(), f"kompakt-log4j2-{digest}.properties")
    if not os.path.isfile(path):
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    return path


def _launch_quiet_gateway(conf: Mapping[str, str]) -> None:
    """Start the JVM (Spark's ``launch_gateway``) with its stderr through a filter that
    drops the JVM's start-up notices and passes every other line on to our stderr."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
        return
    spark_conf_ = SparkConf(loadDefaults=False)
    for key, value in conf.items():
        spark_conf_.set(key, value)
    # a process group of its own: a terminal's Ctrl-C reaches the driver (kompakt, which
    # cancels its jobs) and not the JVM and the Python workers it forks (PySpark keeps
    # SIGINT from the JVM, but its workers set a handler again and died mid-write)
    gateway = launch_gateway(
        spark_conf_, popen_kwargs={"stderr": subprocess.PIPE, "process_group": 0}
    )
    proc = getattr(gateway, "proc", None)
    if proc is not None and proc.stderr is not None:
        threading.Thread(
            target=_forward_stderr, args=(proc.stderr,), name="kompakt-jvm-stderr", daemon=True
        ).start()
    SparkContext._ensure_initialized(gateway=gateway)


_PY4J_INTERRUPTED = ("Exception while sending command.", "KeyboardInterrupt while sending command.")


def _py4j_interrupted(record: logging.LogRecord) -> bool:
    """False for py4j's tracebacks of a call that Ctrl-C interrupted: py4j logs them on
    the root logger (``logging.exception``) while the ``KeyboardInterrupt`` goes on to
    the caller, which reports the interrupt itself."""
    return not (
        record.name == "root"
        and record.msg in _PY4J_INTERRUPTED
        and f"{os.sep}py4j{os.sep}" in record.pathname
    )


def _forward_stderr(stream) -> None:
    for line in iter(stream.readline, b""):
        if line.startswith(_JVM_NOTICES):
            continue
        try:
            os.write(sys.stderr.fileno(), line)
        except (OSError, ValueError):
            pass


def session(config: Mapping[str, str] | None = None) -> SparkSession:
    """The process's kompakt SparkSession, created lazily on the first call.

    Later calls return the same session; their ``config`` is ignored (Spark cannot
    change the master of a running context).
    """
    global _session, _starting
    with _lock:
        if _session is not None and not _session.sparkContext._jsc.sc().isStopped():
            return _session
        from pyspark.sql import SparkSession

        conf = spark_conf(config)
        os.environ.setdefault("PYSPARK_PYTHON", conf["spark.pyspark.python"])
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", conf["spark.pyspark.driver.python"])
        py4j = logging.getLogger("py4j")
        if py4j.level == logging.NOTSET:  # its INFO lines are per connection: noise
            py4j.setLevel(logging.WARNING)
        if _py4j_interrupted not in logging.getLogger().filters:
            logging.getLogger().addFilter(_py4j_interrupted)
        from kompakt.pipeline import zygote

        _starting = threading.get_ident()
        try:
            zygote.start(conf)  # the workers' daemon gets ready while the JVM starts
            _launch_quiet_gateway(conf)
            builder = SparkSession.builder
            for key, value in conf.items():
                builder = builder.config(key, value)
            spark = builder.getOrCreate()
            _warm_first_job(spark, conf)
            _session = register(spark)
        except BaseException:
            zygote.stop()
            raise
        finally:
            _starting = None
        return _session


WARM_UP_GROUP = "kompakt-warm-up"


def _nothing(item: int) -> int:
    """The warm-up job's function (by reference: the workers have this module)."""
    return item


def _warm_first_job(spark: SparkSession, conf: Mapping[str, str]) -> None:
    """On a local master, run a one-task Python job in a thread while the session's
    SQL side starts (the data source's registration took 4.8 s of a loaded 2-core
    machine's start): a context's first job paid ~1.2-1.6 s in the JVM's cold job
    path and the workers' daemon start before its task ran, the next ones ~0.5 s, so
    a first clean right after the start no longer pays that. Failures are nobody's
    business (a session stopped meanwhile): a clean's own job starts everything again."""
    if not conf.get("spark.master", "").startswith("local"):
        return
    sc = spark.sparkContext

    def run() -> None:
        try:
            sc.setJobGroup(WARM_UP_GROUP, "kompakt: start the Python workers", True)
            sc.parallelize([0], 1).map(_nothing).collect()
        except Exception as exc:  # noqa: BLE001 - a warm-up is optional
            logging.getLogger(__name__).debug("Spark warm-up job: %r", exc)

    threading.Thread(target=run, name="kompakt-spark-warm-up", daemon=True).start()


def abandon_start() -> None:
    """Give up the session the calling thread is starting, at once, by raising
    :class:`SparkStartAbandonedError` in it; nothing when it is not starting one. For a
    signal handler (it runs in the main thread, the one waiting for the JVM); the
    process is expected to exit, taking the JVM with it. From the moment PySpark puts
    in its own SIGINT handler (late in the context's start) a Ctrl-C raises there."""
    if _starting is not None and _starting == threading.get_ident():
        raise SparkStartAbandonedError("Spark's start was given up")


def stop() -> None:
    """Stop the process's session (a later ``session()`` creates a new one)."""
    global _session
    with _lock:
        if _session is not None:
            _session.stop()
            _session = None
        from kompakt.pipeline import zygote

        zygote.stop()
