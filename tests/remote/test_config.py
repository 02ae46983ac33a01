"""The remote-tier config keys: Kafka's names and defaults (``RemoteLogManagerConfig``,
``TopicConfig``), -2 meaning "use retention.*", and Kafka's ``LogConfig`` rules across
keys with its messages; kompakt's own keys checked to one clear line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from kompakt.broker.config import BrokerConfig
from kompakt.errors import InvalidConfigError
from kompakt.log.config import TopicConfig
from kompakt.remote import RemoteTier
from kompakt.remote.config import (
    BROKER_KEYS,
    TOPIC_KEYS,
    RemoteSettings,
    check_topic,
    effective_local_retention,
    parse,
)
from kompakt.remote.store import FileObjectStore
from tests.remote.broker_kit import TIMEOUT, tiered_broker


def test_kafka_names_and_defaults() -> None:
    defaults = {name: key.default for name, key in {**BROKER_KEYS, **TOPIC_KEYS}.items()}
    assert defaults == {
        "remote.log.storage.system.enable": False,
        "remote.log.manager.task.interval.ms": 30_000,
        "kompakt.remote.storage.url": "",
        "kompakt.remote.storage.s3.endpoint.url": "",
        "kompakt.remote.cache.bytes": 256 * 1024 * 1024,
        "remote.storage.enable": False,
        "local.retention.ms": -2,
        "local.retention.bytes": -2,
        "remote.log.copy.disable": False,
        "remote.log.delete.on.disable": False,
    }
    assert TOPIC_KEYS["local.retention.ms"].broker_synonym == "log.local.retention.ms"
    assert TOPIC_KEYS["local.retention.bytes"].broker_synonym == "log.local.retention.bytes"


def test_minus_two_means_the_topics_retention() -> None:
    assert effective_local_retention(-2, 604_800_000) == 604_800_000
    assert effective_local_retention(3_600_000, 604_800_000) == 3_600_000
    assert effective_local_retention(-1, -1) == -1


@pytest.mark.parametrize(
    ("name", "raw", "message"),
    [
        (
            "local.retention.ms",
            "-3",
            "Invalid value -3 for configuration local.retention.ms: Value must be at least -2",
        ),
        ("remote.log.manager.task.interval.ms", "0", "Value must be at least 1"),
        ("kompakt.remote.cache.bytes", "lots", "Not a number of type LONG"),
        ("remote.storage.enable", "yes", "Expected value to be either true or false"),
        ("kompakt.remote.storage.url", "ftp://x/y", "the scheme must be file:// or s3://"),
        ("kompakt.remote.storage.s3.endpoint.url", "localhost:9000", "http:// or https://"),
    ],
)
def test_bad_values_are_one_line_errors(name: str, raw: str, message: str) -> None:
    key = {**BROKER_KEYS, **TOPIC_KEYS}[name]
    with pytest.raises(InvalidConfigError, match=message) as e:
        parse(key, raw)
    assert "\n" not in str(e.value)


def test_remote_storage_needs_the_broker_switch() -> None:
    """Kafka's validateRemoteStorageOnlyIfSystemEnabled, with its message."""
    with pytest.raises(
        InvalidConfigError, match="Tiered Storage functionality is disabled in the broker"
    ):
        check_topic({"remote.storage.enable": True}, system_enabled=False)
    check_topic({"remote.storage.enable": True}, system_enabled=True)
    check_topic({"remote.storage.enable": False}, system_enabled=False)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"retention.ms": "1000", "local.retention.ms": "-1"},
            "Value must not be -1 as retention.ms value is set as 1000.",
        ),
        (
            {"retention.ms": "1000", "local.retention.ms": "1001"},
            "Value must not be more than retention.ms property value: 1000",
        ),
        (
            {"retention.bytes": "10", "local.retention.bytes": "-1"},
            "Value must not be -1 as retention.bytes value is set as 10.",
        ),
        (
            {"retention.bytes": "10", "local.retention.bytes": "11"},
            "Value must not be more than retention.bytes property value: 10",
        ),
    ],
)
def test_local_retention_cannot_exceed_retention(values: dict[str, str], message: str) -> None:
    """Kafka's validateRemoteStorageRetentionTime / ...RetentionSize, checked by the
    topic config itself (their one owner) on a tiered topic."""
    with pytest.raises(InvalidConfigError, match=message):
        TopicConfig({"remote.storage.enable": "true", **values})


def test_local_retention_rules_apply_to_tiered_topics_only() -> None:
    """Kafka's validateTopicLogConfigValues runs the local-retention rules only when
    remote.storage.enable is true: an untiered topic keeps any local.retention.*."""
    cfg = TopicConfig({"retention.bytes": "10", "local.retention.bytes": "11"})
    assert cfg.local_retention_bytes == 11


