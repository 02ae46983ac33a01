"""BrokerConfig: Kafka names and defaults, overrides, one-line errors."""

import pytest

from kompakt.broker.config import BrokerConfig
from kompakt.errors import InvalidConfigError


def test_defaults():
    c = BrokerConfig.load()
    assert str(c.listener) == "PLAINTEXT://127.0.0.1:9092"
    assert str(c.data_dir) == "kompakt-data"
    assert c.node_id == 1
    assert c.get("num.partitions") == 1
    assert c.get("auto.create.topics.enable") is True
    assert c.get("socket.request.max.bytes") == 104857600
    assert c.get("log.cleaner.backoff.ms") == 15000
    assert c.get("offsets.topic.num.partitions") == 50
    assert c.get("kompakt.cleaner.engine") == "spark"
    assert c.get("kompakt.spark.master") == "local[*]"
    assert c.admin_listener == "http://127.0.0.1:9644"


def test_file_and_overrides(tmp_path):
    f = tmp_path / "server.properties"
    f.write_text(
        "# a Kafka-style file\nprocess.roles=broker,controller\nlog.dirs=/data/k\n"
        "log.segment.bytes=1024\nlog.cleanup.policy=compact\nspark.executor.memory=2g\n"
        "num.partitions=3\n"
    )
    c = BrokerConfig.load(f, ["num.partitions=6", "kompakt.cleaner.engine=local"])
    assert c.get("num.partitions") == 6
    assert c.log_config == {"log.segment.bytes": "1024", "log.cleanup.policy": "compact"}
    assert c.spark == {"spark.executor.memory": "2g"}
    assert str(c.data_dir) == "/data/k"
    assert c.get("kompakt.cleaner.engine") == "local"


@pytest.mark.parametrize(
    "override, key",
    [
        ("no.such.key=1", "no.such.key"),
        ("log.segment.bytes=3", "log.segment.bytes"),
        ("num.partitions=abc", "num.partitions"),
        ("num.partitions=0", "num.partitions"),
        ("auto.create.topics.enable=maybe", "auto.create.topics.enable"),
        ("kompakt.cleaner.engine=flink", "kompakt.cleaner.engine"),
        ("listeners=localhost", "listeners"),
        ("kompakt.admin.listener=ftp://x", "kompakt.admin.listener"),
        ("log.cleanup.policy=bogus", "log.cleanup.policy"),
    ],
)
def test_bad_values_name_the_key(override, key):
    with pytest.raises(InvalidConfigError) as ei:
        BrokerConfig.load(None, [override])
    msg = str(ei.value)
    assert key in msg and "\n" not in msg


def test_cleaner_io_limit_default_is_kompakts_measured_one_and_kafkas_unlimited_parses():
    """Kafka: log.cleaner.io.max.bytes.per.second is a DOUBLE, Double.MaxValue by
    default; kompakt's default is the measured 32 MiB/s (README)."""
    assert BrokerConfig.load().get("log.cleaner.io.max.bytes.per.second") == 32 << 20
    c = BrokerConfig.load(None, ["log.cleaner.io.max.bytes.per.second=1.7976931348623157E308"])
    assert c.get("log.cleaner.io.max.bytes.per.second") == 1.7976931348623157e308
    assert BrokerConfig.load().get("kompakt.log.cleaner.backlog.setpoint.bytes") == 256 << 20
    # LogCleaner's Throttler period: 300 ms in Kafka, a kompakt key here
    assert BrokerConfig.load().get("kompakt.log.cleaner.io.check.interval.ms") == 300


