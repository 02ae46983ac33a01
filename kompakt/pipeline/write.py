"""Write path of the source: DataFrame rows appended to a topic as record batches.

Commit protocol (why it is safe with many concurrent tasks):

1. Each task encodes its rows into Kafka record batches (base offset 0, CreateTime
   now) and writes them to its own *staged* files, one per target partition, under
   ``<data dir>/.kompakt-staging/<job id>/<task>-<attempt>/``. Tasks never touch a
   segment, so they cannot interleave or tear one; a failed or speculative attempt only
   leaves staged files nobody commits.
2. The task's commit message names its staged files. Spark calls ``commit`` on the
   driver once, with the messages of the successful attempts, in task order.
3. ``commit`` appends the staged batches through a :class:`LogManager`
   (``PartitionLog.append``: validation, null-key refusal on compacted topics, offsets
   assigned under the partition's lock), partition by partition in task order, then
   deletes the staging folder. ``abort`` just deletes it.

``commit`` runs in a Python worker of the driver, so it hands the files to the process
that owns the data dir when one has called :func:`attach_manager` (a broker, an
embedding application), else opens the data dir itself, which needs its ``.lock``:
writing behind a running broker's back is refused rather than risked (see
:mod:`kompakt.pipeline.commit`). Like Spark's Kafka sink this is
at-least-once across partitions: a failure in the middle of ``commit`` keeps the
partitions already appended.

Rows go to the ``partition`` column when it is set, else to Kafka's default partition
for their key (murmur2, as a Kafka producer would), else (no key) to one partition per
task, like Kafka's sticky partitioner.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

from kompakt.errors import InvalidRecordError, RecordTooLargeError, UnknownTopicError
from kompakt.log.names import validate_topic_name
from kompakt.pipeline import options as opt
from kompakt.pipeline.commit import (
    STAGING_DIR,
    attach_manager,
    commit_staged,
    detach_manager,
)
from kompakt.pipeline.layout import read_topics
from kompakt.record import codecs
from kompakt.record.decode import Record
from kompakt.record.encode import build_batch
from kompakt.record.header import HEADER_SIZE
from kompakt.record.partitioner import partition_for_keys

TARGET_BATCH_BYTES = 256 << 10
# a record's varints (length, timestamp and offset deltas, key and value lengths, header
# count) and attributes byte take at most about this many bytes; a header's two lengths 4
RECORD_OVERHEAD_ESTIMATE = 24
HEADER_OVERHEAD_ESTIMATE = 4


@dataclass
class StagedFiles(WriterCommitMessage):
    """What one task wrote: target partition -> staged file of batches."""

    files: dict[int, str] = field(default_factory=dict)
    records: int = 0


def _binary_column(batch: pa.RecordBatch, name: str) -> pa.Array | None:
    if name not in batch.schema.names:
        return None
    col = batch.column(name)
    if pa.types.is_binary(col.type):
        return col
    if (
        pa.types.is_string(col.type)
        or pa.types.is_large_string(col.type)
        or pa.types.is_large_binary(col.type)
    ):
        return pc.cast(col, pa.binary())
    raise InvalidRecordError(f"{name} attribute type must be a string or binary, not {col.type}")


def _key_arrays(keys: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(data, offsets) of a binary array, offset-adjusted for slices."""
    _validity, offs, data = keys.buffers()
    item = np.dtype(np.int32).itemsize  # Arrow binary offsets are int32
    offsets = np.frombuffer(offs, np.int32, len(keys) + 1, keys.offset * item).astype(np.int64)
    raw = np.frombuffer(data, np.uint8) if data is not None else np.empty(0, np.uint8)
    return raw, offsets


