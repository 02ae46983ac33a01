"""Broker configuration: ``server.properties`` plus ``--override key=value`` pairs.

Keys and defaults are Kafka's. Topic-default keys (``log.*``, ``message.max.bytes``,
``compression.type``, ...; see :data:`kompakt.log.config.BROKER_LOG_KEYS`) are validated
with the topic config rules and handed to the :class:`LogManager`. Keys Kafka lacks start
with ``kompakt.``; ``spark.*`` keys pass through to the SparkSession. A set of Kafka keys
that make no sense on a single node without replication (``process.roles``,
``num.network.threads``, ...) are accepted so a Kafka ``server.properties`` works, and
ignored. Every key is either read by kompakt or declared ignored in the table with the
reason (``BrokerKey.ignored``), and DescribeConfigs' documentation says which. Any other
key, or a bad value, is an :class:`InvalidConfigError` naming the key.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from kompakt.cleaner.config import (
    BACKLOG_INTERVAL_DEFAULT,
    BACKLOG_MAX_RATE_DEFAULT,
    BACKLOG_P_COEFF_DEFAULT,
    BACKLOG_SETPOINT_DEFAULT,
    DEDUPE_BUFFER_SIZE_DEFAULT,
    IO_BUFFER_LOAD_FACTOR_DEFAULT,
    IO_BUFFER_SIZE_DEFAULT,
    IO_CHECK_INTERVAL_DEFAULT,
    IO_MAX_BYTES_PER_SECOND_DEFAULT,
)
from kompakt.errors import InvalidConfigError
from kompakt.log.config import (
    BROKER_LOG_KEYS,
    CONFIG_DEFS,
    DEFAULT_CONFIG,
    DYNAMIC_BROKER_CONFIG,
    DYNAMIC_DEFAULT_BROKER_CONFIG,
    INT_MAX,
    LONG_MAX,
    STATIC_BROKER_CONFIG,
    BrokerDefaults,
    ConfigSynonym,
    TopicConfig,
    at_least,
    broker_synonym,
    documentation,
    parse_type,
    read_properties,
    to_string,
)
from kompakt.log.durable import write_json_atomically
from kompakt.log.open_segments import DEFAULT_MAX_OPEN_SEGMENTS

from kompakt.broker.spark_keys import check_spark_key  # isort: skip

from kompakt.broker.security.keys import (  # isort: skip
    PASSWORD,
    SECURITY_KEYS,
    SECURITY_PROTOCOLS,
    check_listener_key,
    listener_key_type,
    listener_prefix,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BrokerKey:
    """One broker key of Kafka's ``KafkaConfig``, as kompakt accepts it."""

    name: str
    type: str  # int | long | boolean | string | double | list
    default: Any
    doc: str
    validator: Any = None
    # Why kompakt accepts the key (for Kafka compatibility) but does not act on it;
    # None: the key is honoured.
    ignored: str | None = None
    # Only in DescribeConfigs when set: keys of Kafka's sample server.properties that
    # have no meaning on one node.
    hidden: bool = False

    @property
    def documentation(self) -> str:
        return documentation(self.doc, self.ignored)


_ONE_NODE = "a single node: the replication factor is always 1."
_ONE_CLEANER_THREAD = "kompakt runs one cleaner thread (the spark engine is parallel inside)."


def _choice(*values: str):
    def check(name: str, value: Any) -> None:
        if value not in values:
            raise InvalidConfigError(
                f"Invalid value {value} for configuration {name}: String must be one of: "
                + ", ".join(values)
            )

    return check


def _authorizer_class(name: str, value: Any) -> None:
    known = (
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "kafka.security.authorizer.AclAuthorizer",
    )
    if value and value not in known:
        raise InvalidConfigError(
            f"Invalid value {value} for configuration {name}: kompakt implements Kafka's "
            f"StandardAuthorizer only; use {known[0]} (or leave it empty for none)"
        )


def _principals(name: str, value: Any) -> None:
    for p in str(value or "").split(";"):
        kind, sep, who = p.strip().partition(":")
        if p.strip() and not (sep and kind and who):
            raise InvalidConfigError(
                f"Invalid value {value} for configuration {name}: {p.strip()!r} is not a "
                "principal (Type:name, e.g. User:admin)"
            )


