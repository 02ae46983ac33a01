"""Kafka topic configs: names, types, defaults, validation and broker-level synonyms.

Follows Kafka 4.x ``TopicConfig`` / ``LogConfig`` / ``ServerTopicConfigSynonyms`` so that
clients, ``kafka-configs``-style tools and users' habits carry over: the same keys, the
same defaults, the same ranges and the same error text ("Invalid value 5 for configuration
segment.bytes: Value must be at least 14"). A topic's effective value comes from its own
override, else from the broker's ``log.*`` synonym (a dynamic broker config, else
``server.properties``; see :class:`BrokerDefaults`), else from the built-in default; ``TopicConfig.describe()`` reports that chain like DescribeConfigs.

Deliberate differences from Kafka 4.x, each kept small:

- ``segment.bytes`` (and ``log.segment.bytes``) keeps the pre-4.0 minimum of 14 bytes (one
  legacy record's overhead) instead of 4.0's 1 MiB, so development and tests can roll
  tiny segments without Kafka 4's internal-only ``internal.segment.bytes``.
- ``cleanup.policy`` rejects duplicate entries, as KIP-1161 states; Kafka 4.2 later chose
  to drop duplicates silently for backward compatibility with stored configs.
- ``min.cleanable.dirty.ratio=NaN`` is rejected (Kafka's range check lets NaN through,
  which would disable cleaning without saying so).
- Remote-storage configs (``remote.*``, ``local.retention.*``) and the replication
  throttle lists are not defined: kompakt is a single node with no tiered storage.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, NamedTuple

from kompakt.errors import InvalidConfigError

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1

DYNAMIC_TOPIC_CONFIG = "DYNAMIC_TOPIC_CONFIG"
DYNAMIC_BROKER_CONFIG = "DYNAMIC_BROKER_CONFIG"
DYNAMIC_DEFAULT_BROKER_CONFIG = "DYNAMIC_DEFAULT_BROKER_CONFIG"
STATIC_BROKER_CONFIG = "STATIC_BROKER_CONFIG"
DEFAULT_CONFIG = "DEFAULT_CONFIG"

CLEANUP_POLICY_COMPACT = "compact"
CLEANUP_POLICY_DELETE = "delete"

HOUR_MS = 60 * 60 * 1000
MINUTE_MS = 60 * 1000

# Kafka's 4.x minimum is 1 MiB; see the module docstring for why we keep 14.
SEGMENT_BYTES_MIN = 14

Validator = Callable[[str, Any], None]


# -- value <-> text, the way Kafka's ConfigDef does it ----------------------------------------


def _java_double(v: float) -> str:
    """``Double.toString``: plain between 1e-3 and 1e7, else ``d.dddE±n``."""
    if v != v:
        return "NaN"
    if v in (float("inf"), float("-inf")):
        return "Infinity" if v > 0 else "-Infinity"
    if v == 0:
        return "-0.0" if str(v).startswith("-") else "0.0"
    if 1e-3 <= abs(v) < 1e7:
        s = repr(v)
        return s if "." in s else s + ".0"
    sign, digits, exp = Decimal(repr(v)).as_tuple()
    text = "".join(map(str, digits)).rstrip("0") or "0"
    point = len(digits) - 1 + int(exp)
    return f"{'-' if sign else ''}{text[0]}.{text[1:] or '0'}E{point}"


def to_string(value: Any) -> str | None:
    """A parsed value as Kafka prints it (``ConfigDef.convertToString``)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return _java_double(value)
    if isinstance(value, tuple | list):
        return ",".join(value)
    return str(value)


