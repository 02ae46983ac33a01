"""Snapshots of a file tree, to prove a command left what it was not aimed at alone."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def snapshot(root: Path, *, mtimes: bool = True) -> dict[str, tuple]:
    """Every path under ``root`` (itself included) with its kind, size, content hash and,
    with ``mtimes``, its modification time (a rewrite with the same bytes is a change)."""
    out: dict[str, tuple] = {}
    if not os.path.lexists(root):
        return out
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [".", *dirnames, *filenames]:
            path = Path(dirpath) / name if name != "." else Path(dirpath)
            st = path.lstat()
            rel = str(path.relative_to(root))
            if path.is_symlink():
                out[rel] = ("link", os.readlink(path))
            elif path.is_dir():
                out[rel] = ("dir", st.st_mtime_ns if mtimes else None)
            else:
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                out[rel] = ("file", st.st_size, digest, st.st_mtime_ns if mtimes else None)
    return out


def changed(before: dict[str, tuple], after: dict[str, tuple]) -> set[str]:
    """Paths added, removed or different between two snapshots."""
    return {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}
