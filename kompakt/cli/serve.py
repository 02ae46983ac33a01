"""``kompakt serve``: the single-node broker with background compaction."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Annotated

import typer

from .backend import check_new_data_dir

INTERRUPTED = 130  # 128 + SIGINT, as a shell and the JVM running Kafka report it


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
    from kompakt.broker.app import run
    from kompakt.broker.config import BrokerConfig
    from kompakt.log.manager import shared_dir_lock

    config = BrokerConfig.load(properties, override or [])
    # Refused here in one error line, before the broker makes anything: a folder of
    # other things (Kafka refuses a log dir holding folders that are not partitions;
    # a LogManager would take a 'photos-2019' folder for partition 2019) and a dir
    # another process owns (Kafka's log dir lock).
    check_new_data_dir(config.data_dir)
    if config.data_dir.is_dir():
        with shared_dir_lock(config.data_dir):
            pass
    logging.basicConfig(
        level=logging.INFO, format="[%(asctime)s] %(levelname)s %(name)s: %(message)s"
    )
    code = run(config)
    if code == INTERRUPTED:
        print("interrupted: the broker stopped cleanly", file=sys.stderr)
    raise typer.Exit(code)
