"""The sans-IO protocol object: framing and decoding without a socket.

Each input is fed whole and again one byte at a time (h11's ``tests/test_io.py`` habit):
a parser that only works when a read happens to hold a whole frame breaks on a real
network. The rules are Kafka's ``NetworkReceive`` (int32 size, refused above
``socket.request.max.bytes`` before the body is read) and ``RequestContext`` (an
unsupported ApiVersions is answered with v0 and UNSUPPORTED_VERSION).
"""

from __future__ import annotations

import logging
import struct

import pytest
from kio.schema.api_versions.v0.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v0.request import MetadataRequest
from kio.schema.produce.v3.request import ProduceRequest
from raw_kafka import decode_response, encode_request

from kompakt.broker.connection import (
    CLOSED,
    MIN_REST_BYTES,
    NEED_DATA,
    REST_STEP,
    Answer,
    KafkaConnection,
    Request,
)
from kompakt.broker.protocol import ProtocolError
from kompakt.broker.registry import ApiRegistry

API_VERSIONS = ApiVersionsRequest.__api_key__
METADATA = MetadataRequest.__api_key__
PRODUCE = ProduceRequest.__api_key__
MAX_REQUEST_BYTES = 1024


def _never_called(ctx, req):
    raise AssertionError("the protocol object never calls handlers")


def _connection(max_request_bytes: int = MAX_REQUEST_BYTES) -> KafkaConnection:
    registry = ApiRegistry()
    registry.register(API_VERSIONS, 0, 4, _never_called)
    registry.register(METADATA, 0, 13, _never_called)
    registry.register(PRODUCE, 3, 13, _never_called, advertised_min=0)
    return KafkaConnection(registry, max_request_bytes)


def _api_versions(correlation_id: int) -> bytes:
    body = {"client_software_name": "raw", "client_software_version": "1"}
    return encode_request(API_VERSIONS, 3, body, correlation_id=correlation_id)


def _metadata(correlation_id: int, topics: list[str]) -> bytes:
    body = {"topics": [{"name": t} for t in topics], "allow_auto_topic_creation": False}
    return encode_request(METADATA, 12, body, correlation_id=correlation_id)


def _feed(conn: KafkaConnection, data: bytes, one_byte_at_a_time: bool) -> list:
    """Every event the bytes give, NEED_DATA left out."""
    chunks = [data[i : i + 1] for i in range(len(data))] if one_byte_at_a_time else [data]
    events = []
    for chunk in chunks:
        conn.receive_data(chunk)
        while (event := conn.next_event()) is not NEED_DATA:
            events.append(event)
    return events


def _summary(event: Request) -> tuple:
    return (event.api.api_key, event.api_version, event.correlation_id, event.client_id)


@pytest.mark.parametrize("one_byte_at_a_time", [False, True], ids=["whole", "bytewise"])
def test_a_request_comes_out_once_its_last_byte_is_in(one_byte_at_a_time):
    conn = _connection()
    frame = _metadata(5, ["a", "b"])
    if one_byte_at_a_time:
        assert _feed(conn, frame[:-1], True) == []
        (event,) = _feed(conn, frame[-1:], False)
    else:
        (event,) = _feed(conn, frame, False)
    assert isinstance(event, Request)
    assert _summary(event) == (METADATA, 12, 5, "raw")
    assert [t.name for t in event.body.topics] == ["a", "b"]
    assert event.body.allow_auto_topic_creation is False
    assert conn.next_event() is NEED_DATA


@pytest.mark.parametrize("one_byte_at_a_time", [False, True], ids=["whole", "bytewise"])
def test_several_requests_in_one_chunk_come_out_in_order(one_byte_at_a_time):
    conn = _connection()
    data = _api_versions(1) + _metadata(2, ["x"]) + _api_versions(3) + _metadata(4, [])
    events = _feed(conn, data, one_byte_at_a_time)
    assert [_summary(e) for e in events] == [
        (API_VERSIONS, 3, 1, "raw"),
        (METADATA, 12, 2, "raw"),
        (API_VERSIONS, 3, 3, "raw"),
        (METADATA, 12, 4, "raw"),
    ]


