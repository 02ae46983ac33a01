"""Topic configs against Kafka 4.x ``LogConfig`` / ``ConfigDef`` / ``ServerTopicConfigSynonyms``."""

from __future__ import annotations

import pickle

import pytest

from kompakt.errors import InvalidConfigError
from kompakt.log.config import (
    BROKER_LOG_KEYS,
    CONFIG_DEFS,
    DEFAULT_CONFIG,
    DYNAMIC_TOPIC_CONFIG,
    LONG_MAX,
    STATIC_BROKER_CONFIG,
    ConfigEntry,
    TopicConfig,
    from_properties,
    parse_value,
    to_properties,
)

KAFKA_DEFAULTS = {
    "cleanup.policy": ("delete",),
    "segment.bytes": 1073741824,
    "segment.ms": 604800000,
    "segment.jitter.ms": 0,
    "segment.index.bytes": 10485760,
    "index.interval.bytes": 4096,
    "flush.messages": LONG_MAX,
    "flush.ms": LONG_MAX,
    "retention.bytes": -1,
    "retention.ms": 604800000,
    "max.message.bytes": 1048588,
    "min.cleanable.dirty.ratio": 0.5,
    "min.compaction.lag.ms": 0,
    "max.compaction.lag.ms": LONG_MAX,
    "delete.retention.ms": 86400000,
    "file.delete.delay.ms": 60000,
    "message.timestamp.type": "CreateTime",
    "message.timestamp.before.max.ms": LONG_MAX,
    "message.timestamp.after.max.ms": 3600000,
    "compression.type": "producer",
    "compression.gzip.level": -1,
    "compression.lz4.level": 9,
    "compression.zstd.level": 3,
    "min.insync.replicas": 1,
    "unclean.leader.election.enable": False,
    "preallocate": False,
    "remote.storage.enable": False,
    "local.retention.ms": -2,
    "local.retention.bytes": -2,
    "remote.log.copy.disable": False,
    "remote.log.delete.on.disable": False,
}


def _error(fn, *args, **kwargs) -> str:
    with pytest.raises(InvalidConfigError) as e:
        fn(*args, **kwargs)
    assert e.value.error_code == 40  # INVALID_CONFIG
    return str(e.value)


# -- defaults and access ---------------------------------------------------------------------


def test_defined_topic_configs_are_exactly_the_kafka_ones_kompakt_supports():
    assert set(CONFIG_DEFS) == set(KAFKA_DEFAULTS)


@pytest.mark.parametrize("name,default", sorted(KAFKA_DEFAULTS.items()))
def test_defaults_match_kafka_4_LogConfig(name, default):
    cfg = TopicConfig()
    assert cfg.get(name) == default
    assert type(cfg.get(name)) is type(default)
    assert CONFIG_DEFS[name].default == default
    assert getattr(cfg, name.replace(".", "_")) == default


def test_default_cleanup_policy_is_delete_not_compact_like_kafka():
    cfg = TopicConfig()
    assert cfg.cleanup_policy == ("delete",)
    assert cfg.delete and not cfg.compact


def test_every_config_has_a_typed_attribute_with_underscores():
    annotated = set(TopicConfig.__annotations__)
    assert annotated == {name.replace(".", "_") for name in CONFIG_DEFS}


def test_unknown_attribute_raises_attribute_error():
    with pytest.raises(AttributeError):
        TopicConfig().segment_byte  # noqa: B018


def test_topic_config_is_immutable():
    cfg = TopicConfig()
    with pytest.raises(AttributeError):
        cfg.segment_bytes = 5


# -- parsing, as Kafka's ConfigDef.parseType -------------------------------------------------


def test_unknown_topic_config_is_rejected_like_kafka_LogConfig_validateNames():
    assert _error(parse_value, "foo", "1") == "Unknown topic config name: foo"
    assert _error(TopicConfig, {"foo": "1"}) == "Unknown topic config name: foo"
    assert _error(TopicConfig().get, "foo") == "Unknown topic config name: foo"


