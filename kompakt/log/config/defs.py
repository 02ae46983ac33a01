"""The topic config table: every key Kafka 4.x's ``TopicConfig`` / ``LogConfig`` defines
that kompakt accepts, with its type, default, validator and broker-level synonyms
(``ServerTopicConfigSynonyms``). See :mod:`kompakt.log.config` for the deliberate
differences from Kafka.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kompakt.errors import InvalidConfigError
from kompakt.log.config.values import (
    LONG_MAX,
    GzipLevel,
    ListOf,
    OneOf,
    Validator,
    at_least,
    between,
    parse_type,
    to_raw,
    to_string,
)

CLEANUP_POLICY_COMPACT = "compact"
CLEANUP_POLICY_DELETE = "delete"

HOUR_MS = 60 * 60 * 1000
MINUTE_MS = 60 * 1000

# Kafka's 4.x minimum is 1 MiB; see kompakt.log.config's docstring for why we keep 14.
SEGMENT_BYTES_MIN = 14


@dataclass(frozen=True)
class BrokerSynonym:
    """A broker-level key that supplies a topic config's default (``ConfigSynonym``).

    ``factor`` converts the broker unit to the topic unit (``log.roll.hours`` -> ms).
    ``default`` is the broker key's own default as Kafka prints it, or None if it has none
    (then a lower-priority synonym supplies it, e.g. ``log.roll.ms`` -> ``log.roll.hours``).
    """

    name: str
    type: str
    factor: int = 1
    default: str | None = None
    validator: Validator | None = None


@dataclass(frozen=True)
class ConfigKey:
    """One config key, Kafka's ``ConfigDef.ConfigKey``: the one type of every key table
    (topic configs here, the broker's and its security keys in :mod:`kompakt.broker`).

    ``type`` is Kafka's ``ConfigDef.Type`` in lower case ('int' | 'long' | 'double' |
    'string' | 'list' | 'boolean' | 'password'); ``validator`` raises Kafka's "Invalid value
    X for configuration Y: ..." text. ``broker_synonyms`` (topic configs only) are the broker
    keys that supply the default, highest priority first (``TOPIC_CONFIG_SYNONYMS``).
    """

    name: str
    type: str
    default: Any
    doc: str
    validator: Validator | None = None
    # Why kompakt accepts the key (for Kafka compatibility) but does not act on it;
    # None: the key is honoured.
    ignored: str | None = None
    # Only in DescribeConfigs when set: keys of Kafka's sample server.properties that
    # have no meaning on one node.
    hidden: bool = False
    broker_synonyms: tuple[BrokerSynonym, ...] = field(default=())

    @property
    def broker_synonym(self) -> str | None:
        """The highest-priority broker key, Kafka's ``TOPIC_CONFIG_SYNONYMS`` entry."""
        return self.broker_synonyms[0].name if self.broker_synonyms else None

    def valid_values(self) -> str:
        return str(self.validator) if self.validator is not None else ""

    @property
    def documentation(self) -> str:
        """The DescribeConfigs ``documentation`` text: the doc, and whether it is ignored."""
        return documentation(self.doc, self.ignored)


def documentation(doc: str, ignored: str | None) -> str:
    """A config key's doc as DescribeConfigs (v3+) reports it: a key kompakt accepts but
    does not act on says so and why, so a user never relies on a silent no-op."""
    return doc if ignored is None else f"{doc} Ignored by kompakt: {ignored}"


CONFIG_DEFS: dict[str, ConfigKey] = {}


def _define(
    name: str,
    type_: str,
    default: Any,
    validator: Validator | None,
    synonyms: str | tuple[BrokerSynonym, ...],
    doc: str,
    ignored: str | None = None,
) -> None:
    """Register a topic config; a plain-string synonym shares the topic's type and default.

    ``ignored`` gives the reason when kompakt accepts the key (for Kafka compatibility:
    clients and tools set it) but does not act on it.
    """
    if validator is not None:
        validator(name, default)  # like Kafka's ConfigKey: a bad default is our bug
    if isinstance(synonyms, str):
        synonyms = (BrokerSynonym(synonyms, type_, 1, to_string(default)),)
    CONFIG_DEFS[name] = ConfigKey(
        name, type_, default, doc, validator, ignored, broker_synonyms=synonyms
    )


