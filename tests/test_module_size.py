"""Modules fit a screen's worth of concerns: no module of the package is over 600 lines.

A module that grew past that held several concerns (issue 27 found nine, each with two
or three: a log manager that was also the topic store and the log-dir table, an
authorizer that was every API family's policy); split along the concern, as Kafka's
storage module splits ``LocalLog`` from ``UnifiedLog``.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "kompakt"
LIMIT = 600


def test_no_module_is_over_600_lines():
    sizes = {
        str(p.relative_to(PACKAGE.parent)): len(p.read_text().splitlines())
        for p in PACKAGE.rglob("*.py")
    }
    assert sizes, "the package has modules"
    assert {m: n for m, n in sorted(sizes.items()) if n > LIMIT} == {}
