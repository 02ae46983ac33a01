"""A topic id prints as Kafka's ``Uuid.toString`` writes it (URL-safe base64, no
padding) through a broker as offline: confluent-kafka's ``str(Uuid)`` uses the standard
alphabet, so ``topic describe -b`` showed ``3yZCmU3cRX2N/ws8tJQRUw`` where ``topic
describe -d`` showed ``3yZCmU3cRX2N_ws8tJQRUw`` for the same topic."""

from __future__ import annotations

import base64

from confluent_kafka import Uuid

from kompakt.cli.broker_backend.topics import _topic_id


def test_a_topic_id_is_url_safe_base64_as_kafkas_uuid_to_string():
    raw = bytes.fromhex("fbffbffbffbffbff0123456789abcdef")
    msb = int.from_bytes(raw[:8], "big", signed=True)
    lsb = int.from_bytes(raw[8:], "big", signed=True)
    uuid = Uuid(msb, lsb)
    assert "/" in str(uuid) or "+" in str(uuid)  # the client's own form
    assert _topic_id(uuid) == base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
    assert "-" in _topic_id(uuid) or "_" in _topic_id(uuid)
