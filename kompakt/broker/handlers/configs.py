"""DescribeConfigs (32), AlterConfigs (33) and IncrementalAlterConfigs (44).

Topic configs are dynamic (stored with the topic). Broker configs come from
``server.properties``, and the keys Kafka marks dynamic (``DYNAMIC_KEYS``: the ``log.*``
topic defaults and the cleaner's settings) can be changed at run time for the cluster
default resource ("") or this broker ("<node.id>"), as Kafka's ``DynamicBrokerConfig``
and ``ConfigAdminManager`` do: persisted in the data dir, effective at once (topics
without their own value follow a changed default), validated like the static config,
and refused as a whole (INVALID_REQUEST) when any key is read-only or any value bad.
A key Kafka does not know is kept, as Kafka keeps custom broker configs (logged here).
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable, Iterable
from typing import Any

from kio.schema.alter_configs.v2.request import AlterConfigsRequest
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1.request import IncrementalAlterConfigsRequest

from kompakt.broker import group_configs
from kompakt.broker.broker_keys import broker_key, is_known_key
from kompakt.broker.config import BrokerConfig
from kompakt.broker.dynamic_config import DYNAMIC_CONFIGS_FILE, group_layers, save_group_layer
from kompakt.broker.handlers.common import error_of
from kompakt.broker.registry import ApiRegistry
from kompakt.broker.state import RequestContext
from kompakt.broker.tiering import check_topic_config
from kompakt.errors import InvalidConfigError
from kompakt.log.config import (
    CONFIG_DEFS,
    DEFAULT_CONFIG,
    TopicConfig,
    parse_type,
    to_string,
)
from kompakt.log.names import invalid_topic_reason

log = logging.getLogger(__name__)


class ResourceType(enum.IntEnum):
    """Kafka's ``ConfigResource.Type`` ids."""

    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    GROUP = 32


