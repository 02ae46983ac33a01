"""What the CLI verbs do, behind a small interface with one implementation per transport.

The typer commands parse arguments, call a :class:`Backend` and print the plain
dataclasses it returns. :class:`OfflineBackend` changes a data dir through the embedded
``LogManager``; :class:`DataDirReader` reads one without changing a byte (the read-only
verbs: ``topic list``/``describe``, ``consume``); a broker backend
(``--bootstrap-server``) implements the same methods over the Kafka protocol. Backends
are context managers: leaving the ``with`` releases what they hold (for the offline one:
closes the ``LogManager``, which writes the clean-shutdown marker and releases the data
dir's ``.lock``).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from kompakt.errors import InvalidRecordError, KompaktError, LogDirLockedError, UnknownTopicError
from kompakt.log.config import DYNAMIC_TOPIC_CONFIG, TopicConfig
from kompakt.record import codecs
from kompakt.record.decode import iter_batches
from kompakt.record.encode import build_simple_batch
from kompakt.record.header import LOG_OVERHEAD
from kompakt.record.partitioner import partition_for_key

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

    def produce(
        self,
        topic: str,
        records: Iterable[ProducerRecord],
        *,
        batch_size: int = 100,
        compression: str = "none",
    ) -> ProduceResult: ...

    def consume(
        self,
        topic: str,
        *,
        partition: int | None = None,
        offset: int | None = None,
        max_messages: int | None = None,
        group: str | None = None,
    ) -> Iterator[ConsumedRecord]: ...


def check_produce_options(batch_size: int, compression: str) -> None:
    """The produce options every transport accepts (the same errors either way)."""
    if batch_size < 1:
        raise CliError(f"batch size must be at least 1, got {batch_size}")
    if compression not in COMPRESSIONS:
        raise CliError(f"unknown compression {compression!r}; use one of {COMPRESSIONS}")


def null_key_error(index: int, topic: str) -> InvalidRecordError:
    return InvalidRecordError(
        f"record {index}: compacted topic '{topic}' cannot accept a record without key"
    )


def no_partition_error(topic: str, partition: int, n_parts: int) -> UnknownTopicError:
    return UnknownTopicError(
        f"partition {partition} of topic '{topic}' does not exist (it has {n_parts} partitions)"
    )


def route(
    records: Iterable[ProducerRecord], topic: str, n_parts: int, compact: bool
) -> Iterator[tuple[int, ProducerRecord]]:
    """(partition, record) as Kafka's default partitioner picks: murmur2 of a key,
    round-robin for null keys; a null key on a compacted topic is refused (INVALID_RECORD)."""
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
    done = f"{written} earlier records were written" if written else "nothing was written"
    return type(exc)(f"{exc} ({done})")


# -- which folders are data dirs ----------------------------------------------------------


def require_data_dir(data_dir: Path) -> None:
    """Refuse, in one line, a ``--data-dir`` that is missing, a file, or a folder that
    was never a data dir, before anything opens it: opening would make it one (``.lock``,
    ``meta.properties``, checkpoints, and a partition for every ``NAME-N`` folder)."""
    from kompakt.log.manager import is_data_dir

    if not data_dir.exists():
        raise CliError(f"data dir '{data_dir}' does not exist")
    if not data_dir.is_dir():
        raise CliError(f"data dir '{data_dir}' is not a directory")
    if not is_data_dir(data_dir):
        raise CliError(
            f"'{data_dir}' is not a kompakt data dir (no meta.properties, "
            f"kompakt-topics.json or topic folders)"
        )


def check_new_data_dir(data_dir: Path) -> None:
    """Where a new data dir may be made (``topic create``; as Kafka formats an empty log
    dir): a missing or empty folder, or an existing data dir; never a folder that holds
    other things, whose ``NAME-N`` sub-folders would be taken for partitions."""
    if not data_dir.exists():
        return
    if not data_dir.is_dir():
        raise CliError(f"data dir '{data_dir}' is not a directory")
    # a freshly formatted volume's root holds only lost+found (no '-': never a partition)
    if not [p for p in data_dir.iterdir() if p.name != "lost+found"]:
        return
    from kompakt.log.manager import is_data_dir

    if not is_data_dir(data_dir):
        raise CliError(
            f"'{data_dir}' is not empty and not a kompakt data dir: "
            "refusing to make a data dir there (use a new or empty folder)"
        )


# -- the offline backend: a data dir through LogManager ----------------------------------


def limit(records: Iterator[ConsumedRecord], max_messages: int | None) -> Iterator[ConsumedRecord]:
    """At most ``max_messages`` records (all without a limit, none for a limit <= 0),
    pulled lazily so a reader stops at the limit."""
    if max_messages is None:
        return records
    return itertools.islice(records, max(max_messages, 0))


def offline_partitions(
    topic: str, n_parts: int, partition: int | None, offset: int | None, group: str | None
) -> list[int]:
    """The partitions an offline consume reads, after the checks both offline readers share
    (no groups without a broker, an existing partition, a non-negative offset)."""
    if group is not None:
        raise CliError("--group needs a broker: consumer groups live on the broker")
    if partition is not None and not 0 <= partition < n_parts:
        raise no_partition_error(topic, partition, n_parts)
    if offset is not None and offset < 0:
        raise CliError(f"offset must be >= 0, got {offset}")
    return [partition] if partition is not None else list(range(n_parts))


class OfflineBackend:
    """The verbs on a data dir, through ``kompakt.log.manager.LogManager``.

    Only one process may open a data dir (its ``.lock``): this fails with
    ``LogDirLockedError`` while a broker or another command holds it. ``create=False``
    refuses a folder that is not already a data dir instead of making one;
    ``create=True`` makes one only in a missing or empty folder.
    """

    def __init__(self, data_dir: str | Path, *, create: bool = False, clock=None):
        self.data_dir = Path(data_dir)
        self._create = create
        self._clock = clock or (lambda: int(time.time() * 1000))
        self._logs = None
        self.warnings: list[str] = []

    def __enter__(self) -> OfflineBackend:
        from kompakt.log.manager import LogManager

        if self._create:
            check_new_data_dir(self.data_dir)
        else:
            require_data_dir(self.data_dir)
        self._logs = LogManager(self.data_dir, clock=self._clock)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._logs is not None:
            logs, self._logs = self._logs, None
            logs.close()

    @property
    def logs(self):
        if self._logs is None:
            raise RuntimeError("OfflineBackend used outside its 'with' block")
        return self._logs

    # -- topics ---------------------------------------------------------------------------
    def create_topic(self, name: str, partitions: int, configs: Mapping[str, str]) -> TopicSummary:
        meta = self.logs.create_topic(name, partitions, dict(configs))
        return TopicSummary(meta.name, meta.partitions, meta.topic_id)

    def alter_topic(
        self, name: str, set: Mapping[str, str], delete: Sequence[str]
    ) -> dict[str, str]:
        return self.logs.alter_topic_config(name, dict(set), list(delete)).overrides

    def describe_topics(self, names: Sequence[str] | None = None) -> list[TopicDescription]:
        names = list(names) if names else self.logs.topics()
        out = []
        for name in names:
            meta = self.logs.topic_meta(name)
            config = self.logs.topic_config(name)
            configs = [
                ConfigValue(e.name, e.value, e.source, e.source == DYNAMIC_TOPIC_CONFIG)
                for e in config.describe()
            ]
            parts = []
            for p in range(meta.partitions):
                plog = self.logs.get_log(name, p)
                parts.append(
                    PartitionDescription(
                        p,
                        plog.log_start_offset,
                        plog.log_end_offset,
                        plog.size_bytes(),
                        len(plog.segments),
                    )
                )
            out.append(TopicDescription(name, meta.topic_id, meta.partitions, configs, parts))
        return out

    def list_topics(self) -> list[TopicSummary]:
        return [
            TopicSummary(m.name, m.partitions, m.topic_id)
            for m in (self.logs.topic_meta(n) for n in self.logs.topics())
        ]

    def delete_topic(self, name: str) -> None:
        self.logs.delete_topic(name)

    # -- records --------------------------------------------------------------------------
    def produce(
        self,
        topic: str,
        records: Iterable[ProducerRecord],
        *,
        batch_size: int = 100,
        compression: str = "none",
    ) -> ProduceResult:
        """Append records in batches of ``batch_size`` per partition, streaming.

        A record the topic refuses (a null key on a compacted topic, a partition out of
        range) fails the call before its batch is written; batches completed before it
        stay written, and the error says how many records that was.
        """
        check_produce_options(batch_size, compression)
        codec = codecs.codec_id(compression)
        n_parts = self.logs.partition_count(topic)
        compact = self.logs.topic_config(topic).compact
        result = ProduceResult(topic)

        def write(part: int, items: list[ProducerRecord]) -> None:
            batch = build_simple_batch(
                [(r.key, r.value, tuple(r.headers)) for r in items],
                timestamp=self._clock(),
                compression=codec,
            )
            info = self.logs.get_log(topic, part).append(batch)
            w = result.partitions.get(part)
            if w is None:
                w = result.partitions[part] = PartitionWrite(part, info.first_offset, -1, 0)
            w.last_offset = info.last_offset
            w.records += info.record_count
            result.records += info.record_count
            result.batches += 1

        try:
            for part, items in batches(records, topic, n_parts, compact, batch_size):
                write(part, items)
        except KompaktError as exc:
            raise partial_write_error(exc, result.records) from exc
        return result

    def consume(
        self,
        topic: str,
        *,
        partition: int | None = None,
        offset: int | None = None,
        max_messages: int | None = None,
        group: str | None = None,
    ) -> Iterator[ConsumedRecord]:
        """Records of one or every partition (in partition order), from ``offset`` or the
        log start; control batches (transaction markers) are skipped."""
        parts = offline_partitions(
            topic, self.logs.partition_count(topic), partition, offset, group
        )
        return limit(self._consume(topic, parts, offset), max_messages)

    def _consume(
        self, topic: str, parts: list[int], offset: int | None
    ) -> Iterator[ConsumedRecord]:
        for part in parts:
            plog = self.logs.get_log(topic, part)
            start = max(offset or 0, plog.log_start_offset)
            for batch in plog.iter_batches(start):
                if batch.header.is_control:
                    continue
                for r in batch.records():
                    if r.offset < start:
                        continue
                    yield ConsumedRecord(
                        topic, part, r.offset, r.timestamp, r.key, r.value, list(r.headers)
                    )


# -- the read-only offline backend: a data dir as files ----------------------------------


def _read_only(verb: str) -> CliError:
    return CliError(f"{verb} changes the data dir; this reader only reads it")


class DataDirReader:
    """The read-only verbs on a data dir, straight from its files, changing nothing.

    A ``LogManager`` cannot open a dir without writing to it (meta.properties,
    checkpoints, index preallocation, recovery), so the readers never use one: topics
    come from ``kompakt-topics.json`` widened by the ``TOPIC-N`` folders (as
    ``LogManager`` loads them), offsets and records from the segment files opened
    read-only. The data dir's ``.lock`` is held shared while reading, so a dir owned by
    a running broker is refused (use ``--bootstrap-server`` for it) and no broker or
    offline writer can start until the read is done. Recovery is not run: a dir that
    was not shut down cleanly is shown as it is on disk, with a warning.
    """

    def __init__(self, data_dir: str | Path):
        self.data_dir = Path(data_dir)
        self.warnings: list[str] = []
        self._stack: contextlib.ExitStack | None = None
        self._topics: dict[str, tuple[int, str, dict[str, str]]] = {}

    def __enter__(self) -> DataDirReader:
        from kompakt.log.manager import CLEAN_SHUTDOWN_FILE, shared_dir_lock

        require_data_dir(self.data_dir)
        stack = contextlib.ExitStack()
        try:
            stack.enter_context(shared_dir_lock(self.data_dir))
        except LogDirLockedError as exc:
            raise LogDirLockedError(
                f"{exc}; to read a broker's topics use --bootstrap-server instead"
            ) from None
        self._stack = stack
        try:
            self._topics = self._load_topics()
        except BaseException:
            stack.close()
            raise
        if self._topics and not (self.data_dir / CLEAN_SHUTDOWN_FILE).exists():
            self.warnings.append(
                f"data dir {self.data_dir} was not shut down cleanly: it is shown as it is "
                "on disk (the next start of a broker on it runs recovery)"
            )
        return self

    def __exit__(self, *exc: object) -> None:
        if self._stack is not None:
            stack, self._stack = self._stack, None
            stack.close()

    def _load_topics(self) -> dict[str, tuple[int, str, dict[str, str]]]:
        from kompakt.log.manager import TOPICS_FILE, parse_partition_dir
        from kompakt.log.names import invalid_topic_reason

        out: dict[str, tuple[int, str, dict[str, str]]] = {}
        path = self.data_dir / TOPICS_FILE
        if path.exists():
            try:
                for name, m in json.loads(path.read_text()).items():
                    if invalid_topic_reason(name) is None:  # a name from a file is no path
                        out[name] = (int(m["partitions"]), m["topic_id"], dict(m["configs"]))
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                raise CliError(f"cannot read {path}: not kompakt's topics file ({exc})") from None
        for p in self.data_dir.iterdir():
            parsed = parse_partition_dir(p.name) if p.is_dir() else None
            if parsed is None or invalid_topic_reason(parsed[0]) is not None:
                continue
            topic, part = parsed
            n, topic_id, configs = out.get(topic, (0, "", {}))
            if not topic_id:
                topic_id = _folder_topic_id(p)
            out[topic] = (max(n, part + 1), topic_id, configs)
        return out

    def _require(self, name: str) -> tuple[int, str, dict[str, str]]:
        try:
            return self._topics[name]
        except KeyError:
            raise UnknownTopicError(f"unknown topic {name!r}") from None

    # -- topics --------------------------------------------------------------------------
    def create_topic(self, name: str, partitions: int, configs: Mapping[str, str]) -> TopicSummary:
        raise _read_only("topic create")

    def alter_topic(
        self, name: str, set: Mapping[str, str], delete: Sequence[str]
    ) -> dict[str, str]:
        raise _read_only("topic alter")

    def delete_topic(self, name: str) -> None:
        raise _read_only("topic delete")

    def list_topics(self) -> list[TopicSummary]:
        return [TopicSummary(n, t[0], t[1]) for n, t in sorted(self._topics.items())]

    def describe_topics(self, names: Sequence[str] | None = None) -> list[TopicDescription]:
        from kompakt.pipeline.layout import (
            log_start_offsets,
            offset_bounds,
            partition_dir,
            segment_path,
        )

        starts = log_start_offsets(self.data_dir)
        out = []
        for name in list(names) if names else sorted(self._topics):
            n_parts, topic_id, overrides = self._require(name)
            configs = [
                ConfigValue(e.name, e.value, e.source, e.source == DYNAMIC_TOPIC_CONFIG)
                for e in TopicConfig(overrides).describe()
            ]
            parts = []
            for p in range(n_parts):
                start, end, bases = offset_bounds(self.data_dir, name, p, starts)
                pdir = partition_dir(self.data_dir, name, p)
                size = sum(_file_size(segment_path(pdir, b)) for b in bases)
                parts.append(PartitionDescription(p, start, end, size, len(bases)))
            out.append(TopicDescription(name, topic_id, n_parts, configs, parts))
        return out

    # -- records --------------------------------------------------------------------------
    def produce(
        self,
        topic: str,
        records: Iterable[ProducerRecord],
        *,
        batch_size: int = 100,
        compression: str = "none",
    ) -> ProduceResult:
        raise _read_only("produce")

    def consume(
        self,
        topic: str,
        *,
        partition: int | None = None,
        offset: int | None = None,
        max_messages: int | None = None,
        group: str | None = None,
    ) -> Iterator[ConsumedRecord]:
        """As :meth:`OfflineBackend.consume`: records of one or every partition in
        partition order, from ``offset`` or the log start, up to the log end as it was
        when reading began; control batches (transaction markers) skipped."""
        parts = offline_partitions(topic, self._require(topic)[0], partition, offset, group)
        return limit(self._consume(topic, parts, offset), max_messages)

    def _consume(
        self, topic: str, parts: list[int], offset: int | None
    ) -> Iterator[ConsumedRecord]:
        from kompakt.pipeline.layout import (
            log_start_offsets,
            offset_bounds,
            partition_dir,
            segment_path,
            segments_covering,
        )

        starts = log_start_offsets(self.data_dir)
        for part in parts:
            log_start, end, bases = offset_bounds(self.data_dir, topic, part, starts)
            begin = max(offset or 0, log_start)
            pdir = partition_dir(self.data_dir, topic, part)
            for base in segments_covering(bases, begin, end):
                for batch in _file_batches(segment_path(pdir, base)):
                    if batch.header.last_offset < begin or batch.header.is_control:
                        continue
                    if batch.header.base_offset >= end:
                        break
                    for r in batch.records():
                        if not begin <= r.offset < end:
                            continue
                        yield ConsumedRecord(
                            topic, part, r.offset, r.timestamp, r.key, r.value, list(r.headers)
                        )


def _folder_topic_id(part_dir: Path) -> str:
    """The topic id Kafka keeps in ``partition.metadata`` ("" without one)."""
    try:
        text = (part_dir / "partition.metadata").read_text()
    except OSError:
        return ""
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "topic_id":
            return value.strip()
    return ""


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _file_batches(path: Path, chunk: int = 1 << 20):
    """Whole batches of a ``.log`` file read through a read-only descriptor, a chunk at
    a time (a torn tail ends the file quietly, as in Kafka's batch iterator)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        end = os.fstat(fd).st_size
        pos = 0
        while pos + LOG_OVERHEAD <= end:
            data = os.pread(fd, min(chunk, end - pos), pos)
            last_end = 0
            for b in iter_batches(data):
                yield b
                last_end = b.position + b.header.size
            if last_end == 0:  # a batch bigger than the chunk, or a torn tail
                length = int.from_bytes(os.pread(fd, LOG_OVERHEAD, pos)[8:12], "big")
                if pos + length + LOG_OVERHEAD > end or length + LOG_OVERHEAD <= chunk:
                    return
                chunk = length + LOG_OVERHEAD
                continue
            pos += last_end
    finally:
        os.close(fd)