def _to_raw(value: Any) -> str:
    """Accept typed values from the embedded API by turning them into config text."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool | int | float | tuple | list):
        return to_string(value)  # type: ignore[return-value]
    raise InvalidConfigError(f"Config values must be strings, not {type(value).__name__}")


def _invalid(name: str, value: Any, message: str) -> InvalidConfigError:
    shown = to_string(value) if not isinstance(value, str) else value
    return InvalidConfigError(f"Invalid value {shown} for configuration {name}: {message}")


def _java_trim(s: str) -> str:
    """``String.trim()``: strips every char <= ' ', not Unicode whitespace."""
    start, end = 0, len(s)
    while start < end and s[start] <= " ":
        start += 1
    while end > start and s[end - 1] <= " ":
        end -= 1
    return s[start:end]


_INTEGER = re.compile(r"[+-]?[0-9]+")
_DOUBLE = re.compile(
    r"[+-]?(?:NaN|Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?)"
)
_LIST_SEPARATOR = re.compile(r"\s*,\s*")
_BOUNDS = {"int": (INT_MIN, INT_MAX), "long": (LONG_MIN, LONG_MAX)}


def _parse_type(name: str, raw: str, type_: str) -> Any:
    """Kafka's ``ConfigDef.parseType`` for a string value (Java's number grammar, not Python's)."""
    s = _java_trim(raw)
    if type_ in _BOUNDS:
        lo, hi = _BOUNDS[type_]
        if _INTEGER.fullmatch(s) and lo <= int(s) <= hi:
            return int(s)
        raise _invalid(name, raw, f"Not a number of type {type_.upper()}")
    if type_ == "double":
        if _DOUBLE.fullmatch(s):
            return float(s.rstrip("fFdD"))
        raise _invalid(name, raw, "Not a number of type DOUBLE")
    if type_ == "boolean":
        if s.lower() in ("true", "false"):
            return s.lower() == "true"
        raise _invalid(name, raw, "Expected value to be either true or false")
    if type_ == "list":
        return () if s == "" else tuple(_LIST_SEPARATOR.split(s))
    return s


# -- validators (Kafka's ConfigDef.Range / ValidString / ValidList) ---------------------------


@dataclass(frozen=True)
class Range:
    """Inclusive bounds; ``str()`` is Kafka's "Valid Values" column."""

    min: int | float | None = None
    max: int | float | None = None

    def __call__(self, name: str, value: Any) -> None:
        if self.min is not None and not value >= self.min:  # `not >=` also rejects NaN
            raise _invalid(name, value, f"Value must be at least {self.min}")
        if self.max is not None and value > self.max:
            raise _invalid(name, value, f"Value must be no more than {self.max}")

    def __str__(self) -> str:
        if self.max is None:
            return f"[{self.min},...]"
        return f"[{self.min},...,{self.max}]"


def at_least(n: int | float) -> Range:
    return Range(n, None)


def between(lo: int | float, hi: int | float) -> Range:
    return Range(lo, hi)


@dataclass(frozen=True)
class OneOf:
    """Case-sensitive choice, like ``ValidString.in``."""

    values: tuple[str, ...]

    def __call__(self, name: str, value: Any) -> None:
        if value not in self.values:
            raise _invalid(name, value, "String must be one of: " + ", ".join(self.values))

    def __str__(self) -> str:
        return "[" + ", ".join(self.values) + "]"


@dataclass(frozen=True)
class ListOf:
    """Each entry one of ``values``, no duplicates, no empty entries (KIP-1161's ValidList).

    An empty list is allowed: for ``cleanup.policy`` it means neither delete nor compact,
    i.e. infinite retention, as in Kafka 4.2.
    """

    values: tuple[str, ...]

    def __call__(self, name: str, value: Any) -> None:
        if len(set(value)) != len(value):
            raise InvalidConfigError(f"Configuration '{name}' values must not be duplicated.")
        for item in value:
            if item == "":
                raise InvalidConfigError(f"Configuration '{name}' values must not be empty.")
            OneOf(self.values)(name, item)

    def __str__(self) -> str:
        return "[" + ", ".join(self.values) + "]"


@dataclass(frozen=True)
class GzipLevel:
    """1..9, or -1 for zlib's default (Kafka's ``CompressionType.GZIP.levelValidator``)."""

    def __call__(self, name: str, value: Any) -> None:
        if value > 9 or (value < 1 and value != -1):
            raise _invalid(name, value, "Value must be between 1 and 9 or equal to -1")

    def __str__(self) -> str:
        return "[1,...,9] or -1"