class ConfigSource(enum.IntEnum):
    """Kafka's ``DescribeConfigsResponse.ConfigSource`` ids; the names are the sources
    ``kompakt.log.config`` reports (``DYNAMIC_TOPIC_CONFIG``, ...)."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


class ConfigType(enum.IntEnum):
    """Kafka's ``DescribeConfigsResponse.ConfigType`` ids (``ConfigDef.Type``)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class OpType(enum.IntEnum):
    """Kafka's ``AlterConfigOp.OpType`` ids (IncrementalAlterConfigs)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


SOURCE_CODES: dict[str, int] = {s.name: s.value for s in ConfigSource}


def _config_entry(
    e: Any,
    read_only: bool,
    is_default: bool,
    type_name: str,
    doc: str | None,
    *,
    synonyms: bool,
    docs: bool,
) -> dict[str, Any]:
    """One DescribeConfigs result entry, for a topic's or the broker's config ``e``."""
    return {
        "name": e.name,
        "value": e.value,
        "read_only": read_only,
        "config_source": SOURCE_CODES[e.source],
        "is_default": is_default,
        "is_sensitive": type_name == "password",  # ConfigDef.Type.PASSWORD: value is null
        "synonyms": [
            {"name": s.name, "value": s.value, "source": SOURCE_CODES[s.source]} for s in e.synonyms
        ]
        if synonyms
        else [],
        "config_type": ConfigType.__members__.get(type_name.upper(), ConfigType.UNKNOWN).value,
        "documentation": doc if docs else None,
    }


def describe_result(r: Any, code: int = ErrorCode.none, msg: str | None = None) -> dict[str, Any]:
    """One resource's DescribeConfigs result: no configs yet, and ``code`` (an error, or
    none before the configs are known)."""
    return {**alter_result(r, code, msg), "configs": []}


def _describe_topic(ctx: RequestContext, r: Any, synonyms: bool, docs: bool) -> dict[str, Any]:
    res = describe_result(r)
    reason = invalid_topic_reason(r.resource_name or "")
    if reason is not None:  # Kafka's ConfigHelper.describeConfigs calls Topic.validate
        res["error_code"] = ErrorCode.invalid_topic_exception
        res["error_message"] = f"Topic name is invalid: {reason}"
        return res
    if not ctx.logs.has_topic(r.resource_name):
        res["error_code"] = ErrorCode.unknown_topic_or_partition
        res["error_message"] = f"Topic {r.resource_name} does not exist."
        return res
    keys = None if r.configuration_keys is None else set(r.configuration_keys)
    cfg = ctx.logs.topic_config(r.resource_name)
    for e in cfg.describe():
        if keys is not None and e.name not in keys:
            continue
        d = CONFIG_DEFS[e.name]
        res["configs"].append(
            _config_entry(
                e, False, e.is_default, d.type, d.documentation, synonyms=synonyms, docs=docs
            )
        )
    return res


def _describe_broker(ctx: RequestContext, r: Any, synonyms: bool, docs: bool) -> dict[str, Any]:
    res = describe_result(r)
    if r.resource_name not in ("", str(ctx.state.node_id)):
        res["error_code"] = ErrorCode.invalid_request
        res["error_message"] = (
            f"Unexpected broker id, expected {ctx.state.node_id} or empty string, "
            f"but received {r.resource_name}"
        )
        return res
    if r.resource_type == ResourceType.BROKER_LOGGER:
        return res
    keys = None if r.configuration_keys is None else set(r.configuration_keys)
    for e in ctx.config.describe_entries(per_broker=r.resource_name != ""):
        if keys is not None and e.name not in keys:
            continue
        res["configs"].append(
            _config_entry(
                e,
                e.read_only,
                e.source == DEFAULT_CONFIG,
                e.type,
                e.doc,
                synonyms=synonyms,
                docs=docs,
            )
        )
    return res


def _group_file(ctx: RequestContext):
    return ctx.config.data_dir / DYNAMIC_CONFIGS_FILE


def _describe_group(ctx: RequestContext, r: Any, docs: bool) -> dict[str, Any]:
    """Kafka's ``ConfigHelper`` for GROUP: every group key, GROUP_CONFIG when the group
    has its own value, else the broker default's value as DEFAULT_CONFIG."""
    res = describe_result(r)
    if not r.resource_name:
        res["error_code"] = ErrorCode.invalid_request
        res["error_message"] = "Group name must not be empty"
        return res
    keys = None if r.configuration_keys is None else set(r.configuration_keys)
    stored = group_layers(_group_file(ctx)).get(r.resource_name, {})
    for e in group_configs.describe(stored, ctx.config):
        if keys is not None and e.name not in keys:
            continue
        source = ConfigSource.GROUP_CONFIG if e.dynamic else ConfigSource.DEFAULT_CONFIG
        doc = broker_key(group_configs.broker_default(e.name)).doc
        res["configs"].append(
            {
                "name": e.name,
                "value": e.value,
                "read_only": False,
                "config_source": source.value,
                "is_default": not e.dynamic,
                "is_sensitive": False,
                "synonyms": [],
                "config_type": ConfigType.INT.value,
                "documentation": doc if docs else None,
            }
        )
    return res


def _alter_group(ctx: RequestContext, r: Any, incremental: bool, validate_only: bool) -> dict:
    """One GROUP resource (``GroupConfig.validate``; the controller refuses the default
    resource ""): the group's new values validated as a whole, then stored."""
    if not r.resource_name:
        return alter_result(
            r, ErrorCode.invalid_request, "Default group resources are not allowed."
        )
    try:
        with ctx.logs.lock:
            path = _group_file(ctx)
            values: dict[str, str | None] = {}
            if incremental:
                values.update(group_layers(path).get(r.resource_name, {}))
                for c in r.configs:
                    op = c.config_operation
                    if op == OpType.SET:
                        values[c.name] = c.value
                    elif op == OpType.DELETE:
                        values.pop(c.name, None)
                    elif op in (OpType.APPEND, OpType.SUBTRACT):
                        raise InvalidConfigError(_list_op_refused(op, c.name))
                    else:
                        raise _InvalidRequest(f"Unknown operations type {op}")
            else:
                values = {c.name: c.value for c in r.configs}
            group_configs.validate(values, ctx.config)
            if not validate_only:
                kept = {k: str(v) for k, v in values.items()}
                save_group_layer(path, r.resource_name, kept)
        return alter_result(r)
    except Exception as exc:
        return alter_result(r, *error_of(exc))