@pytest.mark.parametrize(
    "override, message",
    [
        (
            "log.cleaner.io.max.bytes.per.second=0",
            "Invalid value 0.0 for configuration log.cleaner.io.max.bytes.per.second: "
            "Value must be at least 1.0",
        ),
        (
            "log.cleaner.io.max.bytes.per.second=-5",
            "Invalid value -5.0 for configuration log.cleaner.io.max.bytes.per.second: "
            "Value must be at least 1.0",
        ),
        (
            "log.cleaner.io.max.bytes.per.second=fast",
            "Invalid value fast for configuration log.cleaner.io.max.bytes.per.second: "
            "Not a number of type DOUBLE",
        ),
        (
            "kompakt.log.cleaner.backlog.p.coeff=-1",
            "Invalid value -1.0 for configuration kompakt.log.cleaner.backlog.p.coeff: "
            "Value must be at least 0.0",
        ),
        (
            "kompakt.log.cleaner.backlog.setpoint.bytes=0",
            "Invalid value 0 for configuration kompakt.log.cleaner.backlog.setpoint.bytes: "
            "Value must be at least 1",
        ),
    ],
)
def test_cleaner_throttle_keys_refuse_bad_values_in_kafkas_words(override, message):
    with pytest.raises(InvalidConfigError) as ei:
        BrokerConfig.load(None, [override])
    assert str(ei.value) == message


@pytest.mark.parametrize(
    "key, meant",
    [
        ("spark.exectuor.memory", "spark.executor.memory"),
        ("spark.sq.shuffle.partitions", "spark.sql.shuffle.partitions"),
        ("spark.drivr.extraJavaOptions", "spark.driver.extraJavaOptions"),
    ],
)
def test_spark_key_in_a_near_miss_of_a_spark_namespace_is_refused(key, meant):
    """Spark ignores a conf key it does not know, so a typo ran with Spark's default: a
    namespace that is a near miss of Spark's is refused in one line naming the key meant."""
    with pytest.raises(InvalidConfigError) as err:
        BrokerConfig.load(None, [f"{key}=2g"])
    assert str(err.value).splitlines() == [str(err.value)]
    assert key in str(err.value) and f"did you mean {meant}?" in str(err.value)


@pytest.mark.parametrize(
    "key, meant",
    [
        ("spark.executor.memroy", "spark.executor.memory"),
        ("spark.sql.shuffle.partiton", "spark.sql.shuffle.partitions"),
        ("spark.dynamicAllocation.maxExecutor", "spark.dynamicAllocation.maxExecutors"),
        ("spark.jar", "spark.jars"),
    ],
)
def test_spark_key_a_typo_away_from_a_well_known_key_is_refused(key, meant):
    """A typo after a correct namespace passed silently and Spark ran on its default:
    a key a typo away from one of Spark's most used keys is refused in one line."""
    with pytest.raises(InvalidConfigError) as err:
        BrokerConfig.load(None, [f"{key}=4"])
    assert str(err.value) == f"Unknown Spark config key: {key} (did you mean {meant}?)"


def test_spark_keys_close_to_a_well_known_key_but_real_pass_silently(caplog):
    """Spark has keys similar to the well-known ones (difflib's ratio 0.9 to 0.96): they
    are Spark's and pass without a word, as do the well-known keys themselves."""
    keys = [
        "spark.shuffle.service.db.enabled",
        "spark.executor.memoryOverheadFactor",
        "spark.executor.minMemoryOverhead",
        "spark.sql.execution.arrow.sparkr.enabled",
        "spark.kryoserializer.buffer.mb",
        "spark.dynamicAllocation.minExecutors",
        "spark.sql.shuffle.partitions",
    ]
    c = BrokerConfig.load(None, [f"{k}=1" for k in keys])
    assert sorted(c.spark) == sorted(keys)
    assert [r for r in caplog.records if r.levelname == "WARNING"] == []


def test_spark_key_of_another_namespace_passes_with_a_warning(caplog):
    """A namespace far from Spark's may be a connector's (spark.cassandra.*): passed on,
    with a warning line naming it; Spark's own keys pass silently."""
    c = BrokerConfig.load(
        None, ["spark.cassandra.connection.host=h", "spark.executor.memory=2g", "spark.ui.port=0"]
    )
    assert c.spark["spark.cassandra.connection.host"] == "h"
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 1 and "spark.cassandra.connection.host" in warned[0]


def test_serve_refuses_a_spark_key_typo_in_one_line_and_writes_nothing(tmp_path):
    import subprocess
    import sys

    data = tmp_path / "data"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "kompakt.cli.main",
            "serve",
            "--override",
            "spark.exectuor.memory=2g",
        ]
        + ["--override", f"log.dirs={data}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode != 0
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "spark.exectuor.memory" in lines[0]
    assert not data.exists()