@pytest.mark.parametrize("more_before_taken", [False, True], ids=["alone", "then-more"])
def test_the_rest_of_a_large_frame_given_in_one_piece_makes_the_same_request(
    more_before_taken,
):
    """The server reads exactly the bytes a large frame still misses (``missing``) and
    hands them over in one piece; the request is the one the frame gives fed any other
    way, and bytes given after it frame the next request."""
    conn = _connection(max_request_bytes=1 << 20)
    names = [f"topic-{i:06d}" for i in range(8000)]
    frame = _metadata(7, names)
    assert len(frame) > 100_000
    conn.receive_data(frame[:1000])
    assert conn.next_event() is NEED_DATA
    assert conn.missing == len(frame) - 1000
    conn.receive_data(frame[1000:])
    assert conn.missing == 0
    if more_before_taken:
        conn.receive_data(_api_versions(8))
    first = conn.next_event()
    assert isinstance(first, Request)
    assert _summary(first) == (METADATA, 12, 7, "raw")
    assert [t.name for t in first.body.topics] == names
    if not more_before_taken:
        assert conn.next_event() is NEED_DATA
        conn.receive_data(_api_versions(8))
    assert _summary(conn.next_event()) == (API_VERSIONS, 3, 8, "raw")
    assert conn.next_event() is NEED_DATA
    assert conn.buffered == 0


