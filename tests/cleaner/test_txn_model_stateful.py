"""Model-based test: no clean ever loses a committed record (issue 25's must-show).

A Hypothesis state machine drives one compacted partition with tiny segments
(``segment.bytes=1024``, values up to 900 bytes, so a transaction's data and its marker
often land in different segment groups) through random interleavings of:

* transactional data of two producers, each transaction ended by COMMIT or ABORT;
* idempotent (non-transactional, with a producer id and sequences) and plain batches;
* tombstones; segment rolls; time moving past ``delete.retention.ms``;
* cleans (the in-process engine; the Spark engine too in the second test);
* restarts (the log manager closed and the data dir opened again).

After every step a READ_COMMITTED consumer's view of the log (the fetch's aborted list
from ``.txnindex``, :func:`txn_kit.read_committed`) folded into a table equals the model:
plain and committed records below the last stable offset, folded in offset order
(Kafka's ``LogCleaner`` contract: the latest value of each key is retained; aborted
data never resurfaces; a tombstone deletes). The model knows nothing of segments,
groups, markers or horizons: it is the producer's intent.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from cleaner_kit import T0, ManualClock
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from txn_kit import fold, intended_table, model_lso, read_committed

from kompakt.cleaner import Cleaner, LocalEngine
from kompakt.log.manager import LogManager
from kompakt.record.encode import build_control_batch, build_simple_batch
from kompakt.record.header import CONTROL_ABORT, CONTROL_COMMIT

RETENTION = 1000
CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": "1024",
    "delete.retention.ms": str(RETENTION),
    "file.delete.delay.ms": "0",
    "min.cleanable.dirty.ratio": "0.01",
}
TXN_PIDS = [1000, 1001]
IDEMPOTENT_PIDS = [2000, 2001]
KEYS = [b"k0", b"k1", b"k2", b"k3", b"k4", b"k5"]

value = st.one_of(
    st.none(),  # a tombstone
    st.binary(max_size=8),
    st.sampled_from([b"m" * 300, b"L" * 900]),  # fills a segment: its marker starts the next
)
items = st.lists(st.tuples(st.sampled_from(KEYS), value), min_size=1, max_size=3)


class TxnLog(RuleBasedStateMachine):
    """One partition under test and the model of what was meant."""

    engines: tuple[str, ...] = ("local",)

    def __init__(self) -> None:
        super().__init__()
        # in memory where there is a tmpfs: thousands of steps, each open fsyncs
        shm = "/dev/shm" if Path("/dev/shm").is_dir() else None
        self.tmp = Path(tempfile.mkdtemp(prefix="kompakt-model-", dir=shm))
        self.clock = ManualClock(T0)
        self.appended: dict[int, tuple[bytes, bytes | None]] = {}
        self.fate: dict[int, str] = {}  # offset -> plain / open / commit / abort
        self.open: dict[int, list[int]] = {}  # transactional producer -> its open offsets
        self.marker_of: dict[int, int] = {}  # data offset of an ended txn -> its marker
        self.seq: dict[int, int] = dict.fromkeys(TXN_PIDS + IDEMPOTENT_PIDS, 0)
        self.m: LogManager | None = None

    @initialize()
    def start(self) -> None:
        self.m = LogManager(self.tmp / "data", clock=self.clock)
        self.m.create_topic("t", 1, CONFIG)

    def teardown(self) -> None:
        if self.m is not None:
            self.m.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    @property
    def plog(self):
        return self.m.get_log("t", 0)

    def _append(self, kv, fate: str, **producer) -> list[int]:
        batch = build_simple_batch(kv, timestamp=self.clock(), **producer)
        info = self.plog.append(batch)
        offs = list(range(info.first_offset, info.first_offset + len(kv)))
        for off, rec in zip(offs, kv, strict=True):
            self.appended[off] = rec
            self.fate[off] = fate
        return offs

    def _producer(self, pid: int, n: int, transactional: bool) -> dict:
        seq = self.seq[pid]
        self.seq[pid] += n
        return dict(
            producer_id=pid, producer_epoch=0, base_sequence=seq, transactional=transactional
        )

    # -- what producers do -------------------------------------------------------------

    @rule(kv=items)
    def plain(self, kv) -> None:
        self._append(kv, "plain")

    @rule(pid=st.sampled_from(IDEMPOTENT_PIDS), kv=items)
    def idempotent(self, pid, kv) -> None:
        self._append(kv, "plain", **self._producer(pid, len(kv), False))

    @rule(pid=st.sampled_from(TXN_PIDS), kv=items)
    def txn_data(self, pid, kv) -> None:
        offs = self._append(kv, "open", **self._producer(pid, len(kv), True))
        self.open.setdefault(pid, []).extend(offs)

    @rule(pid=st.sampled_from(TXN_PIDS), commit=st.booleans())
    def end_txn(self, pid, commit) -> None:
        offs = self.open.pop(pid, None)
        if offs is None:
            return  # nothing open: the coordinator writes no marker
        kind = CONTROL_COMMIT if commit else CONTROL_ABORT
        info = self.plog.append(
            build_control_batch(kind, producer_id=pid, producer_epoch=0, timestamp=self.clock())
        )
        for off in offs:
            self.fate[off] = "commit" if commit else "abort"
            self.marker_of[off] = info.first_offset

    @rule(pid=st.sampled_from(TXN_PIDS), kv=items, commit=st.booleans())
    def transaction(self, pid, kv, commit) -> None:
        """A whole transaction at once (its producer's earlier one, if open, first)."""
        self.end_txn(pid, True)
        self.txn_data(pid, kv)
        self.end_txn(pid, commit)

    # -- what the broker does ----------------------------------------------------------

    @rule()
    def roll(self) -> None:
        if self.plog.active_segment.size:
            self.plog.roll()

    @rule(ms=st.sampled_from([0, 10, RETENTION // 2, RETENTION + 1, 2 * RETENTION]), data=st.data())
    def clean(self, ms, data) -> None:
        """Time moves on (past ``delete.retention.ms`` or not), then a clean."""
        self.clock.advance(ms)
        name = data.draw(st.sampled_from(self.engines), label="engine")
        if name == "spark":
            from kompakt.pipeline.engine import SparkEngine

            engine = SparkEngine()
        else:
            engine = LocalEngine(1 << 20)
        if self.plog.active_segment.size:
            self.plog.roll()  # the active segment is never cleaned
        Cleaner(self.m, engine=engine).clean_partition(self.plog)

    @rule()
    def restart(self) -> None:
        self.m.close()
        self.m = LogManager(self.tmp / "data", clock=self.clock)

    # -- after every step --------------------------------------------------------------

    def model_lso(self) -> int:
        return model_lso(self.open, self.plog.log_end_offset)

    @invariant()
    def read_committed_matches_the_model(self) -> None:
        if self.m is None:
            return
        assert self.plog.last_stable_offset == self.model_lso()
        seen = read_committed(self.plog)
        for off, k, v in seen:
            assert (k, v) == self.appended[off], f"offset {off} changed"
            assert self.fate[off] in ("plain", "commit"), f"{self.fate[off]} record {off} read"
        table = fold((k, v) for _off, k, v in seen)
        assert table == intended_table(self.appended, self.fate, self.model_lso())

    @invariant()
    def a_marker_outlives_its_transactions_data(self) -> None:
        """Kafka's ``LogCleaner``: a transaction marker is retained until every record
        batch of its transaction has been removed (then its delete horizon decides)."""
        if self.m is None:
            return
        markers, data = set(), set()
        for b in self.plog.iter_batches():
            if b.header.is_control:
                markers.add(b.header.base_offset)
            else:
                data.update(r.offset for r in b.records())
        for off in sorted(data & set(self.marker_of)):
            assert self.marker_of[off] in markers, (
                f"record {off} ({self.fate[off]} transaction) outlived its marker "
                f"at {self.marker_of[off]}"
            )


TestTxnLogLocal = TxnLog.TestCase
TestTxnLogLocal.settings = settings(
    max_examples=150,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


class TxnLogBothEngines(TxnLog):
    engines = ("local", "spark")


def test_both_engines_keep_every_committed_record(spark):
    """The same machine with cleans on either engine, a few examples: each Spark clean
    is a job of its own (seconds on 2 cores)."""
    from hypothesis.stateful import run_state_machine_as_test

    run_state_machine_as_test(
        TxnLogBothEngines,
        settings=settings(
            max_examples=4,
            stateful_step_count=25,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        ),
    )
