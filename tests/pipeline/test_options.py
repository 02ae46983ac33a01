"""Reader options keep the meaning (and the errors) of Spark's Kafka source for batch queries."""

from __future__ import annotations

import pytest

from kompakt.errors import InvalidTopicError
from kompakt.pipeline.layout import TopicInfo
from kompakt.pipeline.options import (
    EARLIEST,
    LATEST,
    OptionError,
    parse_offsets,
    select_partitions,
)

TOPICS = {
    "orders": TopicInfo("orders", 2),
    "orders-eu": TopicInfo("orders-eu", 1),
    "users": TopicInfo("users", 3),
}


def test_exactly_one_of_subscribe_subscribepattern_assign():
    with pytest.raises(OptionError, match="must be specified"):
        select_partitions({}, TOPICS)
    with pytest.raises(OptionError, match="Only one of"):
        select_partitions({"subscribe": "users", "subscribePattern": "u.*"}, TOPICS)


def test_subscribe_lists_every_partition_of_existing_topics_only():
    got = select_partitions({"subscribe": "users, orders,missing"}, TOPICS)
    assert got == [("orders", 0), ("orders", 1), ("users", 0), ("users", 1), ("users", 2)]


def test_subscribe_validates_topic_names_like_kafka():
    with pytest.raises(InvalidTopicError):
        select_partitions({"subscribe": "bad/name"}, TOPICS)


def test_subscribe_pattern_must_match_the_whole_name_like_java_matches():
    assert select_partitions({"subscribePattern": "orders.*"}, TOPICS) == [
        ("orders", 0),
        ("orders", 1),
        ("orders-eu", 0),
    ]
    assert select_partitions({"subscribePattern": "order"}, TOPICS) == []


def test_assign_takes_json_topic_partition_lists():
    assert select_partitions({"assign": '{"users":[2,0],"orders":[1]}'}, TOPICS) == [
        ("orders", 1),
        ("users", 0),
        ("users", 2),
    ]


def test_option_names_are_case_insensitive_as_spark_passes_them():
    assert select_partitions({"SUBSCRIBE": "orders-eu"}, TOPICS) == [("orders-eu", 0)]


def test_batch_queries_cannot_start_at_latest_or_end_at_earliest():
    tps = [("users", 0)]
    with pytest.raises(OptionError, match="starting offset can't be latest"):
        parse_offsets({"startingOffsets": "latest"}, "startingOffsets", tps)
    with pytest.raises(OptionError, match="ending offset can't be earliest"):
        parse_offsets({"endingOffsets": "earliest"}, "endingOffsets", tps)
    with pytest.raises(OptionError, match="can't be latest"):
        parse_offsets({"startingOffsets": '{"users":{"0":-1}}'}, "startingOffsets", tps)
    with pytest.raises(OptionError, match="can't be earliest"):
        parse_offsets({"endingOffsets": '{"users":{"0":-2}}'}, "endingOffsets", tps)


def test_defaults_are_earliest_to_latest():
    tps = [("users", 0)]
    assert parse_offsets({}, "startingOffsets", tps).resolve(tps[0], 5, 9) == 5
    assert parse_offsets({}, "endingOffsets", tps).resolve(tps[0], 5, 9) == 9


def test_json_offsets_resolve_minus_two_and_minus_one_and_need_every_partition():
    tps = [("users", 0), ("users", 1)]
    spec = parse_offsets({"startingOffsets": '{"users":{"0":23,"1":-2}}'}, "startingOffsets", tps)
    assert spec.resolve(("users", 0), 5, 90) == 23
    assert spec.resolve(("users", 1), 5, 90) == 5
    end = parse_offsets({"endingOffsets": '{"users":{"0":-1,"1":7}}'}, "endingOffsets", tps)
    assert end.resolve(("users", 0), 5, 90) == 90 and end.resolve(("users", 1), 5, 90) == 7
    with pytest.raises(OptionError, match="must specify all TopicPartitions"):
        parse_offsets({"startingOffsets": '{"users":{"0":1}}'}, "startingOffsets", tps)
    with pytest.raises(OptionError, match="Expected e.g."):
        parse_offsets({"startingOffsets": "[1]"}, "startingOffsets", tps)
    assert (EARLIEST, LATEST) == (-2, -1)
