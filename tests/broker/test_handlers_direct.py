"""Handlers are functions of (context, request) -> answer: called here with no server,
no event loop and no socket.

The long-polling Fetch is the one whose answer may wait; its handler says so with a
:class:`DelayedResponse` (Kafka's ``DelayedFetch``) and its ``poll`` is the
``tryComplete`` rule: complete once ``min_bytes`` are there or a partition has an error.
"""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchRequest
from kio.schema.produce.v9.request import ProduceRequest

from kompakt.broker.config import BrokerConfig
from kompakt.broker.handlers.fetch import handle_fetch
from kompakt.broker.handlers.produce import ACKS_LEADER, ACKS_NONE, handle_produce
from kompakt.broker.producers import ProducerStateManager
from kompakt.broker.protocol import build
from kompakt.broker.registry import ApiRegistry, DelayedResponse
from kompakt.broker.state import BrokerState, RequestContext
from kompakt.log.manager import LogManager
from kompakt.record.encode import build_simple_batch

TOPIC = "t"


@pytest.fixture
def state(tmp_path):
    config = BrokerConfig.from_mapping(
        {"log.dirs": str(tmp_path), "listeners": "PLAINTEXT://127.0.0.1:0"}
    )
    logs = LogManager(config.data_dir, config.log_config)
    logs.create_topic(TOPIC, 1)
    state = BrokerState(config, logs, ApiRegistry())
    state.producers = ProducerStateManager()
    yield state
    logs.close()


def _ctx(state: BrokerState, request_class: type, version: int) -> RequestContext:
    return RequestContext(state, request_class.__api_key__, version, 1, "test", "peer")


def _fetch(max_wait_ms: int, min_bytes: int = 1, topic: str = TOPIC):
    partition = {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
    body = {
        "max_wait": max_wait_ms,
        "min_bytes": min_bytes,
        "max_bytes": 1 << 20,
        "topics": [{"topic": topic, "partitions": [partition]}],
    }
    return build(FetchRequest, body)


def _partition(answer):
    (topic,) = answer["responses"]
    (partition,) = topic["partitions"]
    return partition


def _append(state: BrokerState, value: bytes) -> None:
    batch = build_simple_batch([(b"k", value)], timestamp=1_700_000_000_000)
    state.logs.get_log(TOPIC, 0).append(batch)


def test_a_fetch_that_will_not_wait_is_answered_at_once(state):
    answer = handle_fetch(_ctx(state, FetchRequest, 12), _fetch(max_wait_ms=0))
    assert isinstance(answer, dict)
    part = _partition(answer)
    assert (part["error_code"], part["high_watermark"], part["records"]) == (
        ErrorCode.none,
        0,
        b"",
    )


def test_a_fetch_short_of_min_bytes_waits_and_an_append_completes_it(state):
    # Kafka's DelayedFetch.tryComplete: not complete on an empty log, complete after an
    # append to a watched partition
    delayed = handle_fetch(_ctx(state, FetchRequest, 12), _fetch(max_wait_ms=500))
    assert isinstance(delayed, DelayedResponse)
    assert delayed.keys == ((TOPIC, 0),)
    assert delayed.timeout == 0.5
    answer, complete = delayed.poll()
    assert not complete
    assert _partition(answer)["records"] == b""
    _append(state, b"v")
    answer, complete = delayed.poll()
    assert complete
    assert _partition(answer)["high_watermark"] == 1
    assert _partition(answer)["records"]


def test_a_fetch_with_min_bytes_already_there_is_answered_without_waiting(state):
    _append(state, b"v")
    answer = handle_fetch(_ctx(state, FetchRequest, 12), _fetch(max_wait_ms=500))
    assert isinstance(answer, dict)
    assert _partition(answer)["records"]


def test_a_fetch_of_an_unknown_topic_only_is_answered_at_once(state):
    # nothing to watch: no partition could ever complete it
    answer = handle_fetch(_ctx(state, FetchRequest, 12), _fetch(max_wait_ms=500, topic="nope"))
    assert isinstance(answer, dict)
    assert _partition(answer)["error_code"] == ErrorCode.unknown_topic_or_partition


def _produce(acks: int):
    batch = build_simple_batch([(b"k", b"v")], timestamp=1_700_000_000_000)
    body = {
        "acks": acks,
        "timeout": 1000,
        "topic_data": [{"name": TOPIC, "partition_data": [{"index": 0, "records": batch}]}],
    }
    return build(ProduceRequest, body)


def test_produce_with_acks_0_has_no_answer_but_is_appended(state):
    assert handle_produce(_ctx(state, ProduceRequest, 9), _produce(ACKS_NONE)) is None
    assert state.logs.get_log(TOPIC, 0).high_watermark == 1


def test_produce_with_an_unknown_acks_value_is_refused(state):
    answer = handle_produce(_ctx(state, ProduceRequest, 9), _produce(2))
    (topic,) = answer["responses"]
    (part,) = topic["partition_responses"]
    assert part["error_code"] == ErrorCode.invalid_required_acks
    assert state.logs.get_log(TOPIC, 0).high_watermark == 0


def test_produce_with_acks_1_answers_the_base_offset(state):
    ctx = _ctx(state, ProduceRequest, 9)
    for expected in (0, 1):
        (topic,) = handle_produce(ctx, _produce(ACKS_LEADER))["responses"]
        (part,) = topic["partition_responses"]
        assert (part["error_code"], part["base_offset"]) == (ErrorCode.none, expected)
