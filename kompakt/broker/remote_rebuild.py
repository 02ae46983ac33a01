"""A broker started on an empty data dir recreates every tiered topic from the remote
tier alone (what Kafka's tiered storage cannot do: its remote metadata lives in a topic
on the lost disk).

Each topic record (``topic.json``) gives the topic's name, id, partition count and
config overrides; each partition's manifest gives its remote log. The topic is created
with its own id (so its manifests stay its own) and each partition's local log starts
empty at the remote log's end: offsets below it are served from the tier, new records
get the offsets after it. Only an empty data dir is rebuilt: a topic missing from a
data dir that has others was deleted there, and must not come back.

Not restored: idempotent producers' state (a retried batch from before the loss is not
recognized as a duplicate) and topics that were never tiered (consumer group offsets
among them unless ``__consumer_offsets`` was tiered).
"""

from __future__ import annotations

import logging

from kompakt.log.manager import LogManager
from kompakt.remote import RemoteTier

log = logging.getLogger("kompakt.broker.tiering")


def rebuild_from_tier(logs: LogManager, tier: RemoteTier) -> list[str]:
    """Recreate the tier's topics in an empty data dir; the names recreated."""
    if logs.topics():
        return []
    rebuilt = []
    for name in tier.metadata.topics():
        record = tier.metadata.load_topic(name)
        if record is None:
            continue  # deleted since listed
        r = record.value
        logs.create_topic(name, r.partitions, dict(r.configs), topic_id=r.topic_id)
        ends = []
        for partition in range(r.partitions):
            v = tier.metadata.load_partition(name, partition)
            end = v.value.end_offset if v is not None and v.value.topic_id == r.topic_id else 0
            if end > 0:
                plog = logs.get_log(name, partition)
                plog.roll(base_offset=end)  # the local log goes on at the remote end
                plog.delete_records_before(end)  # and starts there (Kafka's local start)
            ends.append(end)
        rebuilt.append(name)
        log.info(
            "recreated topic %s (id %s, %d partitions) from the remote tier; its local "
            "logs start at the remote ends %s",
            name,
            r.topic_id,
            r.partitions,
            ends,
        )
    return rebuilt
