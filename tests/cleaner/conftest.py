"""Fixtures for the cleaner tests; helpers live in ``cleaner_kit.py`` next to this file."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from cleaner_kit import ManualClock  # noqa: E402


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()
