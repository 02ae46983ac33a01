"""Group commit for acks=all: one fsync answers every Produce that appended meanwhile.

kompakt is one node, so acks=all (every in-sync replica has the write) means the write
is on disk: a Produce with acks=-1 is answered only once an fsync of its partition
covers the batch it appended. The handler appends under the log's lock, releases it,
then calls :func:`flush_covering` on its worker thread. Only the ``.log`` files are
fsynced, without the log's lock (Kafka's ``LocalLog.flush`` runs outside it too), so
appends go on during the fsync; the indexes are left to the periodic flush and the roll,
and a crash's recovery rebuilds them from the recovery point.

Per partition log there is one flush in flight at a time. Requests that append while it
runs (other connections' handlers) wait behind it; the first of them then flushes for
all of them at once (the flush moves the log's ``durable_offset`` to the log end
offset it saw) and the others find their batch covered, so n requests in the time of
one fsync cost one more fsync, not n: a database's group commit. Durability is unchanged: nothing
is answered before an fsync that covers it returned. A failed fsync fails the request
that ran it with KAFKA_STORAGE_ERROR (the log marks its dir offline); the ones waiting
behind it try their own and fail the same way.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from kompakt.errors import KafkaStorageError
from kompakt.log.partition_log import PartitionLog

_locks: weakref.WeakKeyDictionary[PartitionLog, threading.Lock] = weakref.WeakKeyDictionary()
_locks_guard = threading.Lock()


def flush_log(plog: PartitionLog) -> None:
    """fsync ``plog``'s records up to its log end offset (its ``.log`` files: the
    indexes are rebuilt by recovery, :meth:`PartitionLog.flush_records`); a failed
    fsync is the KafkaStorageError the client is answered with (not durable)."""
    try:
        plog.flush_records()
    except OSError as exc:
        raise KafkaStorageError(f"cannot flush {plog.name}: {exc}") from exc


def flush_covering(
    plog: PartitionLog, offset: int, on_failure: Callable[[Exception], None] | None = None
) -> None:
    """Return once ``plog`` is fsynced below ``offset`` (the end offset of a batch the
    caller appended): after the flush in flight, if that covered it, else after one
    this thread runs for everyone who appended meanwhile. Inside
    :func:`deferred_flushes` with ``on_failure`` given, the flush waits for its end
    and a failure is handed to ``on_failure`` instead of raised."""
    if plog.durable_offset >= offset:
        return
    pending = getattr(_deferred, "pending", None)
    if pending is not None and on_failure is not None:
        _plog, last, failed = pending.setdefault(id(plog), (plog, offset, []))
        pending[id(plog)] = (plog, max(last, offset), failed)
        failed.append(on_failure)
        return
    with _locks_guard:
        lock = _locks.get(plog)
        if lock is None:
            lock = _locks[plog] = threading.Lock()
    with lock:
        if plog.durable_offset >= offset:  # the flush this thread waited out covered it
            return
        flush_log(plog)


_deferred = threading.local()


@contextmanager
def deferred_flushes() -> Iterator[None]:
    """Within it, this thread's :func:`flush_covering` calls that name an ``on_failure``
    only note their log and offset; leaving it runs one flush per log for all of them
    (several pipelined Produce requests of one connection, handled in one go, share an
    fsync). Their answers must not be sent before it is left."""
    pending: dict[int, tuple[PartitionLog, int, list[Callable[[Exception], None]]]] = {}
    _deferred.pending = pending
    try:
        yield
    finally:
        _deferred.pending = None
        for plog, offset, failed in pending.values():
            try:
                flush_covering(plog, offset)
            except Exception as exc:
                for on_failure in failed:
                    on_failure(exc)
