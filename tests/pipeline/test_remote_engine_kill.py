"""SIGKILL of a process running a Spark remote clean (:mod:`kompakt.pipeline.remote_engine`)
after its executors uploaded the cleaned segments (the step only this engine does
differently; the driver's commit and deletion are the in-process engine's, SIGKILLed by
tests/cleaner/test_remote_clean_kill.py, and every step is failed in-process by
test_remote_engine_faults.py): the manifest names only existing objects, the remote
log reads back the latest value of every key, a new clean succeeds and the sweep leaves
only what the manifest names (docs/tiered-storage.md's order of writes)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from test_remote_clean import (
    CONFIGS,
    TOPIC,
    assert_names_existing,
    assert_next_clean_recovers,
    feed,
    manifest,
    remote_state,
    tiered,
)

from kompakt.cleaner.remote_clean import COMMITTED, UPLOADED

REPO = Path(__file__).resolve().parents[2]
CHILD = """
import json, os, signal, sys, time
import kompakt.pipeline as pipeline
from kompakt.cleaner.remote_clean import RemoteCleaner
from kompakt.pipeline.remote_engine import SparkRemoteEngine
from kompakt.pipeline.remote_tasks import StoreAddress
from kompakt.remote import open_store
from kompakt.remote.metadata import RemoteLogMetadataManager
from kompakt.remote.storage import RemoteStorageManager

url, step, topic, overrides = sys.argv[1:]
store = open_store(url)
segments, meta = RemoteStorageManager(store), RemoteLogMetadataManager(store)
engine = SparkRemoteEngine(segments, StoreAddress.here(url), {"kompakt.spark.master": "local[1]"})
clock = lambda: int(time.time() * 1000)
cleaner = RemoteCleaner(segments, meta, clock, engine=engine)

def fault(at):
    if at == step:
        os.kill(os.getpid(), signal.SIGKILL)

cleaner.fault = fault
cleaner.clean(meta.load_partition(topic, 0), json.loads(overrides), 0)
"""


@pytest.mark.slow
@pytest.mark.parametrize("step", [UPLOADED])
def test_sigkill_of_a_spark_remote_clean_loses_nothing(tmp_path: Path, step: str):
    logs, plog, tier, cleaner, clock, want = tiered(tmp_path, feed)
    logs.close()
    url = (tmp_path / "remote").as_uri()
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, url, step, TOPIC, json.dumps(CONFIGS)],
        cwd=REPO,
        start_new_session=True,
    )
    try:
        assert child.wait(timeout=240) == -signal.SIGKILL
    finally:
        try:
            os.killpg(child.pid, signal.SIGKILL)  # the JVM it started, if still there
        except ProcessLookupError:
            pass
    m = manifest(tier).value
    assert_names_existing(tier, m)
    assert remote_state(tier, m) == want
    assert (m.clean_point == m.end_offset) is (step == COMMITTED)
    assert_next_clean_recovers(tier, cleaner, want)
