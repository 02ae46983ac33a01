"""``kompakt compact``: clean now, offline on a data dir or through a running broker.

Both ways run one implementation, :meth:`kompakt.cleaner.cleaner.Cleaner.compact_now`
(offline here, online inside the broker behind ``POST /v1/compact``), and print one
document shape (:mod:`kompakt.cleaner.report`). Offline (``--data-dir``) it takes the
dir lock, so a dir in use by a broker is refused. A named topic (or
``TOPIC:PARTITION``) is cleaned whatever its dirty ratio; the other rules (active
segment, compaction lags, tombstone horizons) still hold. Without a topic it does one
background pass: every partition Kafka's rules say is due.

A partition with a corrupt batch is reported (one ``error:`` line naming the file and
byte position) after every other partition is cleaned, and the exit code is 1.
``--dry-run`` opens the data dir read-only and changes no byte of its logs, indexes
or checkpoints (Spark's dedup stage stages rows in ``.kompakt-staging`` beside them,
removed at the end: :func:`kompakt.pipeline.exchange.scratch`). Ctrl-C
or SIGTERM aborts the running clean at its next check (Spark: its job group is
cancelled), removes its ``.cleaned`` files, prints one line and exits 130; partitions
cleaned before it stay cleaned. With Spark a line says at once that it is stopping,
and a second Ctrl-C quits without waiting. Ctrl-C before the clean begins (the data
dir opening, Spark starting) cancels it with nothing changed; only through a broker
does the compaction carry on without the CLI.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

from kompakt.log.data_dir import require_data_dir

from .backend import CliError
from .common import check_offline_first, emit, emit_json, print_error, print_table, require_topic

INTERRUPTED_EXIT = 130  # 128 + SIGINT, what shells report for Ctrl-C


class OfflineInterruptedError(Exception):
    """Ctrl-C in an offline compact outside the clean itself (whose signals abort it at a
    safe point): while the data dir opened or Spark started, or while it closed."""

    def __init__(self, cleaned: bool, dry_run: bool = False) -> None:
        if dry_run:  # opened read-only: there is nothing to recover
            super().__init__("interrupted: the dry run stopped, nothing changed")
            return
        what = (
            "the compaction finished, the data dir was not closed cleanly"
            if cleaned
            else "compaction cancelled before it began, nothing changed"
        )
        super().__init__(f"interrupted: {what}; the next open of the data dir recovers")


def _target(target: str | None) -> tuple[str | None, int | None]:
    if not target:
        return None, None
    topic, sep, part = target.rpartition(":")
    if sep and part.isdigit():
        return topic, int(part)
    if sep:
        raise CliError(f"invalid target {target!r}: expected TOPIC or TOPIC:PARTITION")
    return target, None


def _notice(line: str) -> None:
    """One line on stderr from a signal handler (a buffered write under way in the main
    thread would make ``print`` fail as a reentrant call)."""
    try:
        os.write(sys.stderr.fileno(), f"{line}\n".encode())
    except (OSError, ValueError, AttributeError):
        pass


@contextmanager
def _signals_abort(cleaner: Any) -> Iterator[None]:
    """SIGINT/SIGTERM abort the running clean instead of raising mid-swap; a second
    signal exits at once (the next open finishes or rolls back a half-done swap). With
    Spark the first one says so at once, and a session still starting is given up
    (the JVM dies with the process), not waited for."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        if cleaner.states.closed is not None:
            print_error("interrupted again: stopping now; the next open of the data dir recovers")
            os._exit(INTERRUPTED_EXIT)
        cleaner.abort_all("interrupted")
        if any(r.engine == "spark" for r in list(cleaner.running.values())):
            # cancelling Spark's jobs, or its start, is not instant: say so now
            _notice("interrupting: stopping Spark (Ctrl-C again to quit now)")
            pipeline = sys.modules.get("kompakt.pipeline")
            if pipeline is not None:  # still starting: given up here and now
                pipeline.abandon_start()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def compact_offline(
    data_dir: Path,
    topic: str | None,
    partition: int | None,
    dry_run: bool,
    engine: str,
    verbose: bool = False,
) -> dict[str, Any]:
    result = None
    try:  # from the first import on (numba's and Spark's take seconds)
        from rich.progress import Progress

        from kompakt.engines import build_cleaner
        from kompakt.log.manager import LogManager

        require_data_dir(data_dir)  # never turn a folder that is not a data dir into one
        if topic is not None:  # an unknown topic fails before the dir is opened to write
            check_offline_first(data_dir, None, require_topic(topic))
        # a dry run opens the dir read-only: no recovery, index rebuild, lock or checkpoint
        # reaches the disk; a clean's replaced segments are deleted when the manager closes
        with LogManager(data_dir, read_only=dry_run) as logs:
            # the CLI draws its own bar; Spark's console bar would write over it
            config = {"spark.ui.showConsoleProgress": "false", **logs.broker_config}
            if verbose:  # Spark's warnings too (kompakt.pipeline keeps only its errors)
                config["kompakt.spark.log.level"] = "WARN"
            cleaner = build_cleaner(logs, config, engine=engine)
            with Progress(transient=True, disable=not sys.stderr.isatty()) as bar:

                def progress_for(plog: Any):
                    task = bar.add_task(plog.name, total=None)
                    return lambda done, total: bar.update(task, completed=done, total=total)

                with _signals_abort(cleaner):
                    result = cleaner.compact_now(
                        topic, partition, dry_run=dry_run, progress=progress_for
                    )
    except KeyboardInterrupt:
        raise OfflineInterruptedError(cleaned=result is not None, dry_run=dry_run) from None
    return result.to_json()


