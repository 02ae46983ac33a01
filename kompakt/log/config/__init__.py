"""Kafka topic configs: names, types, defaults, validation and broker-level synonyms.

Follows Kafka 4.x ``TopicConfig`` / ``LogConfig`` / ``ServerTopicConfigSynonyms`` so that
clients, ``kafka-configs``-style tools and users' habits carry over: the same keys, the
same defaults, the same ranges and the same error text ("Invalid value 5 for configuration
segment.bytes: Value must be at least 14"). A topic's effective value comes from its own
override, else from the broker's ``log.*`` synonym (a dynamic broker config, else
``server.properties``; see :class:`BrokerDefaults`), else from the built-in default;
``TopicConfig.describe()`` reports that chain like DescribeConfigs.

One idea a module: :mod:`.values` (text <-> value, validators), :mod:`.defs` (the table),
:mod:`.topic` (``TopicConfig``, ``BrokerDefaults``), :mod:`.properties` (Java
``.properties`` files). This package re-exports their public names.

Deliberate differences from Kafka 4.x, each kept small:

- ``segment.bytes`` (and ``log.segment.bytes``) keeps the pre-4.0 minimum of 14 bytes (one
  legacy record's overhead) instead of 4.0's 1 MiB, so development and tests can roll
  tiny segments without Kafka 4's internal-only ``internal.segment.bytes``.
- ``cleanup.policy`` rejects duplicate entries, as KIP-1161 states; Kafka 4.2 later chose
  to drop duplicates silently for backward compatibility with stored configs.
- ``min.cleanable.dirty.ratio=NaN`` is rejected (Kafka's range check lets NaN through,
  which would disable cleaning without saying so).
- The replication throttle lists are not defined: kompakt is a single node.
- ``remote.storage.enable`` may be set on a compacted topic (Kafka refuses it): tiering
  compacted topics is what kompakt's remote tier is for (:mod:`kompakt.remote.config`).
"""

from kompakt.log.config.defs import (
    BROKER_LOG_KEYS,
    CLEANUP_POLICY_COMPACT,
    CLEANUP_POLICY_DELETE,
    CODECS,
    CONFIG_DEFS,
    HOUR_MS,
    MINUTE_MS,
    POLICIES,
    SEGMENT_BYTES_MIN,
    BrokerSynonym,
    ConfigKey,
    broker_synonym,
    definition,
    documentation,
    parse_value,
)
from kompakt.log.config.properties import from_properties, read_properties, to_properties
from kompakt.log.config.topic import (
    DEFAULT_CONFIG,
    DYNAMIC_BROKER_CONFIG,
    DYNAMIC_DEFAULT_BROKER_CONFIG,
    DYNAMIC_TOPIC_CONFIG,
    STATIC_BROKER_CONFIG,
    BrokerDefaults,
    ConfigEntry,
    ConfigSynonym,
    TopicConfig,
)
from kompakt.log.config.values import (
    INT_MAX,
    INT_MIN,
    LONG_MAX,
    LONG_MIN,
    GzipLevel,
    ListOf,
    OneOf,
    Range,
    Validator,
    at_least,
    between,
    java_double,
    parse_type,
    to_raw,
    to_string,
)

__all__ = [
    "BROKER_LOG_KEYS",
    "CLEANUP_POLICY_COMPACT",
    "CLEANUP_POLICY_DELETE",
    "CODECS",
    "CONFIG_DEFS",
    "DEFAULT_CONFIG",
    "DYNAMIC_BROKER_CONFIG",
    "DYNAMIC_DEFAULT_BROKER_CONFIG",
    "DYNAMIC_TOPIC_CONFIG",
    "HOUR_MS",
    "INT_MAX",
    "INT_MIN",
    "LONG_MAX",
    "LONG_MIN",
    "MINUTE_MS",
    "POLICIES",
    "SEGMENT_BYTES_MIN",
    "STATIC_BROKER_CONFIG",
    "BrokerDefaults",
    "BrokerSynonym",
    "ConfigKey",
    "ConfigEntry",
    "ConfigSynonym",
    "GzipLevel",
    "ListOf",
    "OneOf",
    "Range",
    "TopicConfig",
    "Validator",
    "at_least",
    "between",
    "broker_synonym",
    "definition",
    "documentation",
    "from_properties",
    "java_double",
    "parse_type",
    "parse_value",
    "read_properties",
    "to_properties",
    "to_raw",
    "to_string",
]
