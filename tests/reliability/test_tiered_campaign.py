"""The remote tier's SIGKILL campaign (:mod:`reliability.tiered_campaign`) kept short
for CI, and its offline bucket checker.

Six kills of a real broker tiering a compacted and a delete-policy topic under
idempotent acks=all producers: after a segment object's put, before and after a
manifest's compare-and-swap (after it: before the local deletion it allows), after a
remote clean's upload and after its commit, and one at a random moment
(``KOMPAKT_TIERED_SEED=<n>`` replays the choices; ``PYTHONPATH=tests python -m
reliability.tiered_campaign --kills 60`` runs a longer campaign over every step). Zero acknowledged records lost by Kafka's rules, and after each kill's sweep zero
objects that no manifest names, every named object present with its SHA-256.

The checker's own test feeds it a bucket with a missing, a damaged and an unnamed
object: a checker that cannot fail proves nothing.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from reliability.tiered_campaign import (
    COMPACT,
    RANDOM,
    SUITE_STEPS,
    TieredCampaign,
    check_bucket,
)

from kompakt.remote.manifest import PartitionManifest
from kompakt.remote.metadata import RemoteLogMetadataManager
from kompakt.remote.storage import LocalSegmentFiles, RemoteStorageManager
from kompakt.remote.store import FileObjectStore


def test_bucket_checker_finds_missing_damaged_and_orphaned_objects(tmp_path: Path) -> None:
    store = FileObjectStore(tmp_path / "remote")
    segments, meta = RemoteStorageManager(store), RemoteLogMetadataManager(store)
    log = tmp_path / "00000000000000000000.log"
    log.write_bytes(b"x" * 100)
    uploaded = [
        segments.copy_segment(COMPACT, 0, LocalSegmentFiles(base, base + 9, 0, {".log": log}))
        for base in (0, 10, 20)
    ]
    m = PartitionManifest(COMPACT, 0, "id", segments=tuple(uploaded[:2]))
    meta.commit_partition(m, None)
    assert check_bucket(store).violations == []
    orphan = uploaded[2].keys()[0]
    store.put(orphan, b"orphan")  # uploaded, never named (a kill before the commit)
    store.put(uploaded[1].keys()[0], b"y" * 100)  # named, damaged
    store.delete(uploaded[0].keys()[0])  # named, missing
    found = check_bucket(store)
    assert found.orphans == 1 and found.swept == 1
    assert not (tmp_path / "remote" / orphan).exists()
    text = " | ".join(found.violations)
    assert "missing" in text and "SHA-256" in text, text


@pytest.mark.timeout(300)
def test_sigkill_at_each_tiering_step_loses_no_acknowledged_record_and_no_object(
    tmp_path: Path,
) -> None:
    seed = int(os.environ.get("KOMPAKT_TIERED_SEED", random.randrange(2**31)))
    print(f"\nKOMPAKT_TIERED_SEED={seed}  (set it to replay these kill choices)")
    work = tmp_path / "work"
    campaign = TieredCampaign(seed, len(SUITE_STEPS), work, steps=SUITE_STEPS, wait_s=12.0)
    result = campaign.run()
    print(result.summary())
    assert result.violations == [], "\n".join(result.violations[:20])
    assert [k.step for k in result.kills] == list(SUITE_STEPS)
    named = [k for k in result.kills if k.step != RANDOM]
    assert sum(k.hit for k in named) >= len(named) - 1, result.by_step()
    assert sum(k.bucket.orphans for k in result.kills) > 0  # the kills left some to sweep
    assert result.acked > 1000 and result.read_checks == len(SUITE_STEPS)
    assert result.remote_reads == 3  # every partition was read partly from the tier
