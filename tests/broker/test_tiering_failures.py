"""A manifest gone from the remote tier while its broker runs (moved away, or the bucket
wiped), and how a lasting tiering failure is logged (kompakt.broker.tiering_failures).

The task used to take a missing manifest for "nothing tiered yet": it started a new
remote log at the local log start, so the offsets the old manifest held left the log
(its log start jumped from 0 to 50, with nothing logged above INFO) and their objects
were left to the orphan sweep. Now tiering of that partition stops, says why once, and
goes on when the manifest is back.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from kompakt.broker.tiering import Tiering
from kompakt.broker.tiering_failures import FailureLog
from kompakt.log.manager import LogManager
from kompakt.record.encode import build_simple_batch
from kompakt.remote import RemoteTier, open_store
from kompakt.remote.cache import ChunkCache
from kompakt.remote.layout import manifest_key
from kompakt.remote.metadata import RemoteLogMetadataManager
from kompakt.remote.storage import RemoteStorageManager
from kompakt.remote.store import RemoteStorageError

CONFIGS = {"cleanup.policy": "compact", "remote.storage.enable": "true", "segment.bytes": "600"}


def fill(plog, start: int, n: int) -> None:
    for i in range(start, start + n):
        plog.append(build_simple_batch([(b"k%d" % i, b"v" * 50)], timestamp=plog.clock()))
    plog.roll()


def objects(root: Path) -> int:
    return sum(1 for p in root.rglob("*") if p.is_file())


def test_a_vanished_manifest_stops_tiering_until_it_is_back(tmp_path: Path, caplog) -> None:
    caplog.set_level(logging.INFO, "kompakt.broker.tiering")
    store = open_store((tmp_path / "remote").as_uri())
    tier = RemoteTier(
        store, RemoteStorageManager(store), RemoteLogMetadataManager(store), ChunkCache(1 << 20)
    )
    logs = LogManager(tmp_path / "data")
    try:
        logs.create_topic("t", 1, CONFIGS)
        plog = logs.get_log("t", 0)
        fill(plog, 0, 20)
        tiering = Tiering(logs, tier)
        assert tiering.copy(plog) > 1
        held = tiering.manifest(plog)
        assert held is not None and held.log_start_offset == 0
        key = manifest_key("t", 0)
        saved, _version = store.get(key)
        store.delete(key)
        fill(plog, 20, 10)
        with pytest.raises(RemoteStorageError, match=r"manifest is gone .* offsets 0\.\.19"):
            tiering.copy(plog)
        uploaded = objects(tmp_path / "remote")
        for _ in range(3):  # each pass: no upload that no manifest can name
            with pytest.raises(RemoteStorageError, match="manifest is gone"):
                tiering.copy(plog)
        assert objects(tmp_path / "remote") == uploaded
        assert tiering.log_start_offset(plog) == 0  # not a new remote log from offset 20
        store.put(key, saved)
        assert tiering.copy(plog) > 0
        m = tiering.manifest(plog)
        assert m is not None and (m.log_start_offset, m.end_offset) == (0, 30)
        assert "its manifest is back in the remote tier" in caplog.text
    finally:
        logs.close()


def test_a_lasting_failure_is_logged_once_then_again_when_its_cause_changes(caplog) -> None:
    failures = FailureLog()
    with caplog.at_level(logging.WARNING, "kompakt.broker.tiering"):
        for _ in range(5):
            failures.failed(("t", 0), "tiering t-0: store unreachable")
        failures.failed(("t", 1), "tiering t-1: store unreachable")
        failures.failed(("t", 0), "tiering t-0: object damaged")
        failures.ok(("t", 0))
        failures.failed(("t", 0), "tiering t-0: object damaged")
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert said == [
        "tiering t-0: store unreachable",
        "tiering t-1: store unreachable",
        "tiering t-0: object damaged",
        "tiering t-0: object damaged",
    ]


def test_a_fetch_of_a_damaged_remote_object_is_logged_once(tmp_path: Path, caplog) -> None:
    """A flipped byte in a tiered segment: the client got KAFKA_STORAGE_ERROR and the
    broker logged nothing (its consumers retried 5,609 times). The read now says why,
    once, whatever the retries."""
    from kompakt.log.segment import LOG_SUFFIX

    store = open_store((tmp_path / "remote").as_uri())
    tier = RemoteTier(
        store, RemoteStorageManager(store), RemoteLogMetadataManager(store), ChunkCache(1 << 20)
    )
    logs = LogManager(tmp_path / "data")
    try:
        logs.create_topic("t", 1, {**CONFIGS, "local.retention.bytes": "1"})
        plog = logs.get_log("t", 0)
        fill(plog, 0, 20)
        tiering = Tiering(logs, tier)
        tiering.copy(plog)
        tiering.apply_retention(plog)  # offset 0 is the tier's alone now
        assert plog.log_start_offset > 0
        seg = tiering.manifest(plog).segments[0]
        key = seg.files[LOG_SUFFIX].key
        data, _v = store.get(key)
        store.put(key, data[:70] + bytes([data[70] ^ 1]) + data[71:])  # in the first batch
        for _ in range(5):
            with pytest.raises(RemoteStorageError):
                tiering.source_for(plog, 0).read(0, 1 << 20)
    finally:
        logs.close()
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(said) == 1 and said[0].startswith("t-0: a fetch at offset 0 from the remote")
