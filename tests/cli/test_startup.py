"""``kompakt --help`` starts without the heavy libraries.

numba (the record kernels), pyarrow and pyspark (the Spark engine and export) and the
Kafka client take over a second to import; a command that only prints its help, or a
verb that does not need them, must not pay for them. The verbs import them when they
run (``kompakt.cli.backend`` and the verb modules import no log or record layer at
module level). Checked through ``-X importtime`` in a fresh interpreter, which lists
every module the process imported: a behavioural check, not a timing one.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("numba", "numpy", "pyarrow", "pyspark", "confluent_kafka")


def imported_modules(*args: str) -> tuple[subprocess.CompletedProcess, set[str]]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "kompakt.cli.main", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    names = {
        line.rsplit("|", 1)[1].strip()
        for line in proc.stderr.splitlines()
        if line.startswith("import time:") and line.count("|") == 2
    }
    return proc, names


@pytest.mark.parametrize(
    "args", [["--help"], ["topic", "--help"], ["consume", "--help"], ["serve", "--help"]]
)
def test_help_imports_no_heavy_library(args: list[str]):
    proc, names = imported_modules(*args)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Usage" in proc.stdout
    assert "kompakt.cli.common" in names  # the importtime listing was read
    heavy = sorted(n for n in names if n.split(".")[0] in HEAVY)
    assert heavy == [], heavy
