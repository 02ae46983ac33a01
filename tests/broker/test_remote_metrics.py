"""The remote tier on ``/metrics`` of a real broker with the file:// tier: Kafka's
``RemoteCopyBytesPerSec`` / ``RemoteFetchBytesPerSec`` as ``kompakt_remote_*`` counters,
the store requests by kind, the chunk cache's hits and misses, and KIP-963's
``RemoteCopyLagBytes`` / ``RemoteCopyLagSegments`` per partition."""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path

from shared_kit import wait_for

from kompakt.broker.tiering import tiering_of
from kompakt.remote.layout import SEGMENTS
from tests.broker.test_tiered import TIERED, produce, read_all, start, tiered_down
from tests.remote.broker_kit import create_topic

SAMPLE = re.compile(r"^(kompakt_remote_[a-z_]+)(\{[^}]*\})? (\S+)$")


def remote_samples(admin_port: int) -> dict[str, float]:
    """Every ``kompakt_remote_*`` sample, keyed by name and labels as printed."""
    with urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/metrics", timeout=30) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        m = SAMPLE.match(line)
        if m:
            out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out


def test_remote_counters_move_with_tiering_and_a_remote_fetch(tmp_path: Path) -> None:
    """Tiering uploads (copy bytes, put requests, the remote log's size, lag back to 0);
    a consumer from offset 0 reads below the local log start (fetch bytes, get requests,
    cache misses); a second read of the same range is answered by the cache (hits)."""
    b = start(tmp_path / "data")
    try:
        before = remote_samples(b.admin_port)
        assert before["kompakt_remote_copy_bytes_total"] == 0
        assert before["kompakt_remote_fetch_bytes_total"] == 0
        assert before['kompakt_remote_requests_total{kind="put"}'] == 0
        create_topic(b, "tiered", TIERED)
        produce(b.bootstrap, ["tiered"])
        local_start = tiered_down(b, "tiered")
        assert local_start > 0
        m = tiering_of(b.broker.state).manifest(b.logs.get_log("tiered", 0))
        assert m is not None and m.segments
        up = remote_samples(b.admin_port)
        tp = '{partition="0",topic="tiered"}'
        assert up["kompakt_remote_copy_bytes_total"] >= m.size > 0
        assert up['kompakt_remote_requests_total{kind="put"}'] >= len(m.segments)
        assert up[f"kompakt_remote_log_size_bytes{tp}"] == m.size
        assert up[f"kompakt_remote_log_segments{tp}"] == len(m.segments)
        assert up[f"kompakt_remote_copy_lag_segments{tp}"] == 0
        assert up[f"kompakt_remote_copy_lag_bytes{tp}"] == 0

        assert len(read_all(b.bootstrap, "tiered")) > local_start
        cold = remote_samples(b.admin_port)
        assert cold["kompakt_remote_fetch_bytes_total"] > 0
        assert cold['kompakt_remote_requests_total{kind="get"}'] > 0
        assert cold["kompakt_remote_cache_misses_total"] > 0

        read_all(b.bootstrap, "tiered")
        warm = remote_samples(b.admin_port)
        assert warm["kompakt_remote_cache_hits_total"] > cold["kompakt_remote_cache_hits_total"]
        assert 0 < warm["kompakt_remote_cache_hit_ratio"] <= 1
        assert warm["kompakt_remote_cache_bytes"] > 0
    finally:
        b.stop()


def test_copy_lag_counts_the_rolled_segments_the_tier_did_not_take(tmp_path: Path) -> None:
    """With segment uploads failing (the partition's segments folder is a file; its
    manifest reads as absent), every rolled segment is lag (KIP-963's
    RemoteCopyLagSegments, RemoteCopyLagBytes); the active one is not."""
    remote = tmp_path / "remote"
    partition_folder = remote / "topics" / "t" / "0"
    partition_folder.mkdir(parents=True)
    (partition_folder / SEGMENTS).write_bytes(b"not a folder")
    b = start(tmp_path / "data", **{"kompakt.remote.storage.url": remote.as_uri()})
    try:
        create_topic(b, "t", TIERED)
        produce(b.bootstrap, ["t"], 300)
        plog = b.logs.get_log("t", 0)
        tp = '{partition="0",topic="t"}'

        def lag_seen() -> bool:
            s = remote_samples(b.admin_port)
            rolled = plog.segments_snapshot()[:-1]
            return s.get(f"kompakt_remote_copy_lag_segments{tp}") == len(rolled) > 0

        wait_for(lag_seen, "every rolled segment reported as copy lag")
        rolled = plog.segments_snapshot()[:-1]
        s = remote_samples(b.admin_port)
        assert s[f"kompakt_remote_copy_lag_bytes{tp}"] == sum(x.size for x in rolled)
        assert s["kompakt_remote_copy_bytes_total"] == 0
    finally:
        b.stop()


def test_a_remote_clean_moves_the_delete_counters(tmp_path: Path) -> None:
    """A clean of the remote range replaces segments; once ``file.delete.delay.ms``
    (0 here) has passed their objects are deleted, and the delete bytes and requests
    count them (Kafka's RemoteDeleteRequestsPerSec, as objects)."""
    b = start(tmp_path / "data", **{"log.cleaner.enable": "true"})
    try:
        create_topic(
            b,
            "tiered",
            {**TIERED, "min.cleanable.dirty.ratio": "0.01", "file.delete.delay.ms": "0"},
        )
        produce(b.bootstrap, ["tiered"])
        plog = b.logs.get_log("tiered", 0)
        tiering = tiering_of(b.broker.state)

        def cleaned_and_deleted() -> bool:
            m = tiering.manifest(plog)
            s = remote_samples(b.admin_port)
            return (
                m is not None and m.clean_point > 0 and s["kompakt_remote_delete_bytes_total"] > 0
            )

        wait_for(cleaned_and_deleted, "a remote clean and the deletion of what it replaced")
        s = remote_samples(b.admin_port)
        assert s['kompakt_remote_requests_total{kind="delete"}'] > 0
    finally:
        b.stop()