def test_broker_level_name_is_not_a_topic_config_like_kafka():
    assert _error(TopicConfig, {"log.segment.bytes": "1000"}) == (
        "Unknown topic config name: log.segment.bytes"
    )


def test_non_number_for_int_config_is_rejected_with_kafka_not_a_number_message():
    assert _error(parse_value, "segment.bytes", "abc") == (
        "Invalid value abc for configuration segment.bytes: Not a number of type INT"
    )


@pytest.mark.parametrize("raw", ["1_000", "1e3", "1.0", "0x10", "", "2147483648", "-2147483649"])
def test_int_config_accepts_only_java_integer_parse_int_syntax_and_range(raw):
    assert _error(parse_value, "segment.index.bytes", raw).endswith("Not a number of type INT")


@pytest.mark.parametrize("raw", ["9223372036854775808", "1.5", "ten"])
def test_long_config_rejects_what_java_long_parse_long_rejects(raw):
    assert _error(parse_value, "retention.ms", raw) == (
        f"Invalid value {raw} for configuration retention.ms: Not a number of type LONG"
    )


def test_values_are_trimmed_like_kafka_ConfigDef_parseType():
    assert parse_value("segment.bytes", "  1024 \t") == 1024
    assert parse_value("retention.ms", "+5") == 5
    assert parse_value("retention.ms", str(LONG_MAX)) == LONG_MAX
    assert parse_value("message.timestamp.type", " LogAppendTime ") == "LogAppendTime"


@pytest.mark.parametrize(
    "raw,value", [("0.25", 0.25), ("1", 1.0), (".5", 0.5), ("5e-1", 0.5), ("0.5d", 0.5)]
)
def test_double_config_parses_java_double_syntax(raw, value):
    assert parse_value("min.cleanable.dirty.ratio", raw) == value


def test_non_number_for_double_config_is_rejected_like_kafka():
    assert _error(parse_value, "min.cleanable.dirty.ratio", "half") == (
        "Invalid value half for configuration min.cleanable.dirty.ratio: Not a number of type DOUBLE"
    )


def test_boolean_config_accepts_true_false_in_any_case_like_kafka():
    assert parse_value("preallocate", "TRUE") is True
    assert parse_value("unclean.leader.election.enable", "False") is False
    assert _error(parse_value, "preallocate", "yes") == (
        "Invalid value yes for configuration preallocate: Expected value to be either true or false"
    )


# -- validators, as Kafka's Range / ValidString / ValidList ----------------------------------

RANGE_CASES = [
    ("segment.bytes", "13", "Value must be at least 14"),
    ("segment.ms", "0", "Value must be at least 1"),
    ("segment.jitter.ms", "-1", "Value must be at least 0"),
    ("segment.index.bytes", "3", "Value must be at least 4"),
    ("index.interval.bytes", "-1", "Value must be at least 0"),
    ("flush.messages", "0", "Value must be at least 1"),
    ("flush.ms", "-1", "Value must be at least 0"),
    ("retention.ms", "-2", "Value must be at least -1"),
    ("max.message.bytes", "-1", "Value must be at least 0"),
    ("min.compaction.lag.ms", "-1", "Value must be at least 0"),
    ("max.compaction.lag.ms", "0", "Value must be at least 1"),
    ("delete.retention.ms", "-1", "Value must be at least 0"),
    ("file.delete.delay.ms", "-1", "Value must be at least 0"),
    ("message.timestamp.before.max.ms", "-1", "Value must be at least 0"),
    ("message.timestamp.after.max.ms", "-1", "Value must be at least 0"),
    ("min.insync.replicas", "0", "Value must be at least 1"),
    ("compression.lz4.level", "18", "Value must be no more than 17"),
    ("compression.lz4.level", "0", "Value must be at least 1"),
    ("compression.zstd.level", "23", "Value must be no more than 22"),
    ("compression.zstd.level", "-131073", "Value must be at least -131072"),
    ("compression.gzip.level", "0", "Value must be between 1 and 9 or equal to -1"),
    ("compression.gzip.level", "10", "Value must be between 1 and 9 or equal to -1"),
]