def test_local_retention_accepted_within_retention_or_when_unlimited() -> None:
    on = {"remote.storage.enable": "true"}
    TopicConfig(
        {
            **on,
            "retention.ms": "1000",
            "local.retention.ms": "1000",
            "retention.bytes": "-1",
            "local.retention.bytes": "-1",
        }
    )
    TopicConfig(
        {
            **on,
            "retention.ms": "-1",
            "local.retention.ms": "5",
            "retention.bytes": "10",
            "local.retention.bytes": "-2",
        }
    )


def test_log_local_retention_is_the_broker_default() -> None:
    """Kafka's ServerTopicConfigSynonyms: log.local.retention.* supply the topic default."""
    cfg = TopicConfig({}, {"log.local.retention.bytes": "4096"})
    assert (cfg.local_retention_bytes, cfg.local_retention_ms) == (4096, -2)


def test_compacted_topics_may_be_tiered_unlike_kafka() -> None:
    """Kafka refuses remote.storage.enable on cleanup.policy=compact
    (validateNoRemoteStorageForCompactedTopic); tiering compacted topics is what
    kompakt's remote tier is for (issue 29)."""
    cfg = TopicConfig({"remote.storage.enable": "true", "cleanup.policy": "compact"})
    check_topic(cfg.as_dict(), True)
    assert cfg.compact and cfg.remote_storage_enable


def test_settings_default_to_a_folder_beside_the_data_dir(tmp_path: Path) -> None:
    data = tmp_path / "kompakt-data"
    s = RemoteSettings.from_broker({}, data)
    assert not s.enabled and s.storage_url == (tmp_path / "kompakt-data-remote").as_uri()
    tier = RemoteTier.open(s)
    assert isinstance(tier.store, FileObjectStore) and tier.cache.max_bytes == 256 * 1024 * 1024
    s3 = RemoteSettings.from_broker(
        {
            "remote.log.storage.system.enable": "true",
            "kompakt.remote.storage.url": "s3://bucket/prefix",
            "kompakt.remote.storage.s3.endpoint.url": "http://127.0.0.1:9000",
            "kompakt.remote.cache.bytes": "1024",
        },
        data,
    )
    assert (s3.enabled, s3.storage_url, s3.s3_endpoint_url, s3.cache_bytes) == (
        True,
        "s3://bucket/prefix",
        "http://127.0.0.1:9000",
        1024,
    )


def test_a_tiered_topic_turns_remote_storage_off_only_deleting_its_remote_data() -> None:
    """Kafka's validateTurningOffRemoteStorageWithDelete (KIP-950): off only with
    remote.log.delete.on.disable=true, Kafka's message naming both ways out."""
    with pytest.raises(InvalidConfigError, match="invalid to disable remote storage") as e:
        check_topic({"remote.storage.enable": False}, True, was_enabled=True)
    assert "`remote.storage.enable=true,remote.log.copy.disable=true`" in str(e.value)
    assert "`remote.storage.enable=false,remote.log.delete.on.disable=true`" in str(e.value)
    off = {"remote.storage.enable": False, "remote.log.delete.on.disable": True}
    check_topic(off, True, was_enabled=True)
    check_topic({"remote.storage.enable": True}, True, was_enabled=True)
    check_topic({"remote.storage.enable": False}, True, was_enabled=False)


# -- the broker's defaults: Kafka's LogConfig.validateBrokerLogConfigValues --------------
ON = {"remote.log.storage.system.enable": "true"}


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"log.retention.bytes": "1024", "log.local.retention.bytes": "2048"},
            "Invalid value 2048 for configuration local.retention.bytes: Value must not be "
            "more than retention.bytes property value: 1024",
        ),
        (
            {"log.retention.ms": "1000", "log.local.retention.ms": "-1"},
            "Invalid value -1 for configuration local.retention.ms: Value must not be -1 as "
            "retention.ms value is set as 1000.",
        ),
        (  # log.retention.hours is log.retention.ms's synonym: 1 h
            {"log.retention.hours": "1", "log.local.retention.ms": "3600001"},
            "Value must not be more than retention.ms property value: 3600000",
        ),
    ],
)
def test_broker_local_retention_cannot_exceed_the_brokers_retention(
    tmp_path: Path, values: dict[str, str], message: str
) -> None:
    """Kafka's LogManager.apply runs LogConfig.validateBrokerLogConfigValues with the
    remote tier on (validateRemoteStorageRetentionSize / ...RetentionTime on the
    broker's log defaults, KafkaConfigTest.testValidateBrokerLogConfigs): the broker
    refuses to start, naming the key; with the tier off it starts."""
    props = {"log.dirs": str(tmp_path), **values}
    with pytest.raises(InvalidConfigError, match=re.escape(message)):
        BrokerConfig.from_mapping({**props, **ON})
    BrokerConfig.from_mapping(props)


