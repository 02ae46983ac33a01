"""The Spark side of kompakt: data source, compaction engine, exports.

``session()`` is the one SparkSession kompakt uses in a process, created on first use
from broker-style config (``kompakt.spark.master``, ``spark.*`` pass-through) with the
``kompakt`` source registered. ``register(spark)`` registers the source on a session
the caller built. PySpark is imported lazily so importing kompakt stays cheap.
"""

from __future__ import annotations

import os
import sys
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

_lock = threading.Lock()
_session: SparkSession | None = None


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
    }
    conf.update({k: str(v) for k, v in config.items() if k.startswith("spark.")})
    return conf


def session(config: Mapping[str, str] | None = None) -> SparkSession:
    """The process's kompakt SparkSession, created lazily on the first call.

    Later calls return the same session; their ``config`` is ignored (Spark cannot
    change the master of a running context).
    """
    global _session
    with _lock:
        if _session is not None and not _session.sparkContext._jsc.sc().isStopped():
            return _session
        from pyspark.sql import SparkSession

        conf = spark_conf(config)
        os.environ.setdefault("PYSPARK_PYTHON", conf["spark.pyspark.python"])
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", conf["spark.pyspark.driver.python"])
        builder = SparkSession.builder
        for key, value in conf.items():
            builder = builder.config(key, value)
        _session = register(builder.getOrCreate())
        return _session


def stop() -> None:
    """Stop the process's session (a later ``session()`` creates a new one)."""
    global _session
    with _lock:
        if _session is not None:
            _session.stop()
            _session = None