@pytest.mark.parametrize("name,raw,message", RANGE_CASES)
def test_out_of_range_values_are_rejected_with_kafka_range_messages(name, raw, message):
    assert (
        _error(parse_value, name, raw) == f"Invalid value {raw} for configuration {name}: {message}"
    )
    assert (
        _error(TopicConfig, {name: raw})
        == f"Invalid value {raw} for configuration {name}: {message}"
    )


@pytest.mark.parametrize(
    "name,raw",
    [
        ("retention.ms", "-1"),
        ("retention.bytes", "-1"),
        ("retention.bytes", "-100"),  # Kafka puts no lower bound on retention.bytes
        ("max.message.bytes", "0"),
        ("index.interval.bytes", "0"),
        ("segment.index.bytes", "4"),
        ("compression.gzip.level", "-1"),
        ("compression.gzip.level", "9"),
        ("compression.zstd.level", "-131072"),
    ],
)
def test_range_bounds_are_inclusive_like_kafka_Range(name, raw):
    assert parse_value(name, raw) == int(raw)


def test_segment_bytes_minimum_is_14_not_kafka_4_one_mebibyte_so_tiny_segments_work():
    assert TopicConfig({"segment.bytes": "14"}).segment_bytes == 14
    assert TopicConfig({"segment.bytes": "1024"}).segment_bytes == 1024
    assert _error(TopicConfig, {"segment.bytes": "5"}) == (
        "Invalid value 5 for configuration segment.bytes: Value must be at least 14"
    )


@pytest.mark.parametrize("raw", ["0", "1", "0.0", "1.0", "0.99"])
def test_min_cleanable_dirty_ratio_accepts_zero_to_one_inclusive_like_kafka_between(raw):
    assert TopicConfig({"min.cleanable.dirty.ratio": raw}).min_cleanable_dirty_ratio == float(raw)


@pytest.mark.parametrize(
    "raw,message",
    [
        (
            "-0.1",
            "Invalid value -0.1 for configuration min.cleanable.dirty.ratio: Value must be at least 0",
        ),
        (
            "1.5",
            "Invalid value 1.5 for configuration min.cleanable.dirty.ratio: Value must be no more than 1",
        ),
        (
            "NaN",
            "Invalid value NaN for configuration min.cleanable.dirty.ratio: Value must be at least 0",
        ),
    ],
)
def test_min_cleanable_dirty_ratio_outside_zero_to_one_is_rejected(raw, message):
    assert _error(parse_value, "min.cleanable.dirty.ratio", raw) == message


def test_message_timestamp_type_is_case_sensitive_create_or_log_append_time_like_kafka():
    assert (
        TopicConfig({"message.timestamp.type": "LogAppendTime"}).message_timestamp_type
        == "LogAppendTime"
    )
    assert _error(parse_value, "message.timestamp.type", "createtime") == (
        "Invalid value createtime for configuration message.timestamp.type: "
        "String must be one of: CreateTime, LogAppendTime"
    )


@pytest.mark.parametrize("codec", ["uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"])
def test_compression_type_accepts_kafka_broker_compression_types(codec):
    assert TopicConfig({"compression.type": codec}).compression_type == codec


def test_compression_type_rejects_unknown_codec_like_kafka():
    assert _error(parse_value, "compression.type", "brotli") == (
        "Invalid value brotli for configuration compression.type: "
        "String must be one of: uncompressed, zstd, lz4, snappy, gzip, producer"
    )


# -- cleanup.policy, a LIST config -----------------------------------------------------------


@pytest.mark.parametrize(
    "raw,policy,compact,delete",
    [
        ("compact", ("compact",), True, False),
        ("delete", ("delete",), False, True),
        ("compact,delete", ("compact", "delete"), True, True),
        ("delete , compact", ("delete", "compact"), True, True),
    ],
)
def test_cleanup_policy_is_a_comma_separated_list_of_compact_and_delete_like_kafka(
    raw, policy, compact, delete
):
    cfg = TopicConfig({"cleanup.policy": raw})
    assert cfg.cleanup_policy == policy
    assert (cfg.compact, cfg.delete) == (compact, delete)