# -- definitions ------------------------------------------------------------------------------


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
class ConfigDef:
    name: str
    type: str  # 'int' | 'long' | 'double' | 'string' | 'list' | 'boolean'
    default: Any
    validator: Validator | None
    doc: str
    broker_synonym: str | None  # the highest-priority broker key, Kafka's TOPIC_CONFIG_SYNONYMS
    broker_synonyms: tuple[BrokerSynonym, ...] = field(default=())

    def valid_values(self) -> str:
        return str(self.validator) if self.validator is not None else ""


CONFIG_DEFS: dict[str, ConfigDef] = {}


def _define(
    name: str,
    type_: str,
    default: Any,
    validator: Validator | None,
    synonyms: str | tuple[BrokerSynonym, ...],
    doc: str,
) -> None:
    """Register a topic config; a plain-string synonym shares the topic's type and default."""
    if validator is not None:
        validator(name, default)  # like Kafka's ConfigKey: a bad default is our bug
    if isinstance(synonyms, str):
        synonyms = (BrokerSynonym(synonyms, type_, 1, to_string(default)),)
    CONFIG_DEFS[name] = ConfigDef(
        name, type_, default, validator, doc, synonyms[0].name if synonyms else None, synonyms
    )


MiB = 1024 * 1024
POLICIES = (CLEANUP_POLICY_COMPACT, CLEANUP_POLICY_DELETE)
CODECS = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
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
        "Force an fsync after this many messages.")
_define("flush.ms", "long", LONG_MAX, at_least(0),
        (BrokerSynonym("log.flush.interval.ms", "long"),
         BrokerSynonym("log.flush.scheduler.interval.ms", "long", 1, str(LONG_MAX))),
        "Force an fsync after this much time.")
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
        "gzip level when compression.type=gzip.")
_define("compression.lz4.level", "int", 9, between(1, 17), "compression.lz4.level",
        "lz4 level when compression.type=lz4.")
_define("compression.zstd.level", "int", 3, between(-131072, 22), "compression.zstd.level",
        "zstd level when compression.type=zstd.")
_define("min.insync.replicas", "int", 1, at_least(1), "min.insync.replicas",
        "Replicas that must acknowledge an acks=all write (always met on one node).")
_define("unclean.leader.election.enable", "boolean", False, None, "unclean.leader.election.enable",
        "Let an out-of-sync replica lead (no effect on one node).")
_define("preallocate", "boolean", False, None, "log.preallocate",
        "Preallocate a segment's file when it is created.")
# fmt: on

BROKER_LOG_KEYS: frozenset[str] = frozenset(
    s.name for d in CONFIG_DEFS.values() for s in d.broker_synonyms
)


def _definition(name: str) -> ConfigDef:
    d = CONFIG_DEFS.get(name)
    if d is None:
        raise InvalidConfigError(f"Unknown topic config name: {name}")
    return d


def parse_value(name: str, raw: str) -> Any:
    """Parse and validate one topic config value (int, float, str, bool or tuple of str)."""
    d = _definition(name)
    value = _parse_type(name, _to_raw(raw), d.type)
    if d.validator is not None:
        d.validator(name, value)
    return value


def _parse_broker(d: ConfigDef, syn: BrokerSynonym, raw: str) -> Any:
    """A broker synonym's value in the topic's unit, checked by both keys' rules."""
    value = _parse_type(syn.name, raw, syn.type)
    if syn.validator is not None:
        syn.validator(syn.name, value)
    if syn.factor != 1:
        value *= syn.factor
    if d.name == "retention.ms" and value < 0:
        value = -1  # KafkaConfig.logRetentionTimeMillis: any negative means unlimited
    if d.validator is not None:
        d.validator(syn.name, value)
    return value


