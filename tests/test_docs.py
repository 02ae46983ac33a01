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


ROOT = DOC.parent.parent


def test_every_name_in_design_md_exists():
    """docs/design.md's layer table and Kafka class map name modules that import."""
    text = (ROOT / "docs" / "design.md").read_text()
    names = sorted(set(re.findall(r"`(kompakt(?:\.\w+)+)", text)))
    assert len(names) > 15
    assert [n for n in names if not resolve(n)] == []


def _links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)


def test_every_doc_is_linked_from_the_readme_and_every_link_resolves():
    """The README is the way in: each page of docs/ is one click away, and no relative
    link of the README or a page points at a file that is not there."""
    readme = ROOT / "README.md"
    linked = {(readme.parent / link).resolve() for link in _links(readme)}
    pages = sorted((ROOT / "docs").glob("*.md"))
    assert [p.name for p in pages if p.resolve() not in linked] == []
    broken = [
        f"{page.relative_to(ROOT)} -> {link}"
        for page in [readme, *pages]
        for link in _links(page)
        if not link.startswith(("http://", "https://", "mailto:"))
        and not (page.parent / link).exists()
    ]
    assert broken == []


def test_readme_is_what_a_newcomer_needs_first():
    """The README holds set-up, quick start, the embedded API, the CLI and a short
    "how it works" with a table of contents; reference sections live in docs/."""
    text = (ROOT / "README.md").read_text()
    assert "## Contents" in text.split("## Quick start")[0]
    assert len(text.splitlines()) <= 260