def test_empty_cleanup_policy_is_allowed_and_means_keep_everything_like_kafka_4_2():
    cfg = TopicConfig({"cleanup.policy": ""})
    assert cfg.cleanup_policy == ()
    assert not cfg.compact and not cfg.delete
    assert {e.name: e.value for e in cfg.describe()}["cleanup.policy"] == ""


def test_cleanup_policy_entry_other_than_compact_or_delete_is_rejected_like_kafka_ValidList():
    assert _error(parse_value, "cleanup.policy", "compact,Delete") == (
        "Invalid value Delete for configuration cleanup.policy: String must be one of: compact, delete"
    )


def test_duplicate_cleanup_policy_entries_are_rejected_like_kip_1161_ValidList():
    assert _error(parse_value, "cleanup.policy", "compact,compact") == (
        "Configuration 'cleanup.policy' values must not be duplicated."
    )


def test_empty_cleanup_policy_entry_is_rejected_like_kip_1161_ValidList():
    assert _error(parse_value, "cleanup.policy", "compact,") == (
        "Configuration 'cleanup.policy' values must not be empty."
    )


# -- cross-field rule ------------------------------------------------------------------------


def test_min_compaction_lag_above_max_compaction_lag_is_rejected_like_kafka_LogConfig_validateValues():
    assert _error(
        TopicConfig, {"min.compaction.lag.ms": "2000", "max.compaction.lag.ms": "1000"}
    ) == (
        "conflict topic config setting min.compaction.lag.ms (2000) > max.compaction.lag.ms (1000)"
    )


def test_min_compaction_lag_equal_to_max_compaction_lag_is_allowed():
    cfg = TopicConfig({"min.compaction.lag.ms": "1000", "max.compaction.lag.ms": "1000"})
    assert cfg.min_compaction_lag_ms == cfg.max_compaction_lag_ms == 1000


def test_compaction_lag_conflict_is_checked_against_broker_defaults_too_like_kafka():
    broker = {"log.cleaner.max.compaction.lag.ms": "1000"}
    assert "conflict topic config setting" in _error(
        TopicConfig, {"min.compaction.lag.ms": "5000"}, broker
    )


def test_null_topic_config_value_is_rejected_like_kafka_create_topics():
    assert _error(TopicConfig, {"retention.ms": None}) == (
        "Null value not supported for topic configs: retention.ms"
    )


# -- broker defaults (server.properties log.* synonyms) --------------------------------------


def test_broker_log_keys_are_kafka_server_topic_config_synonyms():
    expected = {
        "log.cleanup.policy",
        "log.segment.bytes",
        "log.roll.ms",
        "log.roll.hours",
        "log.roll.jitter.ms",
        "log.roll.jitter.hours",
        "log.index.size.max.bytes",
        "log.index.interval.bytes",
        "log.flush.interval.messages",
        "log.flush.interval.ms",
        "log.flush.scheduler.interval.ms",
        "log.retention.bytes",
        "log.retention.ms",
        "log.retention.minutes",
        "log.retention.hours",
        "message.max.bytes",
        "log.cleaner.min.cleanable.ratio",
        "log.cleaner.min.compaction.lag.ms",
        "log.cleaner.max.compaction.lag.ms",
        "log.cleaner.delete.retention.ms",
        "log.segment.delete.delay.ms",
        "log.message.timestamp.type",
        "log.message.timestamp.before.max.ms",
        "log.message.timestamp.after.max.ms",
        "compression.type",
        "compression.gzip.level",
        "compression.lz4.level",
        "compression.zstd.level",
        "min.insync.replicas",
        "unclean.leader.election.enable",
        "log.preallocate",
        "log.local.retention.ms",
        "log.local.retention.bytes",
    }
    assert BROKER_LOG_KEYS == expected


