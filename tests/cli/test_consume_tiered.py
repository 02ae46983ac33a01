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


def test_offline_export_of_a_tiered_topic_warns_too(tmp_path: Path, monkeypatch) -> None:
    """``export --data-dir`` of a tiered topic printed "Exported 0 key(s)" and exit 0
    while the tier held 60 keys (an outside probe): it now says what it reads."""
    import kompakt.pipeline

    class Stop(Exception):
        pass

    def no_spark(*_a, **_k):
        raise Stop  # the warning comes before Spark starts

    monkeypatch.setattr(kompakt.pipeline, "session", no_spark)
    data = tmp_path / "data"
    with LogManager(data) as logs:
        logs.create_topic("tiered", 1, {"remote.storage.enable": "true"})
    r = runner.invoke(app, ["export", "tiered", "-d", str(data), "-o", str(tmp_path / "out")])
    assert isinstance(r.exception, Stop)
    assert "topic 'tiered' is tiered" in r.stderr and "export reads only" in r.stderr
