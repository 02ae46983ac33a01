"""Which ``spark.*`` keys are clearly not Spark's.

Spark ignores a conf key it does not know, so ``--override spark.exectuor.memory=2g``
would run with the default memory and say nothing. Spark's full key list lives in its
JVM classes (pyspark ships none), and starting a JVM to read it would delay every
start-up; connectors add keys of their own (``spark.cassandra.*``). So two checks, each
refusing only what is surely a typo:

- the whole key against :data:`WELL_KNOWN_KEYS`, about 70 of the most used keys of
  Spark's configuration reference: a key that is not one of them but is one typo away
  (a letter added, dropped or changed, or two adjacent letters swapped:
  ``spark.executor.memroy``), or two from a key of 20 characters or more
  (``spark.sql.shuffle.partiton``), is refused in one line naming the key meant.
  Counted in typos, not by similarity: Spark has real keys similar to the listed ones
  (``spark.shuffle.service.db.enabled`` to ``spark.shuffle.service.enabled`` is 0.95 by
  difflib's ratio; 17 of Spark 4.3's keys are at 0.9 or more), none within those typos;
- the namespace, the first word after ``spark.``, against the namespaces of Spark's
  configuration reference: a namespace that is not Spark's but is a near miss of one is
  a typo and refused in one line, naming the likely key; any other unknown namespace
  may be a connector's and is only warned about.

Another key in one of Spark's namespaces passes as given: a typo of a key that is not
in the list, or a bigger typo, is not caught.
"""

from __future__ import annotations

import difflib

from kompakt.errors import InvalidConfigError

# the first word after "spark." of the keys in Spark's configuration reference (3.x,
# 4.x: core, SQL, streaming, deploy modes, history server, plugins)
SPARK_NAMESPACES: frozenset[str] = frozenset(
    """
    acls admin api app archives authenticate barrier blacklist blockManager broadcast
    buffer checkpoint cleaner connect cores databricks decommission default delta deploy
    driver dynamicAllocation eventLog excludeOnFailure executor executorEnv
    extraListeners files graphx hadoop hadoopRDD history io jars job jobGroup kryo
    kryoserializer kubernetes local locality log logConf master memory mesos metrics ml
    modify network plugins port pyspark python r rdd reducer redaction repl resources
    rpc scheduler security serializer shuffle sql speculation ssl stage standalone
    storage streaming submit task test ui user worker yarn
    """.split()
)

# The most used keys of Spark's configuration reference (each one a key of Spark 4.3's
# classes or of pyspark), for the typo check: no other key of Spark 4.3 (its jars'
# classes, pyspark) is a typo of one of them by :func:`_typo_of`'s rule.
LONG_KEY = 20  # from this length a well-known key's typos may be two
WELL_KNOWN_KEYS: frozenset[str] = frozenset(
    """
    spark.master spark.app.name spark.submit.deployMode
    spark.driver.memory spark.driver.cores spark.driver.maxResultSize
    spark.driver.memoryOverhead spark.driver.extraJavaOptions spark.driver.extraClassPath
    spark.driver.extraLibraryPath spark.driver.host spark.driver.port
    spark.driver.bindAddress
    spark.executor.memory spark.executor.cores spark.executor.instances
    spark.executor.memoryOverhead spark.executor.extraJavaOptions
    spark.executor.extraClassPath spark.executor.extraLibraryPath
    spark.executor.heartbeatInterval
    spark.default.parallelism spark.local.dir spark.serializer
    spark.kryo.registrationRequired
    spark.memory.fraction spark.memory.storageFraction spark.memory.offHeap.enabled
    spark.memory.offHeap.size spark.network.timeout spark.rpc.message.maxSize
    spark.ui.enabled spark.ui.port spark.ui.showConsoleProgress
    spark.eventLog.enabled spark.eventLog.dir spark.eventLog.compress
    spark.dynamicAllocation.enabled spark.dynamicAllocation.minExecutors
    spark.dynamicAllocation.maxExecutors spark.dynamicAllocation.initialExecutors
    spark.dynamicAllocation.executorIdleTimeout
    spark.shuffle.service.enabled spark.shuffle.compress spark.shuffle.spill.compress
    spark.io.compression.codec spark.broadcast.compress spark.rdd.compress
    spark.speculation spark.task.maxFailures spark.locality.wait spark.scheduler.mode
    spark.jars spark.jars.packages spark.files
    spark.pyspark.python spark.pyspark.driver.python
    spark.python.worker.memory spark.python.worker.reuse
    spark.sql.shuffle.partitions spark.sql.adaptive.enabled
    spark.sql.adaptive.coalescePartitions.enabled spark.sql.autoBroadcastJoinThreshold
    spark.sql.files.maxPartitionBytes spark.sql.execution.arrow.pyspark.enabled
    spark.sql.execution.arrow.pyspark.fallback.enabled
    spark.sql.execution.arrow.maxRecordsPerBatch spark.sql.session.timeZone
    spark.sql.warehouse.dir spark.sql.parquet.compression.codec
    spark.sql.sources.partitionOverwriteMode
    """.split()
)


def typos_between(a: str, b: str) -> int:
    """How many typos turn ``a`` into ``b``: characters inserted, deleted or changed,
    and adjacent pairs swapped (the optimal string alignment distance)."""
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        row = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            row[j] = min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                row[j] = min(row[j], prev2[j - 2] + 1)
        prev2, prev = prev, row
    return prev[-1]


def _typo_of(key: str) -> str | None:
    """The well-known key ``key`` is a typo of: one typo away, or two for a known key
    of 20 characters or more; the closest, the first by name on a tie. None for a
    well-known key itself (``minExecutors`` is two typos from ``maxExecutors``)."""
    if key in WELL_KNOWN_KEYS:
        return None
    found = []
    for known in WELL_KNOWN_KEYS:
        allowed = 2 if len(known) >= LONG_KEY else 1
        if abs(len(known) - len(key)) <= allowed:
            n = typos_between(key, known)
            if 0 < n <= allowed:
                found.append((n, known))
    return min(found)[1] if found else None


def check_spark_key(key: str) -> str | None:
    """Refuse a ``spark.*`` key one typo from a well-known Spark key, or whose namespace
    is a near miss of Spark's (one line, naming the key Spark has); a warning text for
    another unknown namespace; None for any other key in one of Spark's namespaces."""
    meant = _typo_of(key)
    if meant is not None:
        raise InvalidConfigError(f"Unknown Spark config key: {key} (did you mean {meant}?)")
    namespace, _dot, rest = key[len("spark.") :].partition(".")
    if namespace in SPARK_NAMESPACES:
        return None
    close = difflib.get_close_matches(namespace, SPARK_NAMESPACES, n=1, cutoff=0.75)
    if close:
        meant_key = f"spark.{close[0]}" + (f".{rest}" if rest else "")
        raise InvalidConfigError(
            f"Unknown Spark config key: {key} (spark.{namespace}.* is not Spark's; "
            f"did you mean {meant_key}?)"
        )
    return (
        f"spark config {key}: spark.{namespace}.* is none of Spark's namespaces; passed "
        "to the SparkSession as given (a connector's key, or a typo Spark will ignore)"
    )