def test_broker_synonym_is_kafka_highest_priority_server_name():
    assert CONFIG_DEFS["segment.bytes"].broker_synonym == "log.segment.bytes"
    assert CONFIG_DEFS["segment.ms"].broker_synonym == "log.roll.ms"
    assert CONFIG_DEFS["retention.ms"].broker_synonym == "log.retention.ms"
    assert (
        CONFIG_DEFS["min.cleanable.dirty.ratio"].broker_synonym == "log.cleaner.min.cleanable.ratio"
    )
    assert CONFIG_DEFS["file.delete.delay.ms"].broker_synonym == "log.segment.delete.delay.ms"
    assert CONFIG_DEFS["max.message.bytes"].broker_synonym == "message.max.bytes"
    assert CONFIG_DEFS["segment.index.bytes"].broker_synonym == "log.index.size.max.bytes"


def test_broker_log_cleanup_policy_is_the_default_for_topics_without_an_override():
    cfg = TopicConfig(broker_defaults={"log.cleanup.policy": "compact"})
    assert cfg.compact and not cfg.delete
    assert cfg.source("cleanup.policy") == STATIC_BROKER_CONFIG
    assert cfg.overrides == {}


def test_topic_override_beats_broker_default():
    cfg = TopicConfig({"segment.bytes": "2048"}, {"log.segment.bytes": "4096"})
    assert cfg.segment_bytes == 2048
    assert cfg.source("segment.bytes") == DYNAMIC_TOPIC_CONFIG
    assert TopicConfig(None, {"log.segment.bytes": "4096"}).segment_bytes == 4096


def test_log_retention_hours_and_minutes_are_converted_to_ms_like_kafka_ConfigSynonym():
    assert TopicConfig(None, {"log.retention.hours": "24"}).retention_ms == 24 * 3600 * 1000
    assert TopicConfig(None, {"log.retention.minutes": "5"}).retention_ms == 5 * 60 * 1000
    assert TopicConfig(None, {"log.roll.hours": "1"}).segment_ms == 3600 * 1000
    assert TopicConfig(None, {"log.roll.jitter.hours": "2"}).segment_jitter_ms == 2 * 3600 * 1000


def test_ms_broker_synonym_takes_priority_over_minutes_and_hours_like_kafka():
    broker = {"log.retention.hours": "1", "log.retention.minutes": "2", "log.retention.ms": "3"}
    assert TopicConfig(None, broker).retention_ms == 3
    broker = {"log.retention.hours": "1", "log.retention.minutes": "2"}
    assert TopicConfig(None, broker).retention_ms == 2 * 60 * 1000
    assert TopicConfig(None, {"log.roll.hours": "1", "log.roll.ms": "10"}).segment_ms == 10


def test_negative_broker_retention_means_unlimited_like_kafka_logRetentionTimeMillis():
    assert TopicConfig(None, {"log.retention.hours": "-1"}).retention_ms == -1


def test_broker_default_values_are_validated_at_construction_under_the_broker_name():
    assert _error(TopicConfig, None, {"log.segment.bytes": "5"}) == (
        "Invalid value 5 for configuration log.segment.bytes: Value must be at least 14"
    )
    assert _error(TopicConfig, None, {"log.roll.hours": "0"}) == (
        "Invalid value 0 for configuration log.roll.hours: Value must be at least 1"
    )
    assert _error(TopicConfig, None, {"log.cleanup.policy": "forever"}) == (
        "Invalid value forever for configuration log.cleanup.policy: "
        "String must be one of: compact, delete"
    )
    assert _error(TopicConfig, None, {"log.retention.hours": "1.5"}) == (
        "Invalid value 1.5 for configuration log.retention.hours: Not a number of type INT"
    )


def test_broker_default_is_validated_even_when_a_topic_override_hides_it():
    with pytest.raises(InvalidConfigError, match="log.cleaner.min.cleanable.ratio"):
        TopicConfig({"min.cleanable.dirty.ratio": "0.1"}, {"log.cleaner.min.cleanable.ratio": "2"})


