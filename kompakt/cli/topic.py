"""``kompakt topic create|alter|describe|list|delete``."""

from __future__ import annotations

import dataclasses
from typing import Annotated

import typer

from .backend import CliError
from .common import DataDir, JsonFlag, emit, emit_json, open_backend, parse_configs, table

app = typer.Typer(
    help="Create, change, inspect and delete topics.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)

ConfigOpt = Annotated[
    list[str] | None,
    typer.Option("--config", "-c", help="Topic config override key=value (repeatable)."),
]


@app.command("create")
def create(
    name: Annotated[str, typer.Argument(help="Topic name.")],
    data_dir: DataDir,
    partitions: Annotated[int, typer.Option("--partitions", "-p", help="Partitions.")] = 1,
    config: ConfigOpt = None,
) -> None:
    """Create a topic (the data dir is created when missing)."""
    configs = parse_configs(config)
    with open_backend(data_dir, create=True) as backend:
        t = backend.create_topic(name, partitions, configs)
    emit(f"Created topic {t.name} with {t.partitions} partition(s).")


@app.command("alter")
def alter(
    name: Annotated[str, typer.Argument(help="Topic name.")],
    data_dir: DataDir,
    config: ConfigOpt = None,
    delete_config: Annotated[
        list[str] | None,
        typer.Option("--delete-config", help="Override to remove (repeatable)."),
    ] = None,
) -> None:
    """Set (--config k=v) or remove (--delete-config k) a topic's config overrides."""
    configs = parse_configs(config)
    deleted = [k.strip() for k in delete_config or []]
    if not configs and not deleted:
        raise CliError("nothing to alter: give --config key=value or --delete-config key")
    with open_backend(data_dir) as backend:
        overrides = backend.alter_topic(name, configs, deleted)
    shown = ",".join(f"{k}={v}" for k, v in sorted(overrides.items())) or "(none)"
    emit(f"Updated topic {name}; overrides: {shown}")


@app.command("describe")
def describe(
    data_dir: DataDir,
    name: Annotated[str | None, typer.Argument(help="Topic name (default: all).")] = None,
    json_out: JsonFlag = False,
) -> None:
    """Configs (overrides marked '*') and per-partition offsets, sizes and segments."""
    with open_backend(data_dir) as backend:
        topics = backend.describe_topics([name] if name else None)
    if json_out:
        emit_json([dataclasses.asdict(t) for t in topics], indent=2)
        return
    for i, t in enumerate(topics):
        if i:
            emit()
        overrides = ",".join(f"{c.name}={c.value}" for c in t.configs if c.override)
        emit(f"Topic: {t.name}\tTopicId: {t.topic_id}\tPartitionCount: {t.partition_count}")
        emit(f"Overrides: {overrides or '(none)'}")
        emit("Configs ('*' = set on the topic):")
        for line in table(
            [["*" if c.override else " ", c.name, c.value, c.source] for c in t.configs], "  "
        ):
            emit(line)
        rows = [["Partition", "StartOffset", "EndOffset", "SizeBytes", "Segments"]]
        rows += [
            [p.partition, p.start_offset, p.end_offset, p.size_bytes, p.segments]
            for p in t.partitions
        ]
        for line in table(rows, "  "):
            emit(line)


@app.command("list")
def list_(data_dir: DataDir, json_out: JsonFlag = False) -> None:
    """Topic names, one a line."""
    with open_backend(data_dir) as backend:
        topics = backend.list_topics()
    if json_out:
        emit_json([dataclasses.asdict(t) for t in topics])
        return
    for t in topics:
        emit(t.name)


@app.command("delete")
def delete(
    name: Annotated[str, typer.Argument(help="Topic name.")],
    data_dir: DataDir,
) -> None:
    """Delete a topic and its data."""
    with open_backend(data_dir) as backend:
        backend.delete_topic(name)
    emit(f"Deleted topic {name}.")
