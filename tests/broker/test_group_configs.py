"""GROUP config resources (KIP-848 / KIP-932, ``ConfigResource.Type.GROUP`` = 32).

Kafka's ``GroupConfig``: consumer.session.timeout.ms, consumer.heartbeat.interval.ms and
their share.* twins, defaulting to the broker's group.<protocol>.* keys and bounded by
its group.<protocol>.min/max.* keys (INVALID_CONFIG otherwise); the default resource ""
is refused (``ControllerConfigurationValidator``); values persist beside the dynamic
broker configs; the checks are the group's own ACLs (DESCRIBE_CONFIGS / ALTER_CONFIGS on
GROUP, else GROUP_AUTHORIZATION_FAILED), as KafkaApis does.
"""

from __future__ import annotations

import json

import pytest
from raw_kafka import call

from kompakt.broker.acls import AclBinding, AclFilter, Op, PatternType, ResourceType
from kompakt.broker.app import start_test_broker
from kompakt.broker.config import DYNAMIC_CONFIGS_FILE
from kompakt.broker.handlers.acls import AUTHORIZER_KEY

GROUP = 32
SET, DELETE = 0, 1
GROUP_CONFIG, DEFAULT_CONFIG = 8, 5
INVALID_CONFIG, INVALID_REQUEST, GROUP_DENIED = 40, 42, 30


@pytest.fixture
def data_dir(tmp_path):
    return tmp_path / "data"


@pytest.fixture
def broker(data_dir):
    b = start_test_broker(data_dir, **{"group.consumer.max.session.timeout.ms": "90000"})
    yield b
    b.stop()


def alter(b, group: str, *ops: tuple[str, str | None, int]):
    body = {
        "resources": [
            {
                "resource_type": GROUP,
                "resource_name": group,
                "configs": [{"name": k, "config_operation": op, "value": v} for k, v, op in ops],
            }
        ],
        "validate_only": False,
    }
    return call(b.port, 44, 1, body).responses[0]


def describe(b, group: str):
    body = {
        "resources": [{"resource_type": GROUP, "resource_name": group, "configuration_keys": None}],
        "include_synonyms": False,
        "include_documentation": False,
    }
    return call(b.port, 32, 4, body).results[0]


def values(result) -> dict[str, tuple[str, int]]:
    return {c.name: (c.value, int(c.config_source)) for c in result.configs}


def test_group_config_is_set_described_and_kept_across_restart(broker, data_dir):
    r = alter(broker, "g1", ("consumer.session.timeout.ms", "80000", SET))
    assert int(r.error_code) == 0, r.error_message
    got = values(describe(broker, "g1"))
    assert got["consumer.session.timeout.ms"] == ("80000", GROUP_CONFIG)
    assert got["consumer.heartbeat.interval.ms"] == ("5000", DEFAULT_CONFIG)
    assert got["share.session.timeout.ms"] == ("45000", DEFAULT_CONFIG)
    assert values(describe(broker, "other"))["consumer.session.timeout.ms"][1] == DEFAULT_CONFIG
    # a dynamic broker change rewrites the file and keeps the groups in it
    body = {
        "resources": [
            {
                "resource_type": 4,
                "resource_name": "1",
                "configs": [{"name": "log.retention.ms", "config_operation": SET, "value": "9"}],
            }
        ],
        "validate_only": False,
    }
    assert int(call(broker.port, 44, 1, body).responses[0].error_code) == 0
    stored = json.loads((data_dir / DYNAMIC_CONFIGS_FILE).read_text())
    assert stored["groups"] == {"g1": {"consumer.session.timeout.ms": "80000"}}
    broker.stop()
    again = start_test_broker(data_dir, **{"group.consumer.max.session.timeout.ms": "90000"})
    try:
        got = values(describe(again, "g1"))
        assert got["consumer.session.timeout.ms"] == ("80000", GROUP_CONFIG)
        assert (
            int(alter(again, "g1", ("consumer.session.timeout.ms", None, DELETE)).error_code) == 0
        )
        assert values(describe(again, "g1"))["consumer.session.timeout.ms"][1] == DEFAULT_CONFIG
    finally:
        again.stop()


@pytest.mark.parametrize(
    "ops, code, message",
    [
        (
            [("consumer.session.timeout.ms", "30000", SET)],
            INVALID_CONFIG,
            "consumer.session.timeout.ms must be greater than or equal to "
            "group.consumer.min.session.timeout.ms",
        ),
        (
            [("consumer.session.timeout.ms", "95000", SET)],
            INVALID_CONFIG,
            "must be less than or equal to group.consumer.max.session.timeout.ms",
        ),
        (
            [("share.heartbeat.interval.ms", "4000", SET)],
            INVALID_CONFIG,
            "share.heartbeat.interval.ms must be greater than or equal to "
            "group.share.min.heartbeat.interval.ms",
        ),
        ([("foobar", "1", SET)], INVALID_CONFIG, "Unknown group config name: foobar"),
        ([("consumer.session.timeout.ms", "soon", SET)], INVALID_CONFIG, "soon"),
    ],
)
def test_group_config_validation_follows_group_config_validate(
    broker, data_dir, ops, code, message
):
    r = alter(broker, "g", *ops)
    assert int(r.error_code) == code and message in r.error_message
    assert not (data_dir / DYNAMIC_CONFIGS_FILE).exists()


def test_default_group_resource_is_refused(broker):
    r = alter(broker, "", ("consumer.session.timeout.ms", "50000", SET))
    assert int(r.error_code) == INVALID_REQUEST
    assert "Default group resources are not allowed." in r.error_message


def test_group_configs_need_the_groups_own_acls(tmp_path):
    """KafkaApis: DESCRIBE_CONFIGS / ALTER_CONFIGS on the GROUP resource (ALTER_CONFIGS
    implies DESCRIBE_CONFIGS); without them GROUP_AUTHORIZATION_FAILED, nothing stored."""
    b = start_test_broker(
        tmp_path / "d",
        **{"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"},
    )
    try:
        az = b.broker.state.extra[AUTHORIZER_KEY]
        r = alter(b, "g", ("consumer.session.timeout.ms", "50000", SET))
        assert int(r.error_code) == GROUP_DENIED
        assert int(describe(b, "g").error_code) == GROUP_DENIED
        az.store.add(
            [
                AclBinding(
                    int(ResourceType.GROUP),
                    "g",
                    int(PatternType.LITERAL),
                    "User:ANONYMOUS",
                    "*",
                    int(Op.ALTER_CONFIGS),
                    3,
                )
            ]
        )
        assert int(alter(b, "g", ("consumer.session.timeout.ms", "50000", SET)).error_code) == 0
        assert values(describe(b, "g"))["consumer.session.timeout.ms"][0] == "50000"
        assert int(describe(b, "other").error_code) == GROUP_DENIED
        az.store.remove([AclFilter(principal="User:ANONYMOUS")])
    finally:
        b.stop()
