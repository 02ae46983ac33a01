"""Response frames as parts: a Fetch response's records go to the socket as the very
object the log read (no copy into the frame), the frame is Kafka's all the same
(``NetworkSend``: int32 size, then the response header and body)."""

from __future__ import annotations

from kio.schema.fetch.v12.response import FetchResponse

from kompakt.broker.protocol import KEEP_BYTES, encode_response, encode_response_parts


def _fetch_body(records: bytes) -> dict:
    part = {"partition_index": 0, "high_watermark": 1, "records": records}
    return {"responses": [{"topic": "t", "partitions": [part]}]}


def test_large_records_are_a_part_of_their_own_and_the_frame_is_unchanged():
    records = b"r" * KEEP_BYTES
    parts = encode_response_parts(FetchResponse, 7, _fetch_body(records))
    assert any(p is records for p in parts)
    frame = b"".join(parts)
    assert frame == encode_response(FetchResponse, 7, _fetch_body(records))
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    assert int.from_bytes(frame[4:8], "big") == 7  # correlation id


def test_a_small_response_is_one_part():
    parts = encode_response_parts(FetchResponse, 1, _fetch_body(b"small"))
    assert len(parts) == 1
    assert int.from_bytes(parts[0][:4], "big") == len(parts[0]) - 4
