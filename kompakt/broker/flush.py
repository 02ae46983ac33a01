"""Group commit for acks=all: one fsync answers every Produce that appended meanwhile.

kompakt is one node, so acks=all (every in-sync replica has the write) means the write
is on disk: a Produce with acks=-1 is answered only once an fsync of its partition
covers the batch it appended. The handler appends (on a worker thread, as before) and
answers with a :class:`DurableResponse` naming the offsets it needs flushed; the server
waits here, on its event loop, and serves the connection's next requests meanwhile.

Per partition log there is one flush in flight at a time. Requests that append while it
runs wait for the next one, which covers all of them at once (the log's flush moves the
recovery point to the log end offset it sees), so n produce requests in the time of one
fsync cost one more fsync, not n — a log's batched flush, as a database's group commit.
Durability is unchanged: nothing is answered before the fsync that covers it returned.
A failed fsync fails every request it covered with KAFKA_STORAGE_ERROR (the log marks
its dir offline), as one fsync per request did.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kompakt.errors import KafkaStorageError
from kompakt.log.partition_log import PartitionLog


def flush_log(plog: PartitionLog) -> None:
    """fsync ``plog`` up to its log end offset; a failed fsync is the KafkaStorageError
    the client is answered with (the write is not durable)."""
    try:
        plog.flush()
    except OSError as exc:
        raise KafkaStorageError(f"cannot flush {plog.name}: {exc}") from exc


@dataclass
class DurableResponse:
    """A handler's answer that may go out once ``waits`` are on disk: each is (log,
    offset the flush must reach, the partition's entry in ``response``); a failed
    flush calls ``failed(entry, exception)``, which turns the entry into that error."""

    response: dict[str, Any]
    failed: Callable[[dict[str, Any], Exception], None]
    waits: list[tuple[PartitionLog, int, dict[str, Any]]] = field(default_factory=list)


@dataclass
class _LogFlushes:
    waiting: list[asyncio.Future] = field(default_factory=list)
    task: asyncio.Task | None = None


class GroupCommit:
    """The flushes of one event loop's Produce requests (see the module doc)."""

    def __init__(self) -> None:
        self._logs: dict[int, _LogFlushes] = {}

    async def complete(self, durable: DurableResponse) -> dict[str, Any]:
        """``durable.response`` once every wait is flushed; a partition whose flush
        failed answers that error instead (its offsets unknown)."""
        futures = [self.flushed(plog, offset) for plog, offset, _ in durable.waits]
        results = await asyncio.gather(*futures, return_exceptions=True)
        for (_plog, _offset, part), res in zip(durable.waits, results, strict=True):
            if isinstance(res, BaseException):
                if not isinstance(res, Exception):
                    raise res  # cancelled: the connection is going away
                durable.failed(part, res)
        return durable.response

    def flushed(self, plog: PartitionLog, offset: int) -> asyncio.Future:
        """A future done once ``plog`` is fsynced up to ``offset`` (exclusive)."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        if plog.recovery_point >= offset:
            fut.set_result(None)
            return fut
        entry = self._logs.setdefault(id(plog), _LogFlushes())
        entry.waiting.append(fut)
        if entry.task is None:
            entry.task = loop.create_task(self._run(plog, entry))
        return fut

    async def _run(self, plog: PartitionLog, entry: _LogFlushes) -> None:
        """Flush until nobody waits: each round covers every request that appended
        before it started (they registered after their append)."""
        try:
            while entry.waiting:
                batch, entry.waiting = entry.waiting, []
                error: Exception | None = None
                try:
                    await asyncio.to_thread(flush_log, plog)
                except Exception as exc:
                    error = exc
                for fut in batch:
                    if fut.done():  # its request was cancelled
                        continue
                    if error is None:
                        fut.set_result(None)
                    else:
                        fut.set_exception(error)
        finally:
            entry.task = None
            if self._logs.get(id(plog)) is entry:
                del self._logs[id(plog)]
            for fut in entry.waiting:  # only when cancelled (loop closing)
                if not fut.done():
                    fut.cancel()
