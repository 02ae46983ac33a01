"""``kompakt compact``: clean now, offline on a data dir or through a running broker.

Offline (``--data-dir``) it takes the dir lock, so a dir in use by a broker is refused.
A named topic (or ``TOPIC:PARTITION``) is cleaned whatever its dirty ratio; the other
rules (active segment, compaction lags, tombstone horizons) still hold. Without a topic
it does one background pass: every partition Kafka's rules say is due.
"""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Annotated, Any

import typer

from .backend import CliError, require_data_dir
from .common import emit, emit_json, table

ENGINES = ("spark", "local")


def _target(target: str | None) -> tuple[str | None, int | None]:
    if not target:
        return None, None
    topic, sep, part = target.rpartition(":")
    if sep and part.isdigit():
        return topic, int(part)
    if sep:
        raise CliError(f"invalid target {target!r}: expected TOPIC or TOPIC:PARTITION")
    return target, None


def _engine(name: str, config: dict[str, str]):
    from kompakt.cleaner import LocalEngine

    if name == "local":
        return LocalEngine(int(config.get("log.cleaner.dedupe.buffer.size", 128 << 20)))
    if name == "spark":
        from kompakt.pipeline.engine import SparkEngine

        return SparkEngine(config)
    raise CliError(f"unknown engine {name!r}: expected one of {', '.join(ENGINES)}")


def compact_offline(
    data_dir: Path, topic: str | None, partition: int | None, dry_run: bool, engine: str
) -> list[dict[str, Any]]:
    from rich.progress import Progress

    from kompakt.cleaner import Cleaner
    from kompakt.log.manager import LogManager

    require_data_dir(data_dir)  # never turn a folder that is not a data dir into one
    with LogManager(data_dir) as logs:
        cleaner = Cleaner(logs, engine=_engine(engine, logs.broker_config))
        if topic is not None:
            if not logs.has_topic(topic):
                logs.get_log(topic, 0)  # raises the unknown-topic error
            if not logs.topic_config(topic).compact:
                raise CliError(
                    f"topic '{topic}' has cleanup.policy="
                    f"{','.join(logs.topic_config(topic).cleanup_policy)}: nothing to compact"
                )
            parts = [partition] if partition is not None else range(logs.partition_count(topic))
            plogs = [logs.get_log(topic, p) for p in parts]
            todo = [(pl, cleaner.log_to_clean(pl)) for pl in plogs]
        else:
            todo = [(ltc.log, ltc) for ltc in cleaner.due(force=False)]
        results = []
        show = sys.stderr.isatty()
        with Progress(transient=True, disable=not show) as bar:
            for plog, ltc in todo:
                task = bar.add_task(f"{plog.name}", total=None)

                def progress(done: int, total: int, task=task) -> None:
                    bar.update(task, completed=done, total=total)

                if plog.uncleanable_reason:
                    results.append(_skipped(plog, f"uncleanable: {plog.uncleanable_reason}"))
                    continue
                from kompakt.cleaner.cleanable import is_eligible

                if not is_eligible(ltc, force=True):
                    results.append(_skipped(plog, "nothing to clean", ltc))
                    continue
                stats = cleaner.clean(ltc, dry_run=dry_run, progress=progress)
                results.append({"status": "dry-run" if dry_run else "cleaned", **stats.to_json()})
        return results


def _skipped(plog, reason: str, ltc=None) -> dict[str, Any]:
    out = {"topic": plog.topic, "partition": plog.partition, "status": "skipped"}
    out["reason"] = reason
    if ltc is not None:
        out["first_dirty_offset"] = ltc.first_dirty_offset
        out["first_uncleanable_offset"] = ltc.first_uncleanable_offset
    return out


def compact_remote(
    admin_url: str, topic: str | None, partition: int | None, dry_run: bool
) -> list[dict[str, Any]]:
    if topic is None:
        raise CliError("compact through a broker needs a TOPIC (or use --data-dir offline)")
    body = json.dumps({"topic": topic, "partition": partition, "dry_run": dry_run}).encode()
    req = urllib.request.Request(
        admin_url.rstrip("/") + "/v1/compact",
        data=body,
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=3600) as resp:
            return json.loads(resp.read())["results"]
    except urllib.error.HTTPError as exc:
        try:
            msg = json.loads(exc.read()).get("error", str(exc))
        except ValueError:
            msg = str(exc)
        raise CliError(msg) from None
    except urllib.error.URLError as exc:
        raise CliError(f"broker admin endpoint {admin_url} not reachable: {exc.reason}") from None


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
        str, typer.Option("--engine", help="spark (default) or local (in-process map).")
    ] = "spark",
    admin: Annotated[
        str, typer.Option("--admin", "--admin-url", help="The broker's admin endpoint.")
    ] = "http://127.0.0.1:9644",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Compact now: records/bytes read and written, tombstones removed, per partition."""
    topic, partition = _target(target)
    if data_dir is not None:
        results = compact_offline(data_dir, topic, partition, dry_run, engine)
    else:
        results = compact_remote(admin, topic, partition, dry_run)
    if as_json:
        emit_json(results)
        return
    if not results:
        emit("nothing to compact")
        return
    rows = [
        [
            "PARTITION",
            "STATUS",
            "READ",
            "WRITTEN",
            "RECORDS",
            "TOMBSTONES-",
            "SEGMENTS",
            "DIRTY-FROM",
        ]
    ]
    for r in results:
        name = f"{r['topic']}-{r['partition']}"
        if r["status"] == "skipped":
            rows.append([name, f"skipped ({r['reason']})", "", "", "", "", "", ""])
            continue
        rows.append(
            [
                name,
                r["status"],
                f"{r['bytes_read']} B",
                f"{r['bytes_written']} B",
                f"{r['records_read']} -> {r['records_written']}",
                r["tombstones_removed"],
                f"{r['segments_before']} -> {r['segments_after']}",
                r["end_offset"],
            ]
        )
    for line in table(rows):
        emit(line)
