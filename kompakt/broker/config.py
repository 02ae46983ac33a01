"""Broker configuration: ``server.properties`` plus ``--override key=value`` pairs.

Keys and defaults are Kafka's. Topic-default keys (``log.*``, ``message.max.bytes``,
``compression.type``, ...; see :data:`kompakt.log.config.BROKER_LOG_KEYS`) are validated
with the topic config rules and handed to the :class:`LogManager`. Keys Kafka lacks start
with ``kompakt.``; ``spark.*`` keys pass through to the SparkSession. A set of Kafka keys
that make no sense on a single node without replication (``process.roles``,
``num.network.threads``, ...) are accepted so a Kafka ``server.properties`` works, and
ignored. Any other key, or a bad value, is an :class:`InvalidConfigError` naming the key.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kompakt.errors import InvalidConfigError
from kompakt.log.config import (
    BROKER_LOG_KEYS,
    CONFIG_DEFS,
    INT_MAX,
    LONG_MAX,
    TopicConfig,
    _parse_type,
    at_least,
    from_properties,
    to_string,
)


@dataclass(frozen=True)
class BrokerKey:
    name: str
    type: str  # int | long | boolean | string | double | list
    default: Any
    doc: str
    validator: Any = None
    ignored: bool = False  # accepted for compatibility with Kafka, no effect


def _choice(*values: str):
    def check(name: str, value: Any) -> None:
        if value not in values:
            raise InvalidConfigError(
                f"Invalid value {value} for configuration {name}: String must be one of: "
                + ", ".join(values)
            )

    return check


_KEYS: list[BrokerKey] = [
    BrokerKey("listeners", "string", "PLAINTEXT://127.0.0.1:9092", "Kafka listener(s)."),
    BrokerKey("advertised.listeners", "string", None, "Address given to clients."),
    BrokerKey("log.dirs", "string", "./kompakt-data", "The data directory (one)."),
    BrokerKey("log.dir", "string", None, "Alias of log.dirs when log.dirs is not set."),
    BrokerKey("node.id", "int", 1, "This broker's id.", at_least(0)),
    BrokerKey("broker.id", "int", None, "Alias of node.id."),
    BrokerKey("num.partitions", "int", 1, "Default partitions of new topics.", at_least(1)),
    BrokerKey("default.replication.factor", "int", 1, "Must be 1 on one node.", at_least(1)),
    BrokerKey("auto.create.topics.enable", "boolean", True, "Create topics on metadata."),
    BrokerKey(
        "socket.request.max.bytes", "int", 104857600, "Largest request accepted.", at_least(1)
    ),
    BrokerKey("log.cleaner.enable", "boolean", True, "Run the log cleaner."),
    BrokerKey("log.cleaner.backoff.ms", "long", 15000, "Cleaner sleep when idle.", at_least(0)),
    BrokerKey(
        "log.cleaner.dedupe.buffer.size",
        "long",
        134217728,
        "Offset map memory (local engine).",
        at_least(0),
    ),
    BrokerKey("log.cleaner.threads", "int", 1, "Cleaner threads.", at_least(0)),
    BrokerKey("log.cleaner.io.buffer.size", "int", 524288, "Cleaner I/O buffer.", at_least(0)),
    BrokerKey("log.cleaner.io.buffer.load.factor", "double", 0.9, "Offset map load factor."),
    BrokerKey(
        "log.cleaner.io.max.bytes.per.second", "double", 1.7976931348623157e308, "Cleaner I/O cap."
    ),
    BrokerKey(
        "log.retention.check.interval.ms",
        "long",
        300000,
        "How often retention runs.",
        at_least(1),
    ),
    BrokerKey(
        "log.flush.offset.checkpoint.interval.ms",
        "int",
        60000,
        "How often recovery points are checkpointed.",
        at_least(0),
    ),
    # offsets.*: Kafka's GroupCoordinatorConfig names, types, defaults and atLeast(1)
    BrokerKey(
        "offsets.topic.num.partitions",
        "int",
        50,
        "Partitions of __consumer_offsets.",
        at_least(1),
    ),
    BrokerKey("offsets.topic.replication.factor", "int", 1, "Must be 1 on one node.", at_least(1)),
    BrokerKey(
        "offsets.topic.segment.bytes",
        "int",
        104857600,
        "Segment size of __consumer_offsets (set when the topic is created); small "
        "segments let the cleaner compact it sooner.",
        at_least(1),
    ),
    BrokerKey(
        "offsets.retention.minutes",
        "int",
        10080,
        "Committed offsets of a group are removed this long after it becomes empty (or, "
        "for a subscribed group, after the last commit of a topic it no longer subscribes "
        "to; for a standalone consumer, after the last commit).",
        at_least(1),
    ),
    BrokerKey(
        "offsets.retention.check.interval.ms",
        "long",
        600000,
        "How often expired offsets are looked for.",
        at_least(1),
    ),
    BrokerKey("offsets.commit.timeout.ms", "int", 5000, "Offset commit timeout.", at_least(1)),
    BrokerKey("group.initial.rebalance.delay.ms", "int", 3000, "Delay of the first rebalance."),
    BrokerKey("group.min.session.timeout.ms", "int", 6000, "Smallest session timeout."),
    BrokerKey("group.max.session.timeout.ms", "int", 1800000, "Largest session timeout."),
    BrokerKey("group.max.size", "int", INT_MAX, "Members per group."),
    BrokerKey("transaction.state.log.replication.factor", "int", 1, "Ignored.", ignored=True),
    BrokerKey("transaction.state.log.min.isr", "int", 1, "Ignored.", ignored=True),
    BrokerKey(
        "kompakt.cleaner.engine", "string", "spark", "spark | local", _choice("spark", "local")
    ),
    BrokerKey("kompakt.spark.master", "string", "local[*]", "Spark master URL."),
    BrokerKey(
        "kompakt.admin.listener", "string", "http://127.0.0.1:9644", "Admin/metrics HTTP address."
    ),
]
# Keys of Kafka's sample server.properties that have no meaning on one kompakt node.
for _name in (
    "process.roles",
    "controller.quorum.voters",
    "controller.quorum.bootstrap.servers",
    "controller.listener.names",
    "inter.broker.listener.name",
    "listener.security.protocol.map",
    "num.network.threads",
    "num.io.threads",
    "socket.send.buffer.bytes",
    "socket.receive.buffer.bytes",
    "num.recovery.threads.per.data.dir",
    "share.coordinator.state.topic.replication.factor",
    "share.coordinator.state.topic.min.isr",
    "zookeeper.connect",
    "zookeeper.connection.timeout.ms",
):
    _KEYS.append(
        BrokerKey(
            _name, "string", None, "Accepted for Kafka compatibility; no effect.", ignored=True
        )
    )

BROKER_KEYS: dict[str, BrokerKey] = {k.name: k for k in _KEYS}

_LISTENER = re.compile(r"^([A-Za-z0-9_]+)://(\[[^\]]*\]|[^:/]*):(\d+)$")


@dataclass(frozen=True)
class Listener:
    name: str
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


def parse_listeners(key: str, text: str) -> list[Listener]:
    out = []
    for item in [s.strip() for s in text.split(",") if s.strip()]:
        m = _LISTENER.match(item)
        if not m or not 0 <= int(m.group(3)) <= 65535:
            raise InvalidConfigError(
                f"Invalid value {text} for configuration {key}: expected NAME://HOST:PORT"
            )
        out.append(Listener(m.group(1).upper(), m.group(2).strip("[]"), int(m.group(3))))
    if not out:
        raise InvalidConfigError(f"Invalid value {text!r} for configuration {key}: empty")
    return out


@dataclass
class BrokerConfig:
    """Validated broker settings; ``raw`` holds every key as given."""

    raw: dict[str, str] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)
    log_config: dict[str, str] = field(default_factory=dict)
    spark: dict[str, str] = field(default_factory=dict)
    source_file: str | None = None

    @classmethod
    def from_mapping(cls, props: Mapping[str, str], source_file: str | None = None) -> BrokerConfig:
        raw = {str(k).strip(): str(v) for k, v in props.items()}
        values: dict[str, Any] = {}
        log_config: dict[str, str] = {}
        spark: dict[str, str] = {}
        for key, text in raw.items():
            if key in BROKER_KEYS:
                d = BROKER_KEYS[key]
                v = _parse_type(key, text, d.type if d.type != "list" else "list")
                if d.validator is not None:
                    d.validator(key, v)
                values[key] = v
            elif key in BROKER_LOG_KEYS:
                log_config[key] = text
            elif key.startswith("spark."):
                spark[key] = text
            else:
                raise InvalidConfigError(f"Unknown broker config key: {key}")
        TopicConfig({}, log_config)  # validates every log.* value, naming the key
        for d in _KEYS:
            if d.name not in values:
                values[d.name] = d.default
        if "broker.id" in raw and "node.id" not in raw:
            values["node.id"] = values["broker.id"]
        if "log.dir" in raw and "log.dirs" not in raw:
            values["log.dirs"] = values["log.dir"]
        if "," in values["log.dirs"]:
            raise InvalidConfigError(
                f"Invalid value {values['log.dirs']} for configuration log.dirs: "
                "kompakt uses one data directory"
            )
        self = cls(raw, values, log_config, spark, source_file)
        self.listeners  # noqa: B018 (validate)
        self.advertised_listener  # noqa: B018
        from kompakt.broker.admin_http import parse_listener

        try:
            parse_listener(values["kompakt.admin.listener"])
        except ValueError as exc:
            raise InvalidConfigError(
                f"Invalid value {values['kompakt.admin.listener']} for configuration "
                f"kompakt.admin.listener: expected http://HOST:PORT"
            ) from exc
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
                props.update(from_properties(Path(path).read_bytes().decode("iso-8859-1")))
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
        return Path(self.values["log.dirs"])

    @property
    def listeners(self) -> list[Listener]:
        return parse_listeners("listeners", self.values["listeners"])

    @property
    def listener(self) -> Listener:
        ls = self.listeners
        for x in ls:
            if x.name == "PLAINTEXT":
                return x
        return ls[0]

    @property
    def advertised_listener(self) -> Listener | None:
        text = self.values.get("advertised.listeners")
        if not text:
            return None
        ls = parse_listeners("advertised.listeners", text)
        for x in ls:
            if x.name == self.listener.name:
                return x
        return ls[0]

    @property
    def admin_listener(self) -> str:
        return self.values["kompakt.admin.listener"]

    def describe(self) -> list[tuple[str, str | None, bool, str]]:
        """(name, value, is_default, doc) for every known broker key, for DescribeConfigs."""
        rows: list[tuple[str, str | None, bool, str]] = []
        for d in _KEYS:
            if d.ignored and d.name not in self.raw:
                continue
            v = self.values.get(d.name)
            rows.append((d.name, to_string(v), d.name not in self.raw, d.doc))
        for name in sorted(BROKER_LOG_KEYS):
            default = None
            doc = ""
            for cd in CONFIG_DEFS.values():
                for s in cd.broker_synonyms:
                    if s.name == name:
                        default = s.default
                        doc = cd.doc
            if name in self.log_config:
                rows.append((name, self.log_config[name], False, doc))
            elif default is not None:
                rows.append((name, default, True, doc))
        for k, v in sorted(self.spark.items()):
            rows.append((k, v, False, "Passed to the SparkSession."))
        return rows


__all__ = ["BrokerConfig", "Listener", "BROKER_KEYS", "parse_listeners", "LONG_MAX"]
