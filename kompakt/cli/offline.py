"""The offline backend: the CLI verbs on a data dir, through the embedded ``LogManager``.

Leaving its ``with`` closes the ``LogManager``, which writes the clean-shutdown marker
and releases the data dir's ``.lock`` (Kafka's ``LogManager.shutdown``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from kompakt.errors import KompaktError
from kompakt.log.data_dir import check_new_data_dir, require_data_dir
from kompakt.log.txn_index import aborted_by_producer, consumer_records
from kompakt.record import codecs
from kompakt.record.encode import build_simple_batch

from .backend import (
    ConfigValue,
    ConsumedRecord,
    ConsumeRequest,
    PartitionDescription,
    PartitionWrite,
    ProduceRequest,
    ProduceResult,
    ProducerRecord,
    TopicDescription,
    TopicSummary,
    partial_write_error,
)


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
            configs = [ConfigValue.of(e.name, e.value, e.source) for e in config.describe()]
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
    def produce(self, request: ProduceRequest) -> ProduceResult:
        """Append records in batches of ``batch_size`` per partition, streaming.

        A record the topic refuses (a null key on a compacted topic, a partition out of
        range) fails the call before its batch is written; batches completed before it
        stay written, and the error says how many records that was.
        """
        topic = request.topic
        codec = codecs.codec_id(request.compression)
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
            for part, items in request.batches(n_parts, compact):
                write(part, items)
        except KompaktError as exc:
            raise partial_write_error(exc, result.records) from exc
        return result

    def consume(self, request: ConsumeRequest) -> Iterator[ConsumedRecord]:
        """Records of one or every partition (in partition order), from ``offset`` or the
        log start (read_committed: up to the last stable offset, without the records of
        aborted transactions); control batches (transaction markers) are skipped."""
        parts = request.offline_partitions(self.logs.partition_count(request.topic))
        return request.limit(self._consume(request, parts))

    def _consume(self, request: ConsumeRequest, parts: list[int]) -> Iterator[ConsumedRecord]:
        topic = request.topic
        for part in parts:
            plog = self.logs.get_log(topic, part)
            start = max(request.offset or 0, plog.log_start_offset)
            end = plog.log_end_offset
            aborted: dict[int, list[tuple[int, int]]] = {}
            if request.read_committed:  # as a READ_COMMITTED Fetch reads the log
                end = plog.last_stable_offset
                aborted = aborted_by_producer(plog.collect_aborted_transactions(start, end))
            for r in consumer_records(plog.iter_batches(start), start, end, aborted):
                yield ConsumedRecord.of(topic, part, r)
