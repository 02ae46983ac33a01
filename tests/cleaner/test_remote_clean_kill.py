"""SIGKILL in each step of a remote clean (:mod:`kompakt.cleaner.remote_clean`): a
process cleaning a tiered partition's remote range is killed after the fetch, the
clean, the upload, the manifest swap and the deletion of the replaced objects. After
each kill the manifest names only existing objects, the remote log read from its start
gives the latest value of every key, a new clean succeeds, and the sweep leaves only
objects the manifest names (docs/tiered-storage.md's order of writes)."""

from __future__ import annotations

import json
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

from kompakt.cleaner.remote_clean import CLEANED, COMMITTED, DELETED, FETCHED, UPLOADED

REPO = Path(__file__).resolve().parents[2]
CHILD = """
import json, os, signal, sys, time
from pathlib import Path
from kompakt.cleaner.remote_clean import RemoteCleaner
from kompakt.remote import open_store
from kompakt.remote.metadata import RemoteLogMetadataManager
from kompakt.remote.storage import RemoteStorageManager

url, work, step, topic, overrides = sys.argv[1:]
store = open_store(url)
meta = RemoteLogMetadataManager(store)
clock = lambda: int(time.time() * 1000)
cleaner = RemoteCleaner(RemoteStorageManager(store), meta, clock, work_dir=Path(work))

def fault(at):
    if at == step:
        os.kill(os.getpid(), signal.SIGKILL)

cleaner.fault = fault
cleaner.clean(meta.load_partition(topic, 0), json.loads(overrides), 0)
cleaner.delete_due()
"""


@pytest.mark.parametrize("step", [FETCHED, CLEANED, UPLOADED, COMMITTED, DELETED])
def test_sigkill_at_each_step_loses_nothing(tmp_path: Path, step: str):
    logs, plog, tier, cleaner, clock, want = tiered(tmp_path, feed)
    logs.close()
    url = (tmp_path / "remote").as_uri()
    args = [url, str(tmp_path / "work"), step, TOPIC, json.dumps(CONFIGS)]
    proc = subprocess.run([sys.executable, "-c", CHILD, *args], cwd=REPO, timeout=120)
    assert proc.returncode == -signal.SIGKILL
    m = manifest(tier).value
    assert_names_existing(tier, m)
    assert remote_state(tier, m) == want
    assert_next_clean_recovers(tier, cleaner, want)
