"""Fixtures every test package shares; ``tests/`` is put on the path for ``manual_clock``.

Hypothesis runs derandomized by default, so ``make test`` (and CI) sees the same
examples every run; ``HYPOTHESIS_PROFILE=explore`` draws fresh random examples
each run when hunting for bugs.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import settings

settings.register_profile("default", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

sys.path.insert(0, str(Path(__file__).parent))

from manual_clock import ManualClock  # noqa: E402


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()
