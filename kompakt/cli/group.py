"""``kompakt group list|describe|reset-offsets|delete``: consumer groups on a broker.

Consumer groups live on the broker (its group coordinator), so these verbs always talk
to one (``--bootstrap-server``, default 127.0.0.1:9092); they mirror Kafka's
``kafka-consumer-groups.sh --list/--describe/--reset-offsets/--delete``.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated

import typer

from .backend import CliError
from .common import (
    DEFAULT_BOOTSTRAP,
    BrokerOnly,
    JsonFlag,
    emit,
    emit_json,
    emit_listing,
    open_broker,
    print_error,
    print_table,
)

app = typer.Typer(
    help="List, inspect, reset and delete consumer groups on a broker "
    f"(--bootstrap-server, default {DEFAULT_BOOTSTRAP}).",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.command("list")
def list_(bootstrap_server: BrokerOnly = DEFAULT_BOOTSTRAP, json_out: JsonFlag = False) -> None:
    """Group ids, one a line (--json adds state and type)."""
    with open_broker(bootstrap_server) as backend:
        groups = backend.list_groups()
    emit_listing(groups, lambda g: g.group_id, json_out)


def _dash(value: object) -> str:
    """A missing value as kafka-consumer-groups.sh prints it."""
    return "-" if value is None else str(value)


def _assignment(tps: list[tuple[str, int]]) -> str:
    return ",".join(f"{t}-{p}" for t, p in tps) or "-"


@app.command("describe")
def describe(
    group: Annotated[str, typer.Argument(help="Group id.")],
    bootstrap_server: BrokerOnly = DEFAULT_BOOTSTRAP,
    json_out: JsonFlag = False,
) -> None:
    """State, members (client id, host, assignment) and per partition the committed
    offset, the log end offset and the lag."""
    with open_broker(bootstrap_server) as backend:
        d = backend.describe_group(group)
    if json_out:
        emit_json(dataclasses.asdict(d), indent=2)
        return
    emit(f"Group: {d.group_id}\tState: {d.state}\tAssignor: {d.assignor or '-'}")
    if d.members:
        emit(f"Members ({len(d.members)}):")
        print_table(
            ([m.member_id, m.client_id, m.host, _assignment(m.assignment)] for m in d.members),
            ["MEMBER-ID", "CLIENT-ID", "HOST", "ASSIGNMENT"],
            indent="  ",
        )
    else:
        emit(f"Consumer group '{d.group_id}' has no active members.")
    if not d.partitions:
        emit("No committed offsets.")
        return
    emit("Offsets:")
    print_table(
        (
            [
                p.topic,
                p.partition,
                *map(_dash, [p.committed_offset, p.end_offset, p.lag, p.member_id]),
            ]
            for p in d.partitions
        ),
        ["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID"],
        indent="  ",
    )


@app.command("reset-offsets")
def reset_offsets(
    group: Annotated[str, typer.Argument(help="Group id.")],
    topic: Annotated[str, typer.Option("--topic", "-t", help="Topic whose offsets to reset.")],
    partition: Annotated[
        int | None, typer.Option("--partition", "-p", min=0, help="Only this partition.")
    ] = None,
    to_earliest: Annotated[
        bool, typer.Option("--to-earliest", help="To each partition's log start offset.")
    ] = False,
    to_latest: Annotated[
        bool, typer.Option("--to-latest", help="To each partition's log end offset.")
    ] = False,
    to_offset: Annotated[
        int | None,
        typer.Option("--to-offset", min=0, help="To this offset (kept within the log)."),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show the new offsets; change nothing.")
    ] = False,
    bootstrap_server: BrokerOnly = DEFAULT_BOOTSTRAP,
    json_out: JsonFlag = False,
) -> None:
    """Set a group's committed offsets for a topic; only while the group has no active
    members (state Empty), as with Kafka's kafka-consumer-groups.sh."""
    chosen = [to_earliest, to_latest, to_offset is not None]
    if sum(chosen) != 1:
        raise CliError("give exactly one of --to-earliest, --to-latest, --to-offset N")
    to: str | int = "earliest" if to_earliest else "latest" if to_latest else int(to_offset or 0)
    with open_broker(bootstrap_server) as backend:
        resets = backend.reset_offsets(group, topic, partition, to, dry_run=dry_run)
    if json_out:
        emit_json(
            {"group": group, "dry_run": dry_run, "offsets": [dataclasses.asdict(r) for r in resets]}
        )
        return
    print_table(
        ([group, r.topic, r.partition, _dash(r.previous_offset), r.new_offset] for r in resets),
        ["GROUP", "TOPIC", "PARTITION", "PREVIOUS-OFFSET", "NEW-OFFSET"],
    )
    if dry_run:
        emit("(dry run: nothing was changed)")


@app.command("delete")
def delete(
    groups: Annotated[list[str], typer.Argument(help="Group ids.")],
    bootstrap_server: BrokerOnly = DEFAULT_BOOTSTRAP,
) -> None:
    """Delete groups and their committed offsets; a group with active members is refused."""
    with open_broker(bootstrap_server) as backend:
        results = backend.delete_groups(groups)
    failed = [why for why in results.values() if why]
    for g, why in results.items():
        if why is None:
            emit(f"Deleted group {g}.")
    if failed:
        print_error("; ".join(failed))
        raise typer.Exit(1)