def test_broker_keys_that_are_not_log_synonyms_are_ignored():
    cfg = TopicConfig(
        None, {"listeners": "PLAINTEXT://:9092", "log.dirs": "/tmp/x", "spark.x": "y"}
    )
    assert cfg.broker_defaults == {}


# -- describe(), in DescribeConfigs style ----------------------------------------------------


def _entries(cfg: TopicConfig) -> dict[str, ConfigEntry]:
    return {e.name: e for e in cfg.describe()}


def test_describe_lists_every_topic_config_sorted_with_default_source():
    entries = TopicConfig().describe()
    assert [e.name for e in entries] == sorted(CONFIG_DEFS)
    seg = _entries(TopicConfig())["segment.bytes"]
    assert seg == ConfigEntry(
        "segment.bytes",
        "1073741824",
        DEFAULT_CONFIG,
        True,
        read_only=False,
        sensitive=False,
        synonyms=[("log.segment.bytes", "1073741824", DEFAULT_CONFIG)],
    )


def test_describe_prints_values_as_kafka_convertToString():
    entries = _entries(TopicConfig({"cleanup.policy": "compact , delete", "preallocate": "TRUE"}))
    assert entries["cleanup.policy"].value == "compact,delete"
    assert entries["preallocate"].value == "true"
    assert entries["min.cleanable.dirty.ratio"].value == "0.5"
    assert (
        _entries(TopicConfig({"min.cleanable.dirty.ratio": "0.0001"}))[
            "min.cleanable.dirty.ratio"
        ].value
        == "1.0E-4"
    )
    assert (
        _entries(TopicConfig({"min.cleanable.dirty.ratio": "1"}))["min.cleanable.dirty.ratio"].value
        == "1.0"
    )


def test_describe_synonyms_run_topic_override_then_broker_default_then_built_in_default():
    cfg = TopicConfig({"cleanup.policy": "compact"}, {"log.cleanup.policy": "compact,delete"})
    entry = _entries(cfg)["cleanup.policy"]
    assert (entry.value, entry.source, entry.is_default) == ("compact", DYNAMIC_TOPIC_CONFIG, False)
    assert entry.synonyms == [
        ("cleanup.policy", "compact", DYNAMIC_TOPIC_CONFIG),
        ("log.cleanup.policy", "compact,delete", STATIC_BROKER_CONFIG),
        ("log.cleanup.policy", "delete", DEFAULT_CONFIG),
    ]


