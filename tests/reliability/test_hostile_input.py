"""Hostile topic names at every entry point, and the admin endpoint under bad requests.

Kafka's rule (``org.apache.kafka.common.internals.Topic.validate``): a topic name is 1..249
characters of ``[a-zA-Z0-9._-]`` and not ``.`` or ``..``; a request naming an invalid
topic gets INVALID_TOPIC_EXCEPTION (17) where Kafka validates (CreateTopics, Metadata,
DescribeConfigs, AlterConfigs) and UNKNOWN_TOPIC_OR_PARTITION (3) where it only looks
the partition up (Produce, Fetch, ListOffsets, DeleteTopics, DeleteRecords,
CreatePartitions). Since a topic name becomes a directory name, every test also checks
that nothing outside the data dir was created or touched (the listing of everything
around the data dir is the same before and after).
"""

from __future__ import annotations

import http.client
import json
import logging
import socket
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from reliability.wire_kit import HOSTILE_NAMES, call, connect, tree
from shared_kit import consume_until
from typer.testing import CliRunner

from kompakt.broker.app import start_test_broker
from kompakt.errors import InvalidTopicError, UnknownTopicError
from kompakt.log.manager import TOPICS_FILE, LogManager
from kompakt.log.names import is_valid_topic_name
from kompakt.record.encode import build_simple_batch

INVALID_TOPIC_EXCEPTION = 17
UNKNOWN_TOPIC_OR_PARTITION = 3


def test_every_hostile_name_is_invalid_by_kafka_topic_validate() -> None:
    """The fixture list itself: each name breaks Kafka's Topic.validate."""
    assert not any(is_valid_topic_name(n) for n in HOSTILE_NAMES)


class Sandbox:
    """``root/outer/data``: the data dir two levels below everything a name could reach."""

    def __init__(self, root: Path):
        self.root = root
        self.data = root / "outer" / "data"
        self.data.mkdir(parents=True)
        self.before = tree(root, skip=self.data)

    def assert_untouched(self) -> None:
        """Nothing created or removed outside the data dir (Kafka keeps logs in log.dirs)."""
        assert tree(self.root, skip=self.data) == self.before


@pytest.fixture
def sandbox(tmp_path: Path) -> Sandbox:
    return Sandbox(tmp_path)


# -- embedded API ---------------------------------------------------------------------


@pytest.mark.parametrize("name", HOSTILE_NAMES, ids=repr)
def test_log_manager_create_topic_refuses_name_like_kafka_topic_validate(
    sandbox: Sandbox, name: str
) -> None:
    with LogManager(sandbox.data) as logs:
        with pytest.raises(InvalidTopicError):
            logs.create_topic(name)
        with pytest.raises(InvalidTopicError):
            logs.create_topic(name, validate_only=True)
        with pytest.raises(UnknownTopicError):
            logs.get_log(name, 0)
        assert logs.topics() == []
    sandbox.assert_untouched()
    assert not any(p.is_dir() for p in sandbox.data.iterdir())


def test_data_dir_with_stray_directories_opens_and_leaves_them_alone(sandbox: Sandbox) -> None:
    """Kafka refuses to start on e.g. ``lost+found`` in log.dirs (a known weakness):
    kompakt logs a warning, skips folders that are not TOPIC-PARTITION of a valid
    topic name, and never modifies them."""
    stray = [
        "a b-0",
        "lost+found",
        "-0",
        "ü-1",
        "..-0",
        "a" * 250 + "-0",
        "backup-delete",  # only TOPIC-N.<uuid>-delete folders are kompakt's to remove
        "a b-0.0123456789abcdef0123456789abcdef-delete",
        "t-01",  # not how kompakt names partition 1: reopening would miss it
        "t-\u0661",  # an Arabic-Indic digit one passes str.isdigit
    ]
    for name in stray:
        (sandbox.data / name).mkdir()
        (sandbox.data / name / "keep.txt").write_text("mine")
    (sandbox.data / "t-0").write_text("a file, not a partition folder")
    with LogManager(sandbox.data) as logs:
        logs.create_topic("good", 2)
        assert logs.topics() == ["good"]
    with LogManager(sandbox.data) as logs:
        assert logs.topics() == ["good"]
    for name in stray:
        assert (sandbox.data / name / "keep.txt").read_text() == "mine"
    assert (sandbox.data / "t-0").read_text() == "a file, not a partition folder"
    sandbox.assert_untouched()


