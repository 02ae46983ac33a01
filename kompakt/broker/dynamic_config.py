"""The file of dynamic configs (KIP-226), kept beside the topics file in the first log dir.

Kafka keeps dynamic broker and group configs in its metadata log; kompakt keeps them in
``kompakt-broker-configs.json``: ``{"cluster_default": {...}, "brokers": {"<node id>":
{...}}, "groups": {"<group>": {...}}}``. Every write replaces the whole file atomically
and creates it 0600 before its first byte (a dynamic value may be a credential-bearing
key, and the file is the broker owner's as the SCRAM and ACL stores are).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kompakt.errors import InvalidConfigError
from kompakt.log.durable import PRIVATE, write_json_atomically

DYNAMIC_CONFIGS_FILE = "kompakt-broker-configs.json"


def read_dynamic_file(path: Path) -> dict[str, Any]:
    """The stored sections ({} without a file); a file that is not a JSON object is an
    :class:`InvalidConfigError` naming it."""
    try:
        body = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise InvalidConfigError(f"cannot read {path}: {exc}") from exc
    if not isinstance(body, dict):
        raise InvalidConfigError(f"cannot read {path}: not a JSON object")
    return body


def write_dynamic_file(path: Path, body: Mapping[str, Any]) -> None:
    """Replace the file with ``body`` (write, fsync, rename), the owner's alone."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomically(path, dict(body), mode=PRIVATE)


def broker_layers(path: Path, node_id: int) -> tuple[dict[str, str], dict[str, str]]:
    """(cluster default, this broker's) dynamic values as stored; InvalidConfigError
    naming the file if a section is not an object of values."""
    stored = read_dynamic_file(path)
    default = stored.get("cluster_default") or {}
    per_broker = (stored.get("brokers") or {}).get(str(node_id)) or {}
    if not isinstance(default, dict) or not isinstance(per_broker, dict):
        raise InvalidConfigError(
            f"dynamic broker configs in {path}: expected JSON objects of config values"
        )
    return (
        {str(k): str(v) for k, v in default.items()},
        {str(k): str(v) for k, v in per_broker.items()},
    )


def save_broker_layers(
    path: Path, node_id: int, default: Mapping[str, str], per_broker: Mapping[str, str]
) -> None:
    """Store the cluster default and this broker's values, other brokers' and the groups'
    sections kept."""
    stored = read_dynamic_file(path)
    brokers = dict(stored.get("brokers") or {})
    if per_broker:
        brokers[str(node_id)] = dict(per_broker)
    else:
        brokers.pop(str(node_id), None)
    write_dynamic_file(path, {**stored, "cluster_default": dict(default), "brokers": brokers})


def group_layers(path: Path) -> dict[str, dict[str, str]]:
    """The ``groups`` section ({group: {key: value}})."""
    groups = read_dynamic_file(path).get("groups") or {}
    return {str(g): {str(k): str(v) for k, v in c.items()} for g, c in groups.items()}


def save_group_layer(path: Path, group: str, values: Mapping[str, str]) -> None:
    """Replace one group's values (none: forget the group), the other sections kept."""
    body = read_dynamic_file(path)
    groups = dict(body.get("groups") or {})
    if values:
        groups[group] = dict(values)
    else:
        groups.pop(group, None)
    write_dynamic_file(path, {**body, "groups": groups})
