"""The same pipeline job gives the same answer on a Spark standalone cluster as locally."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kompakt.pipeline.standalone import cluster_env, standalone_cluster
from kompakt.record.batch import build_simple_batch

JOB = Path(__file__).with_name("cluster_job.py")


def run_job(master: str, data_dir: Path, topic: str, action: str) -> dict:
    proc = subprocess.run(
        [sys.executable, str(JOB), master, str(data_dir), topic, action],
        env=cluster_env(),
        capture_output=True,
        text=True,
        timeout=180,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT ") :])


@pytest.mark.slow
def test_read_on_a_two_worker_standalone_cluster_matches_local(
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
    work = tmp_path / "cluster"
    work.mkdir()
    with standalone_cluster(work, workers=2) as master:
        out = run_job(master, data_dir, "t", "read")
    assert out["executors"] == master
    assert out["input_partitions"] > 2
    assert out["rows"] == local
