"""Cleaner engines by name: the registry above ``cleaner`` and ``pipeline``.

Layer: above :mod:`kompakt.cleaner` (the policy and the in-process engine) and
:mod:`kompakt.pipeline` (the Spark engine), below :mod:`kompakt.broker` and
:mod:`kompakt.cli`, which choose an engine by its ``kompakt.cleaner.engine`` name. It is
the one module that knows every engine, so the cleaner never imports the pipeline
(Kafka's ``LogCleaner`` builds its ``Cleaner`` threads from ``CleanerConfig`` the same
way, one level above both). The Spark engine is imported only when asked for: PySpark
is heavy and the local engine must not need it.

``auto`` (:class:`AutoEngine`) picks one of the two per clean: on one machine the
in-process engine is 2-40x faster than Spark whenever the dirty range's keys fit its
offset map, and Spark wins only beyond it, where the in-process engine needs partial
passes that each rewrite the log again (``benchmarks/bench_spark.py --engines``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from kompakt.cleaner.cleanable import LogToClean
from kompakt.cleaner.cleaner import Cleaner, Clock
from kompakt.cleaner.config import ENGINE_DEFAULT, ENGINE_KEY, dedupe_buffer_size, load_factor
from kompakt.cleaner.engine import CleanJob, Engine, EngineRun
from kompakt.cleaner.local_engine import LocalEngine
from kompakt.cleaner.segment_io import CleanFaults
from kompakt.errors import InvalidConfigError

log = logging.getLogger(__name__)


def _local(settings: Mapping[str, str]) -> LocalEngine:
    return LocalEngine(dedupe_buffer_size(settings), load_factor(settings), CleanFaults.from_env())


def _spark(settings: Mapping[str, str]) -> Engine:
    from kompakt.pipeline.engine import SparkEngine

    return SparkEngine(settings, CleanFaults.from_env())


class AutoEngine:
    """``kompakt.cleaner.engine=auto``: the in-process engine for a clean whose dirty
    range cannot fill its offset map, Spark for one that may.

    The range's offset span bounds its records and so its distinct keys, before
    anything is read: when it is at most the map's ``max_entries``
    (``log.cleaner.dedupe.buffer.size`` / 24 x ``io.buffer.load.factor``) the local
    engine cleans it in one pass; beyond, the local engine might need partial passes,
    each rewriting the log from its start, and one Spark pass is faster the more passes
    it spares (2 cores: 2 GB of 16M distinct keys, Spark 34 s, local 54 s in 4 passes;
    1 GB of 8M keys in 2 passes is a toss-up on a loaded machine). A range of many
    updates to few keys beyond that bound goes to Spark too (it cannot be told apart
    without reading it). No byte threshold: up to 1 GB with keys that fit, the local
    engine was 1.8-43x faster warm, with no crossover. The :class:`Cleaner` asks
    :meth:`choose` before each clean, so its log line, its stats and the console name
    the engine that ran; Spark starts only for the first clean that needs it.
    """

    name = "auto"

    def __init__(self, settings: Mapping[str, str]):
        self.settings = dict(settings)
        self.local = _local(self.settings)
        self._spark: Engine | None = None

    @property
    def spark(self) -> Engine:
        if self._spark is None:
            self._spark = _spark(self.settings)
        return self._spark

    def choose(self, ltc: LogToClean) -> Engine:
        """The engine for this clean (logged with the reason)."""
        bound = max(0, ltc.first_uncleanable_offset - ltc.first_dirty_offset)
        room = self.local.map.max_entries
        if bound <= room:
            engine: Engine = self.local
            why = f"at most {bound:,} keys, the offset map holds {room:,}"
        else:
            engine = self.spark
            why = f"up to {bound:,} keys, more than the offset map's {room:,}"
        log.info("engine auto chose %s for %s: %s", engine.name, ltc.log.name, why)
        return engine

    def clean(self, job: CleanJob) -> EngineRun:
        return self.choose(job.ltc).clean(job)


ENGINES: dict[str, Callable[[Mapping[str, str]], Engine]] = {
    "spark": _spark,
    "local": _local,
    "auto": AutoEngine,
}


def check_engine(name: str) -> str:
    """``name`` if it is an engine kompakt has; else the one-line error users see."""
    if name not in ENGINES:
        raise InvalidConfigError(f"unknown engine {name!r}: expected one of {', '.join(ENGINES)}")
    return name


def build_engine(name: str, settings: Mapping[str, str] | None = None) -> Engine:
    """An engine by name, configured from broker-style settings."""
    return ENGINES[check_engine(name)](dict(settings or {}))


def build_cleaner(
    logs: Any,
    settings: Mapping[str, str] | None = None,
    clock: Clock | None = None,
    engine: str | None = None,
) -> Cleaner:
    """The cleaner a broker (or ``kompakt compact`` offline) runs: engine ``engine``,
    else ``kompakt.cleaner.engine`` (spark|local|auto); other engines by name on demand."""
    config = dict(settings or {})
    name = engine or config.get(ENGINE_KEY, ENGINE_DEFAULT)
    return Cleaner(
        logs,
        engine=build_engine(name, config),
        clock=clock,
        config=config,
        engine_factory=lambda other: build_engine(other, config),
    )


def remote_clean_engine(config: Any, segments: Any, settings: Any) -> Any:
    """The engine that cleans tiered partitions' remote ranges on a broker whose
    ``kompakt.cleaner.engine`` is ``spark``: executors read and write the bucket
    (:class:`kompakt.pipeline.remote_engine.SparkRemoteEngine`); None otherwise (the
    remote cleaner's in-process engine). ``config`` is the broker's config (its
    ``get`` and ``spark`` keys), ``segments`` the tier's
    :class:`~kompakt.remote.storage.RemoteStorageManager`, ``settings`` its
    :class:`~kompakt.remote.config.RemoteSettings`."""
    if str(config.get(ENGINE_KEY)) != "spark":
        return None
    from kompakt.pipeline.remote_engine import SparkRemoteEngine
    from kompakt.pipeline.remote_tasks import StoreAddress

    spark = {
        key: str(config.get(key))
        for key in (ENGINE_KEY, "kompakt.spark.master", "kompakt.spark.log.level")
    }
    address = StoreAddress.here(settings.storage_url, settings.s3_endpoint_url)
    return SparkRemoteEngine(segments, address, {**spark, **config.spark})


def warm_up_spark(
    settings: Mapping[str, str] | None = None, busy: Callable[[], bool] = lambda: False
) -> tuple[float, float]:
    """Start the Spark engine ahead of its first clean (``kompakt.spark.start=eager``):
    :func:`kompakt.pipeline.engine.warm_up`, reached through the registry so the broker
    never imports the pipeline. Returns (session seconds, warm-up clean seconds). The
    warm-up's throwaway topic is no news to the broker's log: this thread's lines below
    WARNING are kept out of it meanwhile (a failing warm-up still says so)."""
    from kompakt.pipeline.engine import warm_up

    with _quiet_thread(logging.WARNING):
        return warm_up(settings, busy)


@contextlib.contextmanager
def _quiet_thread(below: int) -> Iterator[None]:
    """Drop the calling thread's log records under level ``below`` at every handler
    (levels are process-wide: raising one would silence the broker's other threads)."""
    me = threading.get_ident()

    def keep(record: logging.LogRecord) -> bool:
        return record.thread != me or record.levelno >= below

    loggers = [logging.getLogger()] + [
        lg for lg in logging.Logger.manager.loggerDict.values() if isinstance(lg, logging.Logger)
    ]
    handlers = {h for lg in loggers for h in lg.handlers}
    for h in handlers:
        h.addFilter(keep)
    try:
        yield
    finally:
        for h in handlers:
            h.removeFilter(keep)
