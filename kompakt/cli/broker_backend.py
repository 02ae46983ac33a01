"""The CLI verbs against a running broker, over the Kafka protocol (confluent-kafka).

:class:`BrokerBackend` implements the same :class:`~kompakt.cli.backend.Backend` methods
as the offline backend and returns the same dataclasses, so the commands print the same
output whichever transport is used; it adds the consumer-group verbs, which only make
sense against a broker. Kafka errors become one-line ``KompaktError``s (unknown topic,
unknown group, bad config, broker not reachable) for ``kompakt.cli.main`` to print.

``topic describe`` also asks the broker's admin endpoint (``GET /v1/partitions``) for
per-partition size, segments and compaction state; when it cannot be reached the
description goes without them and ``warnings`` says why.
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from kompakt.errors import KompaktError, TopicExistsError, UnknownTopicError

from .backend import (
    CliError,
    ConfigValue,
    ConsumedRecord,
    GroupDescription,
    GroupMember,
    GroupPartitionLag,
    GroupSummary,
    OffsetReset,
    PartitionDescription,
    PartitionWrite,
    ProduceResult,
    ProducerRecord,
    TopicDescription,
    TopicSummary,
    batches,
    check_produce_options,
    no_partition_error,
    partial_write_error,
)

DEFAULT_TIMEOUT_S = 10.0
ADMIN_PORT = 9644
DYNAMIC_TOPIC_CONFIG = "DYNAMIC_TOPIC_CONFIG"
_NO_OFFSET = -1001  # librdkafka's OFFSET_INVALID: nothing committed

# librdkafka logs connection failures on stderr; a CLI reports one line of its own instead.
_quiet = logging.getLogger("kompakt.cli.kafka")
_quiet.addHandler(logging.NullHandler())
_quiet.propagate = False

T = TypeVar("T")


class GroupNotEmptyError(KompaktError):
    """A group with active members cannot have its offsets reset (NON_EMPTY_GROUP)."""

    error_code = 68


class UnknownGroupError(KompaktError):
    """GROUP_ID_NOT_FOUND."""

    error_code = 69


def parse_bootstrap(servers: str) -> list[tuple[str, int]]:
    """``HOST:PORT[,HOST:PORT...]`` as pairs; anything else is a one-line error."""
    out = []
    for item in servers.split(","):
        item = item.strip()
        if item.startswith("PLAINTEXT://"):
            item = item[len("PLAINTEXT://") :]
        host, sep, port = item.rpartition(":")
        host = host.strip("[]")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise CliError(f"invalid --bootstrap-server {servers!r}: expected HOST:PORT")
        out.append((host, int(port)))
    return out


def default_admin_url(servers: str) -> str:
    """The admin endpoint on the first bootstrap host at its default port (9644)."""
    host = parse_bootstrap(servers)[0][0]
    return f"http://{'[' + host + ']' if ':' in host else host}:{ADMIN_PORT}"


def _state_name(state: Any) -> str:
    """confluent-kafka's ConsumerGroupState as Kafka names it (``Stable``, ``Empty``...)."""
    name = getattr(state, "name", str(state))
    return {
        "STABLE": "Stable",
        "EMPTY": "Empty",
        "DEAD": "Dead",
        "PREPARING_REBALANCING": "PreparingRebalance",
        "COMPLETING_REBALANCING": "CompletingRebalance",
    }.get(name, name.title())


def _not_empty(group: str, state: str) -> GroupNotEmptyError:
    # kafka-consumer-groups.sh's wording
    return GroupNotEmptyError(
        f"Assignments can only be reset if the group '{group}' is inactive, "
        f"but the current state is {state}."
    )