MiB = 1024 * 1024
POLICIES = (CLEANUP_POLICY_COMPACT, CLEANUP_POLICY_DELETE)
CODECS = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
_LEVEL_IGNORED = "broker-side recompression (compression.type) uses the codec's default level."
# fmt: off
_define("cleanup.policy", "list", (CLEANUP_POLICY_DELETE,), ListOf(POLICIES), "log.cleanup.policy",
        '"delete" (by time/size) and/or "compact" (latest value per key); empty keeps all.')
_define("segment.bytes", "int", 1024 * MiB, at_least(SEGMENT_BYTES_MIN), "log.segment.bytes",
        "Segment file size; retention and cleaning work a file at a time. Minimum 14, not 1 MiB.")
_define("segment.ms", "long", 7 * 24 * HOUR_MS, at_least(1),
        (BrokerSynonym("log.roll.ms", "long"),
         BrokerSynonym("log.roll.hours", "int", HOUR_MS, "168", at_least(1))),
        "Roll the active segment after this long even if not full.")
_define("segment.jitter.ms", "long", 0, at_least(0),
        (BrokerSynonym("log.roll.jitter.ms", "long"),
         BrokerSynonym("log.roll.jitter.hours", "int", HOUR_MS, "0", at_least(0))),
        "Maximum random jitter subtracted from the scheduled roll time.")
_define("segment.index.bytes", "int", 10 * MiB, at_least(4), "log.index.size.max.bytes",
        "Maximum size of a segment's offset index.")
_define("index.interval.bytes", "int", 4096, at_least(0), "log.index.interval.bytes",
        "Bytes of log between offset index entries.")
_define("flush.messages", "long", LONG_MAX, at_least(1), "log.flush.interval.messages",
        "Force an fsync after this many messages (checked on append, as UnifiedLog.append).")
_define("flush.ms", "long", LONG_MAX, at_least(0),
        (BrokerSynonym("log.flush.interval.ms", "long"),
         BrokerSynonym("log.flush.scheduler.interval.ms", "long", 1, str(LONG_MAX))),
        "Force an fsync once this long has passed since the last (checked on append).")
_define("retention.bytes", "long", -1, None, "log.retention.bytes",
        'Partition size above which "delete" discards old segments; -1: no limit.')
_define("retention.ms", "long", 7 * 24 * HOUR_MS, at_least(-1),
        (BrokerSynonym("log.retention.ms", "long"),
         BrokerSynonym("log.retention.minutes", "int", MINUTE_MS),
         BrokerSynonym("log.retention.hours", "int", HOUR_MS, "168")),
        'Age after which "delete" discards old segments; -1: no limit.')
_define("max.message.bytes", "int", MiB + 12, at_least(0), "message.max.bytes",
        "Largest record batch accepted, after compression (1 MiB + 12 bytes of log overhead).")
_define("min.cleanable.dirty.ratio", "double", 0.5, between(0, 1),
        "log.cleaner.min.cleanable.ratio", "Dirty share of a log above which it is cleaned.")
_define("min.compaction.lag.ms", "long", 0, at_least(0), "log.cleaner.min.compaction.lag.ms",
        "Minimum time a record stays uncompacted.")
_define("max.compaction.lag.ms", "long", LONG_MAX, at_least(1), "log.cleaner.max.compaction.lag.ms",
        "Maximum time a record stays ineligible for compaction.")
_define("delete.retention.ms", "long", 24 * HOUR_MS, at_least(0), "log.cleaner.delete.retention.ms",
        "How long tombstones survive after the clean that first saw them.")
_define("file.delete.delay.ms", "long", 60000, at_least(0), "log.segment.delete.delay.ms",
        "Wait before deleting a replaced or expired file from disk.")
