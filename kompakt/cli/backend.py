"""What the CLI verbs do, behind a small interface with one implementation per transport.

The typer commands parse arguments, call a :class:`Backend` and print the plain
dataclasses it returns. This module is that interface: the values passed both ways,
the :class:`Backend` protocol, and the rules every transport applies (how records are
routed and batched, which partitions a consume reads), so
each rule is written once. The transports live beside it:
:class:`~kompakt.cli.offline.OfflineBackend` changes a data dir through the embedded
``LogManager``; :class:`~kompakt.cli.reader.DataDirReader` reads one without changing a
byte (the read-only verbs: ``topic list``/``describe``, ``consume``);
:class:`~kompakt.cli.broker_backend.BrokerBackend` (``--bootstrap-server``) implements
the same methods over the Kafka protocol. Backends are context managers: leaving the
``with`` releases what they hold.

Nothing here imports the log or record layers at module level: ``kompakt --help`` must
start without numba, pyarrow or pyspark (they load when a verb runs).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from kompakt.errors import InvalidRecordError, KompaktError, UnknownTopicError

COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")


class CliError(KompaktError):
    """A fault in the command line's input (bad ``key=value``, missing data dir, ...)."""


# -- values passed between the commands and a backend -----------------------------------


@dataclass
class ConfigValue:
    name: str
    value: str | None
    source: str
    override: bool  # set on the topic itself, not inherited from broker or Kafka defaults

    @classmethod
    def of(cls, name: str, value: str | None, source: str) -> ConfigValue:
        """A config as DescribeConfigs names its source; an override is one whose source
        is the topic (Kafka's ``DYNAMIC_TOPIC_CONFIG``), offline and from a broker."""
        from kompakt.log.config import DYNAMIC_TOPIC_CONFIG

        return cls(name, value, source, source == DYNAMIC_TOPIC_CONFIG)


@dataclass
class PartitionDescription:
    """One partition's offsets and size; the compaction fields come from a broker's admin
    endpoint (``GET /v1/partitions``) and are None offline, when that endpoint cannot be
    reached, or (dirty ratio, tombstones) for a topic that is not compacted."""

    partition: int
    start_offset: int
    end_offset: int
    size_bytes: int | None
    segments: int | None
    dirty_ratio: float | None = None
    last_compaction_ms: int | None = None
    tombstones_pending: int | None = None
    uncleanable_reason: str | None = None


@dataclass
class TopicSummary:
    name: str
    partitions: int
    topic_id: str


@dataclass
class TopicDescription:
    name: str
    topic_id: str
    partition_count: int
    configs: list[ConfigValue]
    partitions: list[PartitionDescription]


@dataclass
class ProducerRecord:
    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes | None]] = ()
    partition: int | None = None  # None: Kafka's default partitioner decides


@dataclass
class PartitionWrite:
    partition: int
    first_offset: int
    last_offset: int
    records: int


@dataclass
class ProduceResult:
    topic: str
    records: int = 0
    batches: int = 0
    partitions: dict[int, PartitionWrite] = field(default_factory=dict)


@dataclass
class ConsumedRecord:
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]

    @classmethod
    def of(cls, topic: str, partition: int, record: Any) -> ConsumedRecord:
        """A decoded record of a data dir (``kompakt.record``'s Record) as printed."""
        r = record
        return cls(topic, partition, r.offset, r.timestamp, r.key, r.value, list(r.headers))


@dataclass
class GroupSummary:
    group_id: str
    state: str  # Kafka's names: Empty, Stable, PreparingRebalance, CompletingRebalance, Dead
    type: str


@dataclass
class GroupMember:
    member_id: str
    client_id: str
    host: str
    group_instance_id: str | None
    assignment: list[tuple[str, int]]


@dataclass
class GroupPartitionLag:
    topic: str
    partition: int
    committed_offset: int | None  # None: nothing committed for this partition
    end_offset: int | None  # None: the topic is gone
    lag: int | None
    member_id: str | None  # the member it is assigned to, if any


@dataclass
class GroupDescription:
    group_id: str
    state: str
    assignor: str
    members: list[GroupMember]
    partitions: list[GroupPartitionLag]


@dataclass
class OffsetReset:
    topic: str
    partition: int
    previous_offset: int | None
    new_offset: int


@dataclass
class ProduceRequest:
    """What ``produce`` sends: the records (a stream, read lazily) and how to batch them.

    The options are checked here, so every transport refuses the same values with the
    same error (Kafka's producer validates its config before the first send too).
    """

    topic: str
    records: Iterable[ProducerRecord]
    batch_size: int = 100
    compression: str = "none"

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise CliError(f"batch size must be at least 1, got {self.batch_size}")
        if self.compression not in COMPRESSIONS:
            raise CliError(f"unknown compression {self.compression!r}; use one of {COMPRESSIONS}")

    def batches(self, n_parts: int, compact: bool) -> Iterator[tuple[int, list[ProducerRecord]]]:
        """(partition, records) to send, as :func:`batches` cuts them."""
        return batches(self.records, self.topic, n_parts, compact, self.batch_size)


