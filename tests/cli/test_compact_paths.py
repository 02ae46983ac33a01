"""``kompakt compact`` offline (``--data-dir``) and through a broker: one implementation
(``Cleaner.compact_now``), one JSON document, one-line errors.

Kafka rule: a partition the cleaner cannot clean (a corrupt batch) is marked
uncleanable and the cleaner goes on with the others (``LogCleanerManager
.markPartitionUncleanable``); the CLI reports it with the file and byte position after
doing the rest, and exits 1.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_kit import assert_one_line_error
from compact_kit import fold, leftovers, make_data_dir, snapshot
from shared_kit import SPARK_TEST_CONFIG
from typer.testing import CliRunner

from kompakt.broker.app import BrokerThread, start_test_broker
from kompakt.cli.main import app

runner = CliRunner()
NOT_DETERMINISTIC = {"started_ms", "duration_s", "mb_per_s", "file", "reason"}


def run(*args: str | Path):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return make_data_dir(tmp_path / "data")


def test_pass_reports_corrupt_partition_after_cleaning_every_other(data: Path):
    """Was: 'error: CRC mismatch in batch at offset 0' and nothing cleaned."""
    users1, orders = fold(data, "users", 1), fold(data, "orders", 0)
    r = run("compact", "--data-dir", data, "--engine", "local")
    assert r.exit_code == 1, r.output
    [line] = r.stderr.strip().splitlines()
    bad = data / "users-0" / "00000000000000000000.log"
    assert line.startswith("error: users-0 is uncleanable: corrupt batch in ")
    assert f"{bad} at byte position 0" in line and "CRC mismatch" in line
    rows = {ln.split()[0]: ln.split()[1] for ln in r.stdout.splitlines()[1:]}
    assert rows == {"users-1": "cleaned", "orders-0": "cleaned"}
    assert fold(data, "users", 1) == users1 and fold(data, "orders", 0) == orders
    assert not leftovers(data)


def test_pass_json_has_every_partition_and_still_exits_1(data: Path):
    r = run("compact", "--data-dir", data, "--engine", "local", "--json")
    assert r.exit_code == 1
    doc = json.loads(r.stdout)
    got = {(e["topic"], e["partition"]): e["status"] for e in doc["results"]}
    assert got == {("users", 0): "uncleanable", ("users", 1): "cleaned", ("orders", 0): "cleaned"}
    assert len(r.stderr.strip().splitlines()) == 1


def test_named_corrupt_partition_is_one_line_and_touches_nothing(data: Path):
    before = snapshot(data)
    r = run("compact", "users:0", "--data-dir", data, "--engine", "local")
    assert_one_line_error(r, "users-0 is uncleanable", "00000000000000000000.log", "position 0")
    assert r.stdout == ""
    assert snapshot(data) == before


@pytest.mark.parametrize("where", ["offline", "online"])
def test_unknown_engine_is_one_line_before_anything_is_done(tmp_path: Path, where: str):
    """Was: online, --engine was ignored and 'bogus' exited 0."""
    data = make_data_dir(tmp_path / "data", corrupt=False)
    before = snapshot(data)
    lock_before = (data / ".lock").exists()
    args = ["--data-dir", data] if where == "offline" else ["--admin-url", "http://127.0.0.1:9"]
    r = run("compact", "users", *args, "--engine", "bogus")
    assert_one_line_error(r, "unknown engine 'bogus'", "spark, local")
    assert snapshot(data) == before and (data / ".lock").exists() == lock_before


# -- the same data offline and through a broker ------------------------------------------------


@pytest.fixture(scope="module")
def twins(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, BrokerThread]]:
    """Two copies of one data dir: one for the CLI offline, one served by a broker whose
    own engine is spark (it must not be used: the CLI asks for local) and whose
    background cleaner is off (only the request cleans)."""
    root = tmp_path_factory.mktemp("twins")
    offline = make_data_dir(root / "offline")
    online = root / "online"
    shutil.copytree(offline, online)
    # the suite's Spark settings (see SPARK_TEST_CONFIG): with the defaults, local[*],
    # test_session's check of local[2] failed whenever this module ran first
    broker = start_test_broker(
        str(online),
        **{"kompakt.cleaner.engine": "spark", "log.cleaner.enable": "false"},
        **SPARK_TEST_CONFIG,
    )
    try:
        yield offline, broker
    finally:
        broker.stop()


def shape(value: Any, path: str = "") -> Any:
    """Keys and types, recursively (ints and floats both 'number')."""
    if isinstance(value, dict):
        return {k: shape(v, f"{path}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [shape(v, path) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return type(value).__name__
    return "number"


def figures(value: Any) -> Any:
    """The document without what differs run to run (times, paths)."""
    if isinstance(value, dict):
        return {k: figures(v) for k, v in value.items() if k not in NOT_DETERMINISTIC}
    if isinstance(value, list):
        return [figures(v) for v in value]
    return value


@pytest.mark.parametrize("target", ["users", "orders:0"])
def test_offline_and_online_json_are_one_document(twins, target: str):
    """MUST-SHOW: `kompakt compact --json` offline and through the admin endpoint print
    the same document (same keys and types, same figures) for the same data."""
    offline, broker = twins
    r_off = run("compact", target, "--data-dir", offline, "--engine", "local", "--json")
    url = f"http://127.0.0.1:{broker.admin_port}"
    r_on = run("compact", target, "--admin-url", url, "--engine", "local", "--json")
    assert r_off.exit_code == r_on.exit_code, (r_off.output, r_on.output)
    assert r_off.stderr == r_on.stderr.replace(str(broker.logs.dir), str(offline))
    off, on = json.loads(r_off.stdout), json.loads(r_on.stdout)
    assert shape(off) == shape(on)
    assert figures(off) == figures(on)
    assert on["engine"] == "local"  # the broker ran the engine asked for, not its own
    statuses = {e["status"] for e in on["results"]}
    if target == "users":
        assert statuses == {"uncleanable", "cleaned", "skipped"}
        [bad] = [e for e in on["results"] if e["status"] == "uncleanable"]
        assert bad["file"] == str(broker.logs.dir / "users-0" / "00000000000000000000.log")
        assert bad["position"] == 0 and r_on.exit_code == 1
    else:
        assert statuses == {"cleaned"} and r_on.exit_code == 0


def test_online_unknown_engine_and_missing_topic_are_one_line(twins):
    _offline, broker = twins
    url = f"http://127.0.0.1:{broker.admin_port}"
    assert_one_line_error(run("compact", "users", "--admin-url", url, "--engine", "nope"), "nope")
    assert_one_line_error(run("compact", "--admin-url", url), "needs a TOPIC")
    assert_one_line_error(run("compact", "nosuch", "--admin-url", url), "nosuch")
    assert_one_line_error(run("compact", "events", "--admin-url", url), "cleanup.policy=delete")
