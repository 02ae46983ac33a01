"""A topic's effective configuration (Kafka's ``LogConfig``) and the broker defaults it
is built over (the ``log.*`` layers of Kafka's ``DynamicBrokerConfig``), with the
DescribeConfigs view of where each value comes from.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from kompakt.errors import InvalidConfigError
from kompakt.log.config.defs import (
    BROKER_LOG_KEYS,
    CLEANUP_POLICY_COMPACT,
    CLEANUP_POLICY_DELETE,
    CONFIG_DEFS,
    BrokerSynonym,
    ConfigKey,
    definition,
    parse_value,
)
from kompakt.log.config.values import parse_type, to_raw, to_string

DYNAMIC_TOPIC_CONFIG = "DYNAMIC_TOPIC_CONFIG"
DYNAMIC_BROKER_CONFIG = "DYNAMIC_BROKER_CONFIG"
DYNAMIC_DEFAULT_BROKER_CONFIG = "DYNAMIC_DEFAULT_BROKER_CONFIG"
STATIC_BROKER_CONFIG = "STATIC_BROKER_CONFIG"
DEFAULT_CONFIG = "DEFAULT_CONFIG"


def _parse_broker(d: ConfigKey, syn: BrokerSynonym, raw: str) -> Any:
    """A broker synonym's value in the topic's unit, checked by both keys' rules."""
    value = parse_type(syn.name, raw, syn.type)
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
    """Rules across keys (Kafka's ``LogConfig.validateValues``, and for a tiered topic
    ``validateRemoteStorageRetentionSize`` / ``...RetentionTime``)."""
    lo, hi = values["min.compaction.lag.ms"], values["max.compaction.lag.ms"]
    if lo > hi:
        raise InvalidConfigError(
            f"conflict topic config setting min.compaction.lag.ms ({lo}) > "
            f"max.compaction.lag.ms ({hi})"
        )
    if values["remote.storage.enable"]:
        _check_local_retention(values)
        if values["remote.log.copy.disable"]:
            _check_copy_disabled_retention(values)


def _check_copy_disabled_retention(values: Mapping[str, Any]) -> None:
    """Kafka's ``validateRetentionConfigsWhenRemoteCopyDisabled``: with nothing more
    copied, ``local.retention.*`` must follow ``retention.*`` (-2) or equal it."""
    for local_key, key in (
        ("local.retention.bytes", "retention.bytes"),
        ("local.retention.ms", "retention.ms"),
    ):
        if values[local_key] not in (-2, values[key]):
            raise InvalidConfigError(
                f"When `remote.log.copy.disable` is set to true, the `{local_key}` and "
                f"`{key}` must be set to the identical value because there will be no "
                "more logs copied to the remote storage."
            )


def _check_local_retention(values: Mapping[str, Any]) -> None:
    """``local.retention.*`` (-2: follow ``retention.*``) may be neither -1 nor more
    than ``retention.*`` when that is limited (Kafka's messages)."""
    for local_key, key in (
        ("local.retention.ms", "retention.ms"),
        ("local.retention.bytes", "retention.bytes"),
    ):
        local, total = values[local_key], values[key]
        if total == -1 or local == -2:
            continue
        if local == -1:
            raise InvalidConfigError(
                f"Invalid value -1 for configuration {local_key}: "
                f"Value must not be -1 as {key} value is set as {total}."
            )
        if local > total:
            raise InvalidConfigError(
                f"Invalid value {local} for configuration {local_key}: "
                f"Value must not be more than {key} property value: {total}"
            )


def _clean_overrides(overrides: Mapping[str, Any] | None) -> dict[str, str]:
    raw: dict[str, str] = {}
    for name, value in (overrides or {}).items():
        definition(name)
        if value is None:
            raise InvalidConfigError(f"Null value not supported for topic configs: {name}")
        raw[name] = to_raw(value)
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
            (source, {k: to_raw(v) for k, v in values.items() if k in wanted and v is not None})
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

    # ``__dict__`` holds each value under its attribute name too: a plain attribute
    # read, as every append reads a dozen of them (``__getattr__`` cost 4 us each)
    __slots__ = ("__dict__", "_overrides", "_broker", "_values", "_sources")

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
    remote_storage_enable: bool
    local_retention_ms: int
    local_retention_bytes: int
    remote_log_copy_disable: bool
    remote_log_delete_on_disable: bool

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
        self.__dict__.update({name.replace(".", "_"): v for name, v in values.items()})

    # -- reading --------------------------------------------------------------------------
    def get(self, name: str) -> Any:
        """The effective value of the Kafka-named config ``name``."""
        definition(name)
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
        definition(name)
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
            definition(name)
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
