"""Pieces shared by the CLI verbs: options, ``key=value`` parsing, output helpers."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from .backend import Backend, CliError, OfflineBackend

_stderr = Console(stderr=True, highlight=False, soft_wrap=True)


def print_error(message: str) -> None:
    """One line on stderr: ``error: <message>`` (red on a terminal)."""
    message = " ".join(str(message).split()) or "unknown error"
    _stderr.print(f"[bold red]error:[/] [red]{escape(message)}[/]")


def describe_exception(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        where = f": '{exc.filename}'" if exc.filename else ""
        return f"{exc.strerror}{where}"
    return str(exc) or type(exc).__name__


DataDir = Annotated[
    Path,
    typer.Option(
        "--data-dir",
        "-d",
        help="Data dir to work on offline (the broker's log.dirs); it must not be in use.",
        envvar="KOMPAKT_DATA_DIR",
        show_default=False,
    ),
]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]


def open_backend(data_dir: Path, *, create: bool = False) -> Backend:
    """The backend for the given transport options (only the offline one so far).

    A ``--bootstrap-server`` transport adds a parameter here and returns its backend.
    """
    return OfflineBackend(data_dir, create=create)


def parse_configs(pairs: list[str] | None) -> dict[str, str]:
    """``["k=v", ...]`` as a dict; a pair without '=' or with an empty key is an error."""
    out: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise CliError(f"invalid config {pair!r}: expected key=value")
        out[key] = value
    return out


def text(data: bytes | None) -> str | None:
    """Bytes as UTF-8 text (undecodable bytes replaced), None for null."""
    return None if data is None else data.decode("utf-8", "replace")


def emit(line: str = "") -> None:
    sys.stdout.write(line + "\n")


def emit_json(obj: Any, *, indent: int | None = None) -> None:
    sys.stdout.write(json.dumps(obj, indent=indent, ensure_ascii=False) + "\n")


def table(rows: list[list[Any]], indent: str = "") -> list[str]:
    """Left-aligned columns separated by two spaces (stable, no terminal-width wrapping)."""
    cells = [[str(c) for c in row] for row in rows]
    if not cells:
        return []
    widths = [max(len(r[i]) for r in cells) for i in range(len(cells[0]))]
    return [
        indent + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in cells
    ]
