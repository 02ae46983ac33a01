"""Kafka's ``listeners`` / ``advertised.listeners`` values (``NAME://HOST:PORT,...``) and
``listener.security.protocol.map``, parsed and checked as ``KafkaConfig`` does, and the
admin listener's URL (``kompakt.admin.listener``)."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import urlparse

from kompakt.errors import InvalidConfigError

from kompakt.broker.security.keys import SECURITY_PROTOCOLS  # isort: skip


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


def check_distinct(key: str, ls: list[Listener]) -> None:
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


def protocol_map(text: str) -> dict[str, str]:
    """``listener.security.protocol.map`` as {listener name: security protocol}."""
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


def parse_listener(url: str) -> tuple[str, int]:
    """``kompakt.admin.listener`` (``http[s]://HOST:PORT``) as (host, port)."""
    parsed = urlparse(url if "://" in url else f"http://{url}")
    if parsed.scheme not in ("http", "https") or not parsed.hostname or parsed.port is None:
        raise ValueError(f"kompakt.admin.listener must look like http://HOST:PORT, got {url!r}")
    return parsed.hostname, parsed.port


def is_tls(url: str) -> bool:
    return url.startswith("https://")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