def compact_remote(
    admin_url: str, topic: str | None, partition: int | None, dry_run: bool, engine: str | None
) -> dict[str, Any]:
    if topic is None:
        raise CliError("compact through a broker needs a TOPIC (or use --data-dir offline)")
    req_body: dict[str, Any] = {"topic": topic, "partition": partition, "dry_run": dry_run}
    if engine is not None:
        req_body["engine"] = engine
    from .admin_client import admin_json

    return admin_json(admin_url, "/v1/compact", req_body, timeout=3600)


def _render(doc: dict[str, Any]) -> None:
    results = doc.get("results", [])
    rows = []
    for r in results:
        name = f"{r['topic']}-{r['partition']}"
        s = r.get("stats")
        if r["status"] == "uncleanable":
            continue  # an error line on stderr
        if s is None:
            rows.append([name, f"{r['status']} ({r['reason']})", "", "", "", "", "", ""])
            continue
        rows.append(
            [
                name,
                r["status"],
                f"{s['bytes_read']} B",
                f"{s['bytes_written']} B",
                f"{s['records_read']} -> {s['records_written']}",
                s["tombstones_removed"],
                f"{s['segments_before']} -> {s['segments_after']}",
                s["end_offset"],
            ]
        )
    if not results:
        emit("nothing to compact")
    elif rows:
        print_table(rows, REPORT_COLUMNS)


REPORT_COLUMNS = [
    "PARTITION",
    "STATUS",
    "READ",
    "WRITTEN",
    "RECORDS",
    "TOMBSTONES-",
    "SEGMENTS",
    "DIRTY-FROM",
]


def _quiet_logs(verbose: bool = False) -> None:
    """The cleaner logs for a broker's log file; here its report and ``error:`` lines
    say it all (without a handler Python would print every warning to stderr), unless
    ``--verbose`` asks for its log lines on stderr."""
    root = logging.getLogger("kompakt")
    if verbose:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
        root.setLevel(logging.INFO)
    elif not root.handlers:
        root.addHandler(logging.NullHandler())


def compact(
    target: Annotated[
        str | None, typer.Argument(help="TOPIC or TOPIC:PARTITION; omit for one pass over all")
    ] = None,
    data_dir: Annotated[
        Path | None,
        typer.Option("--data-dir", "-d", help="Clean a data dir offline (takes its lock)."),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Report what a clean would do; touch nothing.")
    ] = False,
    engine: Annotated[
        str | None,
        typer.Option(
            "--engine",
            help="spark, local (in-process map) or auto (local when the dirty range fits "
            "the offset map, else spark). Offline the default is spark; through a broker, "
            "the broker's kompakt.cleaner.engine.",
            show_default=False,
        ),
    ] = None,
    admin: Annotated[
        str,
        typer.Option(
            "--admin",
            "--admin-url",
            help="The broker's admin endpoint (https://USER@HOST:PORT with "
            "KOMPAKT_ADMIN_PASSWORD and KOMPAKT_ADMIN_CAFILE for a secured one).",
        ),
    ] = "http://127.0.0.1:9644",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose",
            "-v",
            help="Offline: the cleaner's log lines and Spark's warnings on stderr "
            "(quiet by default).",
        ),
    ] = False,
) -> None:
    """Compact now: records/bytes read and written, tombstones removed, per partition."""
    from kompakt.cleaner.manager import CleaningAbortedError
    from kompakt.cleaner.report import uncleanable_lines
    from kompakt.engines import check_engine

    if engine is not None:
        check_engine(engine)  # before anything is opened or asked
    _quiet_logs(verbose)
    topic, partition = _target(target)
    try:
        if data_dir is not None:
            doc = compact_offline(data_dir, topic, partition, dry_run, engine or "spark", verbose)
        else:
            doc = compact_remote(admin, topic, partition, dry_run, engine)
    except CleaningAbortedError as exc:
        done = [
            f"{r.topic}-{r.partition}"
            for r in getattr(exc, "report", None) or []
            if r.status == "cleaned"
        ]
        print_error(str(exc) + (f" (cleaned before: {', '.join(done)})" if done else ""))
        raise typer.Exit(INTERRUPTED_EXIT) from None
    except OfflineInterruptedError as exc:
        print_error(str(exc))
        raise typer.Exit(INTERRUPTED_EXIT) from None
    except KeyboardInterrupt:  # waiting for a broker: it finishes the clean on its own
        print_error("interrupted: the broker carries on with the compaction")
        raise typer.Exit(INTERRUPTED_EXIT) from None
    if as_json:
        emit_json(doc)
    else:
        _render(doc)
    errors = uncleanable_lines(doc)
    for line in errors:
        print_error(line)
    if errors:
        raise typer.Exit(1)