_KEYS: list[BrokerKey] = [
    BrokerKey("listeners", "string", "PLAINTEXT://127.0.0.1:9092", "Kafka listener(s)."),
    BrokerKey("advertised.listeners", "string", None, "Address given to clients."),
    BrokerKey(
        "log.dirs",
        "string",
        "./kompakt-data",
        "Comma-separated log directories; new partitions go to the one with the fewest.",
    ),
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
        DEDUPE_BUFFER_SIZE_DEFAULT,
        "Offset map memory (local engine).",
        at_least(0),
    ),
    BrokerKey(
        "log.cleaner.threads", "int", 1, "Cleaner threads.", at_least(0), _ONE_CLEANER_THREAD
    ),
    BrokerKey(
        "log.cleaner.io.buffer.size",
        "int",
        IO_BUFFER_SIZE_DEFAULT,
        "Cleaner I/O buffer.",
        at_least(0),
        "the cleaner reads and writes whole batches, not through a fixed buffer.",
    ),
    BrokerKey(
        "log.cleaner.io.buffer.load.factor",
        "double",
        IO_BUFFER_LOAD_FACTOR_DEFAULT,
        "Offset map load factor (local engine; the spark engine has no fixed map).",
    ),
    BrokerKey(
        "log.cleaner.io.max.bytes.per.second",
        "double",
        IO_MAX_BYTES_PER_SECOND_DEFAULT,
        "The log cleaner's I/O limit: bytes read plus bytes written per second, averaged "
        "over 300 ms periods (Kafka's Throttler; both engines, a Spark clean splitting it "
        "evenly over the tasks that run at once). Dynamic. Kafka's default is unlimited "
        "(Double.MaxValue); kompakt's, 32 MiB/s (33554432), was chosen with "
        "benchmarks/bench_broker.py --cleaner-throttle so that produce p99 during a large "
        "clean stays within 2x idle (README). The kompakt.log.cleaner.backlog.* rule "
        "raises it while the dirty-bytes backlog is above its setpoint.",
        at_least(1.0),
    ),
    BrokerKey(
        "kompakt.log.cleaner.io.check.interval.ms",
        "long",
        IO_CHECK_INTERVAL_DEFAULT,
        "kompakt extension: the period over which the cleaner's I/O throttle measures "
        "its rate before it sleeps (Kafka's LogCleaner uses a fixed 300 ms). Shorter "
        "periods make shorter bursts of cleaner I/O between sleeps.",
        at_least(1),
    ),
    # kompakt's backlog rule for the cleaner's I/O limit (Redpanda's backlog controller)
    BrokerKey(
        "kompakt.log.cleaner.backlog.setpoint.bytes",
        "long",
        BACKLOG_SETPOINT_DEFAULT,
        "kompakt extension: the dirty-bytes backlog (cleanable bytes of all compacted "
        "partitions) the cleaner's I/O limit is meant for; above it the limit rises in "
        "proportion (Redpanda's backlog controller setpoint).",
        at_least(1),
    ),
    BrokerKey(
        "kompakt.log.cleaner.backlog.p.coeff",
        "double",
        BACKLOG_P_COEFF_DEFAULT,
        "kompakt extension: proportional gain of the backlog rule: the effective limit is "
        "log.cleaner.io.max.bytes.per.second * (1 + p.coeff * (backlog - setpoint) / "
        "setpoint) above the setpoint; 0 turns the rule off.",
        at_least(0.0),
    ),
    BrokerKey(
        "kompakt.log.cleaner.backlog.max.bytes.per.second",
        "double",
        BACKLOG_MAX_RATE_DEFAULT,
        "kompakt extension: the highest I/O limit the backlog rule may set (default "
        "unlimited, Double.MaxValue).",
        at_least(1.0),
    ),
    BrokerKey(
        "kompakt.log.cleaner.backlog.update.interval.ms",
        "long",
        BACKLOG_INTERVAL_DEFAULT,
        "kompakt extension: how often the backlog rule samples the dirty-bytes backlog.",
        at_least(1),
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
    BrokerKey(
        "offsets.topic.replication.factor",
        "int",
        1,
        "Replication factor of __consumer_offsets.",
        at_least(1),
        _ONE_NODE,
    ),
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
    BrokerKey(
        "offsets.commit.timeout.ms",
        "int",
        5000,
        "Offset commit timeout.",
        at_least(1),
        "a commit is written to the local log before the answer; no replicas to wait for.",
    ),
    BrokerKey("group.initial.rebalance.delay.ms", "int", 3000, "Delay of the first rebalance."),
    BrokerKey("group.min.session.timeout.ms", "int", 6000, "Smallest session timeout."),
    BrokerKey("group.max.session.timeout.ms", "int", 1800000, "Largest session timeout."),
    BrokerKey("group.max.size", "int", INT_MAX, "Members per group."),
    # transaction.*: Kafka's TransactionStateManagerConfig / TransactionLogConfig
    BrokerKey(
        "transactional.id.expiration.ms",
        "int",
        604800000,
        "How long an idle transactional id is kept before it expires.",
        at_least(1),
    ),
    BrokerKey(
        "transaction.max.timeout.ms",
        "int",
        900000,
        "Largest transaction.timeout.ms a producer may ask for.",
        at_least(1),
    ),
    BrokerKey(
        "transaction.state.log.num.partitions",
        "int",
        50,
        "Partitions of __transaction_state.",
        at_least(1),
    ),
    BrokerKey(
        "transaction.state.log.segment.bytes",
        "int",
        104857600,
        "segment.bytes of __transaction_state.",
        at_least(1),
    ),
    BrokerKey(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        "int",
        10000,
        "How often transactions open longer than their timeout are aborted.",
        at_least(1),
    ),
    BrokerKey(
        "transaction.remove.expired.transaction.cleanup.interval.ms",
        "int",
        3600000,
        "How often expired transactional ids are removed.",
        at_least(1),
    ),
    BrokerKey(
        "transaction.state.log.replication.factor",
        "int",
        1,
        "Replication factor of __transaction_state.",
        ignored=_ONE_NODE,
        hidden=True,
    ),
    BrokerKey(
        "transaction.state.log.min.isr",
        "int",
        1,
        "min.insync.replicas of __transaction_state.",
        ignored=_ONE_NODE,
        hidden=True,
    ),
    BrokerKey(
        "kompakt.cleaner.engine",
        "string",
        "spark",
        "spark | local | auto",
        _choice("spark", "local", "auto"),
    ),
    BrokerKey(
        "kompakt.log.max.open.segments",
        "int",
        DEFAULT_MAX_OPEN_SEGMENTS,
        "Most segments with open files (kompakt's extension; Kafka keeps every segment's "
        "files open). Segment files open on first use (Kafka's LazyIndex, and the .log "
        "too) and the least recently used segment is closed beyond this many, so a "
        "broker holds at most about 5 descriptors per open segment (the .log, and the "
        ".index and .timeindex each a file plus its memory map) whatever its partition "
        "count; a closed segment reopens on its next read or append.",
        at_least(1),
    ),
    BrokerKey("kompakt.spark.master", "string", "local[*]", "Spark master URL."),
    BrokerKey(
        "kompakt.spark.start",
        "string",
        "eager",
        "eager | lazy: with kompakt.cleaner.engine=spark, eager starts the SparkSession "
        "in a background thread as soon as the broker listens (start-up and the Kafka "
        "port never wait for it), so the first clean does not pay the JVM and session "
        "start (seconds to a minute); lazy starts it at the first clean. Eager is the "
        "default: a broker's cleaner is expected to run, and a clean that starts late "
        "lets a compacted topic grow unseen. The local engine never starts Spark.",
        _choice("eager", "lazy"),
    ),
    BrokerKey(
        "kompakt.spark.log.level",
        "string",
        "ERROR",
        "Level of Spark's own (log4j) lines on stderr: OFF | ERROR | WARN | INFO | DEBUG. "
        "Ignored when spark.driver.extraJavaOptions names a -Dlog4j2.configurationFile.",
        _choice("OFF", "FATAL", "ERROR", "WARN", "INFO", "DEBUG", "TRACE", "ALL"),
    ),
    BrokerKey(
        "kompakt.admin.listener", "string", "http://127.0.0.1:9644", "Admin/metrics HTTP address."
    ),
    BrokerKey(
        "kompakt.admin.console.writes",
        "boolean",
        False,
        "Let the web console (served by the admin listener) run actions that change data: "
        "compact now, topic config edits. Off: the console is read-only (a dry run is "
        "still offered). The actions are behind kompakt.admin.auth like POST /v1/compact.",
        None,
    ),
    BrokerKey(
        "kompakt.admin.console.history.interval.ms",
        "long",
        30_000,
        "How often the broker samples each partition's size and dirty ratio for the "
        "console's charts (kept in memory, the last 256 samples per partition).",
        at_least(100),
    ),
    # Kafka's authorizer keys (KIP-801 StandardAuthorizer); kompakt.broker.acls
    BrokerKey(
        "authorizer.class.name",
        "string",
        "",
        "The authorizer: empty (none: every request allowed, ACL APIs SECURITY_DISABLED) or "
        "Kafka's org.apache.kafka.metadata.authorizer.StandardAuthorizer (or the older "
        "kafka.security.authorizer.AclAuthorizer), which kompakt implements.",
        _authorizer_class,
    ),
    BrokerKey(
        "super.users",
        "string",
        "",
        "Semicolon-separated principals (User:admin;User:ops) allowed everything.",
        _principals,
    ),
    BrokerKey(
        "allow.everyone.if.no.acl.found",
        "boolean",
        False,
        "Allow a request on a resource no ACL names at all.",
    ),
    *(BrokerKey(*k) for k in SECURITY_KEYS),
]
# Keys of Kafka's sample server.properties that have no meaning on one kompakt node.
for _name in (
    "process.roles",
    "controller.quorum.voters",
    "controller.quorum.bootstrap.servers",
    "controller.listener.names",
    "inter.broker.listener.name",
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
            _name,
            "string",
            None,
            "Kafka's key, accepted so a Kafka server.properties works.",
            ignored="no meaning on a single kompakt node (no controller quorum, replicas, "
            "network thread pools or ZooKeeper).",
            hidden=True,
        )
    )