@pytest.mark.parametrize(
    "values",
    [
        {"log.retention.bytes": "1024", "log.local.retention.bytes": "1024"},
        {"log.retention.bytes": "-1", "log.local.retention.bytes": "-1"},
        {"log.retention.bytes": "-1", "log.local.retention.bytes": str(1 << 40)},
        {"log.retention.bytes": "1024", "log.local.retention.bytes": "-2"},
        {"log.retention.ms": "-1", "log.local.retention.ms": "-1"},
        {"log.retention.ms": "1000", "log.local.retention.ms": "0"},
    ],
)
def test_broker_local_retention_within_or_unlimited_or_following(
    tmp_path: Path, values: dict[str, str]
) -> None:
    """-2 follows log.retention.*; an unlimited (-1) log.retention.* limits nothing."""
    BrokerConfig.from_mapping({"log.dirs": str(tmp_path), **values, **ON})


def test_a_dynamic_change_is_checked_even_with_the_tier_off(tmp_path: Path) -> None:
    """Kafka's DynamicLogConfig.validateReconfiguration checks log.local.retention.*
    against log.retention.* on every dynamic change, whether or not the tier is on."""
    cfg = BrokerConfig.from_mapping({"log.dirs": str(tmp_path), "log.retention.bytes": "1024"})
    with pytest.raises(InvalidConfigError, match="Value must not be more than retention.bytes"):
        cfg.with_dynamic({"log.local.retention.bytes": "2048"}, {})
    with pytest.raises(InvalidConfigError, match="Value must not be -1 as retention.bytes"):
        cfg.with_dynamic({}, {"log.local.retention.bytes": "-1"})
    cfg.with_dynamic({"log.local.retention.bytes": "512"}, {})
    # raising log.retention.bytes above the local value a dynamic layer set is fine
    low = cfg.with_dynamic({"log.local.retention.bytes": "512"}, {})
    low.with_dynamic({"log.local.retention.bytes": "512", "log.retention.bytes": "4096"}, {})


def test_alter_broker_configs_refuses_local_retention_above_retention(tmp_path: Path) -> None:
    """Through IncrementalAlterConfigs on the BROKER resource of a real broker with the
    tier on: INVALID_CONFIG with Kafka's message, and the old value stays."""
    b = tiered_broker(tmp_path / "data", **{"log.retention.bytes": "1048576"})
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        entry = ConfigEntry(
            "log.local.retention.bytes", "2097152", incremental_operation=AlterConfigOpType.SET
        )
        res = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[entry])
        with pytest.raises(KafkaException, match="Value must not be more than retention.bytes"):
            admin.incremental_alter_configs([res])[res].result(TIMEOUT)
        assert "log.local.retention.bytes" not in b.broker.config.log_config
        entry = ConfigEntry(
            "log.local.retention.bytes", "524288", incremental_operation=AlterConfigOpType.SET
        )
        res = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[entry])
        admin.incremental_alter_configs([res])[res].result(TIMEOUT)
        assert b.broker.config.log_config["log.local.retention.bytes"] == "524288"
    finally:
        b.stop()


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"retention.bytes": "8192", "local.retention.bytes": "4096"},
            "When `remote.log.copy.disable` is set to true, the `local.retention.bytes` and "
            "`retention.bytes` must be set to the identical value",
        ),
        (
            {"retention.ms": "60000", "local.retention.ms": "1000"},
            "When `remote.log.copy.disable` is set to true, the `local.retention.ms` and "
            "`retention.ms` must be set to the identical value",
        ),
    ],
)
def test_copy_disabled_needs_local_retention_equal_to_retention(
    changes: dict[str, str], message: str
) -> None:
    """Kafka's LogConfig.validateRetentionConfigsWhenRemoteCopyDisabled (KIP-950): with
    no more copies, local.retention.* must be -2 or equal retention.*."""
    on = {"remote.storage.enable": "true", "remote.log.copy.disable": "true"}
    with pytest.raises(InvalidConfigError, match=re.escape(message)):
        TopicConfig({**on, **changes})
    TopicConfig({**on, **changes, "local.retention.bytes": "-2", "local.retention.ms": "-2"})
    TopicConfig({**on, "retention.bytes": "8192", "local.retention.bytes": "8192"})
    # the rule is a tiered topic's: without remote storage the key checks nothing
    TopicConfig({"remote.log.copy.disable": "true", **changes})
