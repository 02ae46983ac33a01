"""DescribeConfigs (32), AlterConfigs (33) and IncrementalAlterConfigs (44).

Topic configs are dynamic (stored with the topic). Broker configs come from
``server.properties``, and the keys Kafka marks dynamic (``DYNAMIC_KEYS``: the ``log.*``
topic defaults and the cleaner's settings) can be changed at run time for the cluster
default resource ("") or this broker ("<node.id>"), as Kafka's ``DynamicBrokerConfig``
and ``ConfigAdminManager`` do: persisted in the data dir, effective at once (topics
without their own value follow a changed default), validated like the static config,
and refused as a whole (INVALID_REQUEST) when any key is read-only or any value bad.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from kompakt.broker.config import BROKER_KEYS, BrokerConfig
from kompakt.broker.handlers.common import error_of
from kompakt.broker.registry import ApiRegistry
from kompakt.broker.state import RequestContext
from kompakt.errors import InvalidConfigError
from kompakt.log.config import (
    BROKER_LOG_KEYS,
    CONFIG_DEFS,
    DEFAULT_CONFIG,
    DYNAMIC_BROKER_CONFIG,
    DYNAMIC_DEFAULT_BROKER_CONFIG,
    DYNAMIC_TOPIC_CONFIG,
    STATIC_BROKER_CONFIG,
    TopicConfig,
    _parse_type,
    to_string,
)
from kompakt.log.names import invalid_topic_reason

DESCRIBE_CONFIGS = 32
ALTER_CONFIGS = 33
INCREMENTAL_ALTER_CONFIGS = 44

TOPIC = 2
BROKER = 4
BROKER_LOGGER = 8

SOURCE_CODES = {
    DYNAMIC_TOPIC_CONFIG: 1,
    DYNAMIC_BROKER_CONFIG: 2,
    DYNAMIC_DEFAULT_BROKER_CONFIG: 3,
    STATIC_BROKER_CONFIG: 4,
    DEFAULT_CONFIG: 5,
}
TYPE_CODES = {"boolean": 1, "string": 2, "int": 3, "short": 4, "long": 5, "double": 6, "list": 7}

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


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
        "is_sensitive": False,
        "synonyms": [
            {"name": s.name, "value": s.value, "source": SOURCE_CODES[s.source]} for s in e.synonyms
        ]
        if synonyms
        else [],
        "config_type": TYPE_CODES.get(type_name, 0),
        "documentation": doc if docs else None,
    }


def _describe_topic(ctx: RequestContext, r: Any, synonyms: bool, docs: bool) -> dict[str, Any]:
    res: dict[str, Any] = {
        "error_code": ErrorCode.none,
        "error_message": None,
        "resource_type": r.resource_type,
        "resource_name": r.resource_name,
        "configs": [],
    }
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
            _config_entry(e, False, e.is_default, d.type, d.doc, synonyms=synonyms, docs=docs)
        )
    return res


def _describe_broker(ctx: RequestContext, r: Any, synonyms: bool, docs: bool) -> dict[str, Any]:
    res: dict[str, Any] = {
        "error_code": ErrorCode.none,
        "error_message": None,
        "resource_type": r.resource_type,
        "resource_name": r.resource_name,
        "configs": [],
    }
    if r.resource_name not in ("", str(ctx.state.node_id)):
        res["error_code"] = ErrorCode.invalid_request
        res["error_message"] = (
            f"Unexpected broker id, expected {ctx.state.node_id} or empty string, "
            f"but received {r.resource_name}"
        )
        return res
    if r.resource_type == BROKER_LOGGER:
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


async def handle_describe_configs(ctx: RequestContext, req: Any) -> dict[str, Any]:
    synonyms = bool(getattr(req, "include_synonyms", False))
    docs = bool(getattr(req, "include_documentation", False))

    def run() -> list:
        out = []
        for r in req.resources:
            if r.resource_type == TOPIC:
                out.append(_describe_topic(ctx, r, synonyms, docs))
            elif r.resource_type in (BROKER, BROKER_LOGGER):
                out.append(_describe_broker(ctx, r, synonyms, docs))
            else:
                out.append(
                    {
                        "error_code": ErrorCode.invalid_request,
                        "error_message": f"Unsupported resource type {r.resource_type}",
                        "resource_type": r.resource_type,
                        "resource_name": r.resource_name,
                        "configs": [],
                    }
                )
        return out

    return {"throttle_time": 0, "results": await asyncio.to_thread(run)}


def _result(r: Any, code: int = ErrorCode.none, msg: str | None = None) -> dict[str, Any]:
    return {
        "error_code": code,
        "error_message": msg,
        "resource_type": r.resource_type,
        "resource_name": r.resource_name,
    }


def _not_topic(ctx: RequestContext, r: Any) -> dict[str, Any] | None:
    if r.resource_type != TOPIC:
        return _result(r, ErrorCode.invalid_request, f"Unsupported resource type {r.resource_type}")
    # Kafka's ControllerConfigurationValidator.validateTopicName
    if not r.resource_name:
        return _result(r, ErrorCode.invalid_request, "Default topic resources are not allowed.")
    reason = invalid_topic_reason(r.resource_name)
    if reason is not None:
        return _result(r, ErrorCode.invalid_topic_exception, f"Topic name is invalid: {reason}")
    if not ctx.logs.has_topic(r.resource_name):
        return _result(
            r, ErrorCode.unknown_topic_or_partition, f"Topic {r.resource_name} does not exist."
        )
    return None


def _apply(ctx: RequestContext, name: str, overrides: dict[str, str], validate_only: bool) -> None:
    """Replace the topic's overrides with ``overrides`` (validated as a whole)."""
    TopicConfig(overrides, ctx.logs.broker_config)
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
                    _result(r, ErrorCode.invalid_request, "Each resource must appear at most once.")
                )
                continue
            if r.resource_type == BROKER:
                out.append(_alter_broker(ctx, r, broker_layer_for, bool(req.validate_only)))
                continue
            if r.resource_type == BROKER_LOGGER:
                out.append(
                    _result(r, ErrorCode.invalid_request, "kompakt has no dynamic broker loggers")
                )
                continue
            bad = _not_topic(ctx, r)
            if bad is not None:
                out.append(bad)
                continue
            try:
                _apply(ctx, r.resource_name, overrides_for(r), bool(req.validate_only))
                out.append(_result(r))
            except Exception as exc:
                out.append(_result(r, *error_of(exc)))
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
                fresh.save_dynamic()
                cfg.adopt(fresh)
                ctx.logs.reconfigure_defaults(cfg.log_config)
        return _result(r)
    except Exception as exc:
        return _result(r, *error_of(exc))


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
        if op == SET:
            if c.value is None:
                raise InvalidConfigError(f"Null value not supported for : {c.name}")
            overrides[c.name] = c.value
        elif op == DELETE:
            overrides.pop(c.name, None)
        elif op in (APPEND, SUBTRACT):
            if d.type != "list":
                verb = "append" if op == APPEND else "subtract"
                raise InvalidConfigError(
                    f"Config value {verb} is not allowed for config key: {c.name}"
                )
            current = list(effective.get(c.name))
            items = [x.strip() for x in (c.value or "").split(",") if x.strip()]
            if op == APPEND:
                current += [x for x in items if x not in current]
            else:
                current = [x for x in current if x not in items]
            overrides[c.name] = to_string(current) or ""
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
    nulls = [c.name for c in r.configs if c.config_operation != DELETE and c.value is None]
    if nulls:
        raise _InvalidRequest(f"Null value not supported for : {', '.join(nulls)}")
    for c in r.configs:
        op = c.config_operation
        if op == SET:
            layer[c.name] = c.value
        elif op == DELETE:
            layer.pop(c.name, None)
        elif op in (APPEND, SUBTRACT):
            type_, default = _broker_key_type(c.name)
            if type_ != "list":
                verb = "append" if op == APPEND else "subtract"
                raise _InvalidRequest(
                    f"Config value {verb} is not allowed for config key: {c.name}"
                )
            old = layer.get(c.name, default) or ""
            current = list(_parse_type(c.name, old, "list"))
            items = [x.strip() for x in c.value.split(",") if x.strip()]
            if op == APPEND:
                current += [x for x in items if x not in current]
            else:
                current = [x for x in current if x not in items]
            layer[c.name] = to_string(current) or ""
        else:
            raise _InvalidRequest(f"Unknown operations type {op}")
    return layer


def _broker_key_type(name: str) -> tuple[str, str | None]:
    """(type, default as text) of a broker key, for list operations."""
    if name in BROKER_KEYS:
        d = BROKER_KEYS[name]
        return d.type, to_string(d.default)
    if name in BROKER_LOG_KEYS:
        for cd in CONFIG_DEFS.values():
            for syn in cd.broker_synonyms:
                if syn.name == name:
                    return syn.type, syn.default
    raise _InvalidRequest(f"Unknown config name: {name}")


async def handle_incremental_alter_configs(ctx: RequestContext, req: Any) -> dict[str, Any]:
    return await _alter(
        ctx, req, lambda r: _incremental(ctx, r.resource_name, r.configs), _broker_incremental
    )


def register(registry: ApiRegistry) -> None:
    registry.register(DESCRIBE_CONFIGS, 1, 4, handle_describe_configs)
    registry.register(ALTER_CONFIGS, 0, 2, handle_alter_configs)
    registry.register(INCREMENTAL_ALTER_CONFIGS, 0, 1, handle_incremental_alter_configs)
