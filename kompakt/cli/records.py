"""``kompakt produce`` (stdin lines to a topic) and ``kompakt consume`` (a topic to stdout)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from enum import StrEnum
from typing import Annotated, BinaryIO

import typer

from .backend import CliError, ProducerRecord
from .common import (
    BootstrapServer,
    DataDir,
    JsonFlag,
    emit,
    emit_json,
    open_backend,
    text,
)


class Compression(StrEnum):
    none = "none"
    gzip = "gzip"
    snappy = "snappy"
    lz4 = "lz4"
    zstd = "zstd"


def parse_lines(
    stream: BinaryIO,
    separator: bytes,
    tombstone: bytes | None,
    partition: int | None,
) -> Iterator[ProducerRecord]:
    """``key<SEP>value`` lines as records; a line without the separator has a null key.

    The value equal to ``tombstone`` becomes a null value; empty lines are skipped.
    """
    for raw in stream:
        line = raw.rstrip(b"\n")
        if line.endswith(b"\r"):
            line = line[:-1]
        if not line:
            continue
        key, sep, value = line.partition(separator)
        if not sep:
            key, value = None, line
        yield ProducerRecord(key, None if value == tombstone else value, partition=partition)


def produce(
    topic: Annotated[str, typer.Argument(help="Topic to append to.")],
    data_dir: DataDir = None,
    bootstrap_server: BootstrapServer = None,
    key_separator: Annotated[
        str, typer.Option("--key-separator", help="Separates key from value in a line.")
    ] = "\t",
    tombstone: Annotated[
        str | None,
        typer.Option("--tombstone", help="A value equal to this is written as null (delete)."),
    ] = None,
    partition: Annotated[
        int | None,
        typer.Option("--partition", "-p", help="Partition for every record (default: by key)."),
    ] = None,
    batch_size: Annotated[
        int, typer.Option("--batch-size", min=1, help="Records per batch and partition.")
    ] = 100,
    compression: Annotated[
        Compression, typer.Option("--compression", help="Batch compression codec.")
    ] = Compression.none,
    json_out: JsonFlag = False,
) -> None:
    """Append stdin lines 'key<TAB>value' to a topic.

    A line without the separator has a null key (refused by compacted topics). Without
    --partition a keyed record goes where Kafka's default partitioner puts it
    (murmur2(key) % partitions) and null keys go round-robin. Empty lines are skipped.
    Prints a summary to stderr (or to stdout with --json). To a broker it sends with
    acks=all and idempotence.

    With --data-dir it works offline on that data dir; otherwise it talks to the broker
    at --bootstrap-server (default 127.0.0.1:9092).
    """
    if not key_separator:
        raise CliError("--key-separator must not be empty")
    stream = typer.get_binary_stream("stdin")
    records = parse_lines(
        stream,
        key_separator.encode(),
        None if tombstone is None else tombstone.encode(),
        partition,
    )
    with open_backend(data_dir, bootstrap_server) as backend:
        result = backend.produce(
            topic, records, batch_size=batch_size, compression=compression.value
        )
    if json_out:
        emit_json(
            {
                "topic": result.topic,
                "records": result.records,
                "batches": result.batches,
                "partitions": [
                    {
                        "partition": w.partition,
                        "firstOffset": w.first_offset,
                        "lastOffset": w.last_offset,
                        "records": w.records,
                    }
                    for _p, w in sorted(result.partitions.items())
                ],
            }
        )
    else:
        print(
            f"Produced {result.records} record(s) in {result.batches} batch(es) to {topic}.",
            file=sys.stderr,
        )


def consume(
    topic: Annotated[str, typer.Argument(help="Topic to read.")],
    data_dir: DataDir = None,
    bootstrap_server: BootstrapServer = None,
    group: Annotated[
        str | None,
        typer.Option(
            "--group",
            "-g",
            help="Consume as a member of this consumer group (broker only): start at its "
            "committed offsets and commit what was printed.",
        ),
    ] = None,
    partition: Annotated[
        int | None, typer.Option("--partition", "-p", help="Only this partition.")
    ] = None,
    from_beginning: Annotated[
        bool,
        typer.Option("--from-beginning", help="Start at the log start offset (the default)."),
    ] = False,
    offset: Annotated[
        int | None, typer.Option("--offset", min=0, help="Start at this offset in each partition.")
    ] = None,
    max_messages: Annotated[
        int | None, typer.Option("--max-messages", "-n", min=0, help="Stop after N records.")
    ] = None,
    json_out: Annotated[
        bool,
        typer.Option(
            "--json",
            help="One JSON object a line: topic, partition, offset, timestamp, key, value, headers.",
        ),
    ] = False,
) -> None:
    """Print a topic's records as 'key<TAB>value' lines.

    There is no live tail: reading starts at the log start offset (as with
    --from-beginning) unless --offset is given, and stops at the log end as it was when
    reading began. Partitions are read one after another in order. Null keys and values
    print as empty text ('null' in --json); transaction markers are skipped. With --group
    (broker only) the group's committed offsets say where to start (the log start where
    there are none), partitions interleave, and the offsets after the printed records are
    committed at the end.

    With --data-dir it works offline on that data dir; otherwise it talks to the broker
    at --bootstrap-server (default 127.0.0.1:9092).
    """
    if from_beginning and offset is not None:
        raise CliError("use either --from-beginning or --offset, not both")
    with open_backend(data_dir, bootstrap_server) as backend:
        for r in backend.consume(
            topic, partition=partition, offset=offset, max_messages=max_messages, group=group
        ):
            if json_out:
                emit_json(
                    {
                        "topic": r.topic,
                        "partition": r.partition,
                        "offset": r.offset,
                        "timestamp": r.timestamp,
                        "key": text(r.key),
                        "value": text(r.value),
                        "headers": [{"key": k, "value": text(v)} for k, v in r.headers],
                    }
                )
            else:
                emit(f"{text(r.key) or ''}\t{text(r.value) or ''}")