@dataclass(frozen=True)
class ConsumeRequest:
    """What ``consume`` reads: a topic, optionally one partition, a start offset, a
    record limit, (broker only) the consumer group to read as, and the isolation."""

    topic: str
    partition: int | None = None
    offset: int | None = None
    max_messages: int | None = None
    group: str | None = None
    read_committed: bool = True
    """Kafka's ``isolation.level``: leave out records of aborted transactions and stop
    at the last stable offset (librdkafka's default, so the broker and the data dir
    read alike); False reads every data record up to the log end."""

    def partitions(self, n_parts: int) -> list[int]:
        """The partitions to read, in order, after the checks every transport makes (an
        existing partition, a non-negative offset)."""
        parts = select_partitions(self.topic, self.partition, n_parts)
        if self.offset is not None and self.offset < 0:
            raise CliError(f"offset must be >= 0, got {self.offset}")
        return parts

    def offline_partitions(self, n_parts: int) -> list[int]:
        """:meth:`partitions` for a data dir, which has no consumer groups."""
        if self.group is not None:
            raise CliError("--group needs a broker: consumer groups live on the broker")
        return self.partitions(n_parts)

    def limit(self, records: Iterator[ConsumedRecord]) -> Iterator[ConsumedRecord]:
        """``records`` cut at ``max_messages``, as :func:`limit` does."""
        return limit(records, self.max_messages)


class Backend(Protocol):
    """The verbs the CLI needs; each transport implements all of them.

    ``warnings`` collects one-line notes for the user (e.g. a broker's admin endpoint
    that could not be reached); the commands print them on stderr.
    """

    warnings: list[str]

    def __enter__(self) -> Backend: ...

    def __exit__(self, *exc: object) -> None: ...

    def create_topic(
        self, name: str, partitions: int, configs: Mapping[str, str]
    ) -> TopicSummary: ...

    def alter_topic(
        self, name: str, set: Mapping[str, str], delete: Sequence[str]
    ) -> dict[str, str]: ...

    def describe_topics(self, names: Sequence[str] | None = None) -> list[TopicDescription]: ...

    def list_topics(self) -> list[TopicSummary]: ...

    def delete_topic(self, name: str) -> None: ...

    def produce(self, request: ProduceRequest) -> ProduceResult: ...

    def consume(self, request: ConsumeRequest) -> Iterator[ConsumedRecord]: ...


def null_key_error(index: int, topic: str) -> InvalidRecordError:
    return InvalidRecordError(
        f"record {index}: compacted topic '{topic}' cannot accept a record without key"
    )


def no_partition_error(topic: str, partition: int, n_parts: int) -> UnknownTopicError:
    return UnknownTopicError(
        f"partition {partition} of topic '{topic}' does not exist (it has {n_parts} partitions)"
    )


def select_partitions(topic: str, partition: int | None, n_parts: int) -> list[int]:
    """``[partition]`` when it exists, every partition of the topic for None."""
    if partition is None:
        return list(range(n_parts))
    if not 0 <= partition < n_parts:
        raise no_partition_error(topic, partition, n_parts)
    return [partition]


def route(
    records: Iterable[ProducerRecord], topic: str, n_parts: int, compact: bool
) -> Iterator[tuple[int, ProducerRecord]]:
    """(partition, record) as Kafka's default partitioner picks: murmur2 of a key,
    round-robin for null keys; a null key on a compacted topic is refused (INVALID_RECORD)."""
    from kompakt.record.partitioner import partition_for_key  # numba: not at CLI start

    round_robin = 0
    for i, rec in enumerate(records, 1):
        if rec.key is None and compact:
            raise null_key_error(i, topic)
        part = rec.partition
        if part is None:
            if rec.key is None:
                part, round_robin = round_robin % n_parts, round_robin + 1
            else:
                part = partition_for_key(rec.key, n_parts)
        elif not 0 <= part < n_parts:
            raise no_partition_error(topic, part, n_parts)
        yield part, rec


def batches(
    records: Iterable[ProducerRecord], topic: str, n_parts: int, compact: bool, batch_size: int
) -> Iterator[tuple[int, list[ProducerRecord]]]:
    """(partition, up to ``batch_size`` records) in :func:`route`'s partitions: a batch
    as soon as a partition has ``batch_size`` records, the rest at the end in partition
    order. Both transports send what this yields, so they batch alike."""
    pending: dict[int, list[ProducerRecord]] = {}
    for part, rec in route(records, topic, n_parts, compact):
        items = pending.setdefault(part, [])
        items.append(rec)
        if len(items) >= batch_size:
            yield part, pending.pop(part)
    for part in sorted(pending):
        yield part, pending.pop(part)


def partial_write_error(exc: KompaktError, written: int) -> KompaktError:
    """``exc`` saying how much of a produce had been written when it failed."""
    done = (
        f"{written} records were written, not necessarily the first {written} lines: "
        "each partition's batches go on their own"
        if written
        else "nothing was written"
    )
    return type(exc)(f"{exc} ({done})")


def limit(records: Iterator[ConsumedRecord], max_messages: int | None) -> Iterator[ConsumedRecord]:
    """At most ``max_messages`` records (all without a limit, none for a limit <= 0),
    pulled lazily so a reader stops at the limit.

    ``records`` is closed as soon as the limit is reached, not when it is garbage
    collected: a broker consumer commits what was printed and closes in its ``finally``,
    and that must happen (and any error in it be raised) before the command goes on.
    """
    if max_messages is None:
        return records
    return _take(records, max(max_messages, 0))


def _take(records: Iterator[ConsumedRecord], n: int) -> Iterator[ConsumedRecord]:
    try:
        yield from itertools.islice(records, n)
    finally:
        close = getattr(records, "close", None)
        if close is not None:
            close()


def offline_tiered(topic: str, verb: str) -> str:
    """The warning of an offline verb reading a tiered topic: the data dir holds only
    what was not tiered yet (and what local retention kept)."""
    return (
        f"topic {topic!r} is tiered (remote.storage.enable=true): offline, {verb} reads "
        "only its local segments, not what the tier alone holds; go through a broker "
        "(--bootstrap-server) for the whole log"
    )
