"""``kompakt topic create|alter|describe|list|delete``, offline or against a broker."""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Annotated

import typer

from .backend import CliError, PartitionDescription, TopicDescription
from .common import (
    TRANSPORT_HELP,
    AdminUrl,
    BootstrapServer,
    Column,
    DataDir,
    JsonFlag,
    check_offline_first,
    emit,
    emit_json,
    emit_listing,
    open_backend,
    parse_configs,
    print_table,
    print_warnings,
    require_topic,
)

app = typer.Typer(
    help=f"Create, change, inspect and delete topics. {TRANSPORT_HELP}",
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
    data_dir: DataDir = None,
    bootstrap_server: BootstrapServer = None,
    partitions: Annotated[int, typer.Option("--partitions", "-p", help="Partitions.")] = 1,
    config: ConfigOpt = None,
) -> None:
    """Create a topic (offline, the data dir is created when missing)."""
    configs = parse_configs(config)
    check_offline_first(
        data_dir, bootstrap_server, functools.partial(_creatable, name, partitions, configs)
    )
    with open_backend(data_dir, bootstrap_server, create=True) as backend:
        t = backend.create_topic(name, partitions, configs)
    emit(f"Created topic {t.name} with {t.partitions} partition(s).")


def _creatable(name: str, partitions: int, configs: dict[str, str], topics: set[str]) -> None:
    """The topic store's own checks of a new topic (the broker's defaults aside: with
    no configs given none of them matter), then each config value's."""
    from kompakt.log.config.defs import parse_value
    from kompakt.log.topic_store import check_new_topic

    check_new_topic(name, partitions, None, None, topics)
    for key, value in configs.items():
        parse_value(key, value)


@app.command("alter")
def alter(
    name: Annotated[str, typer.Argument(help="Topic name.")],
    data_dir: DataDir = None,
    bootstrap_server: BootstrapServer = None,
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
    check_offline_first(data_dir, bootstrap_server, require_topic(name))
    with open_backend(data_dir, bootstrap_server) as backend:
        overrides = backend.alter_topic(name, configs, deleted)
    shown = ",".join(f"{k}={v}" for k, v in sorted(overrides.items())) or "(none)"
    emit(f"Updated topic {name}; overrides: {shown}")


@app.command("describe")
def describe(
    name: Annotated[str | None, typer.Argument(help="Topic name (default: all).")] = None,
    data_dir: DataDir = None,
    bootstrap_server: BootstrapServer = None,
    admin_url: AdminUrl = None,
    json_out: JsonFlag = False,
) -> None:
    """Configs (overrides marked '*') and per-partition offsets, sizes and segments.

    Against a broker it adds each compacted partition's dirty ratio, last compaction,
    tombstones pending and why it is uncleanable (if it is), from the broker's admin
    endpoint; without that endpoint the table goes without them and a warning says so.
    """
    with open_backend(data_dir, bootstrap_server, read_only=True, admin_url=admin_url) as backend:
        topics = backend.describe_topics([name] if name else None)
    print_warnings(backend)
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
        print_table(
            [["*" if c.override else " ", c.name, c.value, c.source] for c in t.configs],
            indent="  ",
        )
        print_partitions(t)


def _when(ms: int | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000)) if ms else "never"


# header, value of a partition; a column is shown only when some partition has a value
_COLUMNS: list[tuple[str, str, object]] = [
    ("Partition", "partition", str),
    ("Start", "start_offset", str),
    ("End", "end_offset", str),
    ("Size", "size_bytes", str),
    ("Segments", "segments", str),
    ("Dirty ratio", "dirty_ratio", lambda v: f"{v:.2f}"),
    ("Last compaction", "last_compaction_ms", _when),
    ("Tombstones", "tombstones_pending", str),
    ("Uncleanable", "uncleanable_reason", str),
]


def print_partitions(t: TopicDescription) -> None:
    """The partitions as a table; columns nobody has a value for are left out (offline or
    without the admin endpoint there is no compaction state)."""

    def shown(field: str) -> bool:
        if field == "last_compaction_ms":  # "never" is news for a compacted partition
            return any(p.dirty_ratio is not None for p in t.partitions)
        return any(getattr(p, field) is not None for p in t.partitions)

    columns = [c for c in _COLUMNS if shown(c[1])]

    def cell(p: PartitionDescription, field: str, fmt) -> str:
        value = getattr(p, field)
        if field == "last_compaction_ms" and p.dirty_ratio is not None:
            return fmt(value)
        return "-" if value is None else fmt(value)

    print_table(
        [[cell(p, field, fmt) for _h, field, fmt in columns] for p in t.partitions],
        [
            Column(header, "left" if field == "uncleanable_reason" else "right")
            for header, field, _fmt in columns
        ],
        ruled=True,
    )


@app.command("list")
def list_(
    data_dir: DataDir = None,
    bootstrap_server: BootstrapServer = None,
    json_out: JsonFlag = False,
) -> None:
    """Topic names, one a line."""
    with open_backend(data_dir, bootstrap_server, read_only=True) as backend:
        topics = backend.list_topics()
    print_warnings(backend)
    emit_listing(topics, lambda t: t.name, json_out)


@app.command("delete")
def delete(
    name: Annotated[str, typer.Argument(help="Topic name.")],
    data_dir: DataDir = None,
    bootstrap_server: BootstrapServer = None,
) -> None:
    """Delete a topic and its data (not Kafka's internal topics, as kafka-topics.sh)."""
    from kompakt.log.names import is_internal

    if is_internal(name):
        raise CliError(f"topic '{name}' is a Kafka internal topic and is not allowed to be deleted")
    check_offline_first(data_dir, bootstrap_server, require_topic(name))
    with open_backend(data_dir, bootstrap_server) as backend:
        backend.delete_topic(name)
    emit(f"Deleted topic {name}.")
