"""``kompakt txn list|describe|producers``: transactions on a broker.

Kafka's ``kafka-transactions.sh`` verbs (KIP-664) against ``--bootstrap-server``:
``list`` (ListTransactions, with ``--state``, ``--producer-id`` and KIP-994's
``--duration-ms`` filters), ``describe`` (DescribeTransactions of one transactional id)
and ``producers`` (DescribeProducers of a topic's partitions). confluent-kafka's
AdminClient has none of these calls, so the requests go as Kafka frames built with kio
over one socket (kompakt is a single node: it is every partition's leader and every
transactional id's coordinator). Imports are lazy: ``kompakt --help`` stays fast.
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Annotated, Any

import typer

from .backend import CliError
from .common import DEFAULT_BOOTSTRAP, BrokerOnly, JsonFlag, emit, emit_json, print_table
from .raw_request import decode, send

app = typer.Typer(
    help="List and describe transactions and producers on a broker "
    f"(--bootstrap-server, default {DEFAULT_BOOTSTRAP}); kafka-transactions.sh's verbs.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)

DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 61, 65, 66


def _error(code: Any) -> str | None:
    from kio.schema.errors import ErrorCode

    code = ErrorCode(int(code))
    return None if code == ErrorCode.none else code.name.upper()


# -- DescribeTransactions v0, read by hand ----------------------------------------------
# kio refuses the negative start time (-1: no transaction open) that Kafka sends for an
# Empty or Complete id, so this one response is parsed here (a flexible version:
# compact strings and arrays, tagged fields).


class _Reader:
    def __init__(self, data: bytes, pos: int = 0):
        self.data, self.pos = data, pos

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise CliError("truncated DescribeTransactions response")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def int(self, n: int) -> int:
        return int.from_bytes(self.take(n), "big", signed=True)

    def uvarint(self) -> int:
        shift = out = 0
        while True:
            b = self.take(1)[0]
            out |= (b & 0x7F) << shift
            if not b & 0x80:
                return out
            shift += 7

    def string(self) -> str | None:
        n = self.uvarint() - 1
        return None if n < 0 else self.take(n).decode()

    def array(self, item: Any) -> list[Any]:
        n = self.uvarint() - 1
        return [] if n < 0 else [item() for _ in range(n)]

    def tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())


@dataclasses.dataclass
class TransactionDescription:
    transactional_id: str
    error: str | None
    state: str
    timeout_ms: int
    start_time_ms: int
    producer_id: int
    producer_epoch: int
    partitions: list[tuple[str, int]]


def decode_describe_transactions(frame: bytes) -> list[TransactionDescription]:
    """DescribeTransactionsResponse v0 (header v1) from a response frame."""
    r = _Reader(frame)
    r.int(4)  # correlation id
    r.tags()
    r.int(4)  # throttle time

    def topic() -> list[tuple[str, int]]:
        name = r.string() or ""
        parts = r.array(lambda: r.int(4))
        r.tags()
        return [(name, p) for p in parts]

    def state() -> TransactionDescription:
        from kio.schema.errors import ErrorCode

        code = r.int(2)
        d = TransactionDescription(
            r.string() or "",
            None if code == 0 else ErrorCode(code).name.upper(),
            r.string() or "",
            r.int(4),
            r.int(8),
            r.int(8),
            r.int(2),
            [tp for t in r.array(topic) for tp in t],
        )
        r.tags()
        return d

    return r.array(state)


def _time(ms: int) -> str:
    if ms < 0:
        return "None"
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).isoformat(
        timespec="milliseconds"
    )


# -- verbs -------------------------------------------------------------------------------


@app.command("list")
def list_(
    state: Annotated[
        list[str] | None,
        typer.Option("--state", help="Only these states (Ongoing, PrepareCommit, ...)."),
    ] = None,
    producer_id: Annotated[
        list[int] | None, typer.Option("--producer-id", help="Only these producer ids.")
    ] = None,
    duration_ms: Annotated[
        int | None,
        typer.Option("--duration-ms", min=0, help="Only transactions open longer (KIP-994)."),
    ] = None,
    bootstrap_server: BrokerOnly = DEFAULT_BOOTSTRAP,
    json_out: JsonFlag = False,
) -> None:
    """Transactional ids with their producer id and state (ListTransactions)."""
    body: dict[str, Any] = {
        "state_filters": state or [],
        "producer_id_filters": producer_id or [],
    }
    version = 0
    if duration_ms is not None:
        body["duration_filter"], version = duration_ms, 1
    r = decode(LIST_TRANSACTIONS, version, send(bootstrap_server, LIST_TRANSACTIONS, version, body))
    if (err := _error(r.error_code)) is not None:
        raise CliError(f"ListTransactions failed: {err}")
    if r.unknown_state_filters:
        raise CliError(f"unknown transaction states: {', '.join(r.unknown_state_filters)}")
    rows = [
        {
            "transactional_id": s.transactional_id,
            "producer_id": int(s.producer_id),
            "state": s.transaction_state,
        }
        for s in r.transaction_states
    ]
    if json_out:
        emit_json(rows)
        return
    print_table(
        ([x["transactional_id"], x["producer_id"], x["state"]] for x in rows),
        ["TRANSACTIONAL-ID", "PRODUCER-ID", "STATE"],
    )


@app.command("describe")
def describe(
    transactional_id: Annotated[str, typer.Argument(help="The transactional.id.")],
    bootstrap_server: BrokerOnly = DEFAULT_BOOTSTRAP,
    json_out: JsonFlag = False,
) -> None:
    """State, producer id and epoch, timeout, start time and partitions of one
    transactional id (DescribeTransactions)."""
    frame = send(
        bootstrap_server, DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [transactional_id]}
    )
    (d,) = decode_describe_transactions(frame)
    if d.error is not None:
        raise CliError(f"transactional id {transactional_id!r}: {d.error}")
    if json_out:
        emit_json(dataclasses.asdict(d), indent=2)
        return
    print_table(
        [
            [
                d.transactional_id,
                d.producer_id,
                d.producer_epoch,
                d.state,
                d.timeout_ms,
                _time(d.start_time_ms),
                ",".join(f"{t}-{p}" for t, p in d.partitions) or "-",
            ]
        ],
        [
            "TRANSACTIONAL-ID",
            "PRODUCER-ID",
            "EPOCH",
            "STATE",
            "TIMEOUT-MS",
            "START-TIME",
            "PARTITIONS",
        ],
    )


@app.command("producers")
def producers(
    topic: Annotated[str, typer.Argument(help="Topic.")],
    partition: Annotated[
        list[int] | None, typer.Option("--partition", "-p", min=0, help="Only these partitions.")
    ] = None,
    bootstrap_server: BrokerOnly = DEFAULT_BOOTSTRAP,
    json_out: JsonFlag = False,
) -> None:
    """Active producers of a topic's partitions: id, epoch, last sequence, last
    timestamp, coordinator epoch and the open transaction's first offset
    (DescribeProducers)."""
    from kio.schema.metadata.v12.request import MetadataRequest

    if partition:
        parts = sorted(set(partition))
    else:
        md = decode(
            MetadataRequest.__api_key__,
            12,
            send(
                bootstrap_server,
                MetadataRequest.__api_key__,
                12,
                {"topics": [{"name": topic}], "allow_auto_topic_creation": False},
            ),
        )
        (t,) = md.topics
        if (err := _error(t.error_code)) is not None:
            raise CliError(f"topic {topic!r}: {err}")
        parts = sorted(int(p.partition_index) for p in t.partitions)
        if not parts:
            raise CliError(f"topic {topic!r}: UNKNOWN_TOPIC_OR_PARTITION")
    body = {"topics": [{"name": topic, "partition_indexes": parts}]}
    r = decode(DESCRIBE_PRODUCERS, 0, send(bootstrap_server, DESCRIBE_PRODUCERS, 0, body))
    rows = []
    for p in r.topics[0].partitions:
        if (err := _error(p.error_code)) is not None:
            raise CliError(f"{topic}-{p.partition_index}: {err}")
        for s in p.active_producers:
            rows.append(
                {
                    "partition": int(p.partition_index),
                    "producer_id": int(s.producer_id),
                    "producer_epoch": int(s.producer_epoch),
                    "last_sequence": int(s.last_sequence),
                    "last_timestamp": int(s.last_timestamp),
                    "coordinator_epoch": int(s.coordinator_epoch),
                    "current_transaction_start_offset": int(s.current_txn_start_offset),
                }
            )
    if json_out:
        emit_json(rows)
        return
    if not rows:
        emit(f"No active producers on {topic}.")
        return
    print_table(
        ([*x.values()] for x in rows),
        [
            "PARTITION",
            "PRODUCER-ID",
            "PRODUCER-EPOCH",
            "LAST-SEQUENCE",
            "LAST-TIMESTAMP",
            "COORDINATOR-EPOCH",
            "CURRENT-TRANSACTION-START-OFFSET",
        ],
    )
