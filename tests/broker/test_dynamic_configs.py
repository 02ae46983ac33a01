"""Dynamic broker configs, as Kafka's ``DynamicBrokerConfig`` / ``ConfigAdminManager``.

IncrementalAlterConfigs and AlterConfigs on the BROKER resource change the keys Kafka
marks dynamic (the ``log.*`` topic defaults, ``log.cleaner.*``) at run time: for the
cluster default ("") or this broker ("<node.id>"), persisted in the data dir, with
precedence per-broker > cluster default > server.properties > Kafka's default. Topics
without their own value follow at once. Everything is driven with confluent-kafka's
AdminClient against a real broker.
"""

from __future__ import annotations

import json
import time
from typing import NamedTuple

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)
from raw_kafka import call

from kompakt.broker.app import start_test_broker
from kompakt.broker.config import DYNAMIC_CONFIGS_FILE

TIMEOUT = 20
INVALID_REQUEST = 42
BROKER = ConfigResource.Type.BROKER
TOPIC = ConfigResource.Type.TOPIC


@pytest.fixture
def data_dir(tmp_path):
    return tmp_path / "data"


@pytest.fixture
def broker(data_dir):
    """A broker of its own per test: dynamic configs are broker-wide state."""
    b = start_test_broker(data_dir, log_retention_hours="100")
    yield b
    b.stop()


def admin(b) -> AdminClient:
    return AdminClient({"bootstrap.servers": b.bootstrap})


def incremental(b, name: str, *ops: tuple[str, str | None, AlterConfigOpType]) -> None:
    """IncrementalAlterConfigs on BROKER ``name``: confluent-kafka for this broker's id;
    raw for the cluster default "" (librdkafka refuses to send it) and for names that are
    not a live broker (librdkafka would wait for that broker). Errors raise
    KafkaException either way."""
    if name != "1":
        body = {
            "resources": [
                {
                    "resource_type": 4,
                    "resource_name": name,
                    "configs": [
                        {"name": k, "config_operation": int(op.value), "value": v}
                        for k, v, op in ops
                    ],
                }
            ],
            "validate_only": False,
        }
        r = call(b.port, 44, 1, body).responses[0]
        if r.error_code:
            raise KafkaException(KafkaError(int(r.error_code), r.error_message))
        return
    res = ConfigResource(
        BROKER,
        name,
        incremental_configs=[ConfigEntry(k, v, incremental_operation=op) for k, v, op in ops],
    )
    a = admin(b)
    a.incremental_alter_configs([res])[res].result(TIMEOUT)


class Described(NamedTuple):
    value: str | None
    source: int
    is_read_only: bool
    synonyms: list


def describe(b, rtype, name: str, raw: bool = False) -> dict:
    """DescribeConfigs; raw for the cluster default "" (librdkafka will not send it) or
    to see every synonym (the client keys them by name, so two sources of one key fold)."""
    if raw or (name == "" and rtype == BROKER):
        body = {
            "resources": [{"resource_type": 4, "resource_name": name, "configuration_keys": None}],
            "include_synonyms": True,
            "include_documentation": False,
        }
        r = call(b.port, 32, 4, body).results[0]
        assert r.error_code == 0, r.error_message
        return {
            c.name: Described(
                c.value,
                int(c.config_source),
                c.read_only,
                [(s.name, s.value, int(s.source)) for s in c.synonyms],
            )
            for c in r.configs
        }
    res = ConfigResource(rtype, name)
    a = admin(b)
    return a.describe_configs([res])[res].result(TIMEOUT)


def create_topic(b, name: str, **configs: str) -> None:
    a = admin(b)
    cfg = {k.replace("_", "."): v for k, v in configs.items()}
    a.create_topics([NewTopic(name, 1, 1, config=cfg)])[name].result(TIMEOUT)


SET, DELETE, APPEND = AlterConfigOpType.SET, AlterConfigOpType.DELETE, AlterConfigOpType.APPEND


