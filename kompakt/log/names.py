"""Topic name rules, as Kafka's ``org.apache.kafka.common.internals.Topic``.

A topic name becomes a directory name (``TOPIC-PARTITION``) and part of metric names, so
Kafka limits it to a portable alphabet and a length that leaves room for the partition
suffix within a 255-byte file name. The messages are Kafka's, so clients and tools see the
same text from kompakt as from a Kafka broker.
"""

from __future__ import annotations

from collections.abc import Iterable

from kompakt.errors import InvalidTopicError

GROUP_METADATA_TOPIC_NAME = "__consumer_offsets"
TRANSACTION_STATE_TOPIC_NAME = "__transaction_state"
SHARE_GROUP_STATE_TOPIC_NAME = "__share_group_state"
CLUSTER_METADATA_TOPIC_NAME = "__cluster_metadata"

# Kafka's Topic.INTERNAL_TOPICS (4.x); __cluster_metadata is KRaft's log, not a topic.
INTERNAL_TOPICS = frozenset(
    {GROUP_METADATA_TOPIC_NAME, TRANSACTION_STATE_TOPIC_NAME, SHARE_GROUP_STATE_TOPIC_NAME}
)

MAX_NAME_LENGTH = 249
LEGAL_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def invalid_topic_reason(name: str) -> str | None:
    """Why ``name`` is not a legal topic name (Kafka's wording), or None if it is."""
    if name == "":
        return "the empty string is not allowed"
    if name == ".":
        return "'.' is not allowed"
    if name == "..":
        return "'..' is not allowed"
    if len(name) > MAX_NAME_LENGTH:
        return f"the length of '{name}' is longer than the max allowed length {MAX_NAME_LENGTH}"
    if not LEGAL_CHARS.issuperset(name):
        return f"'{name}' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"
    return None


def validate_topic_name(name: str) -> None:
    """Raise ``InvalidTopicError`` unless ``name`` passes Kafka's ``Topic.validate``."""
    reason = invalid_topic_reason(name)
    if reason is not None:
        raise InvalidTopicError(f"Topic name is invalid: {reason}")


def is_valid_topic_name(name: str) -> bool:
    return invalid_topic_reason(name) is None


def is_internal(name: str) -> bool:
    """True for the topics Kafka itself owns (offsets, transactions, share-group state)."""
    return name in INTERNAL_TOPICS


def has_collision_chars(name: str) -> bool:
    """True if ``name`` has '.' or '_', which metric names cannot tell apart."""
    return "." in name or "_" in name


def unify_collision_chars(name: str) -> str:
    """The form two names share when they differ only by '.' vs '_' (used for comparison only)."""
    return name.replace(".", "_")


def has_collision(a: str, b: str) -> bool:
    """True if ``a`` and ``b`` collide in metric names, like Kafka's ``Topic.hasCollision``."""
    return unify_collision_chars(a) == unify_collision_chars(b)


def find_collision(name: str, existing: Iterable[str]) -> str | None:
    """An existing topic, other than ``name`` itself, that ``name`` collides with.

    Kafka refuses to create such a topic ("Topic 'a.b' collides with existing topic: a_b").
    """
    if not has_collision_chars(name):
        return None
    unified = unify_collision_chars(name)
    for other in existing:
        if other != name and unify_collision_chars(other) == unified:
            return other
    return None


def validate_no_collision(name: str, existing: Iterable[str]) -> None:
    """Raise ``InvalidTopicError`` if ``name`` collides with an existing topic, with
    Kafka's message (``ReplicationControlManager.validateNewTopicNames``)."""
    other = find_collision(name, existing)
    if other is not None:
        raise InvalidTopicError(f"Topic '{name}' collides with existing topic: {other}")
