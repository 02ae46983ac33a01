"""The legal-transition check of Kafka's coordinator state machines.

Kafka's group metadata (``GroupMetadata.assertValidTransition``) and transaction
metadata (``TransactionMetadata.prepareTransitionTo``) both keep, for each state, the
states it may be entered from (``validPreviousStates``) and throw
``IllegalStateException`` on any other move. :func:`check_transition` is that check,
shared by :mod:`kompakt.broker.coordinator.state` and :mod:`kompakt.broker.txn.state`;
each passes its own table and its own error type (an illegal move is our bug, never a
client's).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TypeVar

S = TypeVar("S")


def check_transition(
    table: Mapping[S, Collection[S]],
    current: S,
    target: S,
    *,
    subject: str = "",
    error: type[Exception] = RuntimeError,
) -> None:
    """Raise ``error`` unless ``table[target]`` (the valid previous states of
    ``target``) holds ``current``; ``subject`` names the group or id in the message."""
    allowed = table[target]
    if current not in allowed:
        who = f"{subject} " if subject else ""
        raise error(
            f"{who}should be in one of {sorted(str(s) for s in allowed)} before moving to "
            f"{target}, but is {current}"
        )
