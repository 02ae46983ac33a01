"""Consumer groups' committed offsets kept in the remote tier, so a broker rebuilt from
the bucket on an empty disk gives each group the offsets it committed.

``__consumer_offsets`` is not tiered: its newest commits live in its active segment,
which never goes up (Kafka tiers only rolled segments), and the group coordinator
replays the local log only. Instead, every ``remote.log.manager.task.interval.ms`` the
broker uploads the coordinator's committed offsets of tiered topics as one object
(``groups/offsets.json``, :data:`kompakt.remote.layout.GROUP_OFFSETS`), when they
changed since the last upload, with the offsets topic's partition count and config
overrides. A rebuild (:mod:`kompakt.broker.remote_rebuild`) recreates
``__consumer_offsets`` as it was and appends each offset as the OffsetCommit record the
coordinator would have written (Kafka's ``GroupMetadataManager`` format), before the
coordinator loads it, so the load is the ordinary one.

What is lost with the disk, as records not yet tiered are: commits made after the last
upload (at most one task interval), and the groups' membership (members rejoin). A
committed offset past the rebuilt log's end (records that were never tiered) is restored
as that end, so a consumer resumes with the first record the rebuilt log gets instead
of skipping new records up to an offset the lost records had reached.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from kompakt.broker.background import PeriodicThread
from kompakt.broker.coordinator import records as rec
from kompakt.broker.coordinator.handlers import coordinator_if_started
from kompakt.broker.coordinator.records import OffsetAndMetadata
from kompakt.broker.coordinator.storage import OFFSETS_TOPIC, append_batch
from kompakt.log.manager import LogManager
from kompakt.remote.layout import GROUP_OFFSETS
from kompakt.remote.store import ObjectNotFoundError, ObjectStore, RemoteStorageError

if TYPE_CHECKING:
    from kompakt.broker.background import BackgroundTasks
    from kompakt.broker.config import BrokerConfig
    from kompakt.broker.state import BrokerState
    from kompakt.remote import RemoteTier

log = logging.getLogger("kompakt.broker.tiering")

FORMAT = 1
Offsets = dict[tuple[str, str, int], OffsetAndMetadata]  # (group, topic, partition) -> commit


@dataclass(frozen=True)
class GroupOffsets:
    """The object's content: the offsets topic's shape and every committed offset."""

    partitions: int
    configs: Mapping[str, str]
    offsets: Offsets

    def to_json(self) -> bytes:
        rows = [
            {
                "group": g,
                "topic": t,
                "partition": p,
                "offset": om.offset,
                "leader_epoch": om.leader_epoch,
                "metadata": om.metadata,
                "commit_timestamp": om.commit_timestamp,
                "expire_timestamp": om.expire_timestamp,
            }
            for (g, t, p), om in sorted(self.offsets.items())
        ]
        body = {
            "format": FORMAT,
            "topic": OFFSETS_TOPIC,
            "partitions": self.partitions,
            "configs": dict(sorted(self.configs.items())),
            "offsets": rows,
        }
        return json.dumps(body, indent=1, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> GroupOffsets:
        """Parsed and checked; a damaged object is one line naming it."""
        try:
            body = json.loads(data)
            if body["format"] != FORMAT:
                raise ValueError(f"format {body['format']!r} is not {FORMAT}")
            offsets = {
                (_text(r["group"]), _text(r["topic"]), _int(r["partition"])): OffsetAndMetadata(
                    _int(r["offset"]),
                    _int(r["leader_epoch"]),
                    _text(r["metadata"]),
                    _int(r["commit_timestamp"]),
                    None if r["expire_timestamp"] is None else _int(r["expire_timestamp"]),
                )
                for r in body["offsets"]
            }
            configs = {_text(k): _text(v) for k, v in body["configs"].items()}
            partitions = _int(body["partitions"])
            if partitions < 1:
                raise ValueError(f"{partitions} partitions")
        except KeyError as e:
            raise RemoteStorageError(f"{GROUP_OFFSETS} cannot be read: no field {e}") from None
        except (ValueError, TypeError, AttributeError, UnicodeDecodeError) as e:
            raise RemoteStorageError(f"{GROUP_OFFSETS} cannot be read: {e}") from None
        return cls(partitions, configs, offsets)


def _int(v: Any) -> int:
    if not isinstance(v, int) or isinstance(v, bool):
        raise TypeError(f"{v!r} is not an integer")
    return v


def _text(v: Any) -> str:
    if not isinstance(v, str):
        raise TypeError(f"{v!r} is not a string")
    return v


def load(store: ObjectStore) -> GroupOffsets | None:
    """The uploaded offsets, None when none were ever uploaded."""
    try:
        data, _version = store.get(GROUP_OFFSETS)
    except ObjectNotFoundError:
        return None
    return GroupOffsets.from_json(data)


class GroupOffsetsUploader:
    """The periodic job: upload the coordinator's committed offsets of tiered topics
    when they changed (only once the coordinator has loaded, so a broker that has not
    read its groups yet never replaces the object with an empty one)."""

    def __init__(self, state: BrokerState, store: ObjectStore):
        self.state = state  # immutable
        self.store = store  # immutable
        self.last: bytes | None = None  # owned by the job's thread: the last upload

    def current(self) -> GroupOffsets | None:
        """What the object should hold now; None while the coordinator is not loaded."""
        gc = coordinator_if_started(self.state)
        logs = self.state.logs
        if self.state.closing or gc is None or not gc.loaded or not logs.has_topic(OFFSETS_TOPIC):
            return None
        snap = gc.snapshot()
        tiered = {t for t in logs.topics() if logs.topic_config(t).remote_storage_enable}
        offsets = {
            (gid, topic, partition): om
            for gid, g in snap.groups.items()
            for (topic, partition), om in g.offsets.items()
            if topic in tiered
        }
        meta = logs.topic_meta(OFFSETS_TOPIC)
        return GroupOffsets(meta.partitions, dict(meta.overrides), offsets)

    def run_once(self) -> bool:
        """One pass; a failure is logged and the next pass tries again."""
        try:
            want = self.current()
            if want is None:
                return False
            data = want.to_json()
            if data != self.last:
                self.store.put(GROUP_OFFSETS, data)
                self.last = data
                log.info("uploaded %d committed offsets to the remote tier", len(want.offsets))
        except Exception as exc:  # the store unreachable, the coordinator closing
            log.warning("uploading the committed group offsets: %s", exc)
        return False


class Tiered(Protocol):
    """The broker's remote log manager, as far as this module needs it."""

    tier: RemoteTier


