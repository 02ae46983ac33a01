"""The Spark key map is exact: every key's latest offset in the dirty range, in one pass."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kompakt.log.manager import LogManager
from kompakt.pipeline.dedup import latest_offsets, records_with_latest
from kompakt.record.encode import build_simple_batch

ops = st.lists(
    st.tuples(
        st.integers(0, 1),  # partition
        st.lists(
            st.tuples(st.sampled_from([b"a", b"b", b"c", b"d", None]), st.booleans()),
            min_size=1,
            max_size=4,
        ),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(ops, st.integers(0, 6))
def test_latest_offsets_equal_a_dict_fold_of_the_dirty_range(
    spark, tmp_path_factory, appends, first_dirty
):
    data_dir = tmp_path_factory.mktemp("d") / "data"
    with LogManager(data_dir) as m:
        m.create_topic("t", 2, {"segment.bytes": "120"})
        for part, items in appends:
            recs = [(k, b"v" if live else None) for k, live in items]
            m.get_log("t", part).append(build_simple_batch(recs, timestamp=1))
        ends = {p: m.get_log("t", p).log_end_offset for p in range(2)}
    dirty = {p: (min(first_dirty, ends[p]), ends[p]) for p in range(2)}
    want = {}
    for part in range(2):
        offset = 0
        for p, items in appends:
            if p != part:
                continue
            for key, _live in items:
                if key is not None and dirty[p][0] <= offset < dirty[p][1]:
                    want[(part, key)] = offset
                offset += 1
    got = latest_offsets(spark, data_dir, "t", dirty).collect()
    assert {(r.partition, bytes(r.key)): r.latest for r in got} == want


def test_every_record_learns_its_keys_latest_dirty_offset_and_its_segment_group(
    spark, manager, data_dir
):
    manager.create_topic("t", 1)
    log = manager.get_log("t", 0)
    for key in [b"a", b"b", b"a", b"c", b"b", b"a"]:
        log.append(build_simple_batch([(key, b"v")], timestamp=1))
    dirty = {0: (3, 6)}  # offsets 3..5: c@3, b@4, a@5
    latest = latest_offsets(spark, data_dir, "t", dirty)
    rows = records_with_latest(spark, data_dir, "t", {0: (0, 6)}, latest, {0: [0, 2, 4]}).collect()
    got = sorted((r.offset, r.latest, r.group) for r in rows)
    assert got == [(0, 5, 0), (1, 4, 0), (2, 5, 1), (3, 3, 1), (4, 4, 2), (5, 5, 2)]
