"""A Spark clean of the remote tier on a standalone master and two workers that are
given no path of a data dir (issue 29): the partition is tiered to a folder bucket, the
data dir is deleted, the cluster and the job start in another working directory and
get only the bucket's URL. Every object the executors upload (read tasks of a few
segments each, a rewrite task per segment group, spread over both workers) is byte for
byte what the in-process engine uploads for the same manifest, over two cleans (KIP-534
tombstone horizons; the one-task plan is compared in test_remote_engine.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_remote_clean import CONFIGS, tier_of, tiered
from test_remote_engine import TOPIC, all_objects, fill_mixed, remote_state, shape

from kompakt.pipeline.standalone import cluster_env, standalone_cluster

JOB = Path(__file__).with_name("remote_cluster_job.py")
PLANS = ("spread",)  # a task per 4 KiB of segments and per group: both workers busy


def reset_clean_point(tier) -> None:
    """The next clean rewrites the whole range again (as after a clean point reset)."""
    v = tier.metadata.load_partition(TOPIC, 0)
    tier.metadata.commit_partition(v.value.next(v.value.segments, clean_point=0), v)


@pytest.mark.slow
def test_remote_clean_on_a_two_worker_cluster_that_never_sees_the_data_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    src = tmp_path / "broker"
    logs, plog, tier, local, clock, want = tiered(src, fill_mixed)
    logs.close()
    buckets = {plan: tmp_path / "buckets" / plan for plan in PLANS}
    for folder in buckets.values():
        shutil.copytree(src / "remote", folder)
    nows = [clock(), clock() + 2000]  # the second past delete.retention.ms (1000)
    for i, now in enumerate(nows):
        clock.advance(now - clock())
        if i:
            reset_clean_point(tier)
        assert local.clean(tier.metadata.load_partition(TOPIC, 0), CONFIGS, 0) is not None
    expected = tier.metadata.load_partition(TOPIC, 0).value
    shutil.rmtree(src / "data")  # no data dir exists while the cluster runs
    shutil.rmtree(src / "work", ignore_errors=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the master, the workers and the job start here
    (tmp_path / "cluster").mkdir()
    with standalone_cluster(tmp_path / "cluster", workers=2) as master:
        args = [master, TOPIC, json.dumps(CONFIGS), ",".join(map(str, nows))]
        args += [f"{plan}={folder.as_uri()}" for plan, folder in buckets.items()]
        proc = subprocess.run(
            [sys.executable, str(JOB), *args],
            cwd=elsewhere,
            env=cluster_env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    out = json.loads(lines[-1][len("RESULT ") :])
    assert out["master"] == master and out["executors"] == 2
    assert out["cwd"] == str(elsewhere)
    assert not (src / "data").exists()
    assert [c["plan"] for c in out["cleans"]] == [p for p in PLANS for _ in nows]
    for plan, folder in buckets.items():
        twin = tier_of(folder.as_uri())
        got = twin.metadata.load_partition(TOPIC, 0).value
        assert shape(got) == shape(expected), plan
        assert all_objects(twin, got) == all_objects(tier, expected), plan
        assert remote_state(twin, got) == want
