"""``kompakt export``: the latest value per key of a topic, written by Spark.

Every refusal (a folder that is not a data dir, a data dir in use, an output that must
not be replaced) happens before Spark starts, so it is quick and leaves no trace.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Annotated

import typer

from kompakt.log.config import TopicConfig
from kompakt.log.data_dir import require_data_dir

from .backend import CliError, offline_tiered
from .common import emit, print_warning

FORMATS = ("parquet", "json", "csv")


def export(
    topic: Annotated[str, typer.Argument(help="Topic to export.")],
    data_dir: Annotated[Path, typer.Option("--data-dir", "-d", help="The data dir to read.")],
    out: Annotated[
        Path,
        typer.Option(
            "--out", "-o", help="Output folder: must be missing or empty, see --overwrite."
        ),
    ],
    fmt: Annotated[str, typer.Option("--format", help="parquet, json or csv.")] = "parquet",
    overwrite: Annotated[
        bool,
        typer.Option(
            "--overwrite",
            help="Replace an earlier export at --out (a folder holding only Spark output "
            "files); anything else is never replaced.",
        ),
    ] = False,
) -> None:
    """Latest state (tombstoned keys absent): key, value, partition, offset, timestamp.

    In json and csv, keys and values are base64 (they are bytes); csv headers are JSON.
    The output is written beside --out and renamed into place when complete, so a
    failed or interrupted export leaves --out as it was. A data dir in use by a running
    broker is refused: stop the broker, or export a copy of the data dir.
    """
    from kompakt.log.manager import shared_dir_lock
    from kompakt.log.names import validate_topic_name
    from kompakt.pipeline.export import check_export_target
    from kompakt.pipeline.layout import read_topics

    if fmt not in FORMATS:
        raise CliError(f"unknown format {fmt!r}: expected one of {', '.join(FORMATS)}")
    validate_topic_name(topic)
    require_data_dir(data_dir)
    check_export_target(out, data_dir, overwrite)
    # Kafka's log dir has one owner. The cleaner of a broker that owns it rewrites
    # segments while Spark reads them: a key whose older record goes in a clean and
    # whose newer one lies past the export's end offset would vanish from the export.
    # So the dir's lock is held (shared) for the whole export; a broker holding it
    # makes this refuse, in one line, before Spark starts.
    with shared_dir_lock(data_dir):
        topics = read_topics(data_dir)
        if topic not in topics:
            raise CliError(f"unknown topic '{topic}' in {data_dir}")
        if TopicConfig(topics[topic].configs).remote_storage_enable:
            print_warning(offline_tiered(topic, "export"))
        from kompakt.pipeline import session
        from kompakt.pipeline.export import ExportInterrupted, export_latest

        spark = session()
        try:
            rows = export_latest(
                spark, data_dir, topic, out, format=fmt, overwrite=overwrite, quiet_interrupt=True
            )
        except ExportInterrupted as stop:
            # the session is this command's: once Spark is stopped nothing can make the
            # temporary folder again, so the last removal is final
            spark.stop()
            shutil.rmtree(stop.tmp, ignore_errors=True)
            raise
        except Exception as exc:  # a corrupt batch, an unwritable --out: one line
            raise CliError(f"export failed: {_why(exc)}") from exc
    emit(f"Exported {rows} key(s) of {topic} to {out} ({fmt}).")


_CAUSES = (
    r"kompakt\.errors\.\w+: (.+)",
    r"\b(?:java|org\.apache)\.[\w.]+(?:Exception|Error): (.+)",
    r"\b\w*Error: (.+)",
)


def _why(exc: Exception) -> str:
    """A Spark failure in one line: the error a task or the JVM raised, out of the
    traceback text a ``PythonException`` or ``Py4JJavaError`` carries (82 to 317 lines
    for a corrupt batch or a read-only output folder)."""
    text = str(exc)
    for pattern in _CAUSES:
        found = re.findall(pattern, text)
        if found:
            return found[0].strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__
