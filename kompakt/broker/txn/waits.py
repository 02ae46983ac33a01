"""Requests that wait on the coordinator for a transaction to finish completing, instead
of bouncing CONCURRENT_TRANSACTIONS back to the client.

Once EndTxn is answered (its Prepare record written) the client starts its next
transaction at once, but the coordinator still writes the markers and the Complete
record; until that record is in, Kafka answers AddPartitionsToTxn with
CONCURRENT_TRANSACTIONS and the client sleeps its retry backoff (librdkafka and the Java
producer: 20 ms) — far longer than the completion takes. Kafka's broker waits out the
same error on the server for up to ``add.partitions.to.txn.retry.backoff.max.ms``
(100 ms, KIP-890's ``AddPartitionsToTxnManager``); kompakt does so for the client's own
AddPartitionsToTxn / AddOffsetsToTxn: the request is parked until the id's pending
Complete record is written or fails, then decided again, and after the wait it gets
the answer Kafka would give then (CONCURRENT_TRANSACTIONS if still completing).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from kompakt.broker.coordinator.scheduler import Scheduler
from kompakt.broker.txn.state import Completion

T = TypeVar("T")


class CompletionWaits:
    """Parked requests by transactional id, each decided again when the id's Complete
    record is written (or fails) or when its wait runs out, whichever comes first."""

    def __init__(self, scheduler: Scheduler, max_wait_ms: int):
        self.scheduler = scheduler
        self.max_wait_ms = max_wait_ms
        self._parked: dict[str, list[Callable[[], None]]] = {}

    def park(self, transactional_id: str, decide: Callable[[], Completion[T]]) -> Completion[T]:
        """Answer with ``decide()`` once the id's completion is over or the wait ends;
        ``decide`` must not park again."""
        out: Completion[T] = Completion()
        parked = self._parked.setdefault(transactional_id, [])

        def run() -> None:
            if out.done() or run not in parked:
                return
            parked.remove(run)
            if not parked and self._parked.get(transactional_id) is parked:
                del self._parked[transactional_id]
            timer.cancel()
            decide().add_done_callback(out.complete)

        parked.append(run)
        timer = self.scheduler.call_later(self.max_wait_ms, run)
        return out

    def wake(self, transactional_id: str) -> None:
        """The id's pending transition is over (written or failed): decide its parked
        requests now, in arrival order."""
        for run in list(self._parked.get(transactional_id, ())):
            run()