def install(
    config: BrokerConfig, state: BrokerState, background: BackgroundTasks, tiering: Tiered | None
) -> None:
    """At start, with the remote tier on (``tiering``): add the upload job's thread,
    every ``remote.log.manager.task.interval.ms``."""
    if tiering is None:
        return
    uploader = GroupOffsetsUploader(state, tiering.tier.store)
    interval = int(config.get("remote.log.manager.task.interval.ms"))
    background.threads.append(
        PeriodicThread("kompakt-remote-group-offsets", interval, uploader.run_once)
    )


def restore(logs: LogManager, store: ObjectStore, ends: Mapping[tuple[str, int], int]) -> int:
    """Recreate ``__consumer_offsets`` from the uploaded offsets of the rebuilt topics
    (``ends``: each rebuilt partition's log end) before the coordinator loads it;
    returns how many offsets were restored. Call only on a rebuild (empty data dir)."""
    uploaded = load(store)
    if uploaded is None or logs.has_topic(OFFSETS_TOPIC):
        return 0
    logs.create_topic(OFFSETS_TOPIC, uploaded.partitions, dict(uploaded.configs))
    by_partition: dict[int, list[tuple[bytes, bytes | None]]] = {}
    clamped = 0
    for (group, topic, partition), om in uploaded.offsets.items():
        end = ends.get((topic, partition))
        if end is None:
            continue  # a topic not rebuilt (deleted since, or never tiered)
        if om.offset > end:
            om = OffsetAndMetadata(
                end, om.leader_epoch, om.metadata, om.commit_timestamp, om.expire_timestamp
            )
            clamped += 1
        record = (rec.offset_key(group, topic, partition), rec.offset_value(om))
        by_partition.setdefault(rec.partition_for(group, uploaded.partitions), []).append(record)
    for p, items in sorted(by_partition.items()):
        append_batch(logs.get_log(OFFSETS_TOPIC, p), items, durable=True)
    n = sum(len(items) for items in by_partition.values())
    log.info(
        "restored %d committed offsets into %s from the remote tier (%d past the rebuilt "
        "log end, restored as that end)",
        n,
        OFFSETS_TOPIC,
        clamped,
    )
    return n
