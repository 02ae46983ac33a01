"""Topic names that collide in metric names ('.' vs '_') are refused at every creation
path, as Kafka's ``ReplicationControlManager.validateNewTopicNames`` with
``Topic.hasCollisionChars`` / ``Topic.unifyCollisionChars``: INVALID_TOPIC_EXCEPTION,
"Topic 'X_x' collides with existing topic: X.x". Kafka's Metadata auto-create goes to
the same controller check; kompakt's goes through ``LogManager.create_topic`` too."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode
from raw_kafka import API, call
from typer.testing import CliRunner

from kompakt.cli.main import app
from kompakt.errors import InvalidTopicError, TopicExistsError
from kompakt.log.manager import LogManager

TIMEOUT = 10


def test_log_manager_refuses_a_colliding_name_and_allows_it_after_delete(tmp_path):
    m = LogManager(tmp_path / "d")
    try:
        m.create_topic("X.x")
        with pytest.raises(InvalidTopicError) as e:
            m.create_topic("X_x")
        assert str(e.value) == "Topic 'X_x' collides with existing topic: X.x"
        with pytest.raises(InvalidTopicError):
            m.create_topic("X_x", validate_only=True)
        with pytest.raises(TopicExistsError):  # the same name is "already exists"
            m.create_topic("X.x")
        m.create_topic("X-x")  # '-' does not collide
        assert sorted(m.topics()) == ["X-x", "X.x"]
        m.delete_topic("X.x")
        m.create_topic("X_x")
        assert sorted(m.topics()) == ["X-x", "X_x"]
    finally:
        m.close()


def test_create_topics_api_refuses_a_colliding_name(broker):
    """CreateTopics through confluent-kafka's AdminClient, also with validate_only."""
    a = AdminClient({"bootstrap.servers": broker.bootstrap})
    a.create_topics([NewTopic("coll.one", 1, 1)], operation_timeout=TIMEOUT)["coll.one"].result(
        TIMEOUT
    )
    for validate_only in (True, False):
        fut = a.create_topics(
            [NewTopic("coll_one", 1, 1)], operation_timeout=TIMEOUT, validate_only=validate_only
        )["coll_one"]
        with pytest.raises(KafkaException) as e:
            fut.result(TIMEOUT)
        err = e.value.args[0]
        assert err.code() == KafkaError.TOPIC_EXCEPTION
        assert "Topic 'coll_one' collides with existing topic: coll.one" in err.str()
    assert not broker.broker.logs.has_topic("coll_one")


def test_metadata_auto_create_refuses_a_colliding_name(broker):
    """Metadata with allow_auto_topic_creation: the colliding name is not created and
    its entry carries INVALID_TOPIC_EXCEPTION; a fresh name still auto-creates."""
    a = AdminClient({"bootstrap.servers": broker.bootstrap})
    a.create_topics([NewTopic("auto_two", 1, 1)], operation_timeout=TIMEOUT)["auto_two"].result(
        TIMEOUT
    )
    body = {
        "topics": [
            {"name": "auto.two", "topic_id": None},
            {"name": "auto.three", "topic_id": None},
        ],
        "allow_auto_topic_creation": True,
        "include_topic_authorized_operations": False,
    }
    r = call(broker.port, API.metadata, 12, body)
    codes = {t.name: t.error_code for t in r.topics}
    assert codes == {"auto.two": ErrorCode.invalid_topic_exception, "auto.three": ErrorCode.none}
    assert not broker.broker.logs.has_topic("auto.two")
    assert broker.broker.logs.has_topic("auto.three")


def test_offline_cli_topic_create_refuses_a_colliding_name(tmp_path):
    """``kompakt topic create --data-dir`` goes through LogManager.create_topic."""
    runner = CliRunner()
    d = str(tmp_path / "data")
    r = runner.invoke(app, ["topic", "create", "cli.three", "--data-dir", d])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["topic", "create", "cli_three", "--data-dir", d])
    assert r.exit_code != 0
    assert "Topic 'cli_three' collides with existing topic: cli.three" in r.output
    m = LogManager(tmp_path / "data")
    try:
        assert m.topics() == ["cli.three"]
    finally:
        m.close()