def test_tampered_topics_file_never_reaches_outside_the_data_dir(sandbox: Sandbox) -> None:
    """kompakt-topics.json is input too: a topic named ``../x`` in it is skipped with a
    warning (Topic.validate), not opened as ``data/../x-0``."""
    body = {
        name: {"partitions": 1, "topic_id": "AAAAAAAAAAAAAAAAAAAAAA", "configs": {}}
        for name in [*HOSTILE_NAMES, "fine"]
    }
    (sandbox.data / TOPICS_FILE).write_text(json.dumps(body))
    with LogManager(sandbox.data) as logs:
        assert logs.topics() == ["fine"]
        logs.get_log("fine", 0).append(build_simple_batch([(b"k", b"v")], timestamp=1000))
    sandbox.assert_untouched()


# -- Spark source (driver-side planning, the code that turns options into paths) -------


def _reader(data: Path, **options: str):
    from kompakt.pipeline.schema import kafka_schema
    from kompakt.pipeline.source import KompaktReader

    return KompaktReader({"path": str(data), **options}, kafka_schema(True))


@pytest.mark.parametrize("name", [n for n in HOSTILE_NAMES if n.strip(",")], ids=repr)
def test_spark_source_subscribe_refuses_name_like_kafka_topic_validate(
    sandbox: Sandbox, name: str
) -> None:
    with LogManager(sandbox.data) as logs:
        logs.create_topic("t")
    with pytest.raises(InvalidTopicError):
        _reader(sandbox.data, subscribe=name).partitions()
    with pytest.raises(InvalidTopicError):
        _reader(sandbox.data, assign=json.dumps({name: [0]})).partitions()
    sandbox.assert_untouched()


def test_spark_source_subscribe_pattern_never_matches_outside_the_data_dir(
    sandbox: Sandbox,
) -> None:
    """A sibling folder ``outer/x-0`` with real segments, and a tampered topics file
    naming ``../x``: no pattern may plan a read of it."""
    with LogManager(sandbox.data) as logs:
        logs.create_topic("t")
        logs.get_log("t", 0).append(build_simple_batch([(b"k", b"v")], timestamp=1000))
    with LogManager(sandbox.root / "outer" / "x-owner") as other:
        other.create_topic("x")
        other.get_log("x", 0).append(build_simple_batch([(b"secret", b"s")], timestamp=1000))
    (sandbox.root / "outer" / "x-owner" / "x-0").rename(sandbox.root / "outer" / "x-0")
    topics = json.loads((sandbox.data / TOPICS_FILE).read_text())
    topics["../x"] = dict(topics["t"])
    topics["../../outer/x"] = dict(topics["t"])
    (sandbox.data / TOPICS_FILE).write_text(json.dumps(topics))
    sandbox.before = tree(sandbox.root, skip=sandbox.data)
    for pattern in (".*", r"\.\..*", ".*x", r"\.\./x"):
        planned = _reader(sandbox.data, subscribePattern=pattern).partitions()
        dirs = {Path(p.value.dir).resolve() for p in planned}
        assert all(d.parent == sandbox.data.resolve() for d in dirs), (pattern, dirs)
        topics_read = {p.value.topic for p in planned}
        assert topics_read <= {"t"}, (pattern, topics_read)
    sandbox.assert_untouched()


