"""Reader options with the meaning Spark's Kafka source gives them (batch queries).

``subscribe`` / ``subscribePattern`` / ``assign`` choose topic-partitions (exactly one);
``startingOffsets`` / ``endingOffsets`` are ``earliest``, ``latest`` or JSON such as
``{"t":{"0":23,"1":-2}}`` where -2 means earliest and -1 latest. As in Spark, a batch
query may not start at latest nor end at earliest, and JSON offsets must name every
partition read. Error texts follow Spark's so users recognise them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from kompakt.log.names import validate_topic_name
from kompakt.pipeline.layout import TopicInfo

EARLIEST, LATEST = -2, -1
TopicPartition = tuple[str, int]


class OptionError(ValueError):
    """An option is missing, malformed or not allowed for a batch query (Spark: IllegalArgument)."""


def _get(options: Mapping[str, str], name: str) -> str | None:
    """Options arrive case-insensitively from Spark; plain dicts in tests may not."""
    if name in options:
        return options[name]
    lowered = name.lower()
    for k, v in options.items():
        if k.lower() == lowered:
            return v
    return None


def get_option(options: Mapping[str, str], name: str, default: str | None = None) -> str | None:
    value = _get(options, name)
    return default if value is None else value


def data_dir(options: Mapping[str, str]) -> str:
    path = _get(options, "path")
    if not path:
        raise OptionError("option 'path' (the kompakt data dir) is required")
    return path


def select_partitions(
    options: Mapping[str, str], topics: Mapping[str, TopicInfo]
) -> list[TopicPartition]:
    """The topic-partitions to read, sorted; topics that do not exist contribute none."""
    chosen = [k for k in ("subscribe", "subscribePattern", "assign") if _get(options, k)]
    if len(chosen) != 1:
        raise OptionError(
            "One of the following options must be specified for Kafka source: subscribe, "
            "subscribePattern, assign. See the docs for more details."
            if not chosen
            else f"Only one of the following options can be specified: {', '.join(chosen)}"
        )
    how = chosen[0]
    value = _get(options, how) or ""
    if how == "subscribe":
        names = [t.strip() for t in value.split(",") if t.strip()]
        if not names:
            raise OptionError(
                f"No topics to subscribe to as specified value for option 'subscribe' is '{value}'"
            )
        for name in names:
            validate_topic_name(name)
        return [
            (t, p) for t in sorted(set(names)) if t in topics for p in range(topics[t].partitions)
        ]
    if how == "subscribePattern":
        pattern = re.compile(value)
        return [
            (t, p)
            for t in sorted(topics)
            if pattern.fullmatch(t)
            for p in range(topics[t].partitions)
        ]
    assigned = _parse_json(value, "assign")
    out = []
    for topic, parts in assigned.items():
        validate_topic_name(topic)
        if not isinstance(parts, list) or not all(isinstance(p, int) for p in parts):
            raise OptionError(f'Expected e.g. {{"topicA":[0,1]}}, got {value}')
        out += [(topic, p) for p in parts if topic in topics and p < topics[topic].partitions]
    return sorted(set(out))


def _parse_json(text: str, what: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, dict):
        raise OptionError(f'Expected e.g. {{"topicA":{{"0":23,"1":-1}}}}, got {text} for {what}')
    return value


@dataclass(frozen=True)
class OffsetSpec:
    """``earliest``/``latest`` for all partitions, or one offset per partition."""

    default: int | None  # EARLIEST or LATEST, or None when per-partition offsets are given
    per_partition: Mapping[TopicPartition, int]

    def resolve(self, tp: TopicPartition, log_start: int, log_end: int) -> int:
        value = self.per_partition[tp] if self.default is None else self.default
        if value == EARLIEST:
            return log_start
        if value == LATEST:
            return log_end
        return value


def parse_offsets(
    options: Mapping[str, str], name: str, partitions: list[TopicPartition]
) -> OffsetSpec:
    """Parse ``startingOffsets`` or ``endingOffsets`` with Spark's batch-query rules."""
    starting = name == "startingOffsets"
    text = (_get(options, name) or ("earliest" if starting else "latest")).strip()
    forbidden, word = (LATEST, "latest") if starting else (EARLIEST, "earliest")
    what = "starting offset" if starting else "ending offset"
    if text.lower() in ("earliest", "latest"):
        value = EARLIEST if text.lower() == "earliest" else LATEST
        if value == forbidden:
            raise OptionError(f"{what} can't be {word} for batch queries on Kafka")
        return OffsetSpec(value, {})
    raw = _parse_json(text, name)
    offsets: dict[TopicPartition, int] = {}
    for topic, parts in raw.items():
        if not isinstance(parts, dict):
            raise OptionError(f'Expected e.g. {{"topicA":{{"0":23,"1":-1}}}}, got {text}')
        for part, off in parts.items():
            if not isinstance(off, int) or off < EARLIEST:
                raise OptionError(f"invalid offset {off!r} for {topic}-{part} in {name}")
            if off == forbidden:
                raise OptionError(
                    f"{name} for {topic}-{part} can't be {word} for batch queries on Kafka"
                )
            offsets[(topic, int(part))] = off
    if set(offsets) != set(partitions):
        raise OptionError(
            f"If {name} contains specific offsets, you must specify all TopicPartitions.\n"
            "Use -1 for latest, -2 for earliest.\n"
            f"Specified: {sorted(offsets)} Assigned: {sorted(partitions)}"
        )
    return OffsetSpec(None, offsets)
