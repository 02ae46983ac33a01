"""``kompakt serve``: the single-node broker with background compaction."""

from __future__ import annotations

import logging
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
    """Run the broker until SIGTERM/SIGINT (Kafka protocol, admin/metrics endpoint)."""
    from kompakt.broker.app import run
    from kompakt.broker.config import BrokerConfig

    logging.basicConfig(
        level=logging.INFO, format="[%(asctime)s] %(levelname)s %(name)s: %(message)s"
    )
    config = BrokerConfig.load(properties, override or [])
    raise typer.Exit(run(config))
