"""Every field that two threads touch names its owner where it is declared.

docs/design.md's "Threads, and who owns what" lists the threads of a broker; the
classes below are the ones their fields cross (the event loop, the cleaner and periodic
threads, the admin listener's thread, asyncio's executor). A field of one of them is
declared in ``__init__`` with a comment that says who may touch it: ``owned by`` a
thread, ``guarded by`` a lock, or ``immutable``/``set once`` after construction, or the
type is itself ``thread-safe``. A field without one is how the tombstone counter's dict
came to be changed outside its lock (issue 27).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import textwrap

import pytest

QUOTES = chr(34) * 3
OWNERSHIP = ("owned by", "guarded by", "guards", "immutable", "set once", "thread-safe")

SHARED = [
    "kompakt.log.partition_log.PartitionLog",
    "kompakt.log.manager.LogManager",
    "kompakt.cleaner.manager.LogCleanerManager",
    "kompakt.cleaner.status.CleaningStatus",
    "kompakt.broker.background.PeriodicThread",
    "kompakt.broker.coordinator.coordinator.GroupCoordinator",
]


def _declaration(lines: list[str], node: ast.stmt) -> list[str]:
    """The assignment's lines, the comment lines right above it and an attribute
    docstring right below it."""
    start = node.lineno - 1
    while start > 0 and lines[start - 1].strip().startswith("#"):
        start -= 1
    end = node.end_lineno or node.lineno
    if end < len(lines) and lines[end].strip().startswith(QUOTES):
        end += 1
        while end < len(lines) and QUOTES not in lines[end - 1].strip()[3:]:
            end += 1
    return lines[start:end]


def _fields_without_owner(dotted: str) -> list[str]:
    module, _, name = dotted.rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    src, first = inspect.getsourcelines(cls.__init__)
    lines = textwrap.dedent("".join(src)).splitlines()
    tree = ast.parse("\n".join(lines))
    missing = []
    for node in ast.walk(tree):
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else ([node.target] if isinstance(node, ast.AnnAssign) else [])
        )
        for t in targets:
            if (
                isinstance(t, ast.Attribute)
                and isinstance(t.value, ast.Name)
                and t.value.id == "self"
            ):
                near = " ".join(_declaration(lines, node)).lower()
                if not any(word in near for word in OWNERSHIP):
                    missing.append(f"{dotted}.{t.attr} (line {first + node.lineno - 1})")
    return missing


@pytest.mark.parametrize("dotted", SHARED)
def test_every_shared_field_names_its_owner(dotted: str) -> None:
    assert _fields_without_owner(dotted) == []
