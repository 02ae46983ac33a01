"""The log owns its producers' state (Kafka's ``ProducerStateManager`` in ``UnifiedLog``):
``PartitionLog.last_records_of_active_producers`` answers from it, as Kafka's
``lastRecordsOfActiveProducers`` does, without walking the segments, and it outlives
the batches it was built from (KIP-360). Real logs on tmp dirs."""

from __future__ import annotations

from txn_kit import TS, data, marker

from kompakt.log.manager import LogManager
from kompakt.log.producer_snapshot import list_snapshots
from kompakt.log.producer_state import PRODUCER_ID_EXPIRATION_MS, LastRecord
from kompakt.record.encode import build_control_batch, build_simple_batch
from kompakt.record.header import CONTROL_ABORT, CONTROL_COMMIT


def idem(pid: int, seq: int, n: int, epoch: int = 0, ts: int = TS) -> bytes:
    items = [(b"k%d" % (seq + i), b"v") for i in range(n)]
    return build_simple_batch(
        items, timestamp=ts, producer_id=pid, producer_epoch=epoch, base_sequence=seq
    )


def test_last_records_of_active_producers_follow_appends(manager: LogManager, clock) -> None:
    """Kafka's ``lastRecordsOfActiveProducers``: a producer's last data batch's last
    offset and epoch; a marker of a newer epoch starts the epoch with no data (None,
    ``maybeUpdateProducerEpoch`` clears the batches); plain batches have no producer."""
    clock.now = TS
    manager.create_topic("t", 1, {})
    plog = manager.get_log("t", 0)
    plog.append(idem(5, 0, 3))  # 0-2
    plog.append(build_simple_batch([(b"p", b"v")], timestamp=TS))  # 3: no producer
    assert plog.last_records_of_active_producers() == {5: LastRecord(2, 0)}
    plog.append(idem(5, 3, 2))  # 4-5: fed by the append, the state being built
    plog.append(data(6, b"a"))  # 6: producer 6's transaction
    plog.append(
        build_control_batch(CONTROL_ABORT, producer_id=5, producer_epoch=1, timestamp=TS)
    )  # 7: producer 5's epoch bumped by a marker
    assert plog.last_records_of_active_producers() == {
        5: LastRecord(None, 1),
        6: LastRecord(6, 0),
    }


def test_idle_producers_drop_out_unless_their_transaction_is_open(
    manager: LogManager, clock
) -> None:
    """Kafka's ``isProducerExpired``: idle for ``producer.id.expiration.ms`` and no open
    transaction."""
    clock.now = TS
    manager.create_topic("t", 1, {})
    plog = manager.get_log("t", 0)
    plog.append(idem(5, 0, 1))  # 0: idempotent, no transaction
    plog.append(data(6, b"a"))  # 1: open transaction
    plog.append(data(7, b"b"))  # 2
    plog.append(marker(7, CONTROL_COMMIT))  # 3: closed
    later = TS + PRODUCER_ID_EXPIRATION_MS
    assert plog.last_records_of_active_producers(later) == {6: LastRecord(1, 0)}
    assert set(plog.last_records_of_active_producers(later - 1)) == {5, 6, 7}


def test_last_records_outlive_the_batches_they_came_from(tmp_path, clock) -> None:
    """KIP-360: once head segments are gone, and after a restart, the producer's last
    records still come from the state (its snapshot), where a walk over the batch
    headers that remain would find no producer at all."""
    clock.now = TS
    m = LogManager(tmp_path / "data", clock=clock)
    m.create_topic("t", 1, {"cleanup.policy": "delete"})
    plog = m.get_log("t", 0)
    with plog.lock:
        _ = plog.producers  # kept, as the broker keeps it for its idempotence checks
    plog.append(idem(5, 0, 3))  # 0-2
    assert plog.last_records_of_active_producers() == {5: LastRecord(2, 0)}
    plog.roll()  # snapshot at 3
    plog.append(build_simple_batch([(b"p", b"v")], timestamp=TS))  # 3
    plog.roll()
    plog.delete_records_before(4)  # the producer's batches are gone
    assert all(b.header.producer_id < 0 for b in plog.iter_batches())
    assert plog.last_records_of_active_producers() == {5: LastRecord(2, 0)}
    m.close()
    assert list_snapshots(tmp_path / "data" / "t-0")
    m = LogManager(tmp_path / "data", clock=clock)
    try:
        assert m.get_log("t", 0).last_records_of_active_producers() == {5: LastRecord(2, 0)}
    finally:
        m.close()


def test_a_batch_fed_twice_is_recorded_once(manager: LogManager, clock) -> None:
    """The log feeds every append to its producer state; the broker's handlers feeding
    the same batch again (their idempotence bookkeeping) leaves one entry per batch."""
    clock.now = TS
    manager.create_topic("t", 1, {})
    plog = manager.get_log("t", 0)
    with plog.lock:
        state = plog.producers
        plog.append(idem(5, 0, 2))
        (h,) = [b.header for b in plog.iter_batches()]
        state.update(h, 0)
    assert [(b.first_offset, b.last_offset) for b in state.entries[5].batches] == [(0, 1)]
    assert state.check(h) is not None  # a retry is a duplicate of the one batch


def test_a_state_built_only_for_the_cleaner_writes_no_snapshot(tmp_path, clock) -> None:
    """An offline compact asks the log for its producers' last records; closing the log
    then leaves no new file (a cancelled compact changes nothing on disk). A state the
    broker keeps (``producers``) is written at close, as Kafka's ``UnifiedLog.close``."""
    clock.now = TS
    m = LogManager(tmp_path / "data", clock=clock)
    m.create_topic("t", 1, {})
    m.get_log("t", 0).append(idem(5, 0, 3))
    m.close()
    m = LogManager(tmp_path / "data", clock=clock)
    plog = m.get_log("t", 0)
    assert plog.last_records_of_active_producers() == {5: LastRecord(2, 0)}
    m.close()
    assert list_snapshots(tmp_path / "data" / "t-0") == []
    m = LogManager(tmp_path / "data", clock=clock)
    plog = m.get_log("t", 0)
    with plog.lock:
        _ = plog.producers
    m.close()
    assert [s.offset for s in list_snapshots(tmp_path / "data" / "t-0")] == [3]
