"""The topic configs page's data: a topic's configs with their source, and an edit.

DescribeConfigs' sources folded into default / broker / topic; an edit is an
IncrementalAlterConfigs request dispatched through the broker's API table
(:meth:`kompakt.broker.app.Broker.dispatch`), so it is validated (and authorized) by
exactly the code a Kafka client reaches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kompakt.broker.console.browse import BrowseInputError

SOURCE_KIND = {
    "DYNAMIC_TOPIC_CONFIG": "topic",
    "DYNAMIC_BROKER_CONFIG": "broker",
    "DYNAMIC_DEFAULT_BROKER_CONFIG": "broker",
    "STATIC_BROKER_CONFIG": "broker",
    "DEFAULT_CONFIG": "default",
}


@dataclass
class ConfigRow:
    name: str
    value: str | None
    source: str  # default | broker | topic
    kafka_source: str  # DescribeConfigs' source name
    documentation: str
    sensitive: bool = False


def topic_configs(logs: Any, topic: str) -> list[ConfigRow]:
    """A topic's effective configs, as DescribeConfigs reports them."""
    from kompakt.log.config import CONFIG_DEFS

    if not topic or not logs.has_topic(topic):
        raise BrowseInputError(f"topic {(topic or '')[:200]!r} does not exist")
    rows = []
    for e in logs.topic_config(topic).describe():
        d = CONFIG_DEFS.get(e.name)
        rows.append(
            ConfigRow(
                e.name,
                None if e.sensitive else e.value,
                SOURCE_KIND.get(e.source, e.source.lower()),
                e.source,
                d.documentation if d is not None else "",
                e.sensitive,
            )
        )
    return sorted(rows, key=lambda r: r.name)


# Kafka's ConfigResource.Type.TOPIC and AlterConfigOp.OpType ids (the handler's own
# enums live in kompakt.broker.handlers.configs, which this module must not import: the
# admin listener imports the console, and the handlers import the broker config)
RESOURCE_TOPIC = 2
OP_SET = 0
OP_DELETE = 1


async def alter_topic_config_async(
    broker: Any,
    topic: str,
    name: str,
    value: str | None,
    *,
    delete: bool = False,
    principal: str = "User:ANONYMOUS",
    peer: str = "console:0",
    validate_only: bool = False,
) -> str | None:
    """Set (or, with ``delete``, remove) one topic config as an IncrementalAlterConfigs
    request through the broker's API table (:meth:`Broker.dispatch`, the authorizer's
    check included): Kafka's validation, Kafka's messages. None on success, else the
    error message to show next to the field."""
    from kio.schema.errors import ErrorCode
    from kio.schema.incremental_alter_configs.v1.request import (
        AlterableConfig,
        AlterConfigsResource,
        IncrementalAlterConfigsRequest,
    )
    from kio.static.primitive import i8

    if not name:
        return "choose a config"
    if not delete and value is None:
        return f"enter a value for {name}"
    req = IncrementalAlterConfigsRequest(
        resources=(
            AlterConfigsResource(
                resource_type=i8(RESOURCE_TOPIC),
                resource_name=topic,
                configs=(
                    AlterableConfig(
                        name=name,
                        config_operation=i8(OP_DELETE if delete else OP_SET),
                        value=None if delete else value,
                    ),
                ),
            ),
        ),
        validate_only=validate_only,
    )
    resp = await broker.dispatch(
        IncrementalAlterConfigsRequest.__api_key__, 1, req, principal=principal, peer=peer
    )
    r = resp["responses"][0]
    if r["error_code"] == ErrorCode.none:
        return None
    return r["error_message"] or ErrorCode(r["error_code"]).name.upper()


def alter_topic_config(
    broker: Any,
    topic: str,
    name: str,
    value: str | None,
    **kw: Any,
) -> str | None:
    """:func:`alter_topic_config_async` from a thread without a running event loop."""
    import asyncio

    return asyncio.run(alter_topic_config_async(broker, topic, name, value, **kw))
