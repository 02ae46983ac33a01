"""Which ``spark.*`` keys are clearly not Spark's.

Spark ignores a conf key it does not know, so ``--override spark.exectuor.memory=2g``
would run with the default memory and say nothing. Spark's full key list lives in its
JVM classes (pyspark ships none), and starting a JVM to read it would delay every
start-up; connectors add keys of their own (``spark.cassandra.*``). So the check is on
the namespace, the first word after ``spark.``, against the namespaces of Spark's
configuration reference: a namespace that is not Spark's but is a near miss of one is a
typo and refused in one line, naming the likely key; any other unknown namespace may be
a connector's and is only warned about. A typo after a correct namespace
(``spark.executor.memroy``) is not caught.
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


def check_spark_key(key: str) -> str | None:
    """Refuse a ``spark.*`` key whose namespace is a near miss of Spark's (one line,
    naming the key Spark has); a warning text for another unknown namespace; None for
    a key in one of Spark's namespaces."""
    namespace, _dot, rest = key[len("spark.") :].partition(".")
    if namespace in SPARK_NAMESPACES:
        return None
    close = difflib.get_close_matches(namespace, SPARK_NAMESPACES, n=1, cutoff=0.75)
    if close:
        meant = f"spark.{close[0]}" + (f".{rest}" if rest else "")
        raise InvalidConfigError(
            f"Unknown Spark config key: {key} (spark.{namespace}.* is not Spark's; "
            f"did you mean {meant}?)"
        )
    return (
        f"spark config {key}: spark.{namespace}.* is none of Spark's namespaces; passed "
        "to the SparkSession as given (a connector's key, or a typo Spark will ignore)"
    )
