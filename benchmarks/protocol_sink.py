"""A Kafka-protocol sink: the client ceiling of ``bench_broker``.

An asyncio TCP server that speaks the part of the Kafka protocol a confluent-kafka
producer and an assigning consumer use, and stores nothing: Produce is answered with
success and a running base offset (acks=1 and acks=all alike); Fetch serves a prebuilt
record batch of the topic's record size, its base offset patched to the offset asked
for (the CRC does not cover it), up to the high watermark the produces reached. What a
client does against it is the client's own limit on this machine, so ``kompakt ÷ sink``
is the share of the time the broker itself costs.

It uses the broker's own codec (:class:`kompakt.broker.connection.KafkaConnection`,
kio), reads its socket as the broker does (``frame_stream.receive_more``: a large
frame's rest straight into its buffer) and advertises the
broker's version ranges for the APIs it answers, so a client talks to both the same
way. Handlers run on the event loop (no worker threads). APIs: ApiVersions, Metadata
(one broker: itself), CreateTopics, InitProducerId (idempotent and transactional
producers), FindCoordinator (itself, for groups and transactional ids), ListOffsets,
Produce, Fetch, and AddPartitionsToTxn and EndTxn answered at once with success (no
transaction state, no markers): a transactional producer's own ceiling.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from kompakt.broker.connection import CLOSED, NEED_DATA, Answer, KafkaConnection
from kompakt.broker.frame_stream import receive_more, start_frame_server
from kompakt.broker.handlers import register_all
from kompakt.broker.protocol import INT32, ProtocolError, encode_response, schemas
from kompakt.broker.registry import ApiRegistry
from kompakt.record.encode import build_simple_batch
from kompakt.record.header import LAST_OFFSET_DELTA_POS, LOG_OVERHEAD

log = logging.getLogger("protocol_sink")

NODE_ID = 0
READ_SIZE = 1 << 20
MAX_REQUEST_BYTES = 256 << 20
FETCH_BATCH_BYTES = 1 << 20  # a served batch's records, about the producer's batch.size
ENCODED_CACHE_BYTES = 512 << 20  # Fetch responses kept encoded, for the next consumer
NO_AUTHORIZED_OPERATIONS = -(2**31)  # Kafka's "not requested" value
EARLIEST, LATEST = -2, -1  # ListOffsets' special timestamps
_BATCH_LENGTH = struct.Struct(">i")
_OFFSET = struct.Struct(">q")
_LAST_DELTA = struct.Struct(">i")

# API keys answered (Kafka's ApiKeys)
PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
FIND_COORDINATOR, API_VERSIONS, CREATE_TOPICS, INIT_PRODUCER_ID = 10, 18, 19, 22
ADD_PARTITIONS_TO_TXN, END_TXN = 24, 26


@dataclass(frozen=True)
class Encoded:
    """A response frame encoded with correlation id 0 (bytes 4-8), sent with the
    request's in its place."""

    frame: bytes


@dataclass
class SinkTopic:
    """A topic of the sink: its id, record size for Fetch, and each partition's end."""

    name: str
    partitions: int
    record_size: int
    topic_id: uuid.UUID = field(default_factory=uuid.uuid4)
    ends: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.ends = [0] * self.partitions


def count_records(records: bytes | memoryview) -> int:
    """Records in a produced record set: the sum of its batches' lastOffsetDelta + 1
    (a header read per batch, no record decoded)."""
    n = pos = 0
    size = len(records)
    while pos + LAST_OFFSET_DELTA_POS + 4 <= size:
        n += _LAST_DELTA.unpack_from(records, pos + LAST_OFFSET_DELTA_POS)[0] + 1
        pos += LOG_OVERHEAD + _BATCH_LENGTH.unpack_from(records, pos + 8)[0]
    return n