# Kafka's SASL login keys (DynamicListenerConfig.ReconfigurableConfigs): typed and stored
# as Kafka does, dynamic per broker, read by nothing here.
_NO_LOGIN = "kompakt serves no GSSAPI (Kerberos) or OAUTHBEARER login to refresh."
for _name, _type, _default, _doc in (
    ("sasl.kerberos.service.name", "string", None, "Kerberos principal name Kafka runs as."),
    ("sasl.kerberos.kinit.cmd", "string", "/usr/bin/kinit", "Kerberos kinit command path."),
    ("sasl.kerberos.ticket.renew.window.factor", "double", 0.8, "Ticket renewal point."),
    ("sasl.kerberos.ticket.renew.jitter", "double", 0.05, "Jitter of the renewal point."),
    ("sasl.kerberos.min.time.before.relogin", "long", 60000, "Least time between relogins."),
    ("sasl.kerberos.principal.to.local.rules", "list", ("DEFAULT",), "Principal name rules."),
    ("sasl.login.refresh.window.factor", "double", 0.8, "Login refresh point."),
    ("sasl.login.refresh.window.jitter", "double", 0.05, "Jitter of the refresh point."),
    ("sasl.login.refresh.min.period.seconds", "int", 60, "Least time between refreshes."),
    ("sasl.login.refresh.buffer.seconds", "int", 300, "Time kept before expiry."),
):
    _KEYS.append(BrokerKey(_name, _type, _default, _doc, ignored=_NO_LOGIN, hidden=True))

