"""Broker configuration: ``server.properties`` plus ``--override key=value`` pairs.

Keys and defaults are Kafka's. Topic-default keys (``log.*``, ``message.max.bytes``,
``compression.type``, ...; see :data:`kompakt.log.config.BROKER_LOG_KEYS`) are validated
with the topic config rules and handed to the :class:`LogManager`. Keys Kafka lacks start
with ``kompakt.``; ``spark.*`` keys pass through to the SparkSession. A set of Kafka keys
that make no sense on a single node without replication (``process.roles``,
``num.network.threads``, ...) are accepted so a Kafka ``server.properties`` works, and
ignored. Every key is either read by kompakt or declared ignored in the table with the
reason (``ConfigKey.ignored``), and DescribeConfigs' documentation says which. Any other
key, or a bad value, is an :class:`InvalidConfigError` naming the key.

The key table is :mod:`.broker_keys`, the listener values :mod:`.listeners`, the dynamic
configs' file :mod:`.dynamic_config`; this module layers them into one
:class:`BrokerConfig`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from kompakt.errors import InvalidConfigError
from kompakt.log.config import (
    BROKER_LOG_KEYS,
    DEFAULT_CONFIG,
    DYNAMIC_BROKER_CONFIG,
    DYNAMIC_DEFAULT_BROKER_CONFIG,
    LONG_MAX,
    STATIC_BROKER_CONFIG,
    BrokerDefaults,
    ConfigKey,
    ConfigSynonym,
    TopicConfig,
    parse_type,
    read_properties,
    to_string,
)
from kompakt.remote.config import (
    REMOTE_LOG_STORAGE_SYSTEM_ENABLE,
    check_broker_local_retention,
)

from kompakt.broker.spark_keys import check_spark_key  # isort: skip
from kompakt.broker.security.keys import (  # isort: skip
    PASSWORD,
    check_listener_key,
    listener_key_type,
    listener_prefix,
)
from kompakt.broker.broker_keys import (  # isort: skip
    BROKER_KEYS,
    DYNAMIC_KEYS,
    KEYS,
    broker_key,
    check_dynamic_keys,
    is_known_key,
)
from kompakt.broker.listeners import (  # isort: skip
    Listener,
    check_distinct,
    is_loopback,
    is_tls,
    parse_listener,
    parse_listeners,
    protocol_map,
)
from kompakt.broker.dynamic_config import (  # isort: skip
    DYNAMIC_CONFIGS_FILE,
    broker_layers,
    save_broker_layers,
)

log = logging.getLogger(__name__)


class BrokerConfigEntry(NamedTuple):
    """One row of a DescribeConfigs answer for a BROKER resource."""

    name: str
    value: str | None
    source: str
    read_only: bool
    synonyms: list[ConfigSynonym]
    type: str
    doc: str


@dataclass
class BrokerConfig:
    """Validated broker settings; ``raw`` holds every static key as given.

    ``values`` and ``log_config`` are effective: dynamic per-broker values over dynamic
    cluster-default values over ``raw`` over Kafka's defaults (``DynamicBrokerConfig``).
    ``log_config`` keeps those layers for DescribeConfigs.

    Shared by every thread of the broker (the Kafka loop, the admin endpoint, the
    cleaner): ``values``, ``log_config`` and the dynamic layers are never changed in
    place, only replaced whole by :meth:`adopt`, so a reader on another thread sees the
    old dict or the new one, never a mix.
    """

    raw: dict[str, str] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)
    log_config: dict[str, str] = field(default_factory=dict)
    spark: dict[str, str] = field(default_factory=dict)
    source_file: str | None = None
    dynamic_default: dict[str, str] = field(default_factory=dict)
    dynamic_broker: dict[str, str] = field(default_factory=dict)
    # called with the set of changed keys after a dynamic change was applied
    listeners_on_change: list[Callable[[set[str]], None]] = field(
        default_factory=list, repr=False, compare=False
    )

    @classmethod
    def from_mapping(cls, props: Mapping[str, str], source_file: str | None = None) -> BrokerConfig:
        raw = {str(k).strip(): str(v) for k, v in props.items()}
        values: dict[str, Any] = {}
        log_config: dict[str, str] = {}
        spark: dict[str, str] = {}
        for key, text in raw.items():
            if key in BROKER_KEYS:
                d = BROKER_KEYS[key]
                v = parse_type(key, text, d.type)
                if d.validator is not None:
                    d.validator(key, v)
                values[key] = v
            elif key in BROKER_LOG_KEYS:
                log_config[key] = text
            elif key.startswith("spark."):
                unknown = check_spark_key(key)
                if unknown is not None:
                    log.warning(unknown)
                spark[key] = text
            elif key.startswith("listener.name."):
                check_listener_key(key, text)
            else:
                raise InvalidConfigError(f"Unknown broker config key: {key}")
        TopicConfig({}, log_config)  # validates every log.* value, naming the key
        if values.get(REMOTE_LOG_STORAGE_SYSTEM_ENABLE):
            check_broker_local_retention(log_config)
        for d in KEYS:
            if d.name not in values:
                values[d.name] = d.default
        if "broker.id" in raw and "node.id" not in raw:
            values["node.id"] = values["broker.id"]
        if "log.dir" in raw and "log.dirs" not in raw:
            values["log.dirs"] = values["log.dir"]
        dirs = [d.strip() for d in values["log.dirs"].split(",")]
        if not all(dirs):
            raise InvalidConfigError(
                f"Invalid value {values['log.dirs']} for configuration log.dirs: "
                "an empty directory name"
            )
        if len({os.path.abspath(d) for d in dirs}) != len(dirs):
            raise InvalidConfigError(
                f"Invalid value {values['log.dirs']} for configuration log.dirs: "
                "a directory is listed twice"
            )
        self = cls(raw, values, BrokerDefaults.of(log_config), spark, source_file)
        self.listeners  # noqa: B018 (validate)
        self.advertised_listener  # noqa: B018
        self.security_protocols  # noqa: B018
        url = values["kompakt.admin.listener"]
        try:
            host, _port = parse_listener(url)
        except ValueError as exc:
            raise InvalidConfigError(
                f"Invalid value {url} for configuration "
                f"kompakt.admin.listener: expected http://HOST:PORT or https://HOST:PORT"
            ) from exc
        auth = values["kompakt.admin.auth"]
        if not is_loopback(host) and not values["kompakt.admin.allow.insecure"]:
            mtls = is_tls(url) and self.listener_value("ADMIN", "ssl.client.auth") == "required"
            if auth == "none" and not mtls:  # client certificates authenticate (SSL)
                raise InvalidConfigError(
                    f"kompakt.admin.listener={url} is not a loopback address and "
                    "kompakt.admin.auth=none: anyone who reaches it could compact; set "
                    "kompakt.admin.auth=basic (with https://), require client certificates "
                    "(https:// and listener.name.admin.ssl.client.auth=required), or "
                    "kompakt.admin.allow.insecure=true"
                )
            if not is_tls(url):
                raise InvalidConfigError(
                    f"kompakt.admin.listener={url} is not a loopback address: Basic "
                    "credentials would cross the network in clear; use https://, or "
                    "kompakt.admin.allow.insecure=true"
                )
        return self

    @classmethod
    def load(
        cls, path: str | Path | None = None, overrides: Iterable[str] | Mapping[str, str] = ()
    ) -> BrokerConfig:
        """Read ``path`` (Java properties) then apply ``key=value`` overrides.

        The file is read as Kafka reads it, with ``java.util.Properties.load(InputStream)``:
        bytes are ISO-8859-1 (every byte is a character; other characters are written
        as ``\\uXXXX``), so a file from a Kafka install never fails to decode.
        """
        props: dict[str, str] = {}
        if path is not None:
            try:
                props.update(read_properties(path))
            except OSError as exc:
                raise InvalidConfigError(f"cannot read {path}: {exc.strerror or exc}") from exc
        if isinstance(overrides, Mapping):
            props.update({str(k): str(v) for k, v in overrides.items()})
        else:
            for item in overrides:
                key, sep, value = item.partition("=")
                if not sep or not key.strip():
                    raise InvalidConfigError(f"--override expects key=value, got {item!r}")
                props[key.strip()] = value
        return cls.from_mapping(props, str(path) if path is not None else None)

    def get(self, key: str) -> Any:
        if key in self.values:
            return self.values[key]
        if key in self.log_config:
            return self.log_config[key]
        raise KeyError(key)

    # -- convenience -------------------------------------------------------------------
    @property
    def node_id(self) -> int:
        return self.values["node.id"]

    @property
    def data_dir(self) -> Path:
        """The first of ``log.dirs``: it also holds the broker's own files (topics,
        ACLs, SCRAM users, dynamic configs), as Kafka's metadata log is in the first."""
        return self.data_dirs[0]

    @property
    def data_dirs(self) -> list[Path]:
        """Every one of ``log.dirs`` (Kafka: a comma-separated list)."""
        return [Path(d.strip()) for d in self.values["log.dirs"].split(",")]

    @property
    def listeners(self) -> list[Listener]:
        """Kafka's ``listeners``, checked as ``KafkaConfig.listeners`` does: distinct names,
        distinct ports (0 excepted), each name in ``listener.security.protocol.map``."""
        ls = parse_listeners("listeners", self.values["listeners"])
        check_distinct("listeners", ls)
        protocols = self.protocol_map
        for x in ls:
            if x.name not in protocols:
                raise InvalidConfigError(f"No security protocol defined for listener {x.name}")
        return ls

    @property
    def protocol_map(self) -> dict[str, str]:
        """``listener.security.protocol.map`` as {listener name: security protocol}."""
        return protocol_map(self.values.get("listener.security.protocol.map") or "")

    @property
    def security_protocols(self) -> dict[str, str]:
        """{listener name: security protocol} for every listener, in ``listeners`` order."""
        protocols = self.protocol_map
        return {x.name: protocols[x.name] for x in self.listeners}

    def listener_value(self, listener: str, key: str) -> Any:
        """``key`` for one listener: ``listener.name.<listener>.<key>`` over ``key``
        (Kafka's per-listener overrides of ssl.* and sasl.* keys)."""
        prefixed = listener_prefix(listener) + key
        if prefixed in self.raw:
            d = BROKER_KEYS.get(key)
            text = self.raw[prefixed]
            return parse_type(prefixed, text, d.type) if d is not None else text
        return self.values.get(key)

    @property
    def listener(self) -> Listener:
        ls = self.listeners
        for x in ls:
            if x.name == "PLAINTEXT":
                return x
        return ls[0]

    @property
    def advertised_listeners(self) -> dict[str, Listener]:
        """{listener name: advertised address}: ``advertised.listeners`` entries by name,
        the listener itself for names it does not give (Kafka's default)."""
        out = {x.name: x for x in self.listeners}
        text = self.values.get("advertised.listeners")
        if text:
            adv = parse_listeners("advertised.listeners", text)
            check_distinct("advertised.listeners", adv)
            for x in adv:
                if x.name not in out:
                    raise InvalidConfigError(
                        f"Invalid value {text} for configuration advertised.listeners: "
                        f"listener {x.name} is not in listeners"
                    )
                out[x.name] = x
        return out

    @property
    def advertised_listener(self) -> Listener | None:
        text = self.values.get("advertised.listeners")
        if not text:
            return None
        return self.advertised_listeners[self.listener.name]

    @property
    def admin_listener(self) -> str:
        return self.values["kompakt.admin.listener"]

    def describe(self) -> list[tuple[str, str | None, bool, str]]:
        """(name, value, is_default, doc) for every known broker key."""
        return [
            (e.name, e.value, e.source == DEFAULT_CONFIG, e.doc)
            for e in self.describe_entries(per_broker=True)
        ]

    def describe_entries(self, per_broker: bool = True) -> list[BrokerConfigEntry]:
        """DescribeConfigs rows for the BROKER resource: per broker, every key with its
        source and synonyms (dynamic per-broker, dynamic default, static, default); for the
        cluster default resource ("") only the dynamic default values, as Kafka's
        ``ConfigHelper.createBrokerConfigEntry``."""
        rows: list[BrokerConfigEntry] = []
        dynamic = {**self.dynamic_default, **self.dynamic_broker}
        for d in KEYS:
            if d.hidden and d.name not in self.raw and d.name not in dynamic:
                continue
            default = to_string(d.default)
            rows.append(self._entry(d.name, to_string(self.values.get(d.name)), default, d))
        for name in sorted(BROKER_LOG_KEYS):
            d = broker_key(name)
            value = self.log_config.get(name, d.default)  # None: unset, no default (Kafka too)
            rows.append(self._entry(name, value, d.default, d))
        for k in sorted(k for k in self.raw if k.startswith("listener.name.")):
            type_ = listener_key_type(k)
            v = None if type_ == PASSWORD else self.raw[k]
            rows.append(
                BrokerConfigEntry(
                    k,
                    v,
                    STATIC_BROKER_CONFIG,
                    True,
                    [ConfigSynonym(k, v, STATIC_BROKER_CONFIG)],
                    type_,
                    "A per-listener override (listener.name.<listener>.<key>).",
                )
            )
        for k in sorted(k for k in dynamic if not is_known_key(k)):
            d = ConfigKey(k, "string", None, "Not a key kompakt knows: kept, read by nothing.")
            rows.append(self._entry(k, dynamic[k], None, d))
        for k, v in sorted(self.spark.items()):
            rows.append(
                BrokerConfigEntry(
                    k,
                    v,
                    STATIC_BROKER_CONFIG,
                    True,
                    [ConfigSynonym(k, v, STATIC_BROKER_CONFIG)],
                    "string",
                    "Passed to the SparkSession.",
                )
            )
        if per_broker:
            return rows
        out = []
        for e in rows:
            if e.name in self.dynamic_default:
                syn = [s for s in e.synonyms if s.source == DYNAMIC_DEFAULT_BROKER_CONFIG]
                out.append(e._replace(value=syn[0].value, source=syn[0].source, synonyms=syn))
        return out

    def _entry(
        self, name: str, value: str | None, default: str | None, d: ConfigKey
    ) -> BrokerConfigEntry:
        synonyms = []
        for source, layer in (
            (DYNAMIC_BROKER_CONFIG, self.dynamic_broker),
            (DYNAMIC_DEFAULT_BROKER_CONFIG, self.dynamic_default),
            (STATIC_BROKER_CONFIG, self.raw),
        ):
            if name in layer:
                synonyms.append(ConfigSynonym(name, layer[name], source))
        if default is not None:
            synonyms.append(ConfigSynonym(name, default, DEFAULT_CONFIG))
        source = synonyms[0].source if synonyms else DEFAULT_CONFIG
        if d.type == PASSWORD:  # Kafka's ConfigDef.Type.PASSWORD: never shown
            value = None
            synonyms = [s._replace(value=None) for s in synonyms]
        return BrokerConfigEntry(
            name, value, source, name not in DYNAMIC_KEYS, synonyms, d.type, d.documentation
        )

    # -- dynamic broker configs (Kafka's DynamicBrokerConfig) ------------------------------
    def with_dynamic(
        self, default: Mapping[str, str], per_broker: Mapping[str, str]
    ) -> BrokerConfig:
        """A new config with these dynamic layers, validated by the static rules (every
        value, and the log defaults as a whole); ``self`` is not changed."""
        check_dynamic_keys(default, per_broker=False)
        check_dynamic_keys(per_broker)
        merged = {**self.raw, **_known(default), **_known(per_broker)}
        fresh = BrokerConfig.from_mapping(merged, self.source_file)
        check_broker_local_retention(_log_keys(merged))  # DynamicLogConfig: always
        fresh.raw = dict(self.raw)
        fresh.dynamic_default = dict(default)
        fresh.dynamic_broker = dict(per_broker)
        fresh.log_config = BrokerDefaults(
            [
                (DYNAMIC_BROKER_CONFIG, _log_keys(per_broker)),
                (DYNAMIC_DEFAULT_BROKER_CONFIG, _log_keys(default)),
                (STATIC_BROKER_CONFIG, _log_keys(self.raw)),
            ]
        )
        return fresh

    def adopt(self, other: BrokerConfig) -> set[str]:
        """Take ``other``'s dynamic layers and effective values in place (everyone holding
        this object sees them) and tell the listeners; returns the keys whose value moved."""
        before = {**self.values, **self.log_config}
        self.values = dict(other.values)
        self.log_config = other.log_config
        self.dynamic_default = dict(other.dynamic_default)
        self.dynamic_broker = dict(other.dynamic_broker)
        after = {**self.values, **self.log_config}
        changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
        if changed:
            for listener in list(self.listeners_on_change):
                try:
                    listener(changed)
                except Exception:  # one failing reconfiguration must not undo the change
                    log.exception("applying dynamic broker configs %s failed", sorted(changed))
        return changed

    def save_dynamic(self) -> None:
        """Persist the dynamic layers in the data dir (:mod:`.dynamic_config`)."""
        save_broker_layers(
            self.data_dir / DYNAMIC_CONFIGS_FILE,
            self.node_id,
            self.dynamic_default,
            self.dynamic_broker,
        )

    def load_dynamic(self) -> None:
        """Apply the dynamic configs stored in the data dir (at start, before the logs
        open).

        Kafka's ``DynamicBrokerConfig.initialize`` logs and skips stored values it cannot
        apply; kompakt refuses to start instead, naming the file and the key: silently
        falling back to a static ``log.retention.ms`` could delete data the dynamic value
        kept. The file is only written after validation, so this needs a hand edit.
        """
        path = self.data_dir / DYNAMIC_CONFIGS_FILE
        default, per_broker = broker_layers(path, self.node_id)
        try:
            fresh = self.with_dynamic(default, per_broker)
        except InvalidConfigError as exc:
            raise InvalidConfigError(f"dynamic broker configs in {path}: {exc}") from exc
        self.adopt(fresh)


def _known(values: Mapping[str, str]) -> dict[str, str]:
    """The keys of a dynamic layer that kompakt has a definition of."""
    return {k: v for k, v in values.items() if is_known_key(k)}


def _log_keys(values: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in values.items() if k in BROKER_LOG_KEYS}


__all__ = [
    "BROKER_KEYS",
    "DYNAMIC_CONFIGS_FILE",
    "DYNAMIC_KEYS",
    "LONG_MAX",
    "BrokerConfig",
    "BrokerConfigEntry",
    "Listener",
    "parse_listeners",
]
