"""Dynamic GROUP configs (KIP-848 and KIP-932, ``ConfigResource.Type.GROUP`` = 32).

Kafka's ``GroupConfig``: a group may override the broker's session timeout and heartbeat
interval of its consumer (``consumer.*``) and share (``share.*``) protocol. Each key's
default is the broker key ``group.<protocol>.<...>``, and a value must lie within the
broker's ``group.<protocol>.min/max.*`` bounds with the heartbeat below the session
timeout (``GroupConfig.validateValues``, INVALID_CONFIG). The values live in the
``groups`` section of the dynamic configs file (:mod:`kompakt.broker.dynamic_config`;
Kafka keeps them in its metadata log). kompakt's coordinator speaks the classic protocol
only, so no group reads them yet; they are kept and described as Kafka does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kompakt.broker.config import BrokerConfig
from kompakt.errors import InvalidConfigError
from kompakt.log.config import parse_type

GROUP_KEYS = (
    "consumer.session.timeout.ms",
    "consumer.heartbeat.interval.ms",
    "share.session.timeout.ms",
    "share.heartbeat.interval.ms",
)


InvalidGroupConfig = InvalidConfigError  # Kafka's InvalidConfigurationException


def broker_default(name: str) -> str:
    """The broker key whose value is ``name``'s default (``group.consumer.session...``)."""
    return f"group.{name}"


def _bound(name: str, which: str) -> str:
    protocol, rest = name.split(".", 1)
    return f"group.{protocol}.{which}.{rest}"


def broker_keys_read() -> frozenset[str]:
    """The broker keys this module reads by a computed name: each GROUP key's default
    and bounds (a check that every accepted key is read looks here too)."""
    return frozenset(
        name for k in GROUP_KEYS for name in (broker_default(k), _bound(k, "min"), _bound(k, "max"))
    )


@dataclass(frozen=True)
class GroupEntry:
    name: str
    value: str
    dynamic: bool  # set for this group (DYNAMIC_GROUP_CONFIG), else the broker's default


def validate(values: Mapping[str, str | None], broker: BrokerConfig) -> None:
    """``GroupConfig.validate``: known names, INT values, within the broker's bounds,
    heartbeat below session timeout (effective values over the broker's defaults)."""
    nulls = sorted(k for k, v in values.items() if v is None)
    if nulls:
        raise InvalidGroupConfig(f"Null value not supported for group configs: {','.join(nulls)}")
    for k in values:
        if k not in GROUP_KEYS:
            raise InvalidGroupConfig(f"Unknown group config name: {k}")
    eff = {k: broker.get(broker_default(k)) for k in GROUP_KEYS}
    for k, v in values.items():
        eff[k] = parse_type(k, str(v), "int")
    for k in GROUP_KEYS:
        lo, hi = broker.get(_bound(k, "min")), broker.get(_bound(k, "max"))
        if eff[k] < lo:
            raise InvalidGroupConfig(f"{k} must be greater than or equal to {_bound(k, 'min')}")
        if eff[k] > hi:
            raise InvalidGroupConfig(f"{k} must be less than or equal to {_bound(k, 'max')}")
    for protocol in ("consumer", "share"):
        beat, session = f"{protocol}.heartbeat.interval.ms", f"{protocol}.session.timeout.ms"
        if eff[beat] >= eff[session]:
            raise InvalidGroupConfig(f"{beat} must be less than {session}")


def describe(stored: Mapping[str, str], broker: BrokerConfig) -> list[GroupEntry]:
    """Every group key: the group's own value, else the broker's default."""
    return [
        GroupEntry(k, stored[k], True)
        if k in stored
        else GroupEntry(k, str(broker.get(broker_default(k))), False)
        for k in GROUP_KEYS
    ]