class ProtocolSink:
    """The sink server on its own event loop thread; ``add_topic`` before a client
    creates or uses a topic to give its record size (for Fetch)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        self.host, self.port = host, port
        self.topics: dict[str, SinkTopic] = {}
        self._by_id: dict[uuid.UUID, SinkTopic] = {}
        self._templates: dict[tuple[int, int], bytes] = {}
        self._encoded: dict[tuple, Encoded] = {}
        self._encoded_bytes = 0
        self._next_producer_id = 1000
        self.registry = self._registry()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def add_topic(self, name: str, partitions: int = 1, record_size: int = 100) -> SinkTopic:
        t = self.topics.get(name)
        if t is None:
            t = self.topics[name] = SinkTopic(name, partitions, record_size)
            self._by_id[t.topic_id] = t
        return t

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> ProtocolSink:
        ready = threading.Event()

        def run() -> None:
            loop = self._loop = asyncio.new_event_loop()
            self._server = loop.run_until_complete(
                start_frame_server(self._serve, self.host, self.port, limit=READ_SIZE)
            )
            self.port = self._server.sockets[0].getsockname()[1]
            ready.set()
            loop.run_forever()
            loop.close()

        self._thread = threading.Thread(target=run, name="protocol-sink", daemon=True)
        self._thread.start()
        if not ready.wait(30):
            raise RuntimeError("the protocol sink did not start")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(30)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(30)

    async def _shutdown(self) -> None:
        """Stop accepting, then end the connections' tasks (clients see a close)."""
        assert self._server is not None
        self._server.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def __enter__(self) -> ProtocolSink:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- connections ---------------------------------------------------------------------
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = KafkaConnection(self.registry, MAX_REQUEST_BYTES)
        try:
            while True:
                event = conn.next_event()
                if event is NEED_DATA:
                    await receive_more(reader, writer.transport, conn)
                    continue
                if event is CLOSED:
                    return
                if isinstance(event, Answer):
                    out = event.data
                else:
                    result = event.api.handler(event.api_version, event.body)
                    if asyncio.iscoroutine(result):
                        result = await result
                    if result is None:  # acks=0
                        continue
                    if isinstance(result, Encoded):  # the frame but its correlation id
                        writer.write(result.frame[:4] + INT32.pack(event.correlation_id))
                        writer.write(memoryview(result.frame)[8:])
                        await writer.drain()
                        continue
                    out = conn.send(event, result)
                writer.write(out)
                await writer.drain()
        except ProtocolError as exc:
            log.warning("protocol sink: closing a connection: %s", exc)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:  # stop(): end quietly (asyncio 3.11 logs a raise)
            pass
        finally:
            writer.close()

    # -- the APIs ------------------------------------------------------------------------
    def _registry(self) -> ApiRegistry:
        """The broker's version ranges (what it advertises) for the APIs answered here."""
        broker = register_all(ApiRegistry())
        handlers = {
            API_VERSIONS: None,
            METADATA: self._metadata,
            CREATE_TOPICS: self._create_topics,
            INIT_PRODUCER_ID: self._init_producer_id,
            FIND_COORDINATOR: self._find_coordinator,
            LIST_OFFSETS: self._list_offsets,
            PRODUCE: self._produce,
            FETCH: self._fetch,
            ADD_PARTITIONS_TO_TXN: self._add_partitions_to_txn,
            END_TXN: self._end_txn,
        }
        reg = ApiRegistry()
        for key, handler in handlers.items():
            api = broker.get(key)
            assert api is not None, f"the broker serves no API {key}"
            reg.register(
                key,
                api.min_version,
                api.max_version,
                handler or self._api_versions(reg),
                advertised_min=api.advertised_min,
            )
        return reg

    @staticmethod
    def _api_versions(reg: ApiRegistry):
        def handle(_version: int, _req: Any) -> dict[str, Any]:
            return {"error_code": ErrorCode.none, "api_keys": reg.advertised()}

        return handle

    def _endpoint(self) -> dict[str, Any]:
        return {"node_id": NODE_ID, "host": self.host, "port": self.port, "rack": None}

    def _metadata_topic(self, t: SinkTopic) -> dict[str, Any]:
        return {
            "error_code": ErrorCode.none,
            "name": t.name,
            "topic_id": t.topic_id,
            "is_internal": False,
            "partitions": [
                {
                    "error_code": ErrorCode.none,
                    "partition_index": i,
                    "leader_id": NODE_ID,
                    "leader_epoch": 0,
                    "replica_nodes": [NODE_ID],
                    "isr_nodes": [NODE_ID],
                    "offline_replicas": [],
                }
                for i in range(t.partitions)
            ],
            "topic_authorized_operations": NO_AUTHORIZED_OPERATIONS,
        }

    def _metadata(self, version: int, req: Any) -> dict[str, Any]:
        wanted = req.topics
        if version == 0 and not wanted:
            wanted = None
        topics = []
        for name in self.topics if wanted is None else [t.name for t in wanted]:
            t = self.topics.get(name) if name is not None else None
            if t is None:
                topics.append(
                    {
                        "error_code": ErrorCode.unknown_topic_or_partition,
                        "name": name or "",
                        "partitions": [],
                    }
                )
            else:
                topics.append(self._metadata_topic(t))
        return {
            "brokers": [self._endpoint()],
            "cluster_id": "protocol-sink",
            "controller_id": NODE_ID,
            "topics": topics,
            "cluster_authorized_operations": NO_AUTHORIZED_OPERATIONS,
        }

    def _create_topics(self, _version: int, req: Any) -> dict[str, Any]:
        out = []
        for t in req.topics:
            parts = t.num_partitions if t.num_partitions > 0 else 1
            topic = self.add_topic(t.name, parts)
            out.append(
                {
                    "name": t.name,
                    "topic_id": topic.topic_id,
                    "error_code": ErrorCode.none,
                    "num_partitions": topic.partitions,
                    "replication_factor": 1,
                }
            )
        return {"topics": out}

    def _init_producer_id(self, _version: int, req: Any) -> dict[str, Any]:
        self._next_producer_id += 1
        return {
            "error_code": ErrorCode.none,
            "producer_id": self._next_producer_id,
            "producer_epoch": 0,
        }

    @staticmethod
    def _add_partitions_to_txn(_version: int, req: Any) -> dict[str, Any]:
        """Every partition added (v0-3, the versions the broker serves)."""
        return {
            "throttle_time": 0,
            "results_by_topic_v3_and_below": [
                {
                    "name": t.name,
                    "results_by_partition": [
                        {"partition_index": p, "partition_error_code": ErrorCode.none}
                        for p in t.partitions
                    ],
                }
                for t in req.v3_and_below_topics
            ],
        }

    @staticmethod
    def _end_txn(_version: int, _req: Any) -> dict[str, Any]:
        """Committed or aborted at once: nothing is stored, so nothing is marked."""
        return {"throttle_time": 0, "error_code": ErrorCode.none}

    def _find_coordinator(self, version: int, req: Any) -> dict[str, Any]:
        ep = self._endpoint()

        def one(key: str) -> dict[str, Any]:
            return {"key": key, "error_code": ErrorCode.none, **ep}

        if version >= 4:
            return {"coordinators": [one(k) for k in req.coordinator_keys]}
        return one(req.key)

    def _list_offsets(self, _version: int, req: Any) -> dict[str, Any]:
        out = []
        for t in req.topics:
            topic = self.topics.get(t.name)
            parts = []
            for p in t.partitions:
                part: dict[str, Any] = {
                    "partition_index": p.partition_index,
                    "timestamp": -1,
                    "leader_epoch": 0,
                }
                if topic is None or p.partition_index >= topic.partitions:
                    part.update(error_code=ErrorCode.unknown_topic_or_partition, offset=-1)
                else:
                    end = topic.ends[p.partition_index]
                    part["offset"] = end if p.timestamp == LATEST else 0
                parts.append(part)
            out.append({"name": t.name, "partitions": parts})
        return {"topics": out}

    def _topic_of(self, name: str | None, topic_id: uuid.UUID | None) -> SinkTopic | None:
        if name:
            return self.topics.get(name)
        return self._by_id.get(topic_id) if topic_id is not None else None

    def _produce(self, _version: int, req: Any) -> dict[str, Any] | None:
        responses = []
        for td in req.topic_data:
            name = getattr(td, "name", None)
            tid = getattr(td, "topic_id", None)
            topic = self._topic_of(name, tid)
            parts = []
            for p in td.partition_data:
                part = {"index": p.index, "log_append_time": -1, "log_start_offset": 0}
                if topic is None or p.index >= topic.partitions:
                    part.update(error_code=ErrorCode.unknown_topic_or_partition, base_offset=-1)
                else:
                    part["base_offset"] = topic.ends[p.index]
                    topic.ends[p.index] += count_records(p.records or b"")
                parts.append(part)
            key = {"name": name} if name is not None else {"topic_id": tid}
            responses.append({**key, "partition_responses": parts})
        if req.acks == 0:
            return None
        return {"responses": responses}

    def _template(self, record_size: int, count: int) -> bytes:
        """A batch of ``count`` records of ``record_size`` value bytes at offset 0,
        built once (its CRC stays right when only the base offset is patched)."""
        found = self._templates.get((record_size, count))
        if found is None:
            items = [(None, b"s" * record_size)] * count
            found = build_simple_batch(items, timestamp=int(time.time() * 1000))
            self._templates[(record_size, count)] = found
        return found

    def _records(self, topic: SinkTopic, offset: int, end: int, limit: int) -> bytes:
        """Whole prebuilt batches from ``offset`` up to ``end`` within ``limit`` bytes
        (at least one batch, as Kafka returns one even when larger than the limit)."""
        per_batch = max(1, FETCH_BATCH_BYTES // (topic.record_size + 8))
        out = bytearray()
        while offset < end:
            batch = self._template(topic.record_size, min(per_batch, end - offset))
            if out and len(out) + len(batch) > limit:
                break
            pos = len(out)
            out += batch
            _OFFSET.pack_into(out, pos, offset)
            offset += min(per_batch, end - offset)
        return bytes(out)

    async def _fetch(self, version: int, req: Any) -> dict[str, Any] | Encoded:
        """Reads what is there; with nothing there, waits ``max_wait`` as a long poll
        would (produces to the sink do not end the wait: the bench reads after it wrote).
        A response with records is kept encoded: the next consumer of the same records
        (the bench's next round) gets it without the copies of encoding it again."""
        max_bytes = getattr(req, "max_bytes", 2**31 - 1)
        total = 0
        topics = []
        key: list = [version, max_bytes]
        for t in req.topics:
            name = getattr(t, "topic", None)
            tid = getattr(t, "topic_id", None)
            topic = self._topic_of(name, tid)
            parts = []
            for p in t.partitions:
                part: dict[str, Any] = {
                    "partition_index": p.partition,
                    "error_code": ErrorCode.none,
                    "log_start_offset": 0,
                    "preferred_read_replica": -1,
                    "records": b"",
                }
                if topic is None or p.partition >= topic.partitions:
                    part.update(
                        error_code=ErrorCode.unknown_topic_or_partition,
                        high_watermark=-1,
                        last_stable_offset=-1,
                    )
                else:
                    end = topic.ends[p.partition]
                    part["high_watermark"] = part["last_stable_offset"] = end
                    limit = min(p.partition_max_bytes, max(0, max_bytes - total))
                    key.append((name, tid, p.partition, p.fetch_offset, end, limit))
                    if limit > 0 or total == 0:
                        found = self._encoded.get(tuple(key))
                        if found is not None and len(req.topics) == 1 == len(t.partitions):
                            return found
                        part["records"] = self._records(topic, p.fetch_offset, end, limit)
                        total += len(part["records"])
                parts.append(part)
            topic_key = {"topic": name} if name is not None else {"topic_id": tid}
            topics.append({**topic_key, "partitions": parts})
        body = {"error_code": ErrorCode.none, "session_id": 0, "responses": topics}
        if total == 0:
            if req.max_wait.total_seconds() > 0:
                await asyncio.sleep(req.max_wait.total_seconds())
            return body
        found = schemas(FETCH, version)
        assert found is not None
        encoded = Encoded(encode_response(found[1], 0, body))
        if self._encoded_bytes + len(encoded.frame) <= ENCODED_CACHE_BYTES:
            self._encoded[tuple(key)] = encoded
            self._encoded_bytes += len(encoded.frame)
        return encoded


def main(argv: list[str]) -> None:
    """``protocol_sink.py PORT NAME:RECORD_SIZE,...``: the sink on that port with those
    topics, until its stdin closes or it is terminated (``served.ServedSink``)."""
    port, spec = int(argv[0]), argv[1] if len(argv) > 1 else ""
    sink = ProtocolSink(port=port)
    for item in filter(None, spec.split(",")):
        name, size = item.rsplit(":", 1)
        sink.add_topic(name, 1, int(size))
    with sink:
        sys.stdin.read()


if __name__ == "__main__":
    main(sys.argv[1:])