class KompaktWriter(DataSourceArrowWriter):
    """Created on the driver, pickled to tasks; see the module docstring for the protocol."""

    def __init__(self, options: Mapping[str, str], overwrite: bool):
        if overwrite:
            raise opt.OptionError(
                "Save mode Overwrite not allowed for kompakt (a log is append-only). "
                "Use mode('append')."
            )
        self.data_dir = opt.data_dir(options)
        topic = opt.get_option(options, "topic")
        if not topic:
            raise opt.OptionError("option 'topic' is required to write to kompakt")
        validate_topic_name(topic)
        info = read_topics(self.data_dir).get(topic)
        if info is None:
            raise UnknownTopicError(f"unknown topic {topic!r} in {self.data_dir}")
        config = info.config()
        self.topic = topic
        self.partitions = info.partitions
        self.compact = config.compact
        self.max_batch_bytes = max(
            HEADER_SIZE + 1, min(TARGET_BATCH_BYTES, config.max_message_bytes)
        )
        self.max_message_bytes = config.max_message_bytes
        name = (opt.get_option(options, "compression", "none") or "none").lower()
        self.codec = codecs.NONE if name in ("none", "uncompressed") else codecs.codec_id(name)
        self.stage = str(Path(self.data_dir) / STAGING_DIR / uuid.uuid4().hex)

    # -- executor side ---------------------------------------------------------------------
    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedFiles:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        task = f"{ctx.partitionId()}-{ctx.attemptNumber()}" if ctx else uuid.uuid4().hex
        out_dir = Path(self.stage) / task
        out_dir.mkdir(parents=True, exist_ok=True)
        sticky = int(np.random.default_rng().integers(self.partitions))
        now = int(time.time() * 1000)
        msg = StagedFiles()
        handles: dict[int, object] = {}
        try:
            for batch in iterator:
                parts, records = self._route(batch, sticky, now)
                for p in np.unique(parts):
                    rows = [records[i] for i in np.flatnonzero(parts == p)]
                    f = handles.get(int(p))
                    if f is None:
                        path = out_dir / f"{self.topic}-{int(p)}.batches"
                        f = handles[int(p)] = open(path, "wb")  # noqa: SIM115
                        msg.files[int(p)] = str(path)
                    for data in self._encode(rows):
                        f.write(data)
                msg.records += len(records)
        finally:
            for f in handles.values():
                f.close()
        return msg

    def _route(
        self, batch: pa.RecordBatch, sticky: int, now: int
    ) -> tuple[np.ndarray, list[Record]]:
        values = _binary_column(batch, "value")
        if values is None:
            raise InvalidRecordError("Required attribute 'value' not found")
        keys = _binary_column(batch, "key")
        n = batch.num_rows
        if keys is None:
            keys = pa.nulls(n, pa.binary())
        key_null = np.asarray(keys.is_null().to_numpy(zero_copy_only=False), bool)
        parts = np.full(n, sticky, np.int32)
        if not key_null.all():
            data, offsets = _key_arrays(keys)
            hashed = partition_for_keys(data, offsets, self.partitions)
            parts = np.where(key_null, parts, hashed)
        if "partition" in batch.schema.names:
            given = batch.column("partition")
            given_null = np.asarray(given.is_null().to_numpy(zero_copy_only=False), bool)
            vals = np.asarray(pc.fill_null(given, 0).to_numpy(zero_copy_only=False), np.int64)
            bad = (~given_null) & ((vals < 0) | (vals >= self.partitions))
            if bad.any():
                raise InvalidRecordError(
                    f"partition {int(vals[bad][0])} does not exist in topic {self.topic} "
                    f"({self.partitions} partitions)"
                )
            parts = np.where(given_null, parts, vals).astype(np.int32)
        if self.compact and key_null.any():
            raise InvalidRecordError(
                f"Compacted topic cannot accept message without key in topic partition "
                f"{self.topic}-{int(parts[np.flatnonzero(key_null)[0]])}."
            )
        headers = batch.column("headers").to_pylist() if "headers" in batch.schema.names else None
        key_list = keys.to_pylist()
        value_list = values.to_pylist()
        records = [
            Record(
                0,
                now,
                key_list[i],
                value_list[i],
                tuple((h["key"], h["value"]) for h in headers[i] or ()) if headers else (),
            )
            for i in range(n)
        ]
        return parts, records

    def _encode(self, rows: list[Record]) -> Iterator[bytes]:
        """Batches of consecutive records, each at most about ``max_batch_bytes``."""
        chunk: list[Record] = []
        size = 0
        for r in rows:
            rsize = RECORD_OVERHEAD_ESTIMATE + len(r.key or b"") + len(r.value or b"")
            rsize += sum(len(k) + len(v or b"") + HEADER_OVERHEAD_ESTIMATE for k, v in r.headers)
            if chunk and size + rsize > self.max_batch_bytes:
                yield self._build(chunk)
                chunk, size = [], 0
            chunk.append(r._replace(offset=len(chunk)))
            size += rsize
        if chunk:
            yield self._build(chunk)

    def _build(self, chunk: list[Record]) -> bytes:
        data = build_batch(chunk, base_offset=0, compression=self.codec)
        if len(data) > self.max_message_bytes:
            raise RecordTooLargeError(
                f"a record of about {len(data)} bytes exceeds max.message.bytes="
                f"{self.max_message_bytes} of topic {self.topic}"
            )
        return data

    # -- driver side -------------------------------------------------------------------------
    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        files = [
            (part, path)
            for msg in messages
            if isinstance(msg, StagedFiles)
            for part, path in sorted(msg.files.items())
        ]
        try:
            if files:
                commit_staged(self.data_dir, self.topic, files)
        finally:
            self.abort(messages)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        shutil.rmtree(self.stage, ignore_errors=True)
        _remove_if_empty(Path(self.data_dir) / STAGING_DIR)


def _remove_if_empty(path: Path) -> None:
    try:
        os.rmdir(path)
    except OSError:
        pass


__all__ = ["KompaktWriter", "StagedFiles", "attach_manager", "detach_manager", "STAGING_DIR"]
