"""Assertions shared by the offline and broker CLI tests."""

from __future__ import annotations

import sys
from pathlib import Path


def kompakt_cmd() -> list[str]:
    """The installed ``kompakt`` command (beside this Python), else the module: for the
    tests that need the CLI in a process of its own (exit codes, signals, crashes)."""
    script = Path(sys.executable).with_name("kompakt")
    return [str(script)] if script.exists() else [sys.executable, "-m", "kompakt.cli.main"]


def assert_one_line_error(result, *fragments: str) -> None:
    """The CLI's error contract: exit 1, one ``error: ...`` line on stderr, no traceback."""
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), lines
    for f in fragments:
        assert f in lines[0], lines[0]
    assert "Traceback" not in result.output
