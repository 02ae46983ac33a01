"""``kompakt consume --data-dir`` of a tiered topic: offline only the local segments
can be read (the tier's objects are the broker's to fetch), so the verb says so
instead of printing a part of the log as if it were all of it."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from kompakt.cli.main import app
from kompakt.log.manager import LogManager

runner = CliRunner()


def test_offline_consume_of_a_tiered_topic_warns_that_the_tier_is_not_read(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    with LogManager(data) as logs:
        logs.create_topic("tiered", 1, {"remote.storage.enable": "true"})
        logs.create_topic("plain", 1, {})
    r = runner.invoke(app, ["consume", "tiered", "--data-dir", str(data)])
    assert r.exit_code == 0, r.output
    assert "topic 'tiered' is tiered" in r.stderr and "--bootstrap-server" in r.stderr
    r = runner.invoke(app, ["consume", "plain", "--data-dir", str(data)])
    assert r.exit_code == 0 and "tiered" not in r.stderr
