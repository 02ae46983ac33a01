"""Crash during work: SIGKILL a real ``kompakt serve`` at random moments, many times.

Producers (confluent-kafka, idempotent, acks=all) write to compacted partitions (with
tombstones) and delete-policy partitions while the background cleaner keeps cleaning
small segments; the broker is SIGKILLed at random moments and restarted on the same
data dir. The model holds only writes whose delivery report succeeded. Afterwards every
acknowledged write must be there (latest value per key for compacted partitions,
every record exactly once for delete-policy ones), offsets increase, no cleaner
leftovers remain, every segment parses with its CRC and every index entry points at a
batch. Finally an offline clean (clock moved past ``delete.retention.ms``) must remove
every tombstoned key and keep the rest.

The cleaner runs the in-process engine (``kompakt.cleaner.engine=local``) to keep CI
fast; ``benchmarks/soak.py --engine spark --kills N`` runs the same kills on Spark.
Kill moments come from a seed printed at the start; ``KOMPAKT_CRASH_SEED=<n>`` replays
them (producer timing still varies from run to run).
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

from reliability.kit import (
    BrokerProcess,
    Model,
    ModelProducer,
    check_compacted,
    check_data_dir,
    check_delete_policy,
    check_offsets_increase,
    create_topic,
    fold,
    leftovers,
    read_partition,
)
from shared_kit import poll_until

KILLS = int(os.environ.get("KOMPAKT_CRASH_KILLS", "20"))
COMPACTED, DELETE = "users", "events"
BROKER_OVERRIDES = {
    "kompakt.cleaner.engine": "local",  # Spark start-up per restart would dominate CI time
    "log.cleaner.backoff.ms": "100",
    "log.segment.bytes": "4096",
    "log.segment.delete.delay.ms": "200",
    "log.flush.offset.checkpoint.interval.ms": "500",
    "log.retention.check.interval.ms": "1000",
}
COMPACTED_CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": "4096",
    "min.cleanable.dirty.ratio": "0.05",
    "delete.retention.ms": "300",
    "min.compaction.lag.ms": "0",
}
DELETE_CONFIG = {"cleanup.policy": "delete", "segment.bytes": "8192", "retention.ms": "-1"}


def crash_seed() -> int:
    seed = int(os.environ.get("KOMPAKT_CRASH_SEED", random.randrange(2**31)))
    print(f"\nKOMPAKT_CRASH_SEED={seed}  (set it to replay these kill moments)")
    return seed


def wait_for_clean_in_progress(data: Path, timeout: float) -> bool:
    """Poll for a ``.cleaned``/``.swap`` file: a clean is between its write and its swap."""
    # a fine step: the .cleaned file lives milliseconds
    return bool(poll_until(lambda: leftovers(data), timeout, step=0.002))


def targets() -> dict[tuple[str, int], tuple[int, float]]:
    out = {(COMPACTED, p): (200, 0.12) for p in range(3)}
    out.update({(DELETE, p): (1000, 0.0) for p in range(2)})
    return out


def test_sigkill_at_random_moments_loses_no_acknowledged_write(tmp_path: Path) -> None:
    seed = crash_seed()
    rng = random.Random(seed)
    data = tmp_path / "data"
    broker = BrokerProcess(data, dict(BROKER_OVERRIDES))
    t0 = time.monotonic()
    broker.start()
    model = Model()
    try:
        create_topic(broker.bootstrap, COMPACTED, 3, COMPACTED_CONFIG)
        create_topic(broker.bootstrap, DELETE, 2, DELETE_CONFIG)
        producer = ModelProducer(
            broker.bootstrap, model, targets(), random.Random(seed + 1), rate=1500
        ).start()
        mid_clean, start_s, kills = 0, 0.0, 0

        def kill_and_restart(at_clean: bool) -> None:
            nonlocal mid_clean, start_s, kills
            if at_clean:  # wait for a clean to be writing its .cleaned file, then kill
                if wait_for_clean_in_progress(data, timeout=10.0):
                    time.sleep(rng.uniform(0, 0.002))  # fault: a kill moment inside the clean
            else:
                time.sleep(rng.uniform(0.2, 1.5))  # fault: a random kill moment
            assert broker.alive(), f"broker died on its own:\n{broker.log_tail()}"
            broker.kill()
            kills += 1
            mid_clean += bool(leftovers(data))  # killed between writing .cleaned and swap end
            t1 = time.monotonic()
            broker.start()
            start_s += time.monotonic() - t1

        for i in range(KILLS):
            kill_and_restart(at_clean=bool(i % 2))
        # the test exists for kills inside a clean: a run whose random moments all missed
        # one tries a few more, and fails if none lands
        for _ in range(10):
            if mid_clean:
                break
            kill_and_restart(at_clean=True)
        assert mid_clean >= 1, "no kill landed between a clean's .cleaned file and its swap"
        time.sleep(1.0)  # load: the producer keeps writing to the last broker
        left = producer.stop(120)
        assert left == 0, f"{left} messages never got a delivery report"
        assert producer.fatal is None
        cleans = broker.log_text().count("INFO kompakt.cleaner.cleaner: Cleaned ")
        print(
            f"{kills} kills ({mid_clean} mid-clean), {broker.starts} starts "
            f"({start_s / kills:.2f} s each), {cleans} cleans, "
            f"{model.acked} acked, {model.failed} failed {model.errors}, "
            f"{time.monotonic() - t0:.1f} s"
        )
        assert model.acked > 1000
        assert cleans > 0, "the cleaner never ran: the kills did not hit cleaning work"
        for tp in targets():
            records = read_partition(broker.bootstrap, *tp)
            check_offsets_increase(records)
            if tp[0] == COMPACTED:
                check_compacted(model, tp, records)
            else:
                check_delete_policy(model, tp, records)
        assert broker.stop() == 0, broker.log_tail()
    finally:
        broker.kill()
    reports = check_data_dir(data)
    assert {f"{t}-{p}" for t, p in targets()} <= set(reports)
    assert "ERROR" not in broker.log_text(), broker.log_tail(200)
    check_offline_clean_removes_tombstones(data, model)


def check_offline_clean_removes_tombstones(data: Path, model: Model) -> None:
    """After the crashes the logs still clean: a clean stamps the tombstones' delete
    horizon, a clean after it removes them, and what remains is exactly the model."""
    from kompakt.cleaner import Cleaner, LocalEngine
    from kompakt.log.manager import LogManager

    now = [int(time.time() * 1000) + 3_600_000]
    with LogManager(data, clock=lambda: now[0]) as logs:
        cleaner = Cleaner(logs, engine=LocalEngine(16 << 20), clock=lambda: now[0])
        for p in range(3):
            plog = logs.get_log(COMPACTED, p)
            plog.roll()  # the active segment is never cleaned
            for _round in range(2):
                cleaner._update_checkpoint((COMPACTED, p), plog.log_start_offset)
                assert cleaner.clean_partition(plog, force=True) is not None
                now[0] += 3_600_000
            records = [(r.offset, r.key, r.value) for b in plog.iter_batches() for r in b.records()]
            state = fold(records)
            assert None not in state.values(), "a tombstone outlived delete.retention.ms"
            expected = {
                k: ws[-1].value
                for k, ws in model.writes[(COMPACTED, p)].items()
                if ws[-1].value is not None
            }
            assert state == expected
            assert len(records) == len(state), "a superseded record survived the clean"
    check_data_dir(data)


def test_reopening_a_preallocated_index_after_a_crash_does_not_scan_every_slot(
    tmp_path: Path, monkeypatch
) -> None:
    """Was: after a crash every active segment's index is still preallocated (10 MiB by
    default), and finding its used entries unpacked every slot in Python: ~0.4 s per
    partition, 16 s to restart a broker with ``__consumer_offsets``' 50 partitions."""
    from kompakt.log.index import AbstractIndex
    from kompakt.log.offset_index import OffsetIndex
    from kompakt.log.time_index import TimeIndex

    size = 10 * 1024 * 1024
    off = OffsetIndex(tmp_path / "0.index", 100, size)
    ts = TimeIndex(tmp_path / "0.timeindex", 100, size)
    off.append(100, 0)  # relative offset 0 at position 0 is all zero bytes: kept ...
    off.append(105, 4096)
    off.append(110, 8192)
    ts.maybe_append(1_000, 105)
    for idx in (off, ts):
        idx.close()  # no trim: what SIGKILL leaves
    calls = {"n": 0}
    real_raw = AbstractIndex._raw

    def counting_raw(self, i):
        calls["n"] += 1
        return real_raw(self, i)

    monkeypatch.setattr(AbstractIndex, "_raw", counting_raw)
    off2 = OffsetIndex(tmp_path / "0.index", 100, size)
    ts2 = TimeIndex(tmp_path / "0.timeindex", 100, size)
    assert calls["n"] < 50
    assert (off2.entries, ts2.entries) == (3, 1)
    assert off2.lookup(107) == (105, 4096)
    assert ts2.last_entry == (1_000, 105)
    empty = OffsetIndex(tmp_path / "1.index", 0, size)
    empty.append(0, 0)  # ... unless it is the only one (Kafka never writes it)
    empty.close()
    assert OffsetIndex(tmp_path / "1.index", 0, size).entries == 0
