"""librdkafka's own integration tests, a core subset, against a live kompakt broker.

`scripts/librdkafka_tests.py` fetches Debian bookworm's librdkafka source package, builds
its `tests/` and runs them against `kompakt serve` with the outcomes listed in
`scripts/librdkafka-expected.txt`. `make test` runs the core subset below (producer,
consumer, groups, offsets, admin, headers, record errors: about two minutes with four
test processes); the whole list is `.venv/bin/python scripts/librdkafka_tests.py`.

Fetching and building need Debian's package registry and apt: when that is impossible
the test is skipped and says why; once built, a failing librdkafka test fails here.

The build (minutes on 2 busy cores) is not the test's: ``make test-deps`` does it
(scripts/ensure-librdkafka-tests.sh), and the session fixture below only finds its stamp,
or builds with a budget of its own outside the test's timeout. The script runs in a
session of its own, and every process of that session (the build's make and compilers,
the brokers, the test-runners) is killed when it ends, times out or is interrupted.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from shared_kit import (
    finish_session,
    load_script,
    run_in_session,
    session_pids,
    start_session,
    wait_for,
)

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "librdkafka_tests.py"

# Tests that pass against kompakt and cover what clients do every day; all listed `pass`
# in scripts/librdkafka-expected.txt. 0011 checks per-record produce errors (KIP-467);
# 0129 a transactional producer whose aborted records a consumer must not see.
# 0083 (event callback count) is left to the whole list: it is timing-sensitive under load.
CORE = (
    "0001,0002,0011,0012,0013,0014,0015,0017,0019,0020,0021,0022,0026,0029,0030,0031,"
    "0034,0036,0038,0039,0040,0041,0042,0044,0048,0050,0051,0054,0056,0057,0059,0060,"
    "0063,0064,0065,0069,0070,0073,0082,0084,0085,0086,0129"
)


BUILD_BUDGET = 3600  # s: a fresh fetch and build on 2 loaded cores, beside other tests
RUN_BUDGET = 1200  # s: the core subset; pytest's own limit for the test is above it


def run_script(*args: str, timeout: float, **env: str) -> subprocess.CompletedProcess:
    return run_in_session(
        [sys.executable, str(SCRIPT), *args],
        timeout=timeout,
        cwd=ROOT,
        env=dict(os.environ, PYTHONUNBUFFERED="1", **env),
    )


@pytest.fixture(scope="session")
def librdkafka_tests_built() -> None:
    """librdkafka's test-runner, built once outside any test's timeout (func_only below)."""
    prep = run_script("--prepare-only", timeout=BUILD_BUDGET)
    if prep.returncode != 0:
        tail = " ".join((prep.stderr or prep.stdout).splitlines()[-3:])
        pytest.skip(f"librdkafka's tests could not be fetched or built here: {tail}")


@pytest.mark.timeout(RUN_BUDGET + 120, func_only=True)
def test_librdkafka_core_integration_tests_pass_against_kompakt(librdkafka_tests_built, tmp_path):
    res = run_script(
        "--tests",
        CORE,
        "--jobs",
        "4",
        "--workdir",
        str(tmp_path / "rdk"),
        # none of the core tests compacts: no JVM beside four test processes on 2 cores
        "--override",
        "kompakt.spark.start=lazy",
        timeout=RUN_BUDGET,
    )
    summary = "\n".join(res.stdout.splitlines()[-60:])
    assert res.returncode == 0, f"{summary}\n{res.stderr[-3000:]}"
    assert "failed 0" in res.stdout, summary


def fake_build(cache: Path) -> None:
    """A cache the script takes as built: its stamp and a test table of one test, whose
    ``test-runner`` starts a child and both wait (a test that hangs)."""
    script = load_script("librdkafka_tests", SCRIPT)
    tests = cache / f"librdkafka-{script.UPSTREAM_VERSION}" / "tests"
    tests.mkdir(parents=True)
    (tests / "test.c").write_text("struct test tests[] = {\n_TEST(0001_multiobj, 0),\n{NULL}};\n")
    runner = tests / "test-runner"
    runner.write_text(
        '#!/bin/sh\nsleep 600 &\necho $! > "$RUNNER_PIDS"\necho $$ >> "$RUNNER_PIDS"\nwait\n'
    )
    runner.chmod(0o755)
    (cache / "build.ok").write_text(script.build_stamp())


def test_a_timed_out_suite_run_leaves_no_process_of_its_session(tmp_path):
    """The last CI run's orphan: the script killed by a timeout left its `kompakt serve`
    running with PPID 1. Now the timeout kills the script's whole session: broker,
    test-runner and the runner's child too."""
    fake_build(tmp_path / "cache")
    pids = tmp_path / "runner.pids"
    expected = tmp_path / "expected.txt"
    expected.write_text("0001 pass\n")
    proc = start_session(
        [sys.executable, str(SCRIPT), "--tests", "0001", "--expected", str(expected),
         "--workdir", str(tmp_path / "rdk"), "--override", "kompakt.spark.start=lazy"],
        cwd=ROOT,
        env=dict(os.environ, KOMPAKT_RDK_CACHE=str(tmp_path / "cache"), RUNNER_PIDS=str(pids)),
    )  # fmt: skip
    try:
        wait_for(lambda: len(pids.read_text().split()) == 2 if pids.exists() else False,
                 "the test-runner and its child to start", timeout=120)  # fmt: skip
        ours = session_pids(proc.pid)
        serve = [p for p in ours if b"serve" in Path(f"/proc/{p}/cmdline").read_bytes()]
        assert serve and all(int(p) in ours for p in pids.read_text().split()), ours
    except BaseException:
        with contextlib.suppress(subprocess.TimeoutExpired):
            finish_session(proc, timeout=0)
        raise
    with pytest.raises(subprocess.TimeoutExpired):
        finish_session(proc, timeout=0.1)
    assert session_pids(proc.pid) == []


