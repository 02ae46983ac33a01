"""Topic name rules, checked against Kafka's ``Topic.validate`` / ``Topic.hasCollision``."""

from __future__ import annotations

import pytest

from kompakt.errors import InvalidTopicError
from kompakt.log.names import (
    MAX_NAME_LENGTH,
    find_collision,
    has_collision,
    has_collision_chars,
    is_internal,
    is_valid_topic_name,
    unify_collision_chars,
    validate_topic_name,
)


@pytest.mark.parametrize(
    "name",
    [
        "users",
        "a",
        "my-topic",
        "my_topic",
        "my.topic",
        "UPPER.lower_09-x",
        "...",
        "-",
        "_",
        "a" * 249,
    ],
)
def test_topic_names_of_ascii_alphanumerics_dot_underscore_dash_are_valid_like_kafka(name):
    validate_topic_name(name)
    assert is_valid_topic_name(name)


def test_empty_topic_name_is_invalid_like_kafka_Topic_validate():
    with pytest.raises(
        InvalidTopicError, match="^Topic name is invalid: the empty string is not allowed$"
    ):
        validate_topic_name("")


@pytest.mark.parametrize("name", [".", ".."])
def test_dot_and_dotdot_topic_names_are_invalid_like_kafka_Topic_validate(name):
    with pytest.raises(InvalidTopicError) as e:
        validate_topic_name(name)
    assert str(e.value) == f"Topic name is invalid: '{name}' is not allowed"


def test_topic_name_of_249_chars_is_valid_like_kafka_MAX_NAME_LENGTH():
    assert MAX_NAME_LENGTH == 249
    validate_topic_name("t" * 249)


def test_topic_name_longer_than_249_chars_is_invalid_like_kafka_Topic_validate():
    name = "t" * 250
    with pytest.raises(InvalidTopicError) as e:
        validate_topic_name(name)
    assert str(e.value) == (
        f"Topic name is invalid: the length of '{name}' is longer than the max allowed length 249"
    )


@pytest.mark.parametrize(
    "name",
    ["has space", "slash/es", "back\\slash", "colon:", "star*", "ünïcode", "tab\t", "a,b", "名前"],
)
def test_topic_name_with_chars_outside_ascii_alnum_dot_underscore_dash_is_invalid_like_kafka(name):
    with pytest.raises(InvalidTopicError) as e:
        validate_topic_name(name)
    assert str(e.value) == (
        f"Topic name is invalid: '{name}' contains one or more characters other than "
        "ASCII alphanumerics, '.', '_' and '-'"
    )
    assert not is_valid_topic_name(name)


def test_invalid_topic_error_carries_kafka_error_code_17():
    with pytest.raises(InvalidTopicError) as e:
        validate_topic_name("")
    assert e.value.error_code == 17


def test_consumer_offsets_transaction_state_and_share_group_state_are_internal_like_kafka():
    assert is_internal("__consumer_offsets")
    assert is_internal("__transaction_state")
    assert is_internal("__share_group_state")
    assert not is_internal("consumer_offsets")
    assert not is_internal("__cluster_metadata")
    assert not is_internal("users")


def test_dot_and_underscore_are_collision_chars_like_kafka_Topic_hasCollisionChars():
    assert has_collision_chars("a.b")
    assert has_collision_chars("a_b")
    assert not has_collision_chars("a-b")
    assert unify_collision_chars("a.b_c") == "a_b_c"


def test_names_differing_only_by_dot_vs_underscore_collide_like_kafka_Topic_hasCollision():
    assert has_collision("metrics.cpu", "metrics_cpu")
    assert has_collision("a.b_c", "a_b.c")
    assert has_collision("same", "same")
    assert not has_collision("a.b", "a-b")
    assert not has_collision("a.b", "a.bc")


def test_find_collision_names_the_existing_topic_a_new_name_would_collide_with():
    existing = ["users", "metrics_cpu", "orders"]
    assert find_collision("metrics.cpu", existing) == "metrics_cpu"
    assert find_collision("metrics_cpu", existing) is None  # the same topic is not a collision
    assert find_collision("orders", existing) is None
    assert find_collision("new.topic", existing) is None
