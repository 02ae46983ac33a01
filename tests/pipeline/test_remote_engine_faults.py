"""Failures of a Spark remote clean (:mod:`kompakt.pipeline.remote_engine`): a failure
at each step of the remote tier's order of writes (fetch, clean, upload in the
executors; the manifest swap and the delayed deletion on the driver) leaves a manifest
naming only existing objects that reads back the latest value of every key, and the
next clean succeeds; a remote object that fails its SHA-256 in an executor stops the
clean with an error naming it, and nothing is committed."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_remote_clean import (
    CONFIGS,
    Boom,
    assert_names_existing,
    assert_next_clean_recovers,
    feed,
    manifest,
    remote_state,
    tiered,
)
from test_remote_engine import spark_cleaner

from kompakt.cleaner.remote_clean import CLEANED, COMMITTED, DELETED, FETCHED, UPLOADED
from kompakt.log.segment import LOG_SUFFIX
from kompakt.remote.store import RemoteStorageError

pytestmark = pytest.mark.slow


@pytest.fixture
def setup(spark, tmp_path: Path):
    logs, plog, tier, _local, clock, want = tiered(tmp_path, feed)
    logs.close()
    cleaner = spark_cleaner(tier, (tmp_path / "remote").as_uri(), clock, spark)
    return tier, cleaner, want


@pytest.mark.parametrize("step", [FETCHED, CLEANED, UPLOADED, COMMITTED, DELETED])
def test_a_failure_at_any_step_loses_nothing(setup, step: str):
    """docs/tiered-storage.md's order of writes, with the Spark engine making the
    cleaned segments: whichever step fails, the manifest names only existing objects
    and reads back every key's latest value; the sweep then leaves only what it names."""
    tier, cleaner, want = setup

    def fail(at: str) -> None:
        if at == step:
            raise Boom(at)

    cleaner.fault = fail
    with pytest.raises(Boom):
        cleaner.clean(manifest(tier), CONFIGS, 0)
        cleaner.delete_due()
    m = manifest(tier).value
    assert_names_existing(tier, m)
    assert remote_state(tier, m) == want
    cleaner.fault = lambda at: None
    assert_next_clean_recovers(tier, cleaner, want)


def test_a_corrupt_remote_segment_stops_the_clean_and_commits_nothing(setup, tmp_path: Path):
    """A ``.log`` object whose bytes no longer match the SHA-256 recorded at upload is
    never cleaned into new segments: the executor's check fails the job with an error
    naming the object, and the manifest stays as it was."""
    tier, cleaner, want = setup
    before = manifest(tier)
    key = before.value.segments[1].files[LOG_SUFFIX].key
    path = tmp_path / "remote" / key
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(RemoteStorageError, match="ChecksumMismatchError") as err:
        cleaner.clean(before, CONFIGS, 0)
    assert key in str(err.value) and "SHA-256" in str(err.value)
    assert "\n" not in str(err.value)  # one line
    assert manifest(tier).value == before.value
