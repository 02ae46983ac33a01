"""OffsetCommit and its transactional twin TxnOffsetCommit check a commit's partitions
with one rule, as Kafka's ``GroupCoordinator.doCommitOffsets`` and
``doTxnCommitOffsets`` share ``validateOffsetMetadataLength``: metadata longer than
``offset.metadata.max.bytes`` (4096) is OFFSET_METADATA_TOO_LARGE on that partition
alone, the others commit; a partition the topic lacks is UNKNOWN_TOPIC_OR_PARTITION.

Real broker on 127.0.0.1, raw Kafka requests (kio schemas), so each partition's error
code is seen as the broker sent it.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode
from raw_kafka import API, call
from shared_kit import unique, wait_for

from kompakt.broker.app import BrokerThread
from kompakt.broker.coordinator.commit import MAX_METADATA

TIMEOUT = 20


def create(b: BrokerThread, name: str, partitions: int = 2) -> None:
    a = AdminClient({"bootstrap.servers": b.bootstrap})
    a.create_topics([NewTopic(name, partitions, 1)])[name].result(TIMEOUT)


def partitions(topic: str) -> list[dict[str, Any]]:
    """Partition 0 with metadata one byte too long, 1 at the limit, 2 not in the topic."""
    return [
        {
            "name": topic,
            "partitions": [
                {
                    "partition_index": i,
                    "committed_offset": 10 + i,
                    "committed_leader_epoch": -1,
                    "committed_metadata": "m" * size,
                }
                for i, size in ((0, MAX_METADATA + 1), (1, MAX_METADATA), (2, 1))
            ],
        }
    ]


EXPECTED = [
    ErrorCode.offset_metadata_too_large,
    ErrorCode.none,
    ErrorCode.unknown_topic_or_partition,
]


def simple_commit(group: str, topic: str, generation_field: str) -> dict[str, Any]:
    """A commit outside any generation (a simple consumer's) of :func:`partitions`."""
    return {
        "group_id": group,
        generation_field: -1,
        "member_id": "",
        "group_instance_id": None,
        "topics": partitions(topic),
    }


def fetched(b: BrokerThread, group: str, topic: str) -> list[tuple[int, int]] | None:
    """(offset, metadata length) of partitions 0 and 1 once stable (require_stable)."""
    body = {
        "group_id": group,
        "topics": [{"name": topic, "partition_indexes": [0, 1]}],
        "require_stable": True,
    }
    ps = call(b.port, API.offset_fetch, 7, body).topics[0].partitions
    if any(p.error_code != ErrorCode.none for p in ps):
        return None
    return [(p.committed_offset, len(p.metadata or "")) for p in ps]


def test_offset_commit_refuses_metadata_over_offset_metadata_max_bytes_per_partition(
    broker: BrokerThread,
) -> None:
    topic, group = unique("omd"), unique("g")
    create(broker, topic)
    body = simple_commit(group, topic, "generation_id_or_member_epoch")
    r = call(broker.port, API.offset_commit, 8, body)
    assert [p.error_code for p in r.topics[0].partitions] == EXPECTED
    assert fetched(broker, group, topic) == [(-1, 0), (11, MAX_METADATA)]


def test_txn_offset_commit_refuses_metadata_over_offset_metadata_max_bytes_per_partition(
    broker: BrokerThread,
) -> None:
    """TxnOffsetCommit answers OFFSET_METADATA_TOO_LARGE on the partition whose
    metadata is too long (it used to take it), commits the others with the
    transaction."""
    topic, group, tid = unique("tomd"), unique("g"), unique("tx")
    create(broker, topic)
    init = call(
        broker.port,
        API.init_producer_id,
        4,
        {
            "transactional_id": tid,
            "transaction_timeout": 60000,
            "producer_id": -1,
            "producer_epoch": -1,
        },
    )
    assert init.error_code == ErrorCode.none
    producer = {
        "transactional_id": tid,
        "producer_id": init.producer_id,
        "producer_epoch": init.producer_epoch,
    }
    added = call(broker.port, API.add_offsets_to_txn, 3, {**producer, "group_id": group})
    assert added.error_code == ErrorCode.none
    body = {**producer, **simple_commit(group, topic, "generation_id")}
    r = call(broker.port, API.txn_offset_commit, 3, body)
    assert [p.error_code for p in r.topics[0].partitions] == EXPECTED
    ended = call(broker.port, API.end_txn, 3, {**producer, "committed": True})
    assert ended.error_code == ErrorCode.none
    got = wait_for(lambda: fetched(broker, group, topic), "the COMMIT marker", TIMEOUT)
    assert got == [(-1, 0), (11, MAX_METADATA)]


def test_offset_commit_takes_the_empty_group_id_as_kafka_does(broker: BrokerThread) -> None:
    """Kafka's ``GroupCoordinatorService.commitOffsets``: "For backwards compatibility,
    we support offset commits for the empty groupId" (only a null one is
    INVALID_GROUP_ID); OffsetFetch of "" then returns what was committed."""
    topic = unique("empty-group")
    create(broker, topic)
    body = simple_commit("", topic, "generation_id_or_member_epoch")
    r = call(broker.port, API.offset_commit, 8, body)
    assert [p.error_code for p in r.topics[0].partitions] == EXPECTED
    assert fetched(broker, "", topic) == [(-1, 0), (11, MAX_METADATA)]