# -- CLI ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["../x", "..", "a/b", "a" * 250], ids=repr)
def test_cli_topic_create_refuses_name_in_one_line_like_kafka_topic_validate(
    sandbox: Sandbox, name: str
) -> None:
    from kompakt.cli.main import app

    result = CliRunner().invoke(app, ["topic", "create", name, "--data-dir", str(sandbox.data)])
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Topic name is invalid" in lines[0]
    assert "Traceback" not in result.output
    sandbox.assert_untouched()
    assert not any(p.is_dir() for p in sandbox.data.iterdir())


# -- protocol -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def wire_broker(tmp_path_factory: pytest.TempPathFactory):
    sandbox = Sandbox(tmp_path_factory.mktemp("hostile"))
    b = start_test_broker(sandbox.data)
    b.logs.create_topic("real")
    b.logs.create_topic("realc", configs={"cleanup.policy": "compact"})
    yield b, sandbox
    b.stop()
    sandbox.assert_untouched()


def _body(api: int, name: str) -> tuple[int, dict]:
    """(version, body) of a request naming topic ``name`` for API ``api``."""
    batch = build_simple_batch([(b"k", b"v")], timestamp=int(time.time() * 1000))
    part = {"index": 0, "records": batch}
    return {
        0: (
            9,
            {"acks": 1, "timeout": 5000, "topic_data": [{"name": name, "partition_data": [part]}]},
        ),
        1: (
            12,
            {
                "replica_id": -1,
                "max_wait": 0,
                "min_bytes": 1,
                "max_bytes": 1 << 20,
                "topics": [
                    {
                        "topic": name,
                        "partitions": [
                            {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
                        ],
                    }
                ],
            },
        ),
        2: (
            7,
            {
                "replica_id": -1,
                "topics": [{"name": name, "partitions": [{"partition_index": 0, "timestamp": -1}]}],
            },
        ),
        3: (12, {"topics": [{"name": name}], "allow_auto_topic_creation": True}),
        19: (
            7,
            {
                "topics": [
                    {"name": name, "num_partitions": 1, "replication_factor": 1, "configs": []}
                ],
                "timeout": 5000,
            },
        ),
        20: (5, {"topic_names": [name], "timeout": 5000}),
        21: (
            2,
            {
                "topics": [{"name": name, "partitions": [{"partition_index": 0, "offset": 0}]}],
                "timeout": 5000,
            },
        ),
        32: (4, {"resources": [{"resource_type": 2, "resource_name": name}]}),
        33: (2, {"resources": [{"resource_type": 2, "resource_name": name, "configs": []}]}),
        44: (1, {"resources": [{"resource_type": 2, "resource_name": name, "configs": []}]}),
        37: (3, {"topics": [{"name": name, "count": 3}], "timeout": 5000}),
    }[api]


def _error_codes(api: int, resp) -> list[int]:
    if api == 0:
        return [p.error_code for t in resp.responses for p in t.partition_responses]
    if api == 1:
        return [p.error_code for t in resp.responses for p in t.partitions]
    if api in (2, 21):
        return [p.error_code for t in resp.topics for p in t.partitions]
    if api in (3, 19):
        return [t.error_code for t in resp.topics]
    if api == 20:
        return [r.error_code for r in resp.responses]
    if api == 32:
        return [r.error_code for r in resp.results]
    if api in (33, 44):
        return [r.error_code for r in resp.responses]
    return [r.error_code for r in resp.results]


# Kafka's answers: Topic.validate in CreateTopics (ControllerApis/ReplicationControlManager),
# Metadata (KafkaApis.getTopicMetadata / AutoTopicCreationManager) and the config
# resources (ConfigHelper.describeConfigs, ControllerConfigurationValidator); a plain
# partition lookup elsewhere.
EXPECTED = {
    0: UNKNOWN_TOPIC_OR_PARTITION,
    1: UNKNOWN_TOPIC_OR_PARTITION,
    2: UNKNOWN_TOPIC_OR_PARTITION,
    3: INVALID_TOPIC_EXCEPTION,
    19: INVALID_TOPIC_EXCEPTION,
    20: UNKNOWN_TOPIC_OR_PARTITION,
    21: UNKNOWN_TOPIC_OR_PARTITION,
    32: INVALID_TOPIC_EXCEPTION,
    33: INVALID_TOPIC_EXCEPTION,
    44: INVALID_TOPIC_EXCEPTION,
    37: UNKNOWN_TOPIC_OR_PARTITION,
}


@pytest.mark.parametrize("api", sorted(EXPECTED))
def test_protocol_request_naming_hostile_topic_gets_kafkas_error_and_touches_nothing(
    wire_broker, api: int
) -> None:
    broker, sandbox = wire_broker
    with connect(broker.port) as s:
        for i, name in enumerate(HOSTILE_NAMES):
            if api in (33, 44) and name == "":
                continue  # Kafka: "Default topic resources are not allowed" (INVALID_REQUEST)
            version, body = _body(api, name)
            resp = call(s, api, version, body, corr=i + 1)
            assert _error_codes(api, resp) == [EXPECTED[api]], (api, name)
    assert broker.logs.topics() == ["real", "realc"]
    sandbox.assert_untouched()
    assert {p.name for p in sandbox.data.iterdir() if p.is_dir()} == {"real-0", "realc-0"}


def test_metadata_without_auto_create_answers_invalid_topic_like_kafka(wire_broker) -> None:
    """KafkaApis.getTopicMetadata: an unknown topic that fails Topic.validate is
    INVALID_TOPIC_EXCEPTION, a valid unknown one UNKNOWN_TOPIC_OR_PARTITION."""
    broker, sandbox = wire_broker
    with connect(broker.port) as s:
        for name in HOSTILE_NAMES:
            resp = call(s, 3, 12, {"topics": [{"name": name}], "allow_auto_topic_creation": False})
            assert [t.error_code for t in resp.topics] == [INVALID_TOPIC_EXCEPTION], name
        resp = call(s, 3, 12, {"topics": [{"name": "nope"}], "allow_auto_topic_creation": False})
        assert [t.error_code for t in resp.topics] == [UNKNOWN_TOPIC_OR_PARTITION]
    sandbox.assert_untouched()


def test_alter_configs_of_empty_topic_name_is_invalid_request_like_kafka(wire_broker) -> None:
    """ControllerConfigurationValidator: 'Default topic resources are not allowed.'"""
    broker, _sandbox = wire_broker
    with connect(broker.port) as s:
        for api, version in ((33, 2), (44, 1)):
            resp = call(s, api, version, _body(api, "")[1])
            assert _error_codes(api, resp) == [42]


def test_real_client_create_and_produce_to_hostile_names_then_works(wire_broker) -> None:
    """confluent-kafka's admin client sees INVALID_TOPIC_EXCEPTION; a producer to a
    hostile name fails, and a normal produce/consume round trip still works."""
    broker, sandbox = wire_broker
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.create_topics([NewTopic(n, 1, 1) for n in ["../x", "..", "a" * 250]])
    for name, fut in futures.items():
        with pytest.raises(Exception) as e:
            fut.result(timeout=10)
        assert e.value.args[0].code() == INVALID_TOPIC_EXCEPTION, name
    errors: list = []
    p = Producer({"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 3000})
    p.produce("../x", b"v", key=b"k", on_delivery=lambda err, msg: errors.append(err))
    p.produce("real", b"v", key=b"k", on_delivery=lambda err, msg: errors.append(err))
    p.flush(15)
    assert errors[-1] is None or errors[0] is None
    assert sum(e is not None for e in errors) == 1
    c = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "hostile",
            "auto.offset.reset": "earliest",
        }
    )
    c.subscribe(["real"])
    try:
        got = consume_until(c, bool, 20, "the record on 'real'")[0].value()
    finally:
        c.close()
    assert got == b"v"
    sandbox.assert_untouched()


# -- admin endpoint -------------------------------------------------------------------


def _post(port: int, body: bytes, path: str = "/v1/compact", headers: dict | None = None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("POST", path, body=body, headers=headers or {})
    r = conn.getresponse()
    data = r.read()
    conn.close()
    return r.status, data


def _status_of_bad_length(port: int, length: str) -> int:
    """POST with a malformed Content-Length and no body bytes. The server refuses the
    head and closes; body bytes it never read would make the kernel reset the
    connection, and a reset can discard the 400 before the client reads it (a race
    that failed CI once), so the request carries nothing past its head."""
    head = (
        f"POST /v1/compact HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {length}\r\n"
        "Connection: close\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(head.encode())
        answer = b""
        while b"\r\n" not in answer:
            piece = s.recv(4096)
            if not piece:
                break
            answer += piece
    return int(answer.split(b" ", 2)[1])


def test_admin_listener_default_is_loopback() -> None:
    """The admin API can trigger compaction: by default it listens on 127.0.0.1 only."""
    from kompakt.broker.config import BrokerConfig

    cfg = BrokerConfig.from_mapping({})
    assert cfg.admin_listener.startswith("http://127.0.0.1:")


BAD_REQUESTS = [
    (b"{", 400),
    (b"not json", 400),
    (b"\xff\xfe\x00", 400),
    (b"[]", 400),
    (b"null", 400),
    (b"NaN", 400),
    (b'"topic"', 400),
    (b"{}", 400),
    (b'{"topic": 5}', 400),
    (b'{"topic": null}', 400),
    (b'{"topic": ["real"]}', 400),
    (b'{"topic": "real", "partition": "0"}', 400),
    (b'{"topic": "real", "partition": -1}', 400),
    (b'{"topic": "real", "partition": 1.5}', 400),
    (b'{"topic": "real", "partition": true}', 400),
    (b'{"topic": "real", "dry_run": "yes"}', 400),
    (b'{"topic": "nope"}', 404),
    (b'{"topic": "../x"}', 404),
    (b'{"topic": ""}', 404),
    (b'{"topic": "realc", "partition": 7}', 404),
    (b'{"topic": "realc", "partition": 100000000000000000000000000000}', 404),
    (b"[" * 30_000 + b"]" * 30_000, 400),
    (b'{"topic": "' + b"a" * 60_000 + b'"}', 404),
    (b'{"a":' * 9_000 + b"1" + b"}" * 9_000, 400),
]


@pytest.mark.parametrize("body,status", BAD_REQUESTS, ids=lambda v: repr(v)[:40])
def test_admin_compact_bad_request_is_json_4xx_never_500(wire_broker, body: bytes, status: int):
    broker, sandbox = wire_broker
    got, data = _post(broker.admin_port, body, headers={"Content-Type": "application/json"})
    assert got == status, data[:300]
    assert isinstance(json.loads(data)["error"], str)
    sandbox.assert_untouched()


def test_admin_compact_bad_framing_is_4xx(wire_broker) -> None:
    broker, _sandbox = wire_broker
    port = broker.admin_port
    assert _post(port, b"x" * 70_000)[0] == 413  # larger than the body limit: HTTP 413
    assert _status_of_bad_length(port, "abc") == 400
    assert _status_of_bad_length(port, "-5") == 400
    assert _post(port, b"{}", path="/v1/nope")[0] == 404
    logging.getLogger(__name__).info("admin endpoint answered every bad request")


def test_deleting_a_topic_with_a_249_character_name_works_like_kafka(sandbox: Sandbox) -> None:
    """Regression (fuzzer): TOPIC-N.<uuid>-delete is 40 characters longer than the
    partition folder, too long a file name for a 249-character topic; Kafka's
    UnifiedLog.logDeleteDirName shortens the topic part, and so does kompakt."""
    name = "z" * 249
    with LogManager(sandbox.data) as logs:
        logs.create_topic(name, 2)
        logs.delete_topic(name)
        assert logs.topics() == []
    assert not any(p.is_dir() for p in sandbox.data.iterdir())
    sandbox.assert_untouched()
