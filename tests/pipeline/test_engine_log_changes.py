"""The Spark engine and a log that changes under its clean.

Kafka lets time retention and the log cleaner run side by side on a ``compact,delete``
topic (``LocalLog.replaceSegments`` never brings back a segment retention removed; a
clean whose log changed under it is not a corruption). Here retention deletes the
segments a Spark task is about to open (the files are renamed ``.deleted`` at once):
the clean is abandoned, not marked uncleanable (was: "PythonException ...
FileNotFoundError" / "AnalysisException ... Beginning offset ... is after the ending
offset"), nothing is swapped or left behind, and the next clean succeeds.

Runs in a fresh process (retention_race_job.py): the hold hook's environment variable
must be set before the SparkContext and its Python workers start.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

JOB = Path(__file__).with_name("retention_race_job.py")


def test_retention_during_a_spark_clean_abandons_it_and_the_next_clean_works(tmp_path):
    hold = tmp_path / "hold"
    hold.mkdir()
    proc = subprocess.run(
        [sys.executable, str(JOB), str(tmp_path / "data"), str(hold)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    out = json.loads(lines[-1][len("RESULT ") :])
    assert "error" not in out, out
    assert out["deleted"] == 3
    first = out["first"]
    assert first["status"] == "skipped", first
    assert "changed during the clean" in first["reason"], first["reason"]
    assert out["uncleanable"] is None
    assert out["start_after"] == out["start"]  # not moved back
    assert out["leftovers"] == []
    assert out["checkpoint"] is None  # not moved by the abandoned clean
    assert out["second"] == "cleaned"
    assert out["start_final"] == out["start"]
    assert out["same_data"] is True
