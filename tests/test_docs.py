"""docs/internals.md names only what exists: every dotted ``kompakt.…`` name in it
imports as a module or resolves as an attribute of one (the page once named modules
that had been renamed)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "internals.md"


def resolve(name: str) -> bool:
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def test_every_name_in_internals_md_exists():
    names = sorted(set(re.findall(r"`(kompakt(?:\.\w+)+)", DOC.read_text())))
    assert len(names) > 40  # the page is a map of the tree, not a few examples
    missing = [n for n in names if not resolve(n)]
    assert missing == []