def test_pytest_timeout_kills_the_session_of_a_command_it_interrupts(tmp_path):
    """pytest-timeout's signal method (pyproject's ``timeout_method``) raises in the test
    while it waits for the command; the helper then kills the command's session. With
    the thread method pytest would exit at once and leave the processes running."""
    started = tmp_path / "sid"
    inner = tmp_path / "test_inner.py"
    inner.write_text(
        "import sys\nimport pytest\nfrom shared_kit import run_in_session\n\n"
        "@pytest.mark.timeout(5)\ndef test_hangs():\n"
        f"    run_in_session(['sh', '-c', 'sleep 600 & echo $$ > {started}; wait'], timeout=600)\n"
    )
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(ROOT), str(inner)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert "Timeout" in res.stdout and res.returncode == 1, res.stdout[-2000:]
    sid = int(started.read_text())
    assert session_pids(sid) == []


def test_only_0086s_partial_first_batch_counts_as_its_client_race():
    """0086 is rerun only when the purge left 1-9 messages in flight (the client's batch).

    The first line is what a CI run printed; the others are failures a broker could cause
    (nothing in flight, everything, a wrong delivery error alone) and are not rerun.
    """
    race = load_script("librdkafka_tests", SCRIPT).CLIENT_RACES["0086"]
    seen = 'Test assertion failed: "waitmsgs->cnt == exp_remain": remote:272: expected 10 messages remaining, not 1'  # noqa: E501
    assert race.evidence.search(seen)
    for other in (
        "remote:272: expected 10 messages remaining, not 0",
        "remote:272: expected 10 messages remaining, not 20",
        "remote:277: expected 0 messages remaining, not 10",
        "Expected message #1 to fail with Local: Purged in flight, not Local: Purged in queue",
    ):
        assert not race.evidence.search(other), other