# GroupCoordinatorConfig / ShareGroupConfig: the defaults and bounds of GROUP configs
for _proto, _what in (("consumer", "KIP-848 consumer"), ("share", "KIP-932 share")):
    for _name, _default in (
        ("session.timeout.ms", 45000),
        ("min.session.timeout.ms", 45000),
        ("max.session.timeout.ms", 60000),
        ("heartbeat.interval.ms", 5000),
        ("min.heartbeat.interval.ms", 5000),
        ("max.heartbeat.interval.ms", 15000),
    ):
        _KEYS.append(
            BrokerKey(
                f"group.{_proto}.{_name}",
                "int",
                _default,
                f"{_what} groups: the default or bound of a GROUP config ({_proto}.*); "
                "kompakt's coordinator speaks the classic protocol, so only the GROUP "
                "configs' validation reads it.",
                at_least(1),
            )
        )

BROKER_KEYS: dict[str, BrokerKey] = {k.name: k for k in _KEYS}

# Kafka's DynamicBrokerConfig.AllDynamicConfigs, as far as kompakt has the keys:
# LogCleaner.ReconfigurableConfigs and DynamicLogConfig.ReconfigurableConfigs (the main
# broker synonym of every topic config; log.retention.hours, log.roll.hours, ... stay
# read-only as in Kafka). All of them can be set cluster-wide ("") or per broker.
CLEANER_DYNAMIC_KEYS: frozenset[str] = frozenset(
    {
        "log.cleaner.threads",
        "log.cleaner.dedupe.buffer.size",
        "log.cleaner.io.buffer.load.factor",
        "log.cleaner.io.buffer.size",
        "message.max.bytes",
        "log.cleaner.io.max.bytes.per.second",
        "log.cleaner.backoff.ms",
    }
)
# Kafka's PerBrokerConfigs that kompakt has: the SASL login keys of its listener configs,
# refused at the cluster default ("broker id must be specified").
PER_BROKER_KEYS: frozenset[str] = frozenset(
    k.name for k in _KEYS if k.name.startswith(("sasl.kerberos.", "sasl.login."))
)
# DynamicThreadPool.ReconfigurableConfigs: kompakt has no such pools, the values are kept.
THREAD_POOL_KEYS = frozenset({"num.io.threads", "num.recovery.threads.per.data.dir"})
DYNAMIC_KEYS: frozenset[str] = (
    CLEANER_DYNAMIC_KEYS
    | PER_BROKER_KEYS
    | THREAD_POOL_KEYS
    | frozenset(d.broker_synonym for d in CONFIG_DEFS.values() if d.broker_synonym)
)
# Dynamic broker configs live in the data dir beside kompakt-topics.json (Kafka keeps
# them in its metadata log): {"cluster_default": {...}, "brokers": {"<node id>": {...}}}.
DYNAMIC_CONFIGS_FILE = "kompakt-broker-configs.json"


