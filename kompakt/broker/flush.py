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
one fsync cost one more fsync, not n: a database's group commit. The server collects a
batch of requests' flushes (:func:`collected_flushes`) and runs them
(:func:`run_flushes`) on another worker while the connection's next requests append, so
one connection's pipelined requests share fsyncs too. Durability is unchanged: nothing
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

# the flushes a batch of requests still owes: per log, the offset to reach and the
# failure callbacks of the answers that wait for it
Pending = dict[int, tuple[PartitionLog, int, list[Callable[[Exception], None]]]]


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
    :func:`collected_flushes` with ``on_failure`` given, it is only noted (run by
    :func:`run_flushes`) and a failure is handed to ``on_failure`` instead of raised."""
    if plog.durable_offset >= offset:
        return
    pending: Pending | None = getattr(_deferred, "pending", None)
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
def collected_flushes() -> Iterator[Pending]:
    """Within it, this thread's :func:`flush_covering` calls that name an ``on_failure``
    only note their log and offset in the dict it yields; :func:`run_flushes` runs
    them later, on any thread (the server appends a connection's next requests while
    the fsync of the ones before runs). Their answers must not be sent before that."""
    pending: Pending = {}
    _deferred.pending = pending
    try:
        yield pending
    finally:
        _deferred.pending = None


def run_flushes(pending: Pending) -> None:
    """One flush per log for every request noted in ``pending`` (a group commit with
    the flushes other threads run); a failure goes to each of its answers."""
    for plog, offset, failed in pending.values():
        try:
            flush_covering(plog, offset)
        except Exception as exc:
            for on_failure in failed:
                on_failure(exc)
