"""The in-process engine's remote clean against an S3 endpoint (moto's server, see
conftest.py for what it does not prove): the cleaned segments go up as new objects
through the real S3 client, one conditional put commits them, and the replaced objects
go only after ``file.delete.delay.ms``."""

from __future__ import annotations

from pathlib import Path

from test_remote_clean import CONFIGS, TOPIC, feed, manifest, remote_state, tiered

from kompakt.remote.layout import segments_folder


def test_remote_clean_on_s3(tmp_path: Path, s3_url: str, s3_endpoint: str):
    logs, plog, tier, cleaner, clock, want = tiered(tmp_path, feed, s3_url, s3_endpoint)
    try:
        before = manifest(tier)
        result = cleaner.clean(before, CONFIGS, delete_delay_ms=1000)
        m = result.manifest.value
        assert manifest(tier).value == m
        assert m.clean_point == before.value.end_offset and m.size < before.value.size
        assert remote_state(tier, m) == want
        present = {o.key for o in tier.store.list(segments_folder(TOPIC, 0))}
        assert before.value.keys() | m.keys() <= present  # old readers still find theirs
        clock.advance(1000)
        cleaner.delete_due()
        assert {o.key for o in tier.store.list(segments_folder(TOPIC, 0))} == m.keys()
        assert remote_state(tier, m) == want
    finally:
        logs.close()
