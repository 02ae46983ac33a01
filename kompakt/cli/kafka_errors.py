"""confluent-kafka's errors as the CLI's one-line text.

A module of its own, below both of its users: :mod:`kompakt.cli.common` (the top-level
handler that prints any error a verb let through) and
:mod:`kompakt.cli.broker_backend.connection` (which turns a failed admin call into a
``CliError``), and the verbs that read a raw response. confluent-kafka is looked up in
``sys.modules`` (loaded only by a verb that talked to a broker) or imported on a call
that names an error code, so ``kompakt --help`` stays light.
"""

from __future__ import annotations

import sys
from typing import Any


def is_kafka_exception(exc: BaseException) -> bool:
    """Whether ``exc`` is confluent-kafka's ``KafkaException`` (the broker's answer)."""
    ck = sys.modules.get("confluent_kafka")
    return ck is not None and isinstance(exc, ck.KafkaException)


def kafka_error_text(err: Any) -> str:
    """A confluent-kafka ``KafkaError`` as text: its message without librdkafka's
    ``Broker:`` prefix. An error the admin API built from a response code alone has no
    message (``(null)``): then the code's own description, e.g. "Cluster authorization
    failed" for CLUSTER_AUTHORIZATION_FAILED (Kafka's ``Errors`` message)."""
    ck = sys.modules.get("confluent_kafka")
    if ck is None or not isinstance(err, ck.KafkaError):
        return str(err)
    message = err.str()
    if not message or message == "(null)":
        return code_description(err.code())
    return message.removeprefix("Broker: ")


def code_description(code: int) -> str:
    """Kafka's description of an error code, as librdkafka's table carries it: "Cluster
    authorization failed" for CLUSTER_AUTHORIZATION_FAILED (31)."""
    from confluent_kafka import KafkaError

    return KafkaError(int(code)).str().removeprefix("Broker: ")
