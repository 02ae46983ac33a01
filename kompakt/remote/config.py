"""The tiered-storage config keys, with Kafka's names where Kafka has them (KIP-405's
``RemoteLogManagerConfig`` and ``TopicConfig``), as rows of the one key type
(:class:`kompakt.log.config.ConfigKey`) so the broker's and the topic's tables can take
them as they are, plus the cross-key rules of Kafka's ``LogConfig``.

Deliberate difference from Kafka: Kafka refuses ``remote.storage.enable=true`` on a
topic whose ``cleanup.policy`` contains ``compact`` ("Remote log storage only supports
topics with cleanup.policy=delete", ``validateRemoteStorageRequiresDeleteCleanupPolicy``);
kompakt tiers compacted topics, which is the point of its remote tier (issue 29; KIP-1272
proposes the same for Kafka).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from kompakt.errors import InvalidConfigError
from kompakt.log.config import CONFIG_DEFS, ConfigKey, TopicConfig, at_least, parse_type
from kompakt.remote.store import parse_storage_url

# -- broker keys ------------------------------------------------------------------------
REMOTE_LOG_STORAGE_SYSTEM_ENABLE = "remote.log.storage.system.enable"
REMOTE_LOG_MANAGER_TASK_INTERVAL_MS = "remote.log.manager.task.interval.ms"
STORAGE_URL = "kompakt.remote.storage.url"
S3_ENDPOINT_URL = "kompakt.remote.storage.s3.endpoint.url"
CACHE_BYTES = "kompakt.remote.cache.bytes"

# -- topic keys -------------------------------------------------------------------------
REMOTE_STORAGE_ENABLE = "remote.storage.enable"
LOCAL_RETENTION_MS = "local.retention.ms"
LOCAL_RETENTION_BYTES = "local.retention.bytes"
REMOTE_LOG_COPY_DISABLE = "remote.log.copy.disable"
REMOTE_LOG_DELETE_ON_DISABLE = "remote.log.delete.on.disable"

# -2: "use retention.ms / retention.bytes" (Kafka's DEFAULT_LOCAL_RETENTION_*)
USE_RETENTION = -2
TASK_INTERVAL_MS_DEFAULT = 30_000
CACHE_BYTES_DEFAULT = 256 * 1024 * 1024


def _storage_url(name: str, value: Any) -> None:
    if value:
        parse_storage_url(value, name)


def _http_url(name: str, value: Any) -> None:
    if value and (urlparse(value).scheme not in ("http", "https") or not urlparse(value).netloc):
        raise InvalidConfigError(
            f"Invalid value {value} for configuration {name}: expected an http:// or "
            "https:// URL of an S3-compatible endpoint"
        )


BROKER_KEYS: dict[str, ConfigKey] = {
    k.name: k
    for k in (
        ConfigKey(
            REMOTE_LOG_STORAGE_SYSTEM_ENABLE,
            "boolean",
            False,
            "Enable the remote tier on this broker; topics opt in with remote.storage.enable.",
        ),
        ConfigKey(
            REMOTE_LOG_MANAGER_TASK_INTERVAL_MS,
            "long",
            TASK_INTERVAL_MS_DEFAULT,
            "How often the remote log manager copies rolled segments up and expires them.",
            at_least(1),
        ),
        ConfigKey(
            STORAGE_URL,
            "string",
            "",
            "Where the remote tier lives: file:///folder or s3://bucket/prefix. Empty: the "
            "folder <data dir>-remote beside the data dir.",
            _storage_url,
        ),
        ConfigKey(
            S3_ENDPOINT_URL,
            "string",
            "",
            "Endpoint of an S3-compatible server for an s3:// storage URL (empty: AWS). "
            "Credentials come from the AWS environment variables.",
            _http_url,
        ),
        ConfigKey(
            CACHE_BYTES,
            "long",
            CACHE_BYTES_DEFAULT,
            "Bytes of remote segment chunks kept in memory for reads below the local log.",
            at_least(0),
        ),
    )
}

# the topic keys are rows of the log's topic config table (their one owner, with
# Kafka's local-retention rules in TopicConfig); named here for the remote tier's readers
TOPIC_KEYS: dict[str, ConfigKey] = {
    name: CONFIG_DEFS[name]
    for name in (
        REMOTE_STORAGE_ENABLE,
        LOCAL_RETENTION_MS,
        LOCAL_RETENTION_BYTES,
        REMOTE_LOG_COPY_DISABLE,
        REMOTE_LOG_DELETE_ON_DISABLE,
    )
}


def parse(key: ConfigKey, raw: str) -> Any:
    """Text to value, checked by the key's validator (the config tables' own helpers)."""
    value = parse_type(key.name, raw, key.type)
    if key.validator is not None:
        key.validator(key.name, value)
    return value


def check_topic(values: Mapping[str, Any], system_enabled: bool, was_enabled: bool = False) -> None:
    """Kafka's ``validateRemoteStorageOnlyIfSystemEnabled``: a topic cannot enable remote
    storage on a broker whose remote tier is off; and its
    ``validateTurningOffRemoteStorageWithDelete`` (KIP-950): a tiered topic turns it off
    only with ``remote.log.delete.on.disable=true``, which deletes its remote data (the
    remote log manager's next pass). ``values``: parsed topic configs; ``was_enabled``:
    the topic's setting before an alter. The local-retention rules are
    :class:`~kompakt.log.config.TopicConfig`'s."""
    enabled = bool(values.get(REMOTE_STORAGE_ENABLE))
    if enabled and not system_enabled:
        raise InvalidConfigError(
            "Tiered Storage functionality is disabled in the broker. "
            "Topic cannot be configured with remote log storage."
        )
    if was_enabled and not enabled and not values.get(REMOTE_LOG_DELETE_ON_DISABLE):
        raise InvalidConfigError(
            "It is invalid to disable remote storage without deleting remote data. If you "
            "want to keep the remote data and turn to read only, please set "
            "`remote.storage.enable=true,remote.log.copy.disable=true`. If you want to "
            "disable remote storage and delete all remote data, please set "
            "`remote.storage.enable=false,remote.log.delete.on.disable=true`."
        )


def check_broker_local_retention(log_config: Mapping[str, str]) -> None:
    """Kafka's rule on the broker's topic defaults: ``log.local.retention.ms`` /
    ``.bytes`` may be neither -1 nor more than ``log.retention.ms`` / ``.bytes`` when
    that is limited (-2: follow it). Kafka checks it at start when the remote tier is
    on (``LogConfig.validateBrokerLogConfigValues`` from ``LogManager.apply``) and on
    every dynamic change (``DynamicLogConfig.validateReconfiguration``). The rule's one
    owner is the topic config's local-retention check, applied here to the defaults as a
    tiered topic without overrides would take them. ``log_config``: the broker's
    ``log.*`` values (their layers, or a plain map)."""
    try:
        TopicConfig({REMOTE_STORAGE_ENABLE: "true"}, log_config)
    except InvalidConfigError as exc:
        raise InvalidConfigError(
            f"{exc} (the broker's log.local.retention.* and log.retention.* defaults)"
        ) from None


def effective_local_retention(local: int, retention: int) -> int:
    """-2 means the topic's whole retention (Kafka's ``LogConfig.localRetentionMs()``)."""
    return retention if local == USE_RETENTION else local


def default_storage_url(data_dir: Path) -> str:
    """The embedded default: a folder beside the data dir, ``<data dir>-remote``."""
    data_dir = Path(data_dir).resolve()
    return (data_dir.parent / f"{data_dir.name}-remote").as_uri()


@dataclass(frozen=True)
class RemoteSettings:
    """The broker's remote-tier settings, parsed and checked."""

    enabled: bool
    task_interval_ms: int
    storage_url: str
    s3_endpoint_url: str | None
    cache_bytes: int

    @classmethod
    def from_broker(cls, raw: Mapping[str, str], data_dir: Path) -> RemoteSettings:
        """From the broker's key -> text map (absent keys take their defaults)."""
        return cls.of(
            {
                name: parse(key, raw[name]) if name in raw else key.default
                for name, key in BROKER_KEYS.items()
            },
            data_dir,
        )

    @classmethod
    def of(cls, values: Mapping[str, Any], data_dir: Path) -> RemoteSettings:
        """From parsed broker values (the broker's config holds them parsed)."""
        return cls(
            enabled=bool(values["remote.log.storage.system.enable"]),
            task_interval_ms=int(values["remote.log.manager.task.interval.ms"]),
            storage_url=values["kompakt.remote.storage.url"] or default_storage_url(data_dir),
            s3_endpoint_url=values["kompakt.remote.storage.s3.endpoint.url"] or None,
            cache_bytes=int(values["kompakt.remote.cache.bytes"]),
        )
