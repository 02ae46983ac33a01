"""The CLI verbs against a running broker, over the Kafka protocol (confluent-kafka).

:class:`BrokerBackend` implements the same :class:`~kompakt.cli.backend.Backend` methods
as the offline backends and returns the same dataclasses, so the commands print the same
output whichever transport is used; it adds the consumer-group verbs, which only make
sense against a broker. One module per verb family, over one shared connection
(:mod:`.connection`): :mod:`.topics`, :mod:`.records` (produce, consume) and
:mod:`.groups`, as Kafka's ``kafka-topics.sh``, console producer/consumer and
``kafka-consumer-groups.sh`` are separate tools over one ``Admin`` client.
"""

from __future__ import annotations

from .connection import BrokerConnection, default_admin_url, parse_bootstrap
from .groups import GroupNotEmptyError, GroupVerbs, UnknownGroupError
from .records import RecordVerbs
from .topics import TopicVerbs

__all__ = [
    "BrokerBackend",
    "BrokerConnection",
    "GroupNotEmptyError",
    "UnknownGroupError",
    "default_admin_url",
    "parse_bootstrap",
]


class BrokerBackend(TopicVerbs, RecordVerbs, GroupVerbs):
    """Every verb over the Kafka protocol against ``bootstrap_server`` (see
    :class:`~.connection.BrokerConnection` for what entering checks)."""