async def handle_describe_configs(ctx: RequestContext, req: Any) -> dict[str, Any]:
    synonyms = bool(getattr(req, "include_synonyms", False))
    docs = bool(getattr(req, "include_documentation", False))

    def run() -> list:
        out = []
        for r in req.resources:
            if r.resource_type == ResourceType.TOPIC:
                out.append(_describe_topic(ctx, r, synonyms, docs))
            elif r.resource_type in (ResourceType.BROKER, ResourceType.BROKER_LOGGER):
                out.append(_describe_broker(ctx, r, synonyms, docs))
            elif r.resource_type == ResourceType.GROUP:
                out.append(_describe_group(ctx, r, docs))
            else:
                out.append(
                    describe_result(
                        r, ErrorCode.invalid_request, f"Unsupported resource type {r.resource_type}"
                    )
                )
        return out

    return {"throttle_time": 0, "results": await asyncio.to_thread(run)}


def alter_result(r: Any, code: int = ErrorCode.none, msg: str | None = None) -> dict[str, Any]:
    """One resource's (Incremental)AlterConfigs result."""
    return {
        "error_code": code,
        "error_message": msg,
        "resource_type": r.resource_type,
        "resource_name": r.resource_name,
    }


def _not_topic(ctx: RequestContext, r: Any) -> dict[str, Any] | None:
    if r.resource_type != ResourceType.TOPIC:
        return alter_result(
            r, ErrorCode.invalid_request, f"Unsupported resource type {r.resource_type}"
        )
    # Kafka's ControllerConfigurationValidator.validateTopicName
    if not r.resource_name:
        return alter_result(
            r, ErrorCode.invalid_request, "Default topic resources are not allowed."
        )
    reason = invalid_topic_reason(r.resource_name)
    if reason is not None:
        return alter_result(
            r, ErrorCode.invalid_topic_exception, f"Topic name is invalid: {reason}"
        )
    if not ctx.logs.has_topic(r.resource_name):
        return alter_result(
            r, ErrorCode.unknown_topic_or_partition, f"Topic {r.resource_name} does not exist."
        )
    return None


def _apply(ctx: RequestContext, name: str, overrides: dict[str, str], validate_only: bool) -> None:
    """Replace the topic's overrides with ``overrides`` (validated as a whole)."""
    new = TopicConfig(overrides, ctx.logs.broker_config)
    check_topic_config(ctx.config, new, ctx.logs.topic_config(name))
    if validate_only:
        return
    current = ctx.logs.topic_meta(name).overrides
    delete = [k for k in current if k not in overrides]
    ctx.logs.alter_topic_config(name, set=overrides, delete=delete)