def _check_combination(values: Mapping[str, Any]) -> None:
    """Rules across keys (Kafka's ``LogConfig.validateValues``)."""
    lo, hi = values["min.compaction.lag.ms"], values["max.compaction.lag.ms"]
    if lo > hi:
        raise InvalidConfigError(
            f"conflict topic config setting min.compaction.lag.ms ({lo}) > "
            f"max.compaction.lag.ms ({hi})"
        )


def _clean_overrides(overrides: Mapping[str, Any] | None) -> dict[str, str]:
    raw: dict[str, str] = {}
    for name, value in (overrides or {}).items():
        _definition(name)
        if value is None:
            raise InvalidConfigError(f"Null value not supported for topic configs: {name}")
        raw[name] = _to_raw(value)
    return raw


class BrokerDefaults(dict):
    """The broker's effective values (a plain ``dict`` to readers) and the layers they
    come from, highest priority first: per-broker dynamic, cluster-default dynamic,
    ``server.properties`` (Kafka's ``DynamicBrokerConfig`` precedence). A value in a
    higher layer wins key by key; the layers let DescribeConfigs name every synonym.
    """

    def __init__(self, layers: Iterable[tuple[str, Mapping[str, str]]] = ()):
        self.layers: tuple[tuple[str, dict[str, str]], ...] = tuple(
            (source, dict(values)) for source, values in layers
        )
        merged: dict[str, str] = {}
        for _source, values in reversed(self.layers):
            merged.update(values)
        super().__init__(merged)

    @classmethod
    def of(cls, values: Mapping[str, Any] | None) -> BrokerDefaults:
        """``values`` as is when already layered, else as ``server.properties`` values."""
        if isinstance(values, BrokerDefaults):
            return values
        return cls([(STATIC_BROKER_CONFIG, {k: v for k, v in (values or {}).items()})])

    def only(self, keys: Iterable[str]) -> BrokerDefaults:
        """The same layers restricted to ``keys`` (and to values that are not None)."""
        wanted = set(keys)
        return BrokerDefaults(
            (source, {k: _to_raw(v) for k, v in values.items() if k in wanted and v is not None})
            for source, values in self.layers
        )

    def source(self, key: str) -> str:
        for source, values in self.layers:
            if key in values:
                return source
        return DEFAULT_CONFIG

    def __reduce__(self) -> tuple[Any, ...]:
        return (BrokerDefaults, (self.layers,))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, BrokerDefaults):
            return self.layers == other.layers
        return dict.__eq__(self, other)

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple((s, frozenset(v.items())) for s, v in self.layers))


class ConfigSynonym(NamedTuple):
    name: str
    value: str | None
    source: str


@dataclass
class ConfigEntry:
    """One row of a DescribeConfigs answer for a topic."""

    name: str
    value: str | None
    source: str
    is_default: bool
    read_only: bool = False
    sensitive: bool = False
    synonyms: list[ConfigSynonym] = field(default_factory=list)


