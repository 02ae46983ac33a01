"""The engine registry (kompakt/engines.py): engines by name, configured from the
broker's settings, so the cleaner below it never imports the pipeline."""

from __future__ import annotations

import pytest

from kompakt.broker.app import Broker
from kompakt.broker.config import BrokerConfig
from kompakt.cleaner.local_engine import LocalEngine
from kompakt.engines import build_engine, check_engine
from kompakt.errors import InvalidConfigError


def test_unknown_engine_is_one_clear_error():
    with pytest.raises(InvalidConfigError, match="unknown engine 'sprak'"):
        check_engine("sprak")


def test_local_engine_honours_the_offset_map_load_factor():
    """Kafka's ``log.cleaner.io.buffer.load.factor``: the offset map takes that share of
    its slots before a pass stops (``LogCleaner``: slots x dupBufferLoadFactor)."""
    settings = {"log.cleaner.dedupe.buffer.size": str(1 << 20)}
    full = build_engine("local", {**settings, "log.cleaner.io.buffer.load.factor": "0.9"})
    half = build_engine("local", {**settings, "log.cleaner.io.buffer.load.factor": "0.45"})
    assert isinstance(full, LocalEngine) and isinstance(half, LocalEngine)
    assert full.map.capacity == half.map.capacity
    assert half.map.max_entries == pytest.approx(full.map.max_entries / 2, abs=1)


def test_broker_hands_the_load_factor_to_its_cleaner():
    config = BrokerConfig.from_mapping({"log.cleaner.io.buffer.load.factor": "0.5"})
    settings = Broker(config)._cleaner_settings()
    assert float(settings["log.cleaner.io.buffer.load.factor"]) == 0.5


def test_engine_auto_is_a_broker_setting_and_a_cli_choice(tmp_path):
    """``kompakt.cleaner.engine=auto`` passes the broker's config check, and ``kompakt
    compact --engine auto`` offline cleans a small log in process; the JSON names the
    engine that ran (the request's engine stays ``auto``)."""
    import json

    from typer.testing import CliRunner

    from kompakt.cli.main import app
    from kompakt.engines import AutoEngine, build_engine
    from kompakt.log.manager import LogManager
    from kompakt.record.encode import build_simple_batch

    config = BrokerConfig.from_mapping({"kompakt.cleaner.engine": "auto"})
    settings = Broker(config)._cleaner_settings()
    assert settings["kompakt.cleaner.engine"] == "auto"
    assert isinstance(build_engine(settings["kompakt.cleaner.engine"], settings), AutoEngine)

    data = tmp_path / "data"
    with LogManager(data) as m:
        m.create_topic("users", 1, {"cleanup.policy": "compact"})
        plog = m.get_log("users", 0)
        plog.append(build_simple_batch([(b"k", b"1"), (b"k", b"2")], timestamp=plog.clock()))
        plog.roll()
    r = CliRunner().invoke(
        app, ["compact", "users", "--data-dir", str(data), "--engine", "auto", "--json"]
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["engine"] == "auto"
    assert [e["stats"]["engine"] for e in doc["results"]] == ["local"]