class BrokerBackend:
    """The verbs over the Kafka protocol against ``bootstrap_server``.

    Entering checks that the broker answers within ``timeout`` seconds (a TCP connect,
    then a Metadata request), so an unreachable broker is one error line, not a hang.
    """

    def __init__(
        self,
        bootstrap_server: str,
        *,
        admin_url: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
    ):
        self.addresses = parse_bootstrap(bootstrap_server)
        self.bootstrap = bootstrap_server
        self.admin_url = (admin_url or default_admin_url(bootstrap_server)).rstrip("/")
        self.timeout = timeout
        self.warnings: list[str] = []
        self._admin: Any = None
        self._ck: Any = None

    # -- lifecycle ------------------------------------------------------------------------
    def __enter__(self) -> BrokerBackend:
        try:
            import confluent_kafka
            import confluent_kafka.admin
        except ImportError:
            raise CliError(
                "talking to a broker needs confluent-kafka (pip install confluent-kafka); "
                "or work offline with --data-dir"
            ) from None
        self._ck = confluent_kafka
        self._check_reachable()
        self._admin = confluent_kafka.admin.AdminClient(self._conf())
        self._metadata()
        return self

    def __exit__(self, *exc: object) -> None:
        self._admin = None

    def _conf(self, **extra: Any) -> dict[str, Any]:
        ms = int(self.timeout * 1000)
        return {
            "bootstrap.servers": self.bootstrap,
            "client.id": "kompakt-cli",
            "socket.timeout.ms": ms,
            "socket.connection.setup.timeout.ms": ms,
            "reconnect.backoff.max.ms": 1000,
            "logger": _quiet,
            **extra,
        }

    def _check_reachable(self) -> None:
        reason = ""
        for host, port in self.addresses:
            try:
                with socket.create_connection((host, port), timeout=min(self.timeout, 5.0)):
                    return
            except OSError as exc:
                reason = exc.strerror or str(exc) or type(exc).__name__
        raise CliError(f"broker {self.bootstrap} not reachable: {reason}")

    @property
    def admin(self) -> Any:
        if self._admin is None:
            raise RuntimeError("BrokerBackend used outside its 'with' block")
        return self._admin

    # -- calling confluent-kafka ------------------------------------------------------------
    def _error(self, exc: BaseException, *, topic: str | None = None) -> KompaktError:
        """A confluent-kafka failure as the one-line error the CLI prints."""
        ck = self._ck
        if isinstance(exc, concurrent.futures.TimeoutError):
            return CliError(f"broker {self.bootstrap} did not answer within {self.timeout:g} s")
        if isinstance(exc, KompaktError):
            return exc
        err = exc.args[0] if isinstance(exc, ck.KafkaException) and exc.args else None
        if not isinstance(err, ck.KafkaError):
            return CliError(str(exc) or type(exc).__name__)
        return self._kafka_error(err, topic=topic)

    def _kafka_error(self, err: Any, *, topic: str | None = None) -> KompaktError:
        KE = self._ck.KafkaError  # noqa: N806
        code = err.code()
        if code == KE.UNKNOWN_TOPIC_OR_PART:
            return UnknownTopicError(f"unknown topic {topic!r}" if topic else err.str())
        if code == KE.TOPIC_ALREADY_EXISTS:
            return TopicExistsError(err.str())
        if code in (KE._TRANSPORT, KE._ALL_BROKERS_DOWN, KE._TIMED_OUT, KE._RESOLVE):
            return CliError(f"broker {self.bootstrap} not reachable: {err.str()}")
        message = err.str()
        if message.startswith("Broker: "):
            message = message[len("Broker: ") :]
        return CliError(message)

    def _wait(self, future: concurrent.futures.Future, *, topic: str | None = None) -> Any:
        try:
            return future.result(timeout=self.timeout + 2)
        except Exception as exc:
            raise self._error(exc, topic=topic) from None

    def _call(self, fn: Callable[[], T], *, topic: str | None = None) -> T:
        try:
            return fn()
        except Exception as exc:
            raise self._error(exc, topic=topic) from None

    def _metadata(self) -> Any:
        try:
            return self.admin.list_topics(timeout=self.timeout)
        except self._ck.KafkaException as exc:
            raise CliError(
                f"broker {self.bootstrap} not reachable within {self.timeout:g} s: "
                f"{exc.args[0].str() if exc.args else exc}"
            ) from None

    def _partition_count(self, topic: str) -> int:
        md = self._metadata().topics.get(topic)
        if md is None or md.error is not None and not md.partitions:
            raise UnknownTopicError(f"unknown topic {topic!r}")
        return len(md.partitions)

    def _topic_ids(self, names: Sequence[str]) -> dict[str, Any]:
        if not names:
            return {}
        futures = self.admin.describe_topics(
            self._ck.TopicCollection(list(names)), request_timeout=self.timeout
        )
        return {name: self._wait(f, topic=name) for name, f in futures.items()}

    def _configs(self, names: Sequence[str]) -> dict[str, list[ConfigValue]]:
        from confluent_kafka.admin import ConfigResource, ConfigSource, ResourceType

        resources = [ConfigResource(ResourceType.TOPIC, n) for n in names]
        if not resources:
            return {}
        futures = self.admin.describe_configs(resources, request_timeout=self.timeout)
        out = {}
        for res, future in futures.items():
            entries = self._wait(future, topic=res.name)
            values = []
            for name in sorted(entries):
                e = entries[name]
                source = ConfigSource(e.source).name
                values.append(ConfigValue(name, e.value, source, source == DYNAMIC_TOPIC_CONFIG))
            out[res.name] = values
        return out

    def _offsets(self, tps: Iterable[tuple[str, int]], latest: bool) -> dict[tuple[str, int], int]:
        """Start (``latest=False``) or end offsets; a partition that fails is left out."""
        from confluent_kafka.admin import OffsetSpec

        tps = list(tps)
        if not tps:
            return {}
        spec = OffsetSpec.latest() if latest else OffsetSpec.earliest()
        request = {self._ck.TopicPartition(t, p): spec for t, p in tps}
        futures = self._call(lambda: self.admin.list_offsets(request, request_timeout=self.timeout))
        out = {}
        for tp, future in futures.items():
            try:
                out[(tp.topic, tp.partition)] = future.result(timeout=self.timeout + 2).offset
            except self._ck.KafkaException:
                continue
            except concurrent.futures.TimeoutError as exc:
                raise self._error(exc) from None
        return out

    # -- topics ---------------------------------------------------------------------------
    def create_topic(self, name: str, partitions: int, configs: Mapping[str, str]) -> TopicSummary:
        from confluent_kafka.admin import NewTopic

        new = self._call(lambda: NewTopic(name, partitions, config=dict(configs)))
        futures = self._call(
            lambda: self.admin.create_topics(
                [new], operation_timeout=self.timeout, request_timeout=self.timeout
            )
        )
        self._wait(futures[name], topic=name)
        ids = self._topic_ids([name])
        return TopicSummary(name, partitions, str(ids[name].topic_id))

    def alter_topic(
        self, name: str, set: Mapping[str, str], delete: Sequence[str]
    ) -> dict[str, str]:
        from confluent_kafka.admin import (
            AlterConfigOpType,
            ConfigEntry,
            ConfigResource,
            ResourceType,
        )

        self._partition_count(name)  # unknown topic: a clear error before anything else
        entries = [
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in set.items()
        ] + [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in delete]
        res = ConfigResource(ResourceType.TOPIC, name, incremental_configs=entries)
        futures = self._call(
            lambda: self.admin.incremental_alter_configs([res], request_timeout=self.timeout)
        )
        for future in futures.values():
            self._wait(future, topic=name)
        configs = self._configs([name])[name]
        return {c.name: c.value or "" for c in configs if c.override}

    def describe_topics(self, names: Sequence[str] | None = None) -> list[TopicDescription]:
        md = self._metadata()
        if names:
            for n in names:
                if n not in md.topics or (
                    md.topics[n].error is not None and not md.topics[n].partitions
                ):
                    raise UnknownTopicError(f"unknown topic {n!r}")
            names = list(names)
        else:
            names = sorted(md.topics)
        ids = self._topic_ids(names)
        configs = self._configs(names)
        tps = [(n, p.id) for n in names for p in ids[n].partitions]
        starts = self._offsets(tps, latest=False)
        ends = self._offsets(tps, latest=True)
        state = self._admin_partitions()
        out = []
        for n in names:
            parts = []
            for p in sorted(x.id for x in ids[n].partitions):
                s = state.get((n, p), {})
                parts.append(
                    PartitionDescription(
                        p,
                        starts.get((n, p), s.get("log_start_offset", -1)),
                        ends.get((n, p), s.get("log_end_offset", -1)),
                        s.get("size_bytes"),
                        s.get("segments"),
                        s.get("dirty_ratio"),
                        s.get("last_compaction_ms"),
                        s.get("tombstones_pending"),
                        s.get("uncleanable_reason"),
                    )
                )
            out.append(
                TopicDescription(n, str(ids[n].topic_id), len(parts), configs.get(n, []), parts)
            )
        return out

    def _admin_partitions(self) -> dict[tuple[str, int], dict[str, Any]]:
        """Per-partition log and compaction state from the admin endpoint, or {} (and a
        warning) when it cannot be reached: describe must still work without it."""
        url = self.admin_url + "/v1/partitions"
        try:
            with urllib.request.urlopen(url, timeout=min(self.timeout, 3.0)) as resp:
                data = json.loads(resp.read())
            return {(d["topic"], int(d["partition"])): d for d in data["partitions"]}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            reason = getattr(exc, "reason", None) or exc
            if isinstance(reason, OSError) and reason.strerror:
                reason = reason.strerror
            self.warnings.append(
                f"admin endpoint {self.admin_url} not reachable ({reason}): "
                "size, segments and compaction state left out (see --admin-url)"
            )
            return {}

    def list_topics(self) -> list[TopicSummary]:
        md = self._metadata()
        names = sorted(md.topics)
        ids = self._topic_ids(names)
        return [TopicSummary(n, len(md.topics[n].partitions), str(ids[n].topic_id)) for n in names]

    def delete_topic(self, name: str) -> None:
        futures = self._call(
            lambda: self.admin.delete_topics(
                [name], operation_timeout=self.timeout, request_timeout=self.timeout
            )
        )
        self._wait(futures[name], topic=name)

    # -- records --------------------------------------------------------------------------
    def _topic_is_compacted(self, topic: str) -> bool:
        for c in self._configs([topic]).get(topic, []):
            if c.name == "cleanup.policy":
                return "compact" in (c.value or "").split(",")
        return False

    def produce(
        self,
        topic: str,
        records: Iterable[ProducerRecord],
        *,
        batch_size: int = 100,
        compression: str = "none",
    ) -> ProduceResult:
        """Send records with ``acks=all`` and idempotence, ``batch_size`` per batch.

        Partitions are picked here exactly as offline (Kafka's murmur2 for keys,
        round-robin for null keys), and a null key on a compacted topic is refused before
        it is sent, with the same message. ``batches`` counts the batches handed to the
        producer (librdkafka is told to keep each one together: ``batch.num.messages``).
        """
        check_produce_options(batch_size, compression)
        n_parts = self._partition_count(topic)
        compact = self._topic_is_compacted(topic)
        ms = int(self.timeout * 1000)
        producer = self._ck.Producer(
            self._conf(
                **{
                    "acks": "all",
                    "enable.idempotence": True,
                    "compression.type": compression,
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
            for part, items in batches(records, topic, n_parts, compact, batch_size):
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

    def consume(
        self,
        topic: str,
        *,
        partition: int | None = None,
        offset: int | None = None,
        max_messages: int | None = None,
        group: str | None = None,
    ) -> Iterator[ConsumedRecord]:
        """Without ``group``: each partition in order from ``offset`` (or its start) to
        the end it had when reading began, as offline. With ``group``: subscribe as a
        member of that group, start at its committed offsets (earliest where none), stop
        once every assigned partition is at its end, and commit what was printed."""
        n_parts = self._partition_count(topic)
        if partition is not None and not 0 <= partition < n_parts:
            raise no_partition_error(topic, partition, n_parts)
        if offset is not None and offset < 0:
            raise CliError(f"offset must be >= 0, got {offset}")
        if group is not None:
            if partition is not None or offset is not None:
                raise CliError(
                    "--group starts at the group's committed offsets; "
                    "it cannot be combined with --partition or --offset"
                )
            if not group:
                raise CliError("--group must not be empty")
            return self._consume_group(topic, group, max_messages)
        parts = [partition] if partition is not None else list(range(n_parts))
        return self._consume_assigned(topic, parts, offset, max_messages)

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
        self, topic: str, parts: list[int], offset: int | None, max_messages: int | None
    ) -> Iterator[ConsumedRecord]:
        left = max_messages
        if left is not None and left <= 0:
            return
        ck = self._ck
        # group.id is required by librdkafka but never joined or committed to here
        consumer = self._consumer("kompakt-cli")
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
                    if left is not None:
                        left -= 1
                        if left <= 0:
                            return
                    if msg.offset() >= high - 1:
                        break
                consumer.unassign()
        finally:
            consumer.close()

    def _consume_group(
        self, topic: str, group: str, max_messages: int | None
    ) -> Iterator[ConsumedRecord]:
        ck = self._ck
        left = max_messages
        if left is not None and left <= 0:
            return
        consumer = self._consumer(group)
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
                if left is not None:
                    left -= 1
                    if left <= 0:
                        return
        finally:
            try:
                commit(positions)
            finally:
                consumer.close()

    # -- consumer groups ------------------------------------------------------------------
    def list_groups(self) -> list[GroupSummary]:
        result = self._wait(self.admin.list_consumer_groups(request_timeout=self.timeout))
        return sorted(
            (
                GroupSummary(
                    g.group_id,
                    _state_name(g.state),
                    getattr(getattr(g, "type", None), "name", "CLASSIC").lower(),
                )
                for g in result.valid
            ),
            key=lambda g: g.group_id,
        )

    def _describe_group(self, group: str) -> Any:
        """The group's description, or None when the broker does not know it."""
        futures = self._call(
            lambda: self.admin.describe_consumer_groups([group], request_timeout=self.timeout)
        )
        try:
            desc = futures[group].result(timeout=self.timeout + 2)
        except self._ck.KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if err is not None and err.code() == self._ck.KafkaError.GROUP_ID_NOT_FOUND:
                return None
            raise self._error(exc) from None
        except concurrent.futures.TimeoutError as exc:
            raise self._error(exc) from None
        return None if _state_name(desc.state) == "Dead" else desc

    def _committed(self, group: str) -> dict[tuple[str, int], int]:
        request = [self._ck.ConsumerGroupTopicPartitions(group)]
        futures = self._call(
            lambda: self.admin.list_consumer_group_offsets(request, request_timeout=self.timeout)
        )
        result = self._wait(futures[group])
        return {
            (tp.topic, tp.partition): tp.offset
            for tp in result.topic_partitions or []
            if tp.offset != _NO_OFFSET and tp.error is None
        }

    def describe_group(self, group: str) -> GroupDescription:
        desc = self._describe_group(group)
        if desc is None:
            raise UnknownGroupError(f"consumer group '{group}' does not exist")
        committed = self._committed(group)
        members = []
        owner: dict[tuple[str, int], str] = {}
        for m in desc.members:
            tps = sorted(
                (tp.topic, tp.partition)
                for tp in (m.assignment.topic_partitions if m.assignment else [])
            )
            for tp in tps:
                owner[tp] = m.member_id
            members.append(GroupMember(m.member_id, m.client_id, m.host, m.group_instance_id, tps))
        tps = sorted(set(committed) | set(owner))
        ends = self._offsets(tps, latest=True)
        partitions = []
        for t, p in tps:
            c, e = committed.get((t, p)), ends.get((t, p))
            lag = max(e - c, 0) if c is not None and e is not None else None
            partitions.append(GroupPartitionLag(t, p, c, e, lag, owner.get((t, p))))
        return GroupDescription(
            group,
            _state_name(desc.state),
            desc.partition_assignor or "",
            sorted(members, key=lambda m: m.member_id),
            partitions,
        )

    def reset_offsets(
        self,
        group: str,
        topic: str,
        partition: int | None,
        to: str | int,
        *,
        dry_run: bool = False,
    ) -> list[OffsetReset]:
        """Set the group's committed offsets for a topic (or one partition) to the earliest,
        the latest or a given offset (clamped to the log, as Kafka does); only while the
        group has no active members, like ``kafka-consumer-groups.sh --reset-offsets``."""
        desc = self._describe_group(group)
        if desc is not None and _state_name(desc.state) != "Empty":
            raise _not_empty(group, _state_name(desc.state))
        n_parts = self._partition_count(topic)
        if partition is not None and not 0 <= partition < n_parts:
            raise no_partition_error(topic, partition, n_parts)
        parts = [partition] if partition is not None else list(range(n_parts))
        tps = [(topic, p) for p in parts]
        starts = self._offsets(tps, latest=False)
        ends = self._offsets(tps, latest=True)
        committed = self._committed(group) if desc is not None else {}
        out = []
        for tp in tps:
            low, high = starts.get(tp), ends.get(tp)
            if low is None or high is None:
                raise CliError(f"cannot read the offsets of {tp[0]}-{tp[1]}")
            if to == "earliest":
                new = low
            elif to == "latest":
                new = high
            else:
                new = min(max(int(to), low), high)
            out.append(OffsetReset(tp[0], tp[1], committed.get(tp), new))
        if dry_run:
            return out
        request = [
            self._ck.ConsumerGroupTopicPartitions(
                group, [self._ck.TopicPartition(r.topic, r.partition, r.new_offset) for r in out]
            )
        ]
        futures = self._call(
            lambda: self.admin.alter_consumer_group_offsets(request, request_timeout=self.timeout)
        )
        try:
            result = self._wait(futures[group])
            errors = [tp.error for tp in result.topic_partitions or [] if tp.error is not None]
        except CliError:
            errors = [None]
        if errors:
            # a member joined between the check and the commit: say so as Kafka would
            now = self._describe_group(group)
            if now is not None and _state_name(now.state) != "Empty":
                raise _not_empty(group, _state_name(now.state))
            if errors[0] is not None:
                raise self._kafka_error(errors[0], topic=topic)
            raise CliError(f"resetting the offsets of group '{group}' failed")
        return out

    def delete_groups(self, groups: Sequence[str]) -> dict[str, str | None]:
        """Delete each group; per group None or why it could not be deleted."""
        KE = self._ck.KafkaError  # noqa: N806
        futures = self._call(
            lambda: self.admin.delete_consumer_groups(list(groups), request_timeout=self.timeout)
        )
        out: dict[str, str | None] = {}
        for g in groups:
            try:
                futures[g].result(timeout=self.timeout + 2)
                out[g] = None
            except self._ck.KafkaException as exc:
                err = exc.args[0] if exc.args else None
                code = err.code() if err is not None else None
                if code == KE.GROUP_ID_NOT_FOUND:
                    out[g] = f"consumer group '{g}' does not exist"
                elif code == KE.NON_EMPTY_GROUP:
                    out[g] = f"consumer group '{g}' is not empty (it has active members)"
                else:
                    out[g] = f"consumer group '{g}': {self._error(exc)}"
            except concurrent.futures.TimeoutError as exc:
                raise self._error(exc) from None
        return out
