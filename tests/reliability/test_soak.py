"""Sustained load for a bounded time: no memory or fd growth, nothing lost.

Runs ``benchmarks/soak.py``'s :func:`run_soak` for ``KOMPAKT_SOAK_SECONDS`` (default
60): two idempotent acks=all producers and two group consumers on compacted topics
while the background cleaner (in-process engine) cleans 64 KiB segments. No kills here
(``test_crash.py`` does those, and a restart would reset the RSS this test watches);
``benchmarks/soak.py --kills N`` combines both.
"""

from __future__ import annotations

import os
from pathlib import Path

from shared_kit import load_script

REPO = Path(__file__).resolve().parents[2]
SECONDS = float(os.environ.get("KOMPAKT_SOAK_SECONDS", "60"))


def test_sustained_load_is_flat_and_loses_nothing(tmp_path: Path) -> None:
    soak = load_script("soak", REPO / "benchmarks" / "soak.py")
    result = soak.run_soak(SECONDS, rate=700, interval=3.0, work_dir=tmp_path)
    print(result.headline())
    soak.write_outputs(result, tmp_path / "out")
    assert (tmp_path / "out" / "soak.png").stat().st_size > 0
    samples = result.samples
    assert len(samples) >= 9
    third = len(samples) // 3
    first, last = samples[:third], samples[-third:]
    # memory: the broker's RSS does not climb (cleans, appends, fetches all bounded)
    first_rss = max(s.rss_mb for s in first)
    assert max(s.rss_mb for s in last) < first_rss * 1.5 + 50, [s.rss_mb for s in samples]
    # fds: segments roll and cleans swap them; the old ones stay open until
    # file.delete.delay.ms and then close. What is not a segment file (sockets, the
    # lock, pipes, ...) must not grow, and compaction keeps live segments bounded. A
    # leak holds its fds: the last third's median, not one sample caught in a burst of
    # short-lived files (16-17 fds, once 41, in a run at 5cd1f27)
    other = [s.fds_other for s in samples]
    assert sorted(other[-third:])[third // 2] <= max(other[:third]) + 10, other
    segments = [s.segments for s in samples]
    assert max(segments[-third:]) <= max(segments[third:-third]) + 6, segments
    assert max(s.fds_pending_delete for s in last) < 200, "old segments are never closed"
    assert result.cleans >= 3, "the cleaner did not run under load"
    assert min(s.acked_per_s for s in samples[1:]) > 0, "produce stalled"
    assert result.records_lost == 0, result.lost_examples
    assert result.consumer_mismatches == 0, result.lost_examples
    assert result.failed == 0
