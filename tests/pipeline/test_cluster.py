"""The same pipeline jobs give the same answer on a Spark standalone cluster as locally.

A master and two workers start from the pyspark package's own scripts on 127.0.0.1; the
data source reads a topic, and the cleaner's Spark engine compacts a log (tombstones
across two cleans, idempotent-producer batches, every codec) into files byte-identical
to the in-process engine's.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from engine_kit import clean_twice, snapshot, write_log

from kompakt.cleaner import LocalEngine
from kompakt.pipeline.standalone import cluster_env, standalone_cluster
from kompakt.record.encode import build_simple_batch

JOB = Path(__file__).with_name("cluster_job.py")


def run_job(master: str, data_dir: Path, topic: str, *actions: str) -> dict:
    proc = subprocess.run(
        [sys.executable, str(JOB), master, str(data_dir), topic, *actions],
        env=cluster_env(),
        capture_output=True,
        text=True,
        timeout=180,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT ") :])


@pytest.mark.slow
def test_source_and_compaction_on_a_two_worker_standalone_cluster_match_local(
    spark, manager, data_dir, tmp_path, rows_of
):
    manager.create_topic("t", 2, {"segment.bytes": "400"})
    for i in range(40):
        manager.get_log("t", i % 2).append(
            build_simple_batch(
                [(b"k%d" % (i % 7), None if i % 9 == 0 else b"v%d" % i)], timestamp=i
            )
        )
    manager.flush_all()
    local = [
        [p, o, k.hex(), None if v is None else v.hex()]
        for _t, p, o, k, v in rows_of(data_dir, subscribe="t")
    ]
    batches = [
        ([(b"k%d" % (i % 7), None if i % 5 == 0 else b"v%d" % i)], i % 5, i % 3 == 0)
        for i in range(120)
    ]
    write_log(tmp_path / "local", batches)
    shutil.copytree(tmp_path / "local", tmp_path / "on-cluster")
    clean_twice(tmp_path / "local", LocalEngine(1 << 20))
    work = tmp_path / "cluster"
    work.mkdir()
    with standalone_cluster(work, workers=2) as master:
        out = run_job(master, data_dir, "t", "read", f"compact={tmp_path / 'on-cluster'}")
    assert out["executors"] == master
    assert out["input_partitions"] > 2
    assert out["rows"] == local
    expected, got = snapshot(tmp_path / "local"), snapshot(tmp_path / "on-cluster")
    assert sorted(got) == sorted(expected)
    assert any(name.endswith(".log") and len(b) for name, b in got.items())
    for name in expected:
        assert got[name] == expected[name], name
