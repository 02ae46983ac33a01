"""Layered broker defaults under topic configs (Kafka's DynamicBrokerConfig precedence)."""

from __future__ import annotations

import pickle

from kompakt.log.config import (
    DEFAULT_CONFIG,
    DYNAMIC_BROKER_CONFIG,
    DYNAMIC_DEFAULT_BROKER_CONFIG,
    DYNAMIC_TOPIC_CONFIG,
    STATIC_BROKER_CONFIG,
    BrokerDefaults,
    TopicConfig,
)

LAYERS = BrokerDefaults(
    [
        (DYNAMIC_BROKER_CONFIG, {"log.retention.ms": "1000"}),
        (DYNAMIC_DEFAULT_BROKER_CONFIG, {"log.retention.ms": "2000", "log.segment.bytes": "500"}),
        (STATIC_BROKER_CONFIG, {"log.retention.hours": "5", "log.segment.bytes": "900"}),
    ]
)


def test_per_broker_beats_cluster_default_beats_static_key_by_key():
    cfg = TopicConfig({}, LAYERS)
    assert (cfg.retention_ms, cfg.source("retention.ms")) == (1000, DYNAMIC_BROKER_CONFIG)
    assert (cfg.segment_bytes, cfg.source("segment.bytes")) == (
        500,
        DYNAMIC_DEFAULT_BROKER_CONFIG,
    )
    assert cfg.source("cleanup.policy") == DEFAULT_CONFIG
    own = TopicConfig({"retention.ms": "7"}, LAYERS)
    assert (own.retention_ms, own.source("retention.ms")) == (7, DYNAMIC_TOPIC_CONFIG)


def test_describe_lists_every_layer_in_kafkas_synonym_order():
    """ConfigHelper.configSynonyms: per-broker, then cluster default, then static, then
    the defaults, each across the key's broker synonyms."""
    [e] = [e for e in TopicConfig({}, LAYERS).describe() if e.name == "retention.ms"]
    assert [(s.name, s.value, s.source) for s in e.synonyms] == [
        ("log.retention.ms", "1000", DYNAMIC_BROKER_CONFIG),
        ("log.retention.ms", "2000", DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("log.retention.hours", "5", STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", DEFAULT_CONFIG),
    ]


def test_a_plain_mapping_is_the_static_layer_and_layers_survive_pickling():
    plain = TopicConfig({}, {"log.segment.bytes": "900"})
    assert plain.source("segment.bytes") == STATIC_BROKER_CONFIG
    cfg = TopicConfig({}, LAYERS)
    again = pickle.loads(pickle.dumps(cfg))
    assert again == cfg and hash(again) == hash(cfg)
    assert again.source("retention.ms") == DYNAMIC_BROKER_CONFIG
    assert dict(LAYERS) == {
        "log.retention.ms": "1000",
        "log.segment.bytes": "500",
        "log.retention.hours": "5",
    }
