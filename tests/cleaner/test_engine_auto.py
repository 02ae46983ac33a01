"""``kompakt.cleaner.engine=auto``: the in-process engine when the dirty range cannot
fill its offset map (Kafka's ``SkimpyOffsetMap``, sized by
``log.cleaner.dedupe.buffer.size`` x ``log.cleaner.io.buffer.load.factor``), Spark when
it may, where the in-process engine would clean in partial passes (Kafka's
``buildOffsetMap`` stops when the map is full). The clean's stats and log line name the
engine that ran."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from cleaner_kit import fold

from kompakt.engines import build_cleaner
from kompakt.log.manager import LogManager
from kompakt.record.encode import build_simple_batch

TOPIC = "t"
# 24 bytes a slot: 100 slots, 90 keys before the map is full at the 0.9 load factor
SMALL_MAP = {"log.cleaner.dedupe.buffer.size": str(24 * 100)}


def make_log(data_dir: Path, keys: int, records: int) -> None:
    """``records`` records over ``keys`` keys (round-robin), all in rolled segments."""
    with LogManager(data_dir) as m:
        m.create_topic(TOPIC, 1, {"cleanup.policy": "compact", "segment.bytes": "4096"})
        plog = m.get_log(TOPIC, 0)
        for start in range(0, records, 10):
            items = [(b"k%04d" % (i % keys), b"v%d" % i) for i in range(start, start + 10)]
            plog.append(build_simple_batch(items, timestamp=plog.clock()))
        plog.roll()


def clean_with(data_dir: Path, engine: str, settings: dict[str, str]):
    with LogManager(data_dir) as m:
        cleaner = build_cleaner(m, settings, engine=engine)
        plog = m.get_log(TOPIC, 0)
        stats = cleaner.clean_partition(plog, force=True)
        return stats, fold(plog)


def test_auto_cleans_a_range_that_fits_the_offset_map_in_process(tmp_path: Path, caplog):
    make_log(tmp_path / "d", keys=20, records=80)  # 80 records <= 90 keys of room
    with caplog.at_level(logging.INFO, logger="kompakt"):
        stats, state = clean_with(tmp_path / "d", "auto", SMALL_MAP)
    assert stats.engine == "local" and not stats.partial
    assert stats.records_written == 20 and len(state) == 20
    assert "engine auto chose local for t-0: at most 80 keys" in caplog.text
    assert "with engine local:" in caplog.text


def test_auto_cleans_a_range_beyond_the_offset_map_with_spark_in_one_pass(
    tmp_path: Path, spark, caplog
):
    """200 distinct keys, a map of 90: the in-process engine stops early (a partial
    clean, Kafka's rule), auto hands the clean to Spark, which covers it in one pass."""
    make_log(tmp_path / "d", keys=200, records=200)
    shutil.copytree(tmp_path / "d", tmp_path / "local")
    (tmp_path / "local" / ".lock").unlink(missing_ok=True)
    local, _ = clean_with(tmp_path / "local", "local", SMALL_MAP)
    assert local.partial and local.end_offset < 200  # what auto spares the user

    with caplog.at_level(logging.INFO, logger="kompakt"):
        stats, state = clean_with(tmp_path / "d", "auto", SMALL_MAP)
    assert stats.engine == "spark" and not stats.partial and stats.end_offset == 200
    assert len(state) == 200
    assert "engine auto chose spark for t-0: up to 200 keys, more than the offset map's 90" in (
        caplog.text
    )
