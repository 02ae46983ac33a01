"""The declared-size check (:mod:`kompakt.broker.bounds`) on frames without a broker:
Kafka's generated readers refuse a count or length larger than the bytes left ("Tried to
allocate a collection of size N, but there are only M bytes remaining") and a null in a
non-nullable field, and accept everything an honest client sends."""

from __future__ import annotations

import pytest
from raw_kafka import API, encode_request

from kompakt.broker.bounds import DeclaredSizeError, check_request
from kompakt.broker.protocol import schemas


def _frame(api_key: int, version: int, body: dict) -> tuple[memoryview, type]:
    return memoryview(encode_request(api_key, version, body)[4:]), schemas(api_key, version)[0]


def test_a_null_array_of_fixed_size_elements_passes():
    """AlterPartitionReassignments' ``replicas`` is a nullable int32 array (null cancels a
    reassignment, KIP-455); a null array has nothing after its length, so the check must
    not step back over the field before it."""
    body = {
        "timeout": 1000,
        "topics": [
            {"name": "t", "partitions": [{"partition_index": 7, "replicas": None}]},
            {"name": "u", "partitions": [{"partition_index": 1, "replicas": [1, 2]}]},
        ],
    }
    for version in (0, 1):
        frame, cls = _frame(API.alter_partition_reassignments, version, body)
        check_request(frame, cls)


def test_a_count_beyond_the_bytes_left_is_refused_with_a_clear_error():
    """A Produce whose topic count is a thousand times what its bytes could hold."""
    frame, cls = _frame(API.produce, 9, {"acks": 1, "timeout": 1000, "topic_data": []})
    raw = bytearray(frame)
    assert raw[-2:] == b"\x01\x00"  # topic_data: compact length 0+1, no tagged fields
    raw[-2:-1] = bytes([0x80 | 0x69, 0x07])  # a varint count of 1000 (+1)
    with pytest.raises(DeclaredSizeError, match="declared size 1000 is larger than the"):
        check_request(memoryview(bytes(raw)), cls)