def test_per_broker_value_is_described_applied_to_topics_and_kept_across_restart(data_dir, broker):
    """DynamicBrokerConfig: a per-broker log.retention.ms beats the static
    log.retention.hours; a topic without an override follows at once (DynamicLogConfig
    .updateLogsConfig), one with an override keeps it; a restart keeps the value."""
    create_topic(broker, "plain")
    create_topic(broker, "own", retention_ms="5000")
    assert broker.logs.get_log("plain", 0).config.retention_ms == 100 * 3_600_000
    incremental(broker, "1", ("log.retention.ms", "1234", SET))

    d = describe(broker, BROKER, "1")["log.retention.ms"]
    assert d.value == "1234" and d.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    assert not d.is_read_only
    assert [(s.name, s.value, s.source) for s in d.synonyms.values()][0] == (
        "log.retention.ms",
        "1234",
        ConfigSource.DYNAMIC_BROKER_CONFIG.value,
    )
    assert broker.logs.get_log("plain", 0).config.retention_ms == 1234
    assert broker.logs.get_log("own", 0).config.retention_ms == 5000
    t = describe(broker, TOPIC, "plain")["retention.ms"]
    assert t.value == "1234" and t.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    syn = [(s.name, s.source) for s in t.synonyms.values()]
    assert syn[0] == ("log.retention.ms", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    assert "log.retention.hours" in dict(syn)  # the client keys synonyms by name
    stored = json.loads((data_dir / DYNAMIC_CONFIGS_FILE).read_text())
    assert stored["brokers"]["1"] == {"log.retention.ms": "1234"}

    broker.stop()
    again = start_test_broker(data_dir, log_retention_hours="100")
    try:
        assert again.logs.get_log("plain", 0).config.retention_ms == 1234
        d = describe(again, BROKER, "1")["log.retention.ms"]
        assert d.value == "1234" and d.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    finally:
        again.stop()


def test_cluster_default_resource_and_precedence(broker):
    """Resource "" is the cluster-wide default (DYNAMIC_DEFAULT_BROKER_CONFIG); describing
    it lists only the dynamic defaults; a per-broker value wins over it, and deleting the
    per-broker value falls back to it (ConfigHelper.createBrokerConfigEntry)."""
    create_topic(broker, "t")
    incremental(broker, "", ("log.segment.bytes", "4096", SET))
    assert broker.logs.get_log("t", 0).config.segment_bytes == 4096
    default_view = describe(broker, BROKER, "")
    assert list(default_view) == ["log.segment.bytes"]
    assert default_view["log.segment.bytes"].source == (
        ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
    )
    d = describe(broker, BROKER, "1")["log.segment.bytes"]
    assert (d.value, d.source) == ("4096", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)

    incremental(broker, "1", ("log.segment.bytes", "8192", SET))
    assert broker.logs.get_log("t", 0).config.segment_bytes == 8192
    d = describe(broker, BROKER, "1", raw=True)["log.segment.bytes"]
    assert d.value == "8192"
    assert d.synonyms == [
        ("log.segment.bytes", "8192", 2),  # DYNAMIC_BROKER_CONFIG
        ("log.segment.bytes", "4096", 3),  # DYNAMIC_DEFAULT_BROKER_CONFIG
        ("log.segment.bytes", "1073741824", 5),  # DEFAULT_CONFIG
    ]

    incremental(broker, "1", ("log.segment.bytes", None, DELETE))
    assert broker.logs.get_log("t", 0).config.segment_bytes == 4096
    incremental(broker, "", ("log.segment.bytes", None, DELETE))
    assert broker.logs.get_log("t", 0).config.segment_bytes == 1024 * 1024 * 1024
    assert describe(broker, BROKER, "1")["log.segment.bytes"].source == (
        ConfigSource.DEFAULT_CONFIG.value
    )


def test_cleaner_settings_are_dynamic(broker):
    """LogCleaner.ReconfigurableConfigs: log.cleaner.backoff.ms and friends change at run
    time; the cleaner thread sleeps the new backoff."""
    incremental(
        broker,
        "1",
        ("log.cleaner.backoff.ms", "250", SET),
        ("log.cleaner.dedupe.buffer.size", "1048576", SET),
        ("log.cleaner.io.max.bytes.per.second", "1000000.0", SET),
    )
    d = describe(broker, BROKER, "1")
    assert d["log.cleaner.backoff.ms"].value == "250"
    assert d["log.cleaner.dedupe.buffer.size"].value == "1048576"
    assert broker.broker.config.get("log.cleaner.backoff.ms") == 250
    thread = broker.broker.background.cleaner_thread
    assert thread is not None and thread.interval_ms == 250


@pytest.mark.parametrize(
    "key, value",
    [
        ("log.dirs", "/elsewhere"),
        ("log.retention.hours", "1"),  # only log.retention.ms is dynamic in Kafka
        ("log.cleaner.enable", "false"),
        ("num.partitions", "3"),
    ],
)
def test_read_only_key_is_refused_and_nothing_changes(broker, key, value):
    """DynamicBrokerConfig.validateConfigs: "Cannot update these configs dynamically",
    INVALID_REQUEST; the valid key beside it in the same request is not applied either."""
    with pytest.raises(KafkaException) as err:
        incremental(broker, "1", ("log.retention.ms", "1000", SET), (key, value, SET))
    assert err.value.args[0].code() == INVALID_REQUEST
    assert "Cannot update these configs dynamically" in err.value.args[0].str()
    assert key in err.value.args[0].str()
    d = describe(broker, BROKER, "1")
    assert d["log.retention.ms"].source != ConfigSource.DYNAMIC_BROKER_CONFIG.value
    assert broker.broker.config.dynamic_broker == {}


@pytest.mark.parametrize(
    "key, value",
    [
        ("log.retention.ms", "soon"),
        ("log.segment.bytes", "3"),
        ("log.cleanup.policy", "shred"),
        ("log.cleaner.backoff.ms", "-5"),
        ("log.message.timestamp.type", "WallClock"),
    ],
)
def test_bad_value_is_refused_and_nothing_changes(data_dir, broker, key, value):
    """Values are validated with the static rules (ConfigAdminManager answers
    INVALID_REQUEST); nothing is stored or applied."""
    create_topic(broker, "t")
    before = broker.logs.get_log("t", 0).config
    with pytest.raises(KafkaException) as err:
        incremental(broker, "", ("log.roll.ms", "60000", SET), (key, value, SET))
    assert err.value.args[0].code() == INVALID_REQUEST
    assert key in err.value.args[0].str()
    assert broker.logs.get_log("t", 0).config == before
    assert not (data_dir / DYNAMIC_CONFIGS_FILE).exists()


def test_default_that_breaks_an_existing_topic_is_refused(broker):
    """A default that would make a topic's own config invalid (min.compaction.lag.ms above
    max.compaction.lag.ms, LogConfig.validateValues) is refused as a whole."""
    create_topic(broker, "t", min_compaction_lag_ms="60000")
    with pytest.raises(KafkaException) as err:
        incremental(broker, "", ("log.cleaner.max.compaction.lag.ms", "1000", SET))
    assert err.value.args[0].code() == INVALID_REQUEST
    assert broker.logs.get_log("t", 0).config.max_compaction_lag_ms == 2**63 - 1


def test_other_broker_id_and_non_numeric_name_are_invalid_requests(broker):
    """ConfigAdminManager.validateResourceNameIsCurrentNodeId."""
    for name in ("7", "one"):
        with pytest.raises(KafkaException) as err:
            incremental(broker, name, ("log.retention.ms", "1000", SET))
        assert err.value.args[0].code() == INVALID_REQUEST


def test_append_to_log_cleanup_policy_default(broker):
    """APPEND on a list key starts from the layer's value, else the key's default."""
    create_topic(broker, "t")
    incremental(broker, "", ("log.cleanup.policy", "compact", APPEND))
    assert broker.logs.get_log("t", 0).config.cleanup_policy == ("delete", "compact")


def test_legacy_alter_configs_replaces_the_broker_layer(broker):
    """Legacy AlterConfigs: the request's configs are the resource's whole dynamic set."""
    incremental(broker, "1", ("log.retention.ms", "1000", SET))
    res = ConfigResource(BROKER, "1", set_config={"log.segment.bytes": "2048"})
    a = admin(broker)
    a.alter_configs([res])[res].result(TIMEOUT)
    assert broker.broker.config.dynamic_broker == {"log.segment.bytes": "2048"}


def test_dynamic_timestamp_bound_applies_to_produce_at_once(broker):
    """log.message.timestamp.after.max.ms as a dynamic default reaches the produce path
    (KIP-937 bounds read from the topic's current config)."""
    create_topic(broker, "t")
    incremental(broker, "", ("log.message.timestamp.after.max.ms", "0", SET))
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    errors = []
    p.produce(
        "t",
        b"v",
        b"k",
        timestamp=int(time.time() * 1000) + 60_000,
        on_delivery=lambda e, _m: errors.append(e),
    )
    p.flush(TIMEOUT)
    assert [e.code() for e in errors if e is not None] == [32]
    assert broker.logs.get_log("t", 0).log_end_offset == 0


def test_validate_only_changes_nothing(broker, data_dir):
    res = ConfigResource(
        BROKER,
        "1",
        incremental_configs=[ConfigEntry("log.retention.ms", "1000", incremental_operation=SET)],
    )
    a = admin(broker)
    a.incremental_alter_configs([res], validate_only=True)[res].result(TIMEOUT)
    assert broker.broker.config.dynamic_broker == {}
    assert not (data_dir / DYNAMIC_CONFIGS_FILE).exists()


def test_a_hand_broken_stored_config_stops_the_start_with_a_clear_error(data_dir):
    """Beyond Kafka (which logs and skips): falling back to a static retention could delete
    data the stored dynamic value kept, so the broker refuses to start, naming the key."""
    b = start_test_broker(data_dir)
    b.stop()
    (data_dir / DYNAMIC_CONFIGS_FILE).write_text(
        json.dumps({"cluster_default": {"log.retention.ms": "never"}, "brokers": {}})
    )
    with pytest.raises(Exception, match="log.retention.ms"):
        start_test_broker(data_dir)


def test_kafka_python_admin_sees_dynamic_keys_and_alters_them(broker):
    """kafka-python's alter_configs first describes the broker's dynamic (not read-only)
    keys and refuses others client-side; ours must name log.retention.ms dynamic and
    log.dirs read-only, and the change must read back as DYNAMIC_BROKER_CONFIG."""
    from kafka.admin import ConfigResource as KResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    ka = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        res = KResource(ConfigResourceType.BROKER, "1", {"log.retention.ms": "4321"})
        ka.alter_configs([res])
        with pytest.raises(ValueError, match="log.dirs"):
            ka.alter_configs([KResource(ConfigResourceType.BROKER, "1", {"log.dirs": "/x"})])
    finally:
        ka.close()
    d = describe(broker, BROKER, "1")["log.retention.ms"]
    assert (d.value, d.source) == ("4321", ConfigSource.DYNAMIC_BROKER_CONFIG.value)


def test_describe_configs_documentation_says_which_keys_kompakt_ignores(broker):
    """DescribeConfigs v3+ ``documentation``: a key kompakt accepts for compatibility but
    does not act on says so (issue 13 point 8); honoured keys do not."""
    create_topic(broker, "documented")
    body = {
        "resources": [
            {
                "resource_type": 2,
                "resource_name": "documented",
                "configuration_keys": ["preallocate", "flush.ms"],
            },
            {
                "resource_type": 4,
                "resource_name": "1",
                "configuration_keys": ["log.cleaner.threads", "log.cleaner.backoff.ms"],
            },
        ],
        "include_synonyms": False,
        "include_documentation": True,
    }
    results = call(broker.port, 32, 4, body).results
    docs = {c.name: c.documentation for r in results for c in r.configs}
    assert "Ignored by kompakt: segment files grow" in docs["preallocate"]
    assert "Ignored by kompakt: kompakt runs one cleaner thread" in docs["log.cleaner.threads"]
    assert "Ignored" not in docs["flush.ms"]
    assert "Ignored" not in docs["log.cleaner.backoff.ms"]


def test_sasl_login_key_is_dynamic_per_broker_as_in_kafka(broker, data_dir):
    """DynamicListenerConfig.ReconfigurableConfigs: sasl.kerberos.min.time.before.relogin
    (librdkafka's 0081) is accepted for this broker, typed as Kafka's LONG, and refused at
    the cluster default: "Cannot update these configs at default cluster level, broker id
    must be specified" (DynamicBrokerConfig.validateConfigs, INVALID_REQUEST)."""
    key = "sasl.kerberos.min.time.before.relogin"
    res = ConfigResource(BROKER, "1", set_config={key: "58000"})
    a = admin(broker)
    a.alter_configs([res])[res].result(TIMEOUT)
    d = describe(broker, BROKER, "1")[key]
    assert (d.value, d.source) == ("58000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    with pytest.raises(KafkaException) as err:
        incremental(broker, "", (key, "58000", SET))
    assert err.value.args[0].code() == INVALID_REQUEST
    assert "broker id must be specified" in err.value.args[0].str()
    with pytest.raises(KafkaException) as err:
        incremental(broker, "1", (key, "soon", SET))
    assert err.value.args[0].code() == INVALID_REQUEST and key in err.value.args[0].str()
    stored = json.loads((data_dir / DYNAMIC_CONFIGS_FILE).read_text())
    assert stored["brokers"]["1"] == {key: "58000"}


def test_unknown_key_is_kept_as_kafka_keeps_custom_broker_configs(broker, data_dir):
    """DynamicConfig.Broker.validate allows custom props (customPropsAllowed): an unknown
    key is stored, described (read-only, as Kafka marks keys outside AllDynamicConfigs)
    and survives a restart; a known static key is still refused."""
    incremental(broker, "", ("my.plugin.setting", "7", SET))
    d = describe(broker, BROKER, "", raw=True)["my.plugin.setting"]
    assert (d.value, d.source) == ("7", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    broker.stop()
    again = start_test_broker(data_dir, log_retention_hours="100")
    try:
        d = describe(again, BROKER, "1", raw=True)["my.plugin.setting"]
        assert d.value == "7" and d.is_read_only
    finally:
        again.stop()
