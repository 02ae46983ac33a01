"""Time retention deletes segments while a Spark clean is held mid-rewrite; print JSON.

Run by test_engine_log_changes.py in a fresh process (its own SparkContext); the engine
is handed the hold (:class:`~kompakt.cleaner.segment_io.CleanFaults`), which its Spark
tasks carry. Usage: ``python retention_race_job.py DATA_DIR HOLD_DIR``.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path


def fold(plog) -> dict[str, str]:
    state: dict[str, str] = {}
    for b in plog.iter_batches():
        for r in b.records():
            if r.offset >= plog.log_start_offset:
                state[r.key.decode()] = r.value.decode()
    return state


def main() -> None:
    data, hold = Path(sys.argv[1]), Path(sys.argv[2])
    from kompakt.cleaner import Cleaner
    from kompakt.cleaner.segment_io import CleanFaults
    from kompakt.log.manager import LogManager
    from kompakt.pipeline.engine import SparkEngine
    from kompakt.pipeline.standalone import FAST_START_JAVA_OPTS
    from kompakt.record.encode import build_simple_batch

    config = {
        "kompakt.spark.master": "local[2]",
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.driver.memory": "1g",
        "spark.driver.extraJavaOptions": FAST_START_JAVA_OPTS,
    }
    m = LogManager(data)
    topic = {"cleanup.policy": "compact,delete", "segment.bytes": "300", "retention.ms": "3600000"}
    m.create_topic("a", 1, topic)
    plog = m.get_log("a", 0)
    ts = int(time.time() * 1000)
    for i in range(80):
        plog.append(build_simple_batch([(b"k%d" % (i % 40), b"v%d" % i)], timestamp=ts + i))
    plog.roll()
    m.checkpoint()
    c = Cleaner(m, engine=SparkEngine(config, CleanFaults(hold)), config=config)
    out: dict = {}

    def run() -> None:
        try:
            out["first"] = c.compact_now("a", 0).results[0].to_json()
        except BaseException as exc:  # noqa: BLE001 (reported)
            out["error"] = f"{type(exc).__name__}: {exc}"

    t = threading.Thread(target=run, daemon=True)
    t.start()
    deadline = time.monotonic() + 300
    while not any(hold.glob("held-*")):  # a group task is running (2 slots: any group)
        assert time.monotonic() < deadline, "the clean never started"
        time.sleep(0.05)  # a poll (shared_kit.wait_for is not on this script's path)
    third = plog.segments[2]
    out["deleted"] = plog.apply_retention(third.largest_timestamp + 3600000 + 1)
    m.checkpoint()  # the log start offset the Spark source reads
    out["start"] = plog.log_start_offset
    model = fold(plog)
    (hold / "release").touch()
    t.join(300)
    out["uncleanable"] = plog.uncleanable_reason
    out["start_after"] = plog.log_start_offset
    out["leftovers"] = sorted(
        p.name for p in plog.dir.iterdir() if p.name.endswith((".cleaned", ".swap"))
    )
    out["checkpoint"] = m.cleaner_checkpoint().read().get(("a", 0))
    again = c.compact_now("a", 0).results[0]
    out["second"] = again.status
    out["start_final"] = plog.log_start_offset
    out["same_data"] = fold(plog) == model
    m.close()
    print("RESULT " + json.dumps(out, default=str))


if __name__ == "__main__":
    main()