async def _alter(
    ctx: RequestContext,
    req: Any,
    overrides_for: Callable[[Any], dict[str, str]],
    broker_layer_for: Callable[[dict[str, str], Any], dict[str, str]],
) -> dict[str, Any]:
    """Both AlterConfigs flavours: per resource, new values -> validate -> apply.

    ``overrides_for(r)`` gives a topic's new overrides; ``broker_layer_for(layer, r)`` a
    broker resource's new dynamic layer from its current one.
    """

    def run() -> list:
        out = []
        ids = [(r.resource_type, r.resource_name) for r in req.resources]
        for r in req.resources:
            if ids.count((r.resource_type, r.resource_name)) > 1:  # ConfigAdminManager
                out.append(
                    alter_result(
                        r, ErrorCode.invalid_request, "Each resource must appear at most once."
                    )
                )
                continue
            if r.resource_type == ResourceType.BROKER:
                out.append(_alter_broker(ctx, r, broker_layer_for, bool(req.validate_only)))
                continue
            if r.resource_type == ResourceType.GROUP:
                incr = overrides_for is not _replacement
                out.append(_alter_group(ctx, r, incr, bool(req.validate_only)))
                continue
            if r.resource_type == ResourceType.BROKER_LOGGER:
                out.append(
                    alter_result(
                        r, ErrorCode.invalid_request, "kompakt has no dynamic broker loggers"
                    )
                )
                continue
            bad = _not_topic(ctx, r)
            if bad is not None:
                out.append(bad)
                continue
            try:
                _apply(ctx, r.resource_name, overrides_for(r), bool(req.validate_only))
                out.append(alter_result(r))
            except Exception as exc:
                out.append(alter_result(r, *error_of(exc)))
        return out

    return {"throttle_time": 0, "responses": await asyncio.to_thread(run)}


def _alter_broker(
    ctx: RequestContext,
    r: Any,
    layer_for: Callable[[dict[str, str], Any], dict[str, str]],
    validate_only: bool,
) -> dict[str, Any]:
    """One BROKER resource: the cluster default ("") or this broker's own layer.

    Kafka's ``ConfigAdminManager.validateBrokerConfigChange`` answers INVALID_REQUEST for
    every validation failure (KAFKA-13609), and nothing changes unless all of it is valid.
    """
    cfg: BrokerConfig = ctx.config
    name = r.resource_name or ""
    per_broker = name != ""
    try:
        if per_broker:
            try:
                node = int(name)
            except ValueError:
                raise _InvalidRequest(f"Node id must be an integer, but it is: {name}") from None
            if node != ctx.state.node_id:
                raise _InvalidRequest(
                    f"Unexpected broker id, expected {ctx.state.node_id}, but received {name}"
                )
        current = cfg.dynamic_broker if per_broker else cfg.dynamic_default
        layer = layer_for(dict(current), r)
        with ctx.logs.lock:
            try:
                fresh = cfg.with_dynamic(
                    cfg.dynamic_default if per_broker else layer,
                    layer if per_broker else cfg.dynamic_broker,
                )
                for topic in ctx.logs.topics():  # every topic still valid over the new defaults
                    TopicConfig(ctx.logs.topic_meta(topic).overrides, fresh.log_config)
            except InvalidConfigError as exc:
                raise _InvalidRequest(str(exc)) from exc
            if not validate_only:
                for key in sorted(k for k in layer if k not in current and not is_known_key(k)):
                    log.warning(
                        "dynamic broker config %s is not a key kompakt knows: kept, unused", key
                    )
                fresh.save_dynamic()
                cfg.adopt(fresh)
                ctx.logs.reconfigure_defaults(cfg.log_config)
        return alter_result(r)
    except Exception as exc:
        return alter_result(r, *error_of(exc))


def _replacement(r: Any) -> dict[str, str]:
    """Legacy AlterConfigs: the request's configs replace all of the topic's overrides."""
    new = {}
    for c in r.configs:
        if c.value is None:
            raise InvalidConfigError(f"Null value not supported for : {c.name}")
        new[c.name] = c.value
    return new


def _broker_replacement(_layer: dict[str, str], r: Any) -> dict[str, str]:
    """Legacy AlterConfigs on a broker: the request's configs become the whole layer."""
    new = {}
    for c in r.configs:
        if c.name in new:
            raise _InvalidRequest("Error due to duplicate config keys")
        if c.value is None:
            raise _InvalidRequest(f"Null value not supported for : {c.name}")
        new[c.name] = c.value
    return new


async def handle_alter_configs(ctx: RequestContext, req: Any) -> dict[str, Any]:
    return await _alter(ctx, req, _replacement, _broker_replacement)


