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
WAIT_FOR_STEP = "time.sleep(STEP)"  # shared_kit.wait_for: the pause between two looks


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
        if SLEEP.search(line) and "#" not in line and line.strip() != WAIT_FOR_STEP
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