class BrokerConfigEntry(NamedTuple):
    """One row of a DescribeConfigs answer for a BROKER resource."""

    name: str
    value: str | None
    source: str
    read_only: bool
    synonyms: list[ConfigSynonym]
    type: str
    doc: str


def broker_key(name: str) -> BrokerKey:
    """The definition of any broker key: a ``KafkaConfig`` one, or a topic default
    (``log.*``: type and default of the synonym, doc of the topic config)."""
    if name in BROKER_KEYS:
        return BROKER_KEYS[name]
    found = broker_synonym(name)
    if found is None:
        raise InvalidConfigError(f"Unknown broker config key: {name}")
    d, syn = found
    return BrokerKey(name, syn.type, syn.default, d.doc, syn.validator, d.ignored)


def is_known_key(name: str) -> bool:
    """A key kompakt has a definition of (a listener-prefixed one included)."""
    if name in BROKER_KEYS or name in BROKER_LOG_KEYS:
        return True
    try:
        listener_key_type(name)
    except InvalidConfigError:
        return False
    return True


def check_dynamic_keys(keys: Iterable[str], per_broker: bool = True) -> None:
    """Kafka's ``DynamicBrokerConfig.validateConfigs`` name checks, naming them all: a key
    that needs a restart is refused, a per-broker key at the cluster default too. A key
    Kafka does not know passes, as there (``DynamicConfig.Broker`` allows custom props):
    it is stored and shown, and nothing reads it."""
    keys = list(keys)
    static = sorted(k for k in keys if is_known_key(k) and k not in DYNAMIC_KEYS)
    if static:
        raise InvalidConfigError(
            f"Cannot update these configs dynamically: Set({', '.join(static)})"
        )
    if not per_broker:
        only = sorted(k for k in keys if k in PER_BROKER_KEYS)
        if only:
            raise InvalidConfigError(
                "Cannot update these configs at default cluster level, broker id must be "
                f"specified: Set({', '.join(only)})"
            )


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


def _distinct(key: str, ls: list[Listener]) -> None:
    names = [x.name for x in ls]
    if len(set(names)) != len(names):
        raise InvalidConfigError(
            f"Each listener must have a different name, {key}: {', '.join(map(str, ls))}"
        )
    ports = [x.port for x in ls if x.port]
    if key == "listeners" and len(set(ports)) != len(ports):
        raise InvalidConfigError(
            f"Each listener must have a different port, {key}: {', '.join(map(str, ls))}"
        )


