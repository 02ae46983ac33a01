"""The README's embedded-API example runs as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_readme_starts_with_the_two_setup_commands():
    text = README.read_text()
    first_block = re.search(r"```sh\n(.*?)```", text, re.S).group(1).splitlines()
    assert [line.split()[0:2] for line in first_block] == [["make", "serve"], ["make", "test"]]


def test_readme_embedded_api_example_runs(tmp_path):
    (block,) = python_blocks()[:1]
    res = subprocess.run(
        [sys.executable, "-c", block], capture_output=True, text=True, cwd=tmp_path
    )
    assert res.returncode == 0, res.stderr
    assert "0 b'alice' b'London'" in res.stdout


def test_ci_runs_exactly_the_readme_test_command():
    text = README.read_text()
    readme_line = re.search(r"```sh\n(.*?)```", text, re.S).group(1).splitlines()[1]
    ci = (README.parent / ".ci" / "run").read_text().splitlines()
    assert readme_line in ci
