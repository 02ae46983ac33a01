"""``kompakt export``: the latest value per key of a topic, written by Spark."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .backend import CliError
from .common import emit

FORMATS = ("parquet", "json", "csv")


def export(
    topic: Annotated[str, typer.Argument(help="Topic to export.")],
    data_dir: Annotated[Path, typer.Option("--data-dir", "-d", help="The data dir to read.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output directory (replaced).")],
    fmt: Annotated[str, typer.Option("--format", help="parquet, json or csv.")] = "parquet",
) -> None:
    """Latest state (tombstoned keys absent): key, value, partition, offset, timestamp.

    In json and csv, keys and values are base64 (they are bytes); csv headers are JSON.
    """
    from kompakt.log.names import validate_topic_name
    from kompakt.pipeline.layout import read_topics

    if fmt not in FORMATS:
        raise CliError(f"unknown format {fmt!r}: expected one of {', '.join(FORMATS)}")
    validate_topic_name(topic)
    if not data_dir.is_dir():
        raise CliError(f"data dir '{data_dir}' does not exist")
    if topic not in read_topics(data_dir):
        raise CliError(f"unknown topic '{topic}' in {data_dir}")
    from kompakt.pipeline import session
    from kompakt.pipeline.export import export_latest

    rows = export_latest(session(), data_dir, topic, out, format=fmt)
    emit(f"Exported {rows} key(s) of {topic} to {out} ({fmt}).")
