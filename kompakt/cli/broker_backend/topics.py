"""Topic verbs against a broker: create, alter, describe, list, delete.

As ``kafka-topics.sh`` they go through the Admin API (CreateTopics,
IncrementalAlterConfigs, DescribeConfigs, ListOffsets, DeleteTopics). ``describe`` also
asks the broker's admin endpoint (``GET /v1/partitions``) for per-partition size,
segments and compaction state; when it cannot be reached the description goes without
them and ``warnings`` says why.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any

from kompakt.errors import UnknownTopicError

from ..backend import CliError, PartitionDescription, TopicDescription, TopicSummary
from .connection import BrokerConnection


def _topic_id(uuid: Any) -> str:
    """A topic id as Kafka's ``Uuid.toString`` writes it (URL-safe base64, unpadded),
    as the offline verbs print it; confluent-kafka's ``str`` uses the standard
    alphabet, so the same topic showed two ids."""
    msb, lsb = uuid.get_most_significant_bits(), uuid.get_least_significant_bits()
    raw = (msb & (2**64 - 1)).to_bytes(8, "big") + (lsb & (2**64 - 1)).to_bytes(8, "big")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


class TopicVerbs(BrokerConnection):
    """``kompakt topic ...`` over the Kafka protocol."""

    def create_topic(self, name: str, partitions: int, configs: Mapping[str, str]) -> TopicSummary:
        from confluent_kafka.admin import NewTopic

        new = self._call(lambda: NewTopic(name, partitions, config=dict(configs)))
        futures = self._call(
            lambda: self.admin.create_topics(
                [new], operation_timeout=self.timeout, request_timeout=self.timeout
            )
        )
        self._wait(futures[name], topic=name)
        ids = self._topic_ids([name])
        return TopicSummary(name, partitions, _topic_id(ids[name].topic_id))

    def alter_topic(
        self, name: str, set: Mapping[str, str], delete: Sequence[str]
    ) -> dict[str, str]:
        from confluent_kafka.admin import (
            AlterConfigOpType,
            ConfigEntry,
            ConfigResource,
            ResourceType,
        )

        self._partition_count(name)  # unknown topic: a clear error before anything else
        entries = [
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in set.items()
        ] + [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in delete]
        res = ConfigResource(ResourceType.TOPIC, name, incremental_configs=entries)
        futures = self._call(
            lambda: self.admin.incremental_alter_configs([res], request_timeout=self.timeout)
        )
        for future in futures.values():
            self._wait(future, topic=name)
        configs = self._configs([name])[name]
        return {c.name: c.value or "" for c in configs if c.override}

    def describe_topics(self, names: Sequence[str] | None = None) -> list[TopicDescription]:
        md = self._metadata()
        if names:
            for n in names:
                if n not in md.topics or (
                    md.topics[n].error is not None and not md.topics[n].partitions
                ):
                    raise UnknownTopicError(f"unknown topic {n!r}")
            names = list(names)
        else:
            names = sorted(md.topics)
        ids = self._topic_ids(names)
        configs = self._configs(names)
        tps = [(n, p.id) for n in names for p in ids[n].partitions]
        starts = self._offsets(tps, latest=False)
        ends = self._offsets(tps, latest=True)
        state = self._admin_partitions()
        out = []
        for n in names:
            parts = []
            for p in sorted(x.id for x in ids[n].partitions):
                s = state.get((n, p), {})
                parts.append(
                    PartitionDescription(
                        p,
                        starts.get((n, p), s.get("log_start_offset", -1)),
                        ends.get((n, p), s.get("log_end_offset", -1)),
                        s.get("size_bytes"),
                        s.get("segments"),
                        s.get("dirty_ratio"),
                        s.get("last_compaction_ms"),
                        s.get("tombstones_pending"),
                        s.get("uncleanable_reason"),
                    )
                )
            out.append(
                TopicDescription(
                    n, _topic_id(ids[n].topic_id), len(parts), configs.get(n, []), parts
                )
            )
        return out

    def _admin_partitions(self) -> dict[tuple[str, int], dict[str, Any]]:
        """Per-partition log and compaction state from the admin endpoint, or {} (and a
        warning) when it cannot be reached: describe must still work without it."""
        from ..admin_client import admin_json

        try:
            data = admin_json(self.admin_url, "/v1/partitions", timeout=self.timeout)
            return {(d["topic"], int(d["partition"])): d for d in data["partitions"]}
        except (CliError, KeyError, TypeError) as exc:
            self.warnings.append(
                f"{exc}: size, segments and compaction state left out (see --admin-url)"
            )
            return {}

    def list_topics(self) -> list[TopicSummary]:
        md = self._metadata()
        names = sorted(md.topics)
        ids = self._topic_ids(names)
        return [
            TopicSummary(n, len(md.topics[n].partitions), _topic_id(ids[n].topic_id)) for n in names
        ]

    def delete_topic(self, name: str) -> None:
        futures = self._call(
            lambda: self.admin.delete_topics(
                [name], operation_timeout=self.timeout, request_timeout=self.timeout
            )
        )
        self._wait(futures[name], topic=name)
