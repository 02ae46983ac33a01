"""Property test: any interleaving of appends, cleans and restarts keeps what a consumer
rebuilding a table from the log sees (Kafka's compaction guarantee, ``LogCleaner`` docs:
"the latest value for each key is retained"; tombstones vanish only after
delete.retention.ms, KIP-534)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from cleaner_kit import T0, ManualClock, leftovers, records
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kompakt.cleaner import Cleaner, LocalEngine
from kompakt.log.manager import LogManager
from kompakt.record.decode import Record
from kompakt.record.encode import build_batch

KEYS = [b"a", b"b", b"c", b"d", b"e", b"f"]
CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": "300",
    "delete.retention.ms": "1000",
}

record = st.tuples(
    st.sampled_from(KEYS),
    st.integers(0, 9).flatmap(
        lambda r: st.none() if r < 2 else st.binary(min_size=0, max_size=12)
    ),  # ~20% tombstones
    st.integers(0, 2),  # header count
)
op = st.one_of(
    st.tuples(st.just("append"), st.lists(record, min_size=1, max_size=5)),
    st.tuples(st.just("clean"), st.integers(0, 3000)),
    st.tuples(st.just("clean_once"), st.integers(0, 3000)),
    st.tuples(st.just("restart"), st.just(0)),
)


class Harness:
    def __init__(self, path: Path, map_bytes: int | None):
        self.path = path
        self.map_bytes = map_bytes
        self.clock = ManualClock(T0)
        self.m = LogManager(path, clock=self.clock)
        self.m.create_topic("t", 1, CONFIG)
        self.cleaner = self._cleaner()
        self.model: dict[bytes, bytes] = {}
        self.appended: dict[int, tuple] = {}

    @property
    def pl(self):
        return self.m.get_log("t", 0)

    def append(self, items):
        now = self.clock()
        recs = [
            Record(i, now + i, k, v, tuple((f"h{j}", b"%d" % j) for j in range(nh)))
            for i, (k, v, nh) in enumerate(items)
        ]
        info = self.pl.append(build_batch(recs))
        for i, (k, v, _nh) in enumerate(items):
            off = info.first_offset + i
            self.appended[off] = (off, k, v, now + i, recs[i].headers)
            if v is None:
                self.model.pop(k, None)
            else:
                self.model[k] = v

    def clean(self, advance, once):
        self.clock.advance(advance)
        active = self.pl.active_segment
        active_name, active_bytes = active.log_path.name, active.log_path.read_bytes()
        if once:
            self.cleaner.clean_once()
        else:
            self.cleaner.clean_partition(self.pl)
        assert leftovers(self.pl.dir) == []
        assert (self.pl.dir / active_name).read_bytes() == active_bytes
        assert self.pl.active_segment.log_path.name == active_name

    def restart(self):
        self.m.close()
        self.m = LogManager(self.path, clock=self.clock)
        self.cleaner = self._cleaner()

    def _cleaner(self):
        if self.map_bytes is None:
            return Cleaner(self.m)
        return Cleaner(self.m, engine=LocalEngine(self.map_bytes))

    def check(self):
        recs = records(self.pl)
        offsets = [r.offset for r in recs]
        assert all(a < b for a, b in zip(offsets, offsets[1:], strict=False))
        state: dict[bytes, bytes] = {}
        for r in recs:
            assert (r.offset, r.key, r.value, r.timestamp, r.headers) == self.appended[r.offset]
            if r.value is None:
                state.pop(r.key, None)
            else:
                state[r.key] = r.value
        assert state == self.model
        for b in self.pl.iter_batches():
            b.ensure_valid()
        assert self.pl.log_end_offset == len(self.appended)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@pytest.mark.parametrize("map_bytes", [None, 5 * 24], ids=["big_map", "map_of_4_keys"])
@given(ops=st.lists(op, min_size=1, max_size=40))
def test_compaction_preserves_latest_value_per_key(map_bytes, ops):
    """Kafka LogCleanerIntegrationTest / LogCleanerTest.testCleaning*: the fold of the log
    (tombstone = delete) equals the fold of everything appended, after any sequence of
    appends, cleans at increasing times and restarts; surviving records are byte-for-byte
    what was appended at their offset; the active segment is never touched. With a small
    offset map every pass is partial (Cleaner.buildOffsetMap stops when the map is full)."""
    with tempfile.TemporaryDirectory() as d:
        h = Harness(Path(d) / "data", map_bytes)
        try:
            for kind, arg in ops:
                if kind == "append":
                    h.append(arg)
                elif kind == "clean":
                    h.clean(arg, once=False)
                elif kind == "clean_once":
                    h.clean(arg, once=True)
                else:
                    h.restart()
                h.check()
        finally:
            h.m.close()