def test_describe_reports_broker_default_as_static_broker_config_source():
    entry = _entries(TopicConfig(None, {"log.retention.hours": "24"}))["retention.ms"]
    assert (entry.value, entry.source, entry.is_default) == (
        "86400000",
        STATIC_BROKER_CONFIG,
        False,
    )
    assert entry.synonyms == [
        ("log.retention.hours", "24", STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", DEFAULT_CONFIG),
    ]


def test_describe_names_built_in_default_of_segment_ms_by_log_roll_hours_like_kafka():
    entry = _entries(TopicConfig())["segment.ms"]
    assert entry.value == "604800000"
    assert entry.synonyms == [("log.roll.hours", "168", DEFAULT_CONFIG)]


# -- with_changes (IncrementalAlterConfigs SET / DELETE) ------------------------------------


def test_with_changes_sets_and_deletes_overrides_and_returns_a_new_config():
    cfg = TopicConfig({"cleanup.policy": "compact", "segment.bytes": "1024"})
    changed = cfg.with_changes(set={"retention.ms": "1000"}, delete=["segment.bytes"])
    assert changed.overrides == {"cleanup.policy": "compact", "retention.ms": "1000"}
    assert changed.segment_bytes == 1073741824
    assert changed.retention_ms == 1000
    assert cfg.overrides == {"cleanup.policy": "compact", "segment.bytes": "1024"}


def test_with_changes_delete_falls_back_to_broker_default():
    cfg = TopicConfig({"cleanup.policy": "delete"}, {"log.cleanup.policy": "compact"})
    reverted = cfg.with_changes(delete=["cleanup.policy"])
    assert reverted.compact
    assert reverted.source("cleanup.policy") == STATIC_BROKER_CONFIG


def test_with_changes_is_validated_as_a_whole():
    cfg = TopicConfig({"max.compaction.lag.ms": "1000"})
    assert "conflict topic config setting" in _error(
        cfg.with_changes, {"min.compaction.lag.ms": "2000"}
    )
    assert _error(cfg.with_changes, {"segment.bytes": "1"}).endswith("Value must be at least 14")
    assert _error(cfg.with_changes, {"nope": "1"}) == "Unknown topic config name: nope"
    assert _error(cfg.with_changes, None, ["nope"]) == "Unknown topic config name: nope"


def test_with_changes_rejects_a_key_both_set_and_deleted():
    msg = _error(TopicConfig().with_changes, {"retention.ms": "1"}, ["retention.ms"])
    assert "duplicate config keys" in msg


def test_with_changes_deleting_a_key_that_is_not_overridden_is_a_no_op():
    cfg = TopicConfig({"retention.ms": "5"})
    assert cfg.with_changes(delete=["segment.ms"]) == cfg


def test_overrides_keep_the_values_exactly_as_given_for_persistence():
    cfg = TopicConfig({"cleanup.policy": "compact, delete"})
    assert cfg.overrides == {"cleanup.policy": "compact, delete"}
    cfg.overrides["cleanup.policy"] = "x"  # a copy: the config cannot be changed through it
    assert cfg.cleanup_policy == ("compact", "delete")


def test_typed_values_from_the_embedded_api_are_accepted_as_config_text():
    cfg = TopicConfig({"segment.bytes": 1024, "preallocate": True, "cleanup.policy": ["compact"]})
    assert (cfg.segment_bytes, cfg.preallocate, cfg.cleanup_policy) == (1024, True, ("compact",))
    assert cfg.overrides == {
        "segment.bytes": "1024",
        "preallocate": "true",
        "cleanup.policy": "compact",
    }


def test_topic_config_survives_pickle_for_spark_executors():
    cfg = TopicConfig({"cleanup.policy": "compact"}, {"log.retention.hours": "1"})
    copy = pickle.loads(pickle.dumps(cfg))
    assert copy == cfg
    assert copy.compact and copy.retention_ms == 3600 * 1000


# -- properties files ------------------------------------------------------------------------


def test_overrides_round_trip_through_a_properties_file():
    overrides = {
        "cleanup.policy": "compact,delete",
        "segment.bytes": "1024",
        "min.cleanable.dirty.ratio": "0.1",
        "odd key=: ": " lead space, = : # ! \\ back\nnewline\ttab ü",
    }
    text = to_properties(overrides, header="kompakt topic config")
    assert text.startswith("# kompakt topic config\n")
    assert "cleanup.policy=compact,delete\n" in text
    assert from_properties(text) == overrides


def test_to_properties_writes_sorted_key_value_lines():
    assert to_properties({"b": "2", "a": "1"}) == "a=1\nb=2\n"
    assert to_properties({}) == ""


def test_from_properties_reads_java_properties_syntax():
    text = (
        "# comment\n"
        "! also a comment\n"
        "\n"
        "   segment.bytes = 1024\n"
        "retention.ms:5000\n"
        "cleanup.policy compact\n"
        "long.value=a,\\\n"
        "    b\n"
        "empty=\n"
        "unicode=\\u00fc\n"
        "retention.ms=6000\n"
    )
    assert from_properties(text) == {
        "segment.bytes": "1024",
        "retention.ms": "6000",  # the last occurrence wins, like java.util.Properties
        "cleanup.policy": "compact",
        "long.value": "a,b",
        "empty": "",
        "unicode": "ü",
    }


def test_properties_file_feeds_topic_config_back_unchanged():
    cfg = TopicConfig({"cleanup.policy": "compact", "min.compaction.lag.ms": "100"})
    assert TopicConfig(from_properties(to_properties(cfg.overrides))) == cfg