@pytest.mark.parametrize("pieces", [1, 7], ids=["one-read", "seven-reads"])
def test_the_rest_of_a_large_frame_read_into_its_own_buffer_makes_the_same_request(pieces):
    """``rest_view`` hands out the missing bytes of the frame being received as a view
    of the frame's own buffer (the server reads the socket into it); once they are in,
    the request is the one the frame gives fed any other way, and the next frame
    reads as before."""
    conn = _connection(max_request_bytes=1 << 20)
    names = [f"topic-{i:06d}" for i in range(8000)]
    frame = _metadata(7, names)
    head = 60_000 if pieces == 1 else 1000
    conn.receive_data(frame[:head])
    assert conn.next_event() is NEED_DATA
    at = head
    while conn.missing:
        assert conn.buffered == at - 4  # what arrived of the frame, its size prefix taken
        view = conn.rest_view()
        size = len(view)
        chunk = -(-size // pieces)
        for i in range(0, size, chunk):  # the transport's reads, each into the next part
            view[i : i + chunk] = frame[at + i : at + min(i + chunk, size)]
        view.release()
        conn.rest_filled(size)
        at += size
    assert at == len(frame)
    first = conn.next_event()
    assert _summary(first) == (METADATA, 12, 7, "raw")
    assert [t.name for t in first.body.topics] == names
    assert conn.next_event() is NEED_DATA
    conn.receive_data(_api_versions(8))
    assert _summary(conn.next_event()) == (API_VERSIONS, 3, 8, "raw")
    assert conn.buffered == 0


def test_a_frame_whose_rest_ends_short_is_a_truncated_request_logged_quietly():
    """The stream ending while the rest is read into the frame (fewer bytes than the
    view asked for) is the peer hanging up inside a request, as with any read."""
    conn = _connection(max_request_bytes=1 << 20)
    frame = _metadata(7, [f"topic-{i:06d}" for i in range(8000)])
    conn.receive_data(frame[:1000])
    assert conn.next_event() is NEED_DATA
    view = conn.rest_view()
    view[:500] = frame[1000:1500]
    view.release()
    conn.rest_filled(500)
    assert conn.buffered == 1500 - 4
    with pytest.raises(ProtocolError, match="ended inside") as err:
        conn.next_event()
    assert err.value.level == logging.INFO


def test_a_declared_large_frame_grows_its_buffer_a_step_at_a_time():
    """A peer that declares a large frame gets a buffer at most twice what it sent (and
    64 KiB), not the declared size: the rest is read in steps, each as long as what
    came before it (``REST_STEP`` at most), and the frame comes out whole once every
    step is in."""
    conn = _connection(max_request_bytes=64 << 20)
    names = [f"topic-{i:07d}-{'x' * 40}" for i in range(60_000)]
    frame = _metadata(9, names)
    assert len(frame) > 2 * REST_STEP + 1000
    conn.receive_data(frame[:1000])
    assert conn.next_event() is NEED_DATA
    at = 1000
    while conn.missing:
        view = conn.rest_view()
        assert len(view) == min(conn.missing, REST_STEP, max(at - 4, MIN_REST_BYTES))
        assert conn.buffered == at - 4  # the buffer holds what arrived, plus the view
        step = len(view)
        view[:] = frame[at : at + step]
        at += step
        view.release()
        conn.rest_filled(step)
    first = conn.next_event()
    assert _summary(first) == (METADATA, 12, 9, "raw")
    assert [t.name for t in first.body.topics] == names


def test_a_peer_that_sent_only_a_size_gets_one_small_step():
    """Four bytes declaring 60 MiB: the buffer grows by 64 KiB, not by the declared
    size (Kafka's NetworkReceive allocates the whole of it)."""
    conn = _connection(max_request_bytes=64 << 20)
    conn.receive_data(struct.pack(">i", 60 << 20))
    assert conn.next_event() is NEED_DATA
    view = conn.rest_view()
    assert len(view) == MIN_REST_BYTES
    view.release()
    conn.rest_filled(0)
    with pytest.raises(ProtocolError, match="ended inside"):
        conn.next_event()


def test_rest_view_only_while_a_frames_rest_is_missing():
    conn = _connection(max_request_bytes=1 << 20)
    with pytest.raises(RuntimeError):
        conn.rest_view()  # no frame begun
    frame = _metadata(7, [f"topic-{i:06d}" for i in range(8000)])
    conn.receive_data(frame[:1000])
    assert conn.next_event() is NEED_DATA
    view = conn.rest_view()
    with pytest.raises(RuntimeError):
        conn.rest_view()  # handed out already
    with pytest.raises(RuntimeError):
        conn.receive_data(b"x")  # the rest goes into the view, not around it
    view.release()
    conn.rest_filled(0)


def test_the_peer_hanging_up_between_requests_is_a_clean_close():
    conn = _connection()
    assert len(_feed(conn, _api_versions(1), False)) == 1
    conn.receive_data(b"")
    assert conn.next_event() is CLOSED


@pytest.mark.parametrize("one_byte_at_a_time", [False, True], ids=["whole", "bytewise"])
def test_a_frame_over_socket_request_max_bytes_is_refused_from_its_size_alone(
    one_byte_at_a_time,
):
    # Kafka's NetworkReceive: InvalidReceiveException before a byte of the body is read
    conn = _connection()
    with pytest.raises(ProtocolError, match="socket.request.max.bytes=1024") as err:
        _feed(conn, struct.pack(">i", MAX_REQUEST_BYTES + 1), one_byte_at_a_time)
    assert err.value.api is None
    assert err.value.level == logging.WARNING
    with pytest.raises(ProtocolError):  # the connection stays unusable
        conn.next_event()


@pytest.mark.parametrize("size", [-5, 0, 7])
def test_a_frame_too_short_for_a_request_header_is_refused(size):
    conn = _connection()
    conn.receive_data(struct.pack(">i", size) + b"\0" * 16)
    with pytest.raises(ProtocolError, match=f"request size {size} outside"):
        conn.next_event()


def test_a_frame_of_exactly_socket_request_max_bytes_is_read():
    # Kafka refuses only sizes above maxSize; the body here is garbage, so what proves
    # the size was accepted is that the protocol waits for the rest of the frame
    conn = _connection()
    conn.receive_data(struct.pack(">i", MAX_REQUEST_BYTES) + b"\0" * 100)
    assert conn.next_event() is NEED_DATA


@pytest.mark.parametrize("cut", [1, 3, 4, 10])
def test_the_peer_hanging_up_inside_a_request_is_logged_quietly(cut):
    conn = _connection()
    conn.receive_data(_api_versions(1)[:cut])
    assert conn.next_event() is NEED_DATA
    conn.receive_data(b"")
    with pytest.raises(ProtocolError, match="truncated size prefix|ended inside") as err:
        conn.next_event()
    assert err.value.level == logging.INFO


@pytest.mark.parametrize("one_byte_at_a_time", [False, True], ids=["whole", "bytewise"])
def test_a_truncated_header_is_refused_and_counted_for_its_api(one_byte_at_a_time):
    # a Metadata v12 header whose client id claims 200 bytes in a 20-byte frame
    frame = struct.pack(">hhih", METADATA, 12, 9, 200) + b"raw" + b"\0" * 7
    conn = _connection()
    with pytest.raises(ProtocolError, match="cannot decode MetadataRequest") as err:
        _feed(conn, struct.pack(">i", len(frame)) + frame, one_byte_at_a_time)
    assert err.value.api == "Metadata"


def test_an_unknown_api_key_is_refused_and_counted():
    conn = _connection()
    frame = struct.pack(">hhih", 19, 7, 1, -1) + b"\0" * 4  # CreateTopics: not registered
    conn.receive_data(struct.pack(">i", len(frame)) + frame)
    with pytest.raises(ProtocolError, match="unsupported API key 19") as err:
        conn.next_event()
    assert err.value.api == "CreateTopics"


def test_an_api_versions_of_an_unknown_version_is_answered_with_v0_and_the_version_list():
    # a future ApiVersions v99: header v2 layout, body unknown (Kafka's ApiVersionsRequest)
    frame = struct.pack(">hhih", API_VERSIONS, 99, 42, 3) + b"raw" + b"\x00"
    conn = _connection()
    (event,) = _feed(conn, struct.pack(">i", len(frame)) + frame, False)
    assert isinstance(event, Answer)
    assert event.api == "ApiVersions"
    correlation_id, body = decode_response(API_VERSIONS, 0, event.data[4:])
    assert correlation_id == 42
    assert body.error_code == ErrorCode.unsupported_version
    advertised = {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}
    assert advertised == {API_VERSIONS: (0, 4), METADATA: (0, 13), PRODUCE: (0, 13)}


def test_a_version_below_the_served_range_without_a_schema_closes_the_connection():
    # Produce v2 is advertised (KAFKA-18659) but not served, and kio has no schema for it
    frame = struct.pack(">hhih", PRODUCE, 2, 7, 3) + b"raw" + b"\x00\x01" + b"\x00" * 10
    conn = _connection()
    conn.receive_data(struct.pack(">i", len(frame)) + frame)
    with pytest.raises(ProtocolError, match="Produce v2 is not supported") as err:
        conn.next_event()
    assert err.value.api == "Produce"


def test_send_frames_a_handlers_answer_for_the_requests_version():
    conn = _connection()
    (request,) = _feed(conn, _api_versions(77), False)
    answer = {"error_code": ErrorCode.none, "api_keys": [{"api_key": 3, "max_version": 13}]}
    out = conn.send(request, answer)
    assert struct.unpack(">i", out[:4])[0] == len(out) - 4
    correlation_id, body = decode_response(API_VERSIONS, 3, out[4:])
    assert correlation_id == 77
    assert body.error_code == ErrorCode.none
    assert [(k.api_key, k.min_version, k.max_version) for k in body.api_keys] == [(3, 0, 13)]
    assert body.throttle_time.total_seconds() == 0  # missing fields are zeroed
