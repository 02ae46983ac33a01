"""``kompakt produce`` (stdin lines to a topic) and ``kompakt consume`` (a topic to stdout)."""

from __future__ import annotations

import base64
import signal
import sys
from collections.abc import Iterator
from enum import StrEnum
from typing import Annotated, Any, BinaryIO

import typer

from .backend import CliError, ConsumedRecord, ConsumeRequest, ProduceRequest, ProducerRecord
from .common import (
    INTERRUPTED,
    BootstrapServer,
    DataDir,
    JsonFlag,
    emit,
    emit_json,
    open_backend,
    print_warnings,
    text,
)


class Compression(StrEnum):
    none = "none"
    gzip = "gzip"
    snappy = "snappy"
    lz4 = "lz4"
    zstd = "zstd"


class ConsumeFormat(StrEnum):
    text = "text"
    json = "json"
    hex = "hex"


class IsolationLevel(StrEnum):
    """kafka-console-consumer's ``--isolation-level`` values."""

    read_committed = "read_committed"
    read_uncommitted = "read_uncommitted"


class Interruptible:
    """The lines of a stream until its end or until Ctrl-C, which ends it like EOF.

    ``kafka-console-producer`` closes its producer on Ctrl-C, and close sends what was
    already read; likewise the lines read before the interrupt are still written, then
    the command reports it was interrupted (``interrupted`` is set). While iterating,
    SIGINT only raises inside the blocking read; arriving while a record is being
    routed or written it just ends the input at the next line, so records already read
    are never dropped half-way. A second Ctrl-C once the input has ended interrupts
    the writing of the rest as usual.
    """

    def __init__(self, stream: BinaryIO):
        self._stream = stream
        self._reading = False
        self.interrupted = False

    def _on_sigint(self, _signum: int, _frame: object) -> None:
        self.interrupted = True
        if self._reading:
            raise KeyboardInterrupt

    def __iter__(self) -> Iterator[bytes]:
        try:
            previous = signal.signal(signal.SIGINT, self._on_sigint)
        except ValueError:  # not the main thread: Ctrl-C cannot be caught here anyway
            previous = None
        try:
            while not self.interrupted:
                self._reading = True
                try:
                    raw = self._stream.readline()
                except KeyboardInterrupt:
                    self.interrupted = True
                    return
                finally:
                    self._reading = False
                if not raw:
                    return
                yield raw
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)


def parse_lines(
    stream: BinaryIO | Interruptible,
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
    stream = Interruptible(typer.get_binary_stream("stdin"))
    records = parse_lines(
        stream,
        key_separator.encode(),
        None if tombstone is None else tombstone.encode(),
        partition,
    )
    with open_backend(data_dir, bootstrap_server) as backend:
        result = backend.produce(ProduceRequest(topic, records, batch_size, compression.value))
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
    elif not stream.interrupted:
        print(
            f"Produced {result.records} record(s) in {result.batches} batch(es) to {topic}.",
            file=sys.stderr,
        )
    if stream.interrupted:
        print(
            f"interrupted: produced the {result.records} record(s) read before it to {topic}",
            file=sys.stderr,
        )
        raise typer.Exit(INTERRUPTED)


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
    fmt: Annotated[
        ConsumeFormat | None,
        typer.Option(
            "--format",
            "-f",
            help="text: 'key<TAB>value', bytes that are not UTF-8 as \\xNN; "
            "hex: 'key<TAB>value' in hex; json: as --json.",
            show_default=False,
        ),
    ] = None,
    json_out: Annotated[
        bool,
        typer.Option(
            "--json",
            help="One JSON object a line: topic, partition, offset, timestamp, key, value, "
            "headers (same as --format json).",
        ),
    ] = False,
    isolation: Annotated[
        IsolationLevel,
        typer.Option(
            "--isolation-level",
            help="read_committed: leave out the records of aborted transactions and stop "
            "before any still open; read_uncommitted: every record up to the log end.",
        ),
    ] = IsolationLevel.read_committed,
) -> None:
    """Print a topic's records as 'key<TAB>value' lines.

    Keys and values are bytes and are never printed altered without a sign: in text
    (the default) a byte that is not part of valid UTF-8 prints as \\xNN (Python's
    backslashreplace); --format hex prints every byte as two hex digits; in --format
    json a key or value is a string when it is valid UTF-8, else base64 with
    "keyEncoding"/"valueEncoding": "base64" beside it.

    There is no live tail: reading starts at the log start offset (as with
    --from-beginning) unless --offset is given, and stops at the log end as it was when
    reading began. Partitions are read one after another in order. Null keys and values
    print as empty text ('null' in --json); transaction markers are skipped, and so,
    by default (--isolation-level read_committed, as a Kafka client reads), are the
    records of aborted transactions and of those still open. With --group
    (broker only) the group's committed offsets say where to start (the log start where
    there are none), partitions interleave, and the offsets after the printed records are
    committed at the end.

    With --data-dir it works offline on that data dir; otherwise it talks to the broker
    at --bootstrap-server (default 127.0.0.1:9092).
    """
    if from_beginning and offset is not None:
        raise CliError("use either --from-beginning or --offset, not both")
    if group is not None and data_dir is not None:  # before the data dir is even looked at
        raise CliError("--group needs a broker: consumer groups live on the broker")
    if json_out and fmt not in (None, ConsumeFormat.json):
        raise CliError(f"use either --json or --format {fmt.value}, not both")
    show = FORMATTERS[ConsumeFormat.json if json_out else fmt or ConsumeFormat.text]
    with open_backend(data_dir, bootstrap_server, read_only=True) as backend:
        request = ConsumeRequest(
            topic,
            partition,
            offset,
            max_messages,
            group,
            read_committed=isolation is IsolationLevel.read_committed,
        )
        records = backend.consume(request)
        print_warnings(backend)
        for r in records:
            show(r)


def json_bytes(data: bytes | None) -> tuple[str | None, str | None]:
    """(text, encoding) of a key or value for JSON: the UTF-8 string when the bytes are
    valid UTF-8 ("utf-8"), else base64 ("base64"); (None, None) for null."""
    if data is None:
        return None, None
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(data).decode("ascii"), "base64"


def record_json(r: ConsumedRecord) -> dict[str, Any]:
    """One consumed record as the JSON object ``consume --format json`` prints; a key,
    value or header value that is not valid UTF-8 is base64 and has a
    ``keyEncoding``/``valueEncoding`` field saying "base64" next to it (fields absent:
    UTF-8 text or null, as before binary data was handled)."""
    out: dict[str, Any] = {
        "topic": r.topic,
        "partition": r.partition,
        "offset": r.offset,
        "timestamp": r.timestamp,
    }
    _put(out, "key", r.key)
    _put(out, "value", r.value)
    headers = []
    for k, v in r.headers:
        h: dict[str, Any] = {"key": k}
        _put(h, "value", v)
        headers.append(h)
    out["headers"] = headers
    return out


def _put(obj: dict[str, Any], name: str, data: bytes | None) -> None:
    value, encoding = json_bytes(data)
    obj[name] = value
    if encoding == "base64":
        obj[f"{name}Encoding"] = encoding


def _hex(data: bytes | None) -> str:
    return "" if data is None else data.hex()


FORMATTERS = {
    ConsumeFormat.text: lambda r: emit(f"{text(r.key) or ''}\t{text(r.value) or ''}"),
    ConsumeFormat.hex: lambda r: emit(f"{_hex(r.key)}\t{_hex(r.value)}"),
    ConsumeFormat.json: lambda r: emit_json(record_json(r)),
}
