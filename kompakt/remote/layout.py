"""Where each remote object lives in the bucket (or folder): the one place keys are named.

::

    topics/<topic>/topic.json                                  topic id, partitions, configs
    topics/<topic>/<partition>/manifest.json                   the partition's remote log
    topics/<topic>/<partition>/segments/<base:20d>-<id>.log    a segment's files, whole,
    topics/<topic>/<partition>/segments/<base:20d>-<id>.index  immutable, never rewritten
    ...                                                        (.timeindex, .txnindex,
                                                                .snapshot)
    groups/offsets.json                                        committed group offsets

``<id>`` is a fresh UUID per upload (Kafka's ``RemoteLogSegmentId``), so a retried or a
re-cleaned upload of the same base offset never overwrites an object a manifest names.
Topic names are Kafka's legal characters (``[a-zA-Z0-9._-]``), safe in a key as they are.
"""

from __future__ import annotations

TOPICS = "topics"
TOPIC_OBJECT = "topic.json"
MANIFEST_OBJECT = "manifest.json"
SEGMENTS = "segments"
GROUP_OFFSETS = "groups/offsets.json"  # the group coordinator's committed offsets


def topic_folder(topic: str) -> str:
    return f"{TOPICS}/{topic}"


def topic_key(topic: str) -> str:
    return f"{TOPICS}/{topic}/{TOPIC_OBJECT}"


def partition_folder(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/{partition}"


def manifest_key(topic: str, partition: int) -> str:
    return f"{partition_folder(topic, partition)}/{MANIFEST_OBJECT}"


def segments_folder(topic: str, partition: int) -> str:
    return f"{partition_folder(topic, partition)}/{SEGMENTS}"


def segment_key(topic: str, partition: int, base_offset: int, segment_id: str, suffix: str) -> str:
    """``suffix`` is the local file's (``.log``, ``.index``, ... from kompakt.log)."""
    return f"{segments_folder(topic, partition)}/{base_offset:020d}-{segment_id}{suffix}"


def topic_of_topic_key(key: str) -> str | None:
    """The topic a ``topics/<topic>/topic.json`` key names, else None."""
    parts = key.split("/")
    if len(parts) == 3 and parts[0] == TOPICS and parts[2] == TOPIC_OBJECT:
        return parts[1]
    return None


def partition_of_key(key: str) -> tuple[str, int] | None:
    """(topic, partition) of any key below a partition's folder, else None."""
    parts = key.split("/")
    if len(parts) >= 4 and parts[0] == TOPICS and parts[2].isdigit():
        return parts[1], int(parts[2])
    return None


def file_base_offset(key: str) -> int:
    """The base offset of the local segment a segment object was uploaded from, as its
    key names it: what the ``.index``'s relative offsets count from, even when the
    manifest's ``base_offset`` is later (a cleaned segment reaching below the remote
    end, tiered from that end on)."""
    name = key.rsplit("/", 1)[-1]
    digits = name.split("-", 1)[0]
    if len(digits) != 20 or not digits.isdigit():
        raise ValueError(f"{key!r} is not a segment object key")
    return int(digits)
