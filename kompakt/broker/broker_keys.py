"""The broker's key table: every ``KafkaConfig`` key kompakt accepts, as
:class:`~kompakt.log.config.ConfigKey` rows (the one key type of the topic, broker and
security tables), and which of them may change at run time (KIP-226).

Topic-default keys (``log.*``, ``message.max.bytes``, ...) are not listed here: they are
the topic configs' broker synonyms (:data:`kompakt.log.config.BROKER_LOG_KEYS`) and
:func:`broker_key` derives their row from the topic table. Every key is either read by
kompakt or declared ignored with the reason (``ConfigKey.ignored``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

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
    INT_MAX,
    ConfigKey,
    OneOf,
    at_least,
    broker_synonym,
)
from kompakt.log.open_segments import DEFAULT_MAX_OPEN_SEGMENTS
from kompakt.remote.config import BROKER_KEYS as REMOTE_BROKER_KEYS

from kompakt.broker.security.keys import SECURITY_KEYS, listener_key_type  # isort: skip


_ONE_NODE = "a single node: the replication factor is always 1."
_ONE_CLEANER_THREAD = "kompakt runs one cleaner thread (the spark engine is parallel inside)."


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


KEYS: list[ConfigKey] = [
    ConfigKey("listeners", "string", "PLAINTEXT://127.0.0.1:9092", "Kafka listener(s)."),
    ConfigKey("advertised.listeners", "string", None, "Address given to clients."),
    ConfigKey(
        "log.dirs",
        "string",
        "./kompakt-data",
        "Comma-separated log directories; new partitions go to the one with the fewest.",
    ),
    ConfigKey("log.dir", "string", None, "Alias of log.dirs when log.dirs is not set."),
    ConfigKey("node.id", "int", 1, "This broker's id.", at_least(0)),
    ConfigKey("broker.id", "int", None, "Alias of node.id."),
    ConfigKey("num.partitions", "int", 1, "Default partitions of new topics.", at_least(1)),
    ConfigKey("default.replication.factor", "int", 1, "Must be 1 on one node.", at_least(1)),
    ConfigKey("auto.create.topics.enable", "boolean", True, "Create topics on metadata."),
    ConfigKey(
        "socket.request.max.bytes", "int", 104857600, "Largest request accepted.", at_least(1)
    ),
    ConfigKey("log.cleaner.enable", "boolean", True, "Run the log cleaner."),
    ConfigKey("log.cleaner.backoff.ms", "long", 15000, "Cleaner sleep when idle.", at_least(0)),
    ConfigKey(
        "log.cleaner.dedupe.buffer.size",
        "long",
        DEDUPE_BUFFER_SIZE_DEFAULT,
        "Offset map memory (local engine).",
        at_least(0),
    ),
    ConfigKey(
        "log.cleaner.threads", "int", 1, "Cleaner threads.", at_least(0), _ONE_CLEANER_THREAD
    ),
    ConfigKey(
        "log.cleaner.io.buffer.size",
        "int",
        IO_BUFFER_SIZE_DEFAULT,
        "Cleaner I/O buffer.",
        at_least(0),
        "the cleaner reads and writes whole batches, not through a fixed buffer.",
    ),
    ConfigKey(
        "log.cleaner.io.buffer.load.factor",
        "double",
        IO_BUFFER_LOAD_FACTOR_DEFAULT,
        "Offset map load factor (local engine; the spark engine has no fixed map).",
    ),
    ConfigKey(
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
    ConfigKey(
        "kompakt.log.cleaner.io.check.interval.ms",
        "long",
        IO_CHECK_INTERVAL_DEFAULT,
        "kompakt extension: the period over which the cleaner's I/O throttle measures "
        "its rate before it sleeps (Kafka's LogCleaner uses a fixed 300 ms). Shorter "
        "periods make shorter bursts of cleaner I/O between sleeps.",
        at_least(1),
    ),
    # kompakt's backlog rule for the cleaner's I/O limit (Redpanda's backlog controller)
    ConfigKey(
        "kompakt.log.cleaner.backlog.setpoint.bytes",
        "long",
        BACKLOG_SETPOINT_DEFAULT,
        "kompakt extension: the dirty-bytes backlog (cleanable bytes of all compacted "
        "partitions) the cleaner's I/O limit is meant for; above it the limit rises in "
        "proportion (Redpanda's backlog controller setpoint).",
        at_least(1),
    ),
    ConfigKey(
        "kompakt.log.cleaner.backlog.p.coeff",
        "double",
        BACKLOG_P_COEFF_DEFAULT,
        "kompakt extension: proportional gain of the backlog rule: the effective limit is "
        "log.cleaner.io.max.bytes.per.second * (1 + p.coeff * (backlog - setpoint) / "
        "setpoint) above the setpoint; 0 turns the rule off.",
        at_least(0.0),
    ),
    ConfigKey(
        "kompakt.log.cleaner.backlog.max.bytes.per.second",
        "double",
        BACKLOG_MAX_RATE_DEFAULT,
        "kompakt extension: the highest I/O limit the backlog rule may set (default "
        "unlimited, Double.MaxValue).",
        at_least(1.0),
    ),
    ConfigKey(
        "kompakt.log.cleaner.backlog.update.interval.ms",
        "long",
        BACKLOG_INTERVAL_DEFAULT,
        "kompakt extension: how often the backlog rule samples the dirty-bytes backlog.",
        at_least(1),
    ),
    ConfigKey(
        "log.retention.check.interval.ms",
        "long",
        300000,
        "How often retention runs.",
        at_least(1),
    ),
    ConfigKey(
        "log.flush.offset.checkpoint.interval.ms",
        "int",
        60000,
        "How often recovery points are checkpointed.",
        at_least(0),
    ),
    # offsets.*: Kafka's GroupCoordinatorConfig names, types, defaults and atLeast(1)
    ConfigKey(
        "offsets.topic.num.partitions",
        "int",
        50,
        "Partitions of __consumer_offsets.",
        at_least(1),
    ),
    ConfigKey(
        "offsets.topic.replication.factor",
        "int",
        1,
        "Replication factor of __consumer_offsets.",
        at_least(1),
        _ONE_NODE,
    ),
    ConfigKey(
        "offsets.topic.segment.bytes",
        "int",
        104857600,
        "Segment size of __consumer_offsets (set when the topic is created); small "
        "segments let the cleaner compact it sooner.",
        at_least(1),
    ),
    ConfigKey(
        "offsets.retention.minutes",
        "int",
        10080,
        "Committed offsets of a group are removed this long after it becomes empty (or, "
        "for a subscribed group, after the last commit of a topic it no longer subscribes "
        "to; for a standalone consumer, after the last commit).",
        at_least(1),
    ),
    ConfigKey(
        "offsets.retention.check.interval.ms",
        "long",
        600000,
        "How often expired offsets are looked for.",
        at_least(1),
    ),
    ConfigKey(
        "offsets.commit.timeout.ms",
        "int",
        5000,
        "Offset commit timeout.",
        at_least(1),
        "a commit is written to the local log before the answer; no replicas to wait for.",
    ),
    ConfigKey("group.initial.rebalance.delay.ms", "int", 3000, "Delay of the first rebalance."),
    ConfigKey("group.min.session.timeout.ms", "int", 6000, "Smallest session timeout."),
    ConfigKey("group.max.session.timeout.ms", "int", 1800000, "Largest session timeout."),
    ConfigKey("group.max.size", "int", INT_MAX, "Members per group."),
    # transaction.*: Kafka's TransactionStateManagerConfig / TransactionLogConfig
    ConfigKey(
        "transactional.id.expiration.ms",
        "int",
        604800000,
        "How long an idle transactional id is kept before it expires.",
        at_least(1),
    ),
    ConfigKey(
        "transaction.max.timeout.ms",
        "int",
        900000,
        "Largest transaction.timeout.ms a producer may ask for.",
        at_least(1),
    ),
    ConfigKey(
        "transaction.partition.verification.enable",
        "boolean",
        True,
        "Check a transactional write's partition is in its transaction (KIP-890).",
    ),
    ConfigKey(
        "transaction.state.log.num.partitions",
        "int",
        50,
        "Partitions of __transaction_state.",
        at_least(1),
    ),
    ConfigKey(
        "transaction.state.log.segment.bytes",
        "int",
        104857600,
        "segment.bytes of __transaction_state.",
        at_least(1),
    ),
    ConfigKey(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        "int",
        10000,
        "How often transactions open longer than their timeout are aborted.",
        at_least(1),
    ),
    ConfigKey(
        "transaction.remove.expired.transaction.cleanup.interval.ms",
        "int",
        3600000,
        "How often expired transactional ids are removed.",
        at_least(1),
    ),
    ConfigKey(
        "add.partitions.to.txn.retry.backoff.max.ms",
        "int",
        100,
        "How long AddPartitionsToTxn waits for the previous transaction to complete.",
        at_least(0),
    ),
    ConfigKey(
        "transaction.state.log.replication.factor",
        "int",
        1,
        "Replication factor of __transaction_state.",
        ignored=_ONE_NODE,
        hidden=True,
    ),
    ConfigKey(
        "transaction.state.log.min.isr",
        "int",
        1,
        "min.insync.replicas of __transaction_state.",
        ignored=_ONE_NODE,
        hidden=True,
    ),
    ConfigKey(
        "kompakt.cleaner.engine",
        "string",
        "spark",
        "spark | local | auto",
        OneOf(("spark", "local", "auto")),
    ),
    ConfigKey(
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
    ConfigKey("kompakt.spark.master", "string", "local[*]", "Spark master URL."),
    ConfigKey(
        "kompakt.spark.start",
        "string",
        "eager",
        "eager | lazy: with kompakt.cleaner.engine=spark, eager starts the SparkSession "
        "in a background thread as soon as the broker listens (start-up and the Kafka "
        "port never wait for it), so the first clean does not pay the JVM and session "
        "start (seconds to a minute); lazy starts it at the first clean. Eager is the "
        "default: a broker's cleaner is expected to run, and a clean that starts late "
        "lets a compacted topic grow unseen. The local engine never starts Spark.",
        OneOf(("eager", "lazy")),
    ),
    ConfigKey(
        "kompakt.spark.log.level",
        "string",
        "ERROR",
        "Level of Spark's own (log4j) lines on stderr: OFF | ERROR | WARN | INFO | DEBUG. "
        "Ignored when spark.driver.extraJavaOptions names a -Dlog4j2.configurationFile.",
        OneOf(("OFF", "FATAL", "ERROR", "WARN", "INFO", "DEBUG", "TRACE", "ALL")),
    ),
    ConfigKey(
        "kompakt.admin.listener", "string", "http://127.0.0.1:9644", "Admin/metrics HTTP address."
    ),
    ConfigKey(
        "kompakt.admin.console.writes",
        "boolean",
        False,
        "Let the web console (served by the admin listener) run actions that change data: "
        "compact now, topic config edits. Off: the console is read-only (a dry run is "
        "still offered). The actions are behind kompakt.admin.auth like POST /v1/compact.",
        None,
    ),
    ConfigKey(
        "kompakt.admin.console.history.interval.ms",
        "long",
        30_000,
        "How often the broker samples each partition's size and dirty ratio for the "
        "console's charts (kept in memory, the last 256 samples per partition).",
        at_least(100),
    ),
    # Kafka's authorizer keys (KIP-801 StandardAuthorizer); kompakt.broker.acls
    ConfigKey(
        "authorizer.class.name",
        "string",
        "",
        "The authorizer: empty (none: every request allowed, ACL APIs SECURITY_DISABLED) or "
        "Kafka's org.apache.kafka.metadata.authorizer.StandardAuthorizer (or the older "
        "kafka.security.authorizer.AclAuthorizer), which kompakt implements.",
        _authorizer_class,
    ),
    ConfigKey(
        "super.users",
        "string",
        "",
        "Semicolon-separated principals (User:admin;User:ops) allowed everything.",
        _principals,
    ),
    ConfigKey(
        "allow.everyone.if.no.acl.found",
        "boolean",
        False,
        "Allow a request on a resource no ACL names at all.",
    ),
    *SECURITY_KEYS,
    # the remote tier (Kafka's RemoteLogManagerConfig names, kompakt's own for the place)
    *REMOTE_BROKER_KEYS.values(),
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
    KEYS.append(
        ConfigKey(
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
    KEYS.append(ConfigKey(_name, _type, _default, _doc, ignored=_NO_LOGIN, hidden=True))

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
        KEYS.append(
            ConfigKey(
                f"group.{_proto}.{_name}",
                "int",
                _default,
                f"{_what} groups: the default or bound of a GROUP config ({_proto}.*); "
                "kompakt's coordinator speaks the classic protocol, so only the GROUP "
                "configs' validation reads it.",
                at_least(1),
            )
        )

BROKER_KEYS: dict[str, ConfigKey] = {k.name: k for k in KEYS}

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
    k.name for k in KEYS if k.name.startswith(("sasl.kerberos.", "sasl.login."))
)
# DynamicThreadPool.ReconfigurableConfigs: kompakt has no such pools, the values are kept.
THREAD_POOL_KEYS = frozenset({"num.io.threads", "num.recovery.threads.per.data.dir"})
DYNAMIC_KEYS: frozenset[str] = (
    CLEANER_DYNAMIC_KEYS
    | PER_BROKER_KEYS
    | THREAD_POOL_KEYS
    | frozenset(d.broker_synonym for d in CONFIG_DEFS.values() if d.broker_synonym)
)


def broker_key(name: str) -> ConfigKey:
    """The definition of any broker key: a ``KafkaConfig`` one, or a topic default
    (``log.*``: type and default of the synonym, doc of the topic config)."""
    if name in BROKER_KEYS:
        return BROKER_KEYS[name]
    found = broker_synonym(name)
    if found is None:
        raise InvalidConfigError(f"Unknown broker config key: {name}")
    d, syn = found
    return ConfigKey(name, syn.type, syn.default, d.doc, syn.validator, d.ignored)


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
