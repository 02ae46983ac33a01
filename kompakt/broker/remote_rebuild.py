"""A broker started on an empty data dir recreates every tiered topic from the remote
tier alone (what Kafka's tiered storage cannot do: its remote metadata lives in a topic
on the lost disk).

Each topic record (``topic.json``) gives the topic's name, id, partition count and
config overrides; each partition's manifest gives its remote log. The topic is created
with its own id (so its manifests stay its own) and each partition's local log starts
empty at the remote log's end: offsets below it are served from the tier, new records
get the offsets after it. Only an empty data dir is rebuilt: a topic missing from a
data dir that has others was deleted there, and must not come back.

Also restored:

- the idempotent producers' state at the remote end: the manifest's producer snapshot
  (the last segment's ``.snapshot``, checked against its SHA-256) becomes the local
  log's ``<end>.snapshot``, which the log loads as Kafka's ``ProducerStateManager``
  loads its latest snapshot, so a producer retrying its last batch gets the original's
  offset and a stale epoch is fenced, as before the loss. A transaction the snapshot
  shows open is dropped from it (its marker and its coordinator's state were on the
  lost disk; kept, it would hold the last stable offset back forever) and logged;
- the consumer groups' committed offsets of the rebuilt topics
  (:mod:`kompakt.broker.remote_groups`).

Not restored: topics that were never tiered, and the records of a tiered topic that
were not tiered yet (its active segment among them), as in Kafka.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

from kompakt.log.manager import LogManager
from kompakt.log.partition_log import PartitionLog
from kompakt.log.producer_snapshot import (
    NO_OFFSET,
    SNAPSHOT_SUFFIX,
    CorruptSnapshotError,
    ProducerSnapshotFile,
    decode,
)
from kompakt.remote import RemoteTier
from kompakt.remote.manifest import PartitionManifest
from kompakt.remote.store import RemoteStorageError

log = logging.getLogger("kompakt.broker.tiering")


def rebuild_from_tier(logs: LogManager, tier: RemoteTier) -> list[str]:
    """Recreate the tier's topics in an empty data dir; the names recreated. Every topic
    record and manifest is read before the first topic is made, so a damaged one stops
    the start with the data dir still empty, and the start after its repair rebuilds."""
    if logs.topics():
        return []
    found = []
    for name in tier.metadata.topics():
        record = tier.metadata.load_topic(name)
        if record is None:
            continue  # deleted since listed
        r = record.value
        manifests = []
        for partition in range(r.partitions):
            v = tier.metadata.load_partition(name, partition)
            manifests.append(v.value if v is not None and v.value.topic_id == r.topic_id else None)
        found.append((name, r, manifests))
    rebuilt = []
    ends: dict[tuple[str, int], int] = {}
    for name, r, manifests in found:
        logs.create_topic(name, r.partitions, dict(r.configs), topic_id=r.topic_id)
        for partition, m in enumerate(manifests):
            end = m.end_offset if m is not None else 0
            if m is not None and end > 0:
                _start_at_remote_end(logs.get_log(name, partition), tier, m)
            ends[(name, partition)] = end
        rebuilt.append(name)
        log.info(
            "recreated topic %s (id %s, %d partitions) from the remote tier; its local "
            "logs start at the remote ends %s",
            name,
            r.topic_id,
            r.partitions,
            [ends[(name, p)] for p in range(r.partitions)],
        )
    if rebuilt:
        # imported here: the coordinator's package imports the request handlers, which
        # import the remote log manager, which imports this module
        from kompakt.broker import remote_groups

        try:
            remote_groups.restore(logs, tier.store, ends)
        except RemoteStorageError as exc:  # the topics stand; the groups start afresh
            log.error("consumer group offsets not restored: %s", exc)
    return rebuilt


def _start_at_remote_end(plog: PartitionLog, tier: RemoteTier, m: PartitionManifest) -> None:
    """An empty local log goes on at the remote log's end: offsets below it are the
    tier's, and the idempotent producers' state is the tier's snapshot of that end."""
    end = m.end_offset
    plog.roll(base_offset=end)  # the local log goes on at the remote end
    _restore_producers(plog, tier, m)  # before anything builds the state
    plog.delete_records_before(end)  # and starts there (Kafka's local start)


def align_to_tier(
    logs: LogManager,
    tier: RemoteTier,
    manifest_of: Callable[[PartitionLog], PartitionManifest | None],
    overlapping: set[tuple[str, int]] | None = None,
) -> list[str]:
    """The tiered partitions whose local log is behind their remote log's end (its
    folder lost, or a rebuild cut short): an empty one goes on at the remote end, as a
    rebuild starts it; left at offset 0, it gave new records offsets the tier already
    held, and local retention then deleted them as tiered. One with records (an older
    copy of the folder) is named in an error and added to ``overlapping``, which the
    tiering task then leaves alone. ``manifest_of`` is the tiering's own answer to "the
    remote log of this partition" (:meth:`kompakt.broker.tiering.Tiering.manifest`:
    this topic's, of a tiered topic), which it then keeps. Returns the partitions
    aligned."""
    aligned = []
    for name in logs.topics():
        for partition in range(logs.partition_count(name)):
            plog = logs.get_log(name, partition)
            try:
                m = manifest_of(plog)
            except RemoteStorageError as exc:  # a manifest unreadable now: the task retries
                log.warning("%s: not checked against the remote tier: %s", plog.name, exc)
                continue
            if m is None or not m.segments:
                continue
            if plog.log_end_offset >= m.end_offset:
                continue
            if plog.log_end_offset > plog.log_start_offset:
                log.error(
                    "%s: its local log (offsets %d..%d) is behind the remote tier's end %d "
                    "and overlaps it: it is not tiered and its segments are kept; move its "
                    "folder away and restart to go on from the tier's end",
                    plog.name,
                    plog.log_start_offset,
                    plog.log_end_offset - 1,
                    m.end_offset,
                )
                if overlapping is not None:
                    overlapping.add((name, partition))
                continue
            log.warning(
                "%s: its local log is empty at offset %d but the remote tier holds offsets "
                "%d..%d (its folder was lost or a rebuild was cut short): it goes on at %d",
                plog.name,
                plog.log_end_offset,
                m.log_start_offset,
                m.end_offset - 1,
                m.end_offset,
            )
            _start_at_remote_end(plog, tier, m)
            aligned.append(plog.name)
    return aligned


def _restore_producers(plog: PartitionLog, tier: RemoteTier, m: PartitionManifest) -> None:
    """The manifest's producer snapshot as the log's snapshot at the remote end."""
    if m.producer_snapshot is None:
        return
    try:
        entries = decode(tier.segments.fetch_file(m.segments[-1], SNAPSHOT_SUFFIX))
    except (CorruptSnapshotError, RemoteStorageError) as exc:  # missing or damaged
        log.warning(
            "%s: the tiered producer snapshot is unusable (%s): idempotent producers' "
            "retries from before the loss are not recognized",
            plog.name,
            exc,
        )
        return
    open_txns = [e.producer_id for e in entries if e.current_txn_first_offset != NO_OFFSET]
    if open_txns:
        log.warning(
            "%s: producers %s had a transaction open at the remote end %d; its outcome was "
            "on the lost disk, so it is not restored as open",
            plog.name,
            open_txns,
            m.end_offset,
        )
    entries = [replace(e, current_txn_first_offset=NO_OFFSET) for e in entries]
    ProducerSnapshotFile(plog.dir, m.end_offset).write(entries)
    log.info("%s: restored %d producers' state at offset %d", plog.name, len(entries), m.end_offset)