@dataclass
class BrokerConfig:
    """Validated broker settings; ``raw`` holds every static key as given.

    ``values`` and ``log_config`` are effective: dynamic per-broker values over dynamic
    cluster-default values over ``raw`` over Kafka's defaults (``DynamicBrokerConfig``).
    ``log_config`` keeps those layers for DescribeConfigs.
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
        for d in _KEYS:
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
        from kompakt.broker.admin_http import is_loopback, is_tls, parse_listener

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
            if auth == "none":
                raise InvalidConfigError(
                    f"kompakt.admin.listener={url} is not a loopback address and "
                    "kompakt.admin.auth=none: anyone who reaches it could compact; set "
                    "kompakt.admin.auth=basic (with https://), or "
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
        _distinct("listeners", ls)
        protocols = self.protocol_map
        for x in ls:
            if x.name not in protocols:
                raise InvalidConfigError(f"No security protocol defined for listener {x.name}")
        return ls

    @property
    def protocol_map(self) -> dict[str, str]:
        """``listener.security.protocol.map`` as {listener name: security protocol}."""
        text = self.values.get("listener.security.protocol.map") or ""
        out: dict[str, str] = {}
        for item in [s.strip() for s in text.split(",") if s.strip()]:
            name, sep, proto = item.partition(":")
            name, proto = name.strip().upper(), proto.strip().upper()
            if not sep or not name or proto not in SECURITY_PROTOCOLS:
                raise InvalidConfigError(
                    f"Invalid value {text} for configuration listener.security.protocol.map: "
                    f"{item!r} is not LISTENER_NAME:SECURITY_PROTOCOL (one of "
                    f"{', '.join(SECURITY_PROTOCOLS)})"
                )
            if name in out:
                raise InvalidConfigError(
                    f"Invalid value {text} for configuration listener.security.protocol.map: "
                    f"duplicate listener name {name}"
                )
            out[name] = proto
        return out

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
            _distinct("advertised.listeners", adv)
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
        for d in _KEYS:
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
            d = BrokerKey(k, "string", None, "Not a key kompakt knows: kept, read by nothing.")
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
        self, name: str, value: str | None, default: str | None, d: BrokerKey
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
        """Persist the dynamic layers beside the topics file (write, fsync, rename)."""
        path = self.data_dir / DYNAMIC_CONFIGS_FILE
        stored = _read_dynamic_file(path)
        brokers = dict(stored.get("brokers") or {})
        if self.dynamic_broker:
            brokers[str(self.node_id)] = dict(self.dynamic_broker)
        else:
            brokers.pop(str(self.node_id), None)
        body = {**stored, "cluster_default": dict(self.dynamic_default), "brokers": brokers}
        self.data_dir.mkdir(parents=True, exist_ok=True)
        write_json_atomically(path, body)

    def load_dynamic(self) -> None:
        """Apply the dynamic configs stored in the data dir (at start, before the logs
        open).

        Kafka's ``DynamicBrokerConfig.initialize`` logs and skips stored values it cannot
        apply; kompakt refuses to start instead, naming the file and the key: silently
        falling back to a static ``log.retention.ms`` could delete data the dynamic value
        kept. The file is only written after validation, so this needs a hand edit.
        """
        path = self.data_dir / DYNAMIC_CONFIGS_FILE
        stored = _read_dynamic_file(path)
        default = stored.get("cluster_default") or {}
        per_broker = (stored.get("brokers") or {}).get(str(self.node_id)) or {}
        try:
            if not isinstance(default, dict) or not isinstance(per_broker, dict):
                raise InvalidConfigError("expected JSON objects of config values")
            fresh = self.with_dynamic(
                {str(k): str(v) for k, v in default.items()},
                {str(k): str(v) for k, v in per_broker.items()},
            )
        except InvalidConfigError as exc:
            raise InvalidConfigError(f"dynamic broker configs in {path}: {exc}") from exc
        self.adopt(fresh)


def _known(values: Mapping[str, str]) -> dict[str, str]:
    """The keys of a dynamic layer that kompakt has a definition of."""
    return {k: v for k, v in values.items() if is_known_key(k)}


def _log_keys(values: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in values.items() if k in BROKER_LOG_KEYS}


def _read_dynamic_file(path: Path) -> dict[str, Any]:
    try:
        body = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise InvalidConfigError(f"cannot read {path}: {exc}") from exc
    if not isinstance(body, dict):
        raise InvalidConfigError(f"cannot read {path}: not a JSON object")
    return body


__all__ = [
    "BrokerConfig",
    "Listener",
    "BROKER_KEYS",
    "DYNAMIC_KEYS",
    "parse_listeners",
    "LONG_MAX",
]