class TopicConfig:
    """A topic's validated configuration: its overrides over broker defaults over Kafka's.

    Immutable; change it with ``with_changes``. Values are read by Kafka name with
    ``get("segment.bytes")`` or as attributes with underscores (``cfg.segment_bytes``).
    ``broker_defaults`` may be a whole broker config: only ``BROKER_LOG_KEYS`` are read.
    """

    __slots__ = ("_overrides", "_broker", "_values", "_sources")

    cleanup_policy: tuple[str, ...]
    segment_bytes: int
    segment_ms: int
    segment_jitter_ms: int
    segment_index_bytes: int
    index_interval_bytes: int
    flush_messages: int
    flush_ms: int
    retention_bytes: int
    retention_ms: int
    max_message_bytes: int
    min_cleanable_dirty_ratio: float
    min_compaction_lag_ms: int
    max_compaction_lag_ms: int
    delete_retention_ms: int
    file_delete_delay_ms: int
    message_timestamp_type: str
    message_timestamp_before_max_ms: int
    message_timestamp_after_max_ms: int
    compression_type: str
    compression_gzip_level: int
    compression_lz4_level: int
    compression_zstd_level: int
    min_insync_replicas: int
    unclean_leader_election_enable: bool
    preallocate: bool

    def __init__(
        self,
        overrides: Mapping[str, str] | None = None,
        broker_defaults: Mapping[str, str] | None = None,
    ):
        raw = _clean_overrides(overrides)
        broker = BrokerDefaults.of(broker_defaults).only(BROKER_LOG_KEYS)
        values: dict[str, Any] = {}
        sources: dict[str, str] = {}
        for name, d in CONFIG_DEFS.items():
            from_broker = [
                (_parse_broker(d, s, broker[s.name]), broker.source(s.name))
                for s in d.broker_synonyms
                if s.name in broker
            ]  # every broker value is checked, the first (highest priority) one is used
            if name in raw:
                values[name], sources[name] = parse_value(name, raw[name]), DYNAMIC_TOPIC_CONFIG
            elif from_broker:
                values[name], sources[name] = from_broker[0]
            else:
                values[name], sources[name] = d.default, DEFAULT_CONFIG
        _check_combination(values)
        object.__setattr__(self, "_overrides", raw)
        object.__setattr__(self, "_broker", broker)
        object.__setattr__(self, "_values", values)
        object.__setattr__(self, "_sources", sources)

    # -- reading --------------------------------------------------------------------------
    def get(self, name: str) -> Any:
        """The effective value of the Kafka-named config ``name``."""
        _definition(name)
        return self._values[name]

    def __getattr__(self, attr: str) -> Any:
        if not attr.startswith("_"):
            name = attr.replace("_", ".")
            if name in CONFIG_DEFS:
                return self._values[name]
        raise AttributeError(f"{type(self).__name__} has no attribute {attr!r}")

    def __setattr__(self, attr: str, value: Any) -> None:
        raise AttributeError("TopicConfig is immutable; use with_changes()")

    @property
    def compact(self) -> bool:
        return CLEANUP_POLICY_COMPACT in self._values["cleanup.policy"]

    @property
    def delete(self) -> bool:
        return CLEANUP_POLICY_DELETE in self._values["cleanup.policy"]

    @property
    def overrides(self) -> dict[str, str]:
        """The topic's explicitly set values, as given (what gets persisted)."""
        return dict(self._overrides)

    @property
    def broker_defaults(self) -> dict[str, str]:
        """The broker ``log.*`` values this config was built over (effective, flat)."""
        return dict(self._broker)

    def source(self, name: str) -> str:
        """Where the effective value came from: one of the DescribeConfigs sources."""
        _definition(name)
        return self._sources[name]

    def as_dict(self) -> dict[str, Any]:
        return dict(self._values)

    # -- changing -------------------------------------------------------------------------
    def with_changes(
        self, set: Mapping[str, str] | None = None, delete: Iterable[str] = ()
    ) -> TopicConfig:
        """A new config with overrides set or deleted (back to the broker/default value).

        Validated as a whole, like IncrementalAlterConfigs: a key cannot be both set and
        deleted, and deleting a key that was not overridden is a no-op.
        """
        set = dict(set or {})
        deleted = [delete] if isinstance(delete, str) else list(delete)
        for name in deleted:
            _definition(name)
            if name in set:
                raise InvalidConfigError(f"Error due to duplicate config keys: {name}")
        merged = {k: v for k, v in self._overrides.items() if k not in deleted}
        merged.update(set)
        return TopicConfig(merged, self._broker)

    # -- reporting ------------------------------------------------------------------------
    def describe(self) -> list[ConfigEntry]:
        """Every topic config as DescribeConfigs reports it, sorted by name.

        Synonyms run from highest priority down: the topic override, the broker's dynamic
        per-broker, dynamic default and static ``log.*`` values, then the built-in defaults
        (named by the broker key, as Kafka's ``ConfigHelper.configSynonyms`` does).
        """
        entries = []
        for name in sorted(CONFIG_DEFS):
            d = CONFIG_DEFS[name]
            value = to_string(self._values[name])
            synonyms = []
            if name in self._overrides:
                synonyms.append(ConfigSynonym(name, value, DYNAMIC_TOPIC_CONFIG))
            for source, layer in self._broker.layers:
                for s in d.broker_synonyms:
                    if s.name in layer:
                        synonyms.append(ConfigSynonym(s.name, layer[s.name], source))
            for s in d.broker_synonyms:
                if s.default is not None:
                    synonyms.append(ConfigSynonym(s.name, s.default, DEFAULT_CONFIG))
            if not d.broker_synonyms:
                synonyms.append(ConfigSynonym(name, to_string(d.default), DEFAULT_CONFIG))
            source = self._sources[name]
            entries.append(
                ConfigEntry(name, value, source, source == DEFAULT_CONFIG, synonyms=synonyms)
            )
        return entries

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TopicConfig):
            return NotImplemented
        return self._overrides == other._overrides and self._broker == other._broker

    def __hash__(self) -> int:
        return hash((frozenset(self._overrides.items()), hash(self._broker)))

    def __reduce__(self) -> tuple[Any, ...]:
        return (TopicConfig, (self._overrides, self._broker))

    def __repr__(self) -> str:
        return f"TopicConfig({self._overrides!r})"


