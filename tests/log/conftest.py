from __future__ import annotations

import pytest

from kompakt.log.manager import LogManager


@pytest.fixture
def manager(tmp_path, clock):
    m = LogManager(tmp_path / "data", clock=clock)
    yield m
    m.close()
