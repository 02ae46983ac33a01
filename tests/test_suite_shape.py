"""The test suite's own rules (issue 13, point 10), checked on its source text.

Kits import through pytest's ``pythonpath`` (no path edits in test code); a test waits
on evidence (``shared_kit.wait_for``), so every other sleep says in a comment why it is
not a wait (an injected fault, time the scenario needs, a retry back-off); the slow
table in ``conftest.py`` names tests that exist, so ``-m "not slow"`` keeps meaning
"no Spark, no broker kills".
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
PATH_EDIT = re.compile(r"\bsys\.path\.(insert|append|extend)\(|\bsys\.path\s*[+]?=")
SLEEP = re.compile(r"\b(time|asyncio)\.sleep\(")
WAIT_FOR_STEP = "time.sleep(step)"  # shared_kit.poll_until: the pause between two looks
CLOCK_LOOP = re.compile(r"^\s*while\b.*\btime\.(monotonic|time)\(\)")
# loops that run for a duration of scenario time, not until something happened
DURATION_LOOPS = {
    "reliability/fuzz_kit.py",  # run_fuzz sends requests for the seconds it was given
    "broker/test_groups_restart.py",  # poll_for keeps members polling for a while
    "reliability/fault_campaign.py",  # reads through a fault's window
    "reliability/test_read_io_errors.py",  # reads while the disk fails reads
}


def source_lines() -> list[tuple[str, int, str]]:
    return [
        (str(p.relative_to(TESTS)), n, line)
        for p in sorted(TESTS.rglob("*.py"))
        for n, line in enumerate(p.read_text().splitlines(), 1)
    ]


def test_no_test_file_edits_sys_path():
    offenders = [f"{f}:{n}" for f, n, line in source_lines() if PATH_EDIT.search(line)]
    assert offenders == [], "list the folder in pyproject's pytest pythonpath instead"


def test_every_sleep_says_why_it_is_not_a_wait():
    offenders = [
        f"{f}:{n}: {line.strip()}"
        for f, n, line in source_lines()
        if SLEEP.search(line)
        and "#" not in line
        and not (f == "shared_kit.py" and line.strip() == WAIT_FOR_STEP)
    ]
    assert offenders == [], (
        "wait on evidence with shared_kit.wait_for (or a manual clock); a sleep that is "
        "an injected fault, scenario time or a back-off says so in a comment"
    )


def test_slow_table_names_existing_tests(request: pytest.FixtureRequest):
    conftest = request.config.pluginmanager.get_plugin(str(TESTS / "conftest.py"))
    for entry in conftest.SLOW_TESTS:
        path, _, name = entry.partition("::")
        target = TESTS / path
        assert target.exists(), entry
        if name:
            assert re.search(rf"^def {re.escape(name)}\(", target.read_text(), re.M), entry


def test_every_deadline_loop_is_the_kits():
    """A hand-written ``while time.monotonic() < deadline`` loop is a wait the kit
    already has (``poll_until``, ``wait_for``, ``consume_until``), and the hand-written
    ones drifted: several returned a partial read on timeout instead of failing."""
    offenders = [
        f"{f}:{n}: {line.strip()}"
        for f, n, line in source_lines()
        if CLOCK_LOOP.search(line) and f != "shared_kit.py" and f not in DURATION_LOOPS
    ]
    assert offenders == [], "use shared_kit.poll_until / wait_for / consume_until"
