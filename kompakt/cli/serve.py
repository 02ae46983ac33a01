"""``kompakt serve``: the single-node broker with background compaction.

The start-up itself is :func:`kompakt.broker.__main__.serve`, which
``python -m kompakt.broker`` runs too; this is its typer front end.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def serve(
    properties: Annotated[
        Path | None, typer.Argument(help="A Kafka-style server.properties file.")
    ] = None,
    override: Annotated[
        list[str] | None,
        typer.Option("--override", help="key=value, applied after the file (repeatable)."),
    ] = None,
) -> None:
    """Run the broker until SIGTERM/SIGINT (Kafka protocol, admin/metrics endpoint).

    server.properties is read as Java (and so Kafka) reads it: ISO-8859-1 with \\uXXXX
    escapes. log.dirs must be a data dir, or a missing or empty folder to make one in;
    a data dir in use by another broker is refused. Ctrl-C stops the broker cleanly
    and exits with 130.
    """
    from kompakt.broker.__main__ import serve as serve_broker  # the broker, on use

    raise typer.Exit(serve_broker(properties, override or []))
