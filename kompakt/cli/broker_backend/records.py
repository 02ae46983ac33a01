"""Record verbs against a broker: produce (a librdkafka producer) and consume (a
librdkafka consumer, assigned to partitions or a member of a consumer group).

Partitions, batches and the options' errors come from :mod:`kompakt.cli.backend`, so a
produce routes and fails exactly as offline.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from kompakt.errors import KompaktError

from ..backend import (
    CliError,
    ConsumedRecord,
    ConsumeRequest,
    PartitionWrite,
    ProduceRequest,
    ProduceResult,
    ProducerRecord,
    partial_write_error,
)
from .connection import BrokerConnection


class RecordVerbs(BrokerConnection):
    """``kompakt produce`` and ``kompakt consume`` over the Kafka protocol."""

    def _topic_is_compacted(self, topic: str) -> bool:
        for c in self._configs([topic]).get(topic, []):
            if c.name == "cleanup.policy":
                return "compact" in (c.value or "").split(",")
        return False

    def produce(self, request: ProduceRequest) -> ProduceResult:
        """Send records with ``acks=all`` and idempotence, ``batch_size`` per batch.

        Partitions are picked here exactly as offline (Kafka's murmur2 for keys,
        round-robin for null keys), and a null key on a compacted topic is refused before
        it is sent, with the same message. ``batches`` counts the batches handed to the
        producer (librdkafka is told to keep each one together: ``batch.num.messages``).
        """
        topic, batch_size = request.topic, request.batch_size
        n_parts = self._partition_count(topic)
        compact = self._topic_is_compacted(topic)
        ms = int(self.timeout * 1000)
        producer = self._ck.Producer(
            self._conf(
                **{
                    "acks": "all",
                    "enable.idempotence": True,
                    "compression.type": request.compression,
                    "batch.num.messages": min(batch_size, 1_000_000),
                    "linger.ms": 5,
                    "request.timeout.ms": ms,
                    "message.timeout.ms": 3 * ms,
                }
            )
        )
        result = ProduceResult(topic)
        failures: list[Any] = []

        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                failures.append(err)
                return
            part, off = msg.partition(), msg.offset()
            w = result.partitions.get(part)
            if w is None:
                w = result.partitions[part] = PartitionWrite(part, off, off, 0)
            w.first_offset = min(w.first_offset, off)
            w.last_offset = max(w.last_offset, off)
            w.records += 1
            result.records += 1

        def send(part: int, items: list[ProducerRecord]) -> None:
            for rec in items:
                while True:
                    try:
                        producer.produce(
                            topic,
                            value=rec.value,
                            key=rec.key,
                            partition=part,
                            headers=list(rec.headers) or None,
                            on_delivery=delivered,
                        )
                        break
                    except BufferError:  # the local queue is full: let it drain
                        producer.poll(0.1)
            result.batches += 1
            producer.poll(0)

        def finish() -> None:
            left = producer.flush(3 * self.timeout)
            if failures:
                raise self._kafka_error(failures[0], topic=topic)
            if left:
                raise CliError(
                    f"{left} record(s) not acknowledged by {self.bootstrap} "
                    f"within {3 * self.timeout:g} s"
                )

        try:
            for part, items in request.batches(n_parts, compact):
                send(part, items)  # delivery reports arrive in its poll()
                if failures:
                    raise self._kafka_error(failures[0], topic=topic)
            finish()
        except KompaktError as exc:
            try:
                producer.flush(3 * self.timeout)
            except Exception:
                pass
            raise partial_write_error(exc, result.records) from None
        return result

    def consume(self, request: ConsumeRequest) -> Iterator[ConsumedRecord]:
        """Without a group: each partition in order from ``offset`` (or its start) to
        the end it had when reading began, as offline. With a group: subscribe as a
        member of that group, start at its committed offsets (earliest where none), stop
        once every assigned partition is at its end, and commit what was printed."""
        topic, group = request.topic, request.group
        parts = request.partitions(self._partition_count(topic))
        if group is None:
            return request.limit(self._consume_assigned(request, parts))
        if request.partition is not None or request.offset is not None:
            raise CliError(
                "--group starts at the group's committed offsets; "
                "it cannot be combined with --partition or --offset"
            )
        if not group:
            raise CliError("--group must not be empty")
        return request.limit(self._consume_group(request))

    def _consumer(self, group: str, **extra: Any) -> Any:
        return self._ck.Consumer(
            self._conf(
                **{
                    "group.id": group,
                    "enable.auto.commit": False,
                    "enable.partition.eof": True,
                    "auto.offset.reset": "earliest",
                    **extra,
                }
            )
        )

    def _record(self, msg: Any) -> ConsumedRecord:
        return ConsumedRecord(
            msg.topic(),
            msg.partition(),
            msg.offset(),
            msg.timestamp()[1],
            msg.key(),
            msg.value(),
            list(msg.headers() or []),
        )

    def _poll(self, consumer: Any, deadline: float) -> Any:
        """The next message or event; an error line if nothing comes before ``deadline``."""
        while True:
            msg = consumer.poll(0.2)
            if msg is not None:
                return msg
            if time.monotonic() > deadline:
                raise CliError(f"no answer from broker {self.bootstrap} for {self.timeout:g} s")

    def _consume_assigned(
        self, request: ConsumeRequest, parts: list[int]
    ) -> Iterator[ConsumedRecord]:
        ck = self._ck
        topic, offset = request.topic, request.offset
        # group.id is required by librdkafka but never joined or committed to here
        consumer = self._consumer("kompakt-cli", **_isolation(request.read_committed))
        try:
            for part in parts:
                tp = ck.TopicPartition(topic, part)
                low, high = self._call(
                    lambda tp=tp: consumer.get_watermark_offsets(tp, timeout=self.timeout),
                    topic=topic,
                )
                start = max(offset or 0, low)
                if start >= high:
                    continue
                consumer.assign([ck.TopicPartition(topic, part, start)])
                while True:
                    msg = self._poll(consumer, time.monotonic() + self.timeout)
                    if msg.error():
                        if msg.error().code() == ck.KafkaError._PARTITION_EOF:
                            break
                        raise self._kafka_error(msg.error(), topic=topic)
                    yield self._record(msg)
                    if msg.offset() >= high - 1:
                        break
                consumer.unassign()
        finally:
            consumer.close()

    def _consume_group(self, request: ConsumeRequest) -> Iterator[ConsumedRecord]:
        """The group's records; closing the generator (``limit`` does at the limit)
        commits the positions after the records yielded and leaves the group."""
        ck = self._ck
        topic = request.topic
        consumer = self._consumer(request.group or "", **_isolation(request.read_committed))
        assigned: set[int] = set()
        at_end: set[int] = set()
        positions: dict[int, int] = {}

        def on_assign(_c: Any, tps: list[Any]) -> None:
            assigned.update(tp.partition for tp in tps)

        def on_revoke(_c: Any, tps: list[Any]) -> None:
            gone = {tp.partition for tp in tps}
            commit({p: o for p, o in positions.items() if p in gone})
            assigned.difference_update(gone)

        def commit(offsets: dict[int, int]) -> None:
            if offsets:
                tps = [ck.TopicPartition(topic, p, o) for p, o in sorted(offsets.items())]
                self._call(lambda: consumer.commit(offsets=tps, asynchronous=False), topic=topic)
                for p in list(offsets):
                    positions.pop(p, None)

        consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
        # joining may wait for the broker's group.initial.rebalance.delay.ms (3 s by default)
        deadline = time.monotonic() + 3 * self.timeout
        try:
            while not assigned or not assigned <= at_end:
                msg = self._poll(consumer, deadline)
                deadline = time.monotonic() + 3 * self.timeout
                if msg.error():
                    if msg.error().code() == ck.KafkaError._PARTITION_EOF:
                        at_end.add(msg.partition())
                        continue
                    raise self._kafka_error(msg.error(), topic=topic)
                at_end.discard(msg.partition())
                positions[msg.partition()] = msg.offset() + 1
                yield self._record(msg)
        finally:
            try:
                commit(positions)
            finally:
                consumer.close()


def _isolation(read_committed: bool) -> dict[str, str]:
    """The consumer's ``isolation.level`` for a :class:`ConsumeRequest`."""
    return {"isolation.level": "read_committed" if read_committed else "read_uncommitted"}