# -- persistence: a Java-properties-like file of a topic's overrides --------------------------

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_CONTROLS = {v: "\\" + k for k, v in _ESCAPES.items()}
_KEY_END = "=: \t\f"
_LINE_BREAK = re.compile(r"\r\n|\r|\n")  # Java's line ends only; str.splitlines() splits on more


def _escape(text: str, is_key: bool) -> str:
    out = []
    for i, ch in enumerate(text):
        if ch == "\\":
            out.append("\\\\")
        elif ch in _CONTROLS:
            out.append(_CONTROLS[ch])
        elif ch in "=:#!" or (ch == " " and (is_key or i == 0)):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def to_properties(overrides: Mapping[str, str], header: str | None = None) -> str:
    """``key=value`` lines, sorted, escaped so ``from_properties`` reads them back exactly."""
    lines = [f"# {line}" for line in header.splitlines()] if header else []
    lines += [f"{_escape(k, True)}={_escape(v, False)}" for k, v in sorted(overrides.items())]
    return "".join(line + "\n" for line in lines)


def _logical_lines(text: str) -> Iterable[str]:
    """Join lines ending in an odd number of backslashes, as ``Properties.load`` does."""
    pending: str | None = None
    for line in _LINE_BREAK.split(text):
        line = line.lstrip(" \t\f") if pending is not None else line
        if pending is None and line.lstrip(" \t\f")[:1] in ("#", "!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending = (pending or "") + line[:-1]
            continue
        yield (pending or "") + line
        pending = None
    if pending is not None:
        yield pending


def _unescape_until(s: str, i: int, stop: str) -> tuple[str, int]:
    out = []
    while i < len(s) and s[i] not in stop:
        ch = s[i]
        if ch == "\\" and i + 1 < len(s):
            nxt = s[i + 1]
            if nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", s[i + 2 : i + 6]):
                out.append(chr(int(s[i + 2 : i + 6], 16)))
                i += 6
                continue
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out), i


def from_properties(text: str) -> dict[str, str]:
    """Read ``key=value`` (or ``key: value``, ``key value``) lines; '#' and '!' start comments."""
    result: dict[str, str] = {}
    for line in _logical_lines(text):
        line = line.lstrip(" \t\f")
        if not line:
            continue
        key, i = _unescape_until(line, 0, _KEY_END)
        while i < len(line) and line[i] in " \t\f":
            i += 1
        if i < len(line) and line[i] in "=:":
            i += 1
        while i < len(line) and line[i] in " \t\f":
            i += 1
        value, _ = _unescape_until(line, i, "")
        result[key] = value
    return result
