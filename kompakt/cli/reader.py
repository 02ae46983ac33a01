"""The read-only offline backend: a data dir read straight from its files.

A ``LogManager`` cannot open a dir without writing to it, so the read-only verbs
(``topic list``/``describe``, ``consume`` with ``--data-dir``) use
:class:`DataDirReader`, which opens every file read-only.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from kompakt.errors import LogDirLockedError, UnknownTopicError
from kompakt.log.config import TopicConfig
from kompakt.log.data_dir import require_data_dir
from kompakt.log.syncs import batches_before_zeros
from kompakt.record.decode import RecordBatch
from kompakt.record.header import LOG_OVERHEAD

from .backend import (
    CliError,
    ConfigValue,
    ConsumedRecord,
    ConsumeRequest,
    PartitionDescription,
    ProduceRequest,
    ProduceResult,
    TopicDescription,
    TopicSummary,
    offline_tiered,
)


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
                ConfigValue.of(e.name, e.value, e.source) for e in TopicConfig(overrides).describe()
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
    def produce(self, request: ProduceRequest) -> ProduceResult:
        raise _read_only("produce")

    def consume(self, request: ConsumeRequest) -> Iterator[ConsumedRecord]:
        """As :meth:`OfflineBackend.consume`: records of one or every partition in
        partition order, from ``offset`` or the log start, up to the log end as it was
        when reading began (read_committed: up to the last stable offset, without the
        records of aborted transactions); control batches (transaction markers)
        skipped."""
        n_parts, _topic_id, overrides = self._require(request.topic)
        parts = request.offline_partitions(n_parts)
        if TopicConfig(overrides).remote_storage_enable:
            self.warnings.append(offline_tiered(request.topic, "consume"))
        return request.limit(self._consume(request, parts))

    def _consume(self, request: ConsumeRequest, parts: list[int]) -> Iterator[ConsumedRecord]:
        from kompakt.log.txn_index import aborted_by_producer, consumer_records
        from kompakt.pipeline.layout import (
            cleaned_offsets,
            log_start_offsets,
            offset_bounds,
            partition_dir,
            segment_path,
            segments_covering,
        )
        from kompakt.pipeline.plan import committed_view

        topic, offset = request.topic, request.offset
        starts = log_start_offsets(self.data_dir)
        cleaned = cleaned_offsets(self.data_dir) if request.read_committed else {}
        for part in parts:
            log_start, end, bases = offset_bounds(self.data_dir, topic, part, starts)
            begin = max(offset or 0, log_start)
            pdir = partition_dir(self.data_dir, topic, part)
            aborted: dict[int, list[tuple[int, int]]] = {}
            if request.read_committed:  # as the Spark source reads it (plan_ranges)
                unstable, found = committed_view(pdir, cleaned.get((topic, part), 0))
                aborted = aborted_by_producer(found)
                if unstable is not None:  # READ_COMMITTED stops at the last stable offset
                    end = min(end, max(unstable, log_start))
            batches = (
                _checked(batch)
                for base in segments_covering(bases, begin, end)
                for batch in _file_batches(segment_path(pdir, base))
            )
            for r in consumer_records(batches, begin, end, aborted):
                yield ConsumedRecord.of(topic, part, r)


def _checked(batch: RecordBatch) -> RecordBatch:
    """The batch once its CRC holds: a reader prints no record of a corrupt batch
    (Kafka's consumer, ``check.crcs`` true by default: CorruptRecordException)."""
    batch.ensure_valid()
    return batch


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
            last_end = yield from batches_before_zeros(
                data, lambda e, at=pos: os.pread(fd, end - at - e, at + e)
            )
            if last_end is None:  # zeros a live or crashed segment was written ahead with
                return
            if last_end == 0:  # a batch bigger than the chunk, or a torn tail
                length = int.from_bytes(os.pread(fd, LOG_OVERHEAD, pos)[8:12], "big")
                if pos + length + LOG_OVERHEAD > end or length + LOG_OVERHEAD <= chunk:
                    return
                chunk = length + LOG_OVERHEAD
                continue
            pos += last_end
    finally:
        os.close(fd)
