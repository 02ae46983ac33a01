"""The log cleaner: Kafka's compaction rules over kompakt's Kafka-format logs.

``Cleaner``, ``CleanStats`` and ``LocalEngine`` are loaded on first use (PEP 562), so
importing a light module of the package (:mod:`kompakt.cleaner.config`, which the
broker's config table reads its defaults from) does not load numba and numpy.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "Cleaner": "kompakt.cleaner.cleaner",
    "CleanStats": "kompakt.cleaner.stats",
    "LocalEngine": "kompakt.cleaner.local_engine",
}
__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