def _incremental(ctx: RequestContext, name: str, ops: Any) -> dict[str, str]:
    overrides = dict(ctx.logs.topic_meta(name).overrides)
    effective = ctx.logs.topic_config(name)
    seen = set()
    for c in ops:
        if c.name in seen:
            raise _InvalidRequest(f"Error due to duplicate config keys : {c.name}")
        seen.add(c.name)
        d = CONFIG_DEFS.get(c.name)
        if d is None:
            raise InvalidConfigError(f"Unknown topic config name: {c.name}")
        op = c.config_operation
        if op == OpType.SET:
            if c.value is None:
                raise InvalidConfigError(f"Null value not supported for : {c.name}")
            overrides[c.name] = c.value
        elif op == OpType.DELETE:
            overrides.pop(c.name, None)
        elif op in (OpType.APPEND, OpType.SUBTRACT):
            if d.type != "list":
                raise InvalidConfigError(_list_op_refused(op, c.name))
            overrides[c.name] = _list_op(op, effective.get(c.name), c.value)
        else:
            raise _InvalidRequest(f"Unknown config operation {op} for {c.name}")
    return overrides


class _InvalidRequest(InvalidConfigError):
    error_code = ErrorCode.invalid_request


def _broker_incremental(layer: dict[str, str], r: Any) -> dict[str, str]:
    """IncrementalAlterConfigs on a broker layer (Kafka's ``prepareIncrementalConfigs``):
    APPEND/SUBTRACT start from the layer's value, else the key's default."""
    names = [c.name for c in r.configs]
    if len(set(names)) != len(names):
        raise _InvalidRequest("Error due to duplicate config keys")
    nulls = [c.name for c in r.configs if c.config_operation != OpType.DELETE and c.value is None]
    if nulls:
        raise _InvalidRequest(f"Null value not supported for : {', '.join(nulls)}")
    for c in r.configs:
        op = c.config_operation
        if op == OpType.SET:
            layer[c.name] = c.value
        elif op == OpType.DELETE:
            layer.pop(c.name, None)
        elif op in (OpType.APPEND, OpType.SUBTRACT):
            try:
                d = broker_key(c.name)
            except InvalidConfigError:
                raise _InvalidRequest(f"Unknown config name: {c.name}") from None
            if d.type != "list":
                raise _InvalidRequest(_list_op_refused(op, c.name))
            old = layer.get(c.name, to_string(d.default)) or ""
            layer[c.name] = _list_op(op, parse_type(c.name, old, "list"), c.value)
        else:
            raise _InvalidRequest(f"Unknown operations type {op}")
    return layer


def _list_op(op: int, current: Iterable[str], value: str | None) -> str:
    """Kafka's IncrementalAlterConfigs APPEND / SUBTRACT on a list value: add the
    comma-separated ``value`` items not yet present, or remove every one of them."""
    out = list(current)
    items = [x.strip() for x in (value or "").split(",") if x.strip()]
    if op == OpType.APPEND:
        out += [x for x in items if x not in out]
    else:
        out = [x for x in out if x not in items]
    return to_string(out) or ""


def _list_op_refused(op: int, name: str) -> str:
    verb = "append" if op == OpType.APPEND else "subtract"
    return f"Config value {verb} is not allowed for config key: {name}"


async def handle_incremental_alter_configs(ctx: RequestContext, req: Any) -> dict[str, Any]:
    return await _alter(
        ctx, req, lambda r: _incremental(ctx, r.resource_name, r.configs), _broker_incremental
    )


def register(registry: ApiRegistry) -> None:
    registry.register(DescribeConfigsRequest.__api_key__, 1, 4, handle_describe_configs)
    registry.register(AlterConfigsRequest.__api_key__, 0, 2, handle_alter_configs)
    registry.register(
        IncrementalAlterConfigsRequest.__api_key__, 0, 1, handle_incremental_alter_configs
    )