_define("message.timestamp.type", "string", "CreateTime", OneOf(("CreateTime", "LogAppendTime")),
        "log.message.timestamp.type", "Record timestamps: the producer's or the append time.")
_define("message.timestamp.before.max.ms", "long", LONG_MAX, at_least(0),
        "log.message.timestamp.before.max.ms", "How far a CreateTime may lie in the past.")
_define("message.timestamp.after.max.ms", "long", HOUR_MS, at_least(0),  # 1 h since KIP-1030
        "log.message.timestamp.after.max.ms", "How far a CreateTime may lie in the future.")
_define("compression.type", "string", "producer", OneOf(CODECS), "compression.type",
        "Final codec of the topic; 'producer' keeps the producer's codec.")
_define("compression.gzip.level", "int", -1, GzipLevel(), "compression.gzip.level",
        "gzip level when compression.type=gzip.", _LEVEL_IGNORED)
_define("compression.lz4.level", "int", 9, between(1, 17), "compression.lz4.level",
        "lz4 level when compression.type=lz4.", _LEVEL_IGNORED)
_define("compression.zstd.level", "int", 3, between(-131072, 22), "compression.zstd.level",
        "zstd level when compression.type=zstd.", _LEVEL_IGNORED)
_define("min.insync.replicas", "int", 1, at_least(1), "min.insync.replicas",
        "Replicas that must acknowledge an acks=all write.",
        "a single node has no followers; its one replica is always in sync.")
_define("unclean.leader.election.enable", "boolean", False, None, "unclean.leader.election.enable",
        "Let an out-of-sync replica lead.",
        "a single node has no other replica that could lead.")
_define("preallocate", "boolean", False, None, "log.preallocate",
        "Preallocate a segment's file when it is created.",
        "segment files grow as records are appended (Kafka's preallocate helps NTFS).")
# tiered storage (KIP-405's TopicConfig keys; the broker side is kompakt.remote.config).
# Unlike Kafka, compacted topics may be tiered (kompakt.remote.config says why).
_define("remote.storage.enable", "boolean", False, None, (),
        "Copy this topic's rolled segments to the remote tier (compacted topics too).")
_define("local.retention.ms", "long", -2, at_least(-2),
        (BrokerSynonym("log.local.retention.ms", "long", 1, "-2"),),
        "How long a tiered segment also stays on local disk; -2: retention.ms.")
_define("local.retention.bytes", "long", -2, at_least(-2),
        (BrokerSynonym("log.local.retention.bytes", "long", 1, "-2"),),
        "Local bytes a tiered partition keeps before deleting uploaded segments; "
        "-2: retention.bytes.")
_define("remote.log.copy.disable", "boolean", False, None, (),
        "Stop copying segments to the remote tier; what is there stays readable and "
        "expires by retention.* (KIP-950).")
_define("remote.log.delete.on.disable", "boolean", False, None, (),
        "Delete the topic's remote data when remote.storage.enable is turned off (KIP-950).")
# fmt: on

BROKER_LOG_KEYS: frozenset[str] = frozenset(
    s.name for d in CONFIG_DEFS.values() for s in d.broker_synonyms
)


def broker_synonym(name: str) -> tuple[ConfigKey, BrokerSynonym] | None:
    """The topic config that the broker key ``name`` supplies a default for, and the
    synonym itself; None when ``name`` is not one of ``BROKER_LOG_KEYS``."""
    for d in CONFIG_DEFS.values():
        for syn in d.broker_synonyms:
            if syn.name == name:
                return d, syn
    return None


def definition(name: str) -> ConfigKey:
    d = CONFIG_DEFS.get(name)
    if d is None:
        raise InvalidConfigError(f"Unknown topic config name: {name}")
    return d


def parse_value(name: str, raw: str) -> Any:
    """Parse and validate one topic config value (int, float, str, bool or tuple of str)."""
    d = definition(name)
    value = parse_type(name, to_raw(raw), d.type)
    if d.validator is not None:
        d.validator(name, value)
    return value
