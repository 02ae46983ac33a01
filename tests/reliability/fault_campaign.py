"""A fault campaign against a real ``kompakt serve``, with a checker that models Kafka's
compaction guarantees (issue 17). Shared by ``benchmarks/faults.py`` (long runs) and
``tests/reliability/test_fault_campaign.py`` (the short CI campaign).

Workload: two idempotent acks=all confluent-kafka producers on two compacted topics
(4 KiB segments, ``min.cleanable.dirty.ratio=0.05``, ``delete.retention.ms=1000`` so
tombstones expire during the run, keys from a bounded key space, 10% tombstones) and one
delete-policy topic (``retention.ms=3000``: retention deletes segments all the time); a
transactional producer (commits, and some aborts) on a fourth topic; two members of one
consumer group (``session.timeout.ms=2000``) consuming everything, so every kill, pause
and join is a rebalance.

Faults, drawn from a seeded RNG and aimed at a phase:

* ``sigkill`` at a random moment (``produce``), while a reader's fetch is in flight
  (``fetch``), while a new member joins the group (``rebalance``), as soon as a
  ``.cleaned`` file shows a local clean writing (``local-clean``), as soon as a ``.swap``
  file shows a swap (``swap``), as soon as a ``.deleted`` file in the delete-policy topic
  shows a retention delete (``retention``), while ``commit_transaction`` is in flight
  (``txn-commit``), at a random delay into a ``POST /v1/compact`` with
  ``"engine": "spark"`` on a warm Spark session (``spark-clean``);
* ``pause``: SIGSTOP for longer than the consumers' session timeout, then SIGCONT;
* ``disk-full``: the broker's ``RLIMIT_FSIZE`` soft limit lowered with ``prlimit(2)`` to
  a few KiB for a while (every append past it fails with EFBIG, as on a full disk), then
  restored. No tmpfs or loop device: those need root.
* ``read-io-error``: reads of segment files fail with EIO for a while, injected with
  libfiu (:mod:`reliability.fiu`: the broker runs under ``fiu-run`` with two libfiu
  points on ``.log`` files, ``fiu-ctrl`` fails ``pread`` and ``mmap`` with a drawn
  probability, then stops), aimed at a fetch
  (group members and extra readers fetch through the window), a local clean (the
  background cleaner runs all the time) or a Spark clean (``POST /v1/compact`` on a warm
  session: libfiu fails the broker's side of it, and :class:`reliability.fiu.WorkerReads`
  the reads of Spark's Python workers, preloaded through ``spark.executorEnv``).
  During the window clients may get errors; every record anyone reads must still be the
  one acknowledged at that offset (readers check CRCs: a bad batch is a violation).
  After it, the broker must be up and serving, or have exited on its own (a clean exit:
  an exit by a signal is a violation), or answer KAFKA_STORAGE_ERROR for the failed log
  dir as Kafka's ``LogDirFailureChannel`` makes it; in the last two cases, and when
  produce keeps failing after the window (a partition left broken: counted as
  ``stuck``), the fault restarts the broker. Without ``fiu-run`` this kind is skipped
  and the summary says so.

Each fault's ``hit`` says whether the aimed phase was observed at the kill moment (the
file or the request still there); a miss is still a kill at a random moment.

After each kill (broker dead) every partition folder is checked offline
(:func:`reliability.kit.check_partition_dir`: CRCs, increasing offsets, indexes at batch
starts); cleaner leftovers are expected there (recovery resolves them) and counted.

The checker (:func:`check_partition`) holds every write in produce order per key with its
delivery report (offset, times). Every acknowledged record must be read back at exactly
its offset with its key and value, unless the cleaner or retention was allowed to remove
it: a later write of the same key exists (Kafka keeps only the last record of a key), or
it is a tombstone sent more than ``delete.retention.ms`` before the read (its delete
horizon could have passed), or, on the delete-policy topic, it was sent more than
``retention.ms`` before the read and lies below the log start. Offsets strictly
increase, no value appears twice (idempotence) and nothing appears that was never
produced. Transactions (:func:`check_transactions`): READ_COMMITTED shows every record of
a committed transaction at its offset and none of an aborted one; a transaction whose
outcome the client never learnt is all or nothing. Records the group members consumed
must agree with the model too.
"""

from __future__ import annotations

import csv
import json
import os
import random
import resource
import signal
import subprocess
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from reliability.fiu import Fiu, FiuError, WorkerReads
from reliability.fiu import missing as fiu_missing
from reliability.kit import (
    BrokerProcess,
    Model,
    ModelProducer,
    Write,
    check_data_dir,
    check_partition_dir,
    create_topic,
    p99,
    read_partition,
)
from reliability.wire_kit import call, connect
from shared_kit import accepts_connections, poll_until, wait_for

COMPACTED = {"fc-users": 3, "fc-orders": 2}
# the background cleaner leaves fc-orders dirty for a while (ratio 0.9), so the Spark
# cleans the campaign asks for on it have work; fc-users is cleaned at once (0.05)
SPARK_TOPIC = "fc-orders"
EVENTS = "fc-events"  # delete policy with a short retention
TXN_TOPIC = "fc-txn"
EVENTS_PARTITIONS, TXN_PARTITIONS = 2, 2
KEYS, TOMBSTONE_SHARE = 120, 0.10
DELETE_RETENTION_MS = 1000
RETENTION_MS = 3000
SESSION_TIMEOUT_MS = 2000
COMPACTED_CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": "4096",
    "min.cleanable.dirty.ratio": "0.05",
    "delete.retention.ms": str(DELETE_RETENTION_MS),
    "min.compaction.lag.ms": "0",
}
EVENTS_CONFIG = {
    "cleanup.policy": "delete",
    "segment.bytes": "4096",
    "retention.ms": str(RETENTION_MS),
}
TXN_CONFIG = {"cleanup.policy": "delete", "segment.bytes": "16384", "retention.ms": "-1"}
BROKER_OVERRIDES = {
    "log.cleaner.backoff.ms": "50",
    "log.index.size.max.bytes": "65536",  # plenty for 4 KiB segments; a crash leaves it preallocated
    "log.segment.delete.delay.ms": "300",
    "log.retention.check.interval.ms": "500",
    "log.flush.offset.checkpoint.interval.ms": "500",
    "offsets.topic.num.partitions": "2",
    "transaction.state.log.num.partitions": "2",
    "group.min.session.timeout.ms": "1000",
    "group.initial.rebalance.delay.ms": "0",
    "kompakt.spark.start": "lazy",
}

# (phase, weight): a SIGKILL aimed at that phase, or another kind of fault
SIGKILL_PHASES = (
    "produce",
    "fetch",
    "rebalance",
    "local-clean",
    "swap",
    "retention",
    "txn-commit",
    "spark-clean",
)
DEFAULT_WEIGHTS = {
    "produce": 10,
    "fetch": 10,
    "rebalance": 10,
    "local-clean": 16,
    "swap": 12,
    "retention": 10,
    "txn-commit": 10,
    "spark-clean": 12,
    "pause": 5,
    "disk-full": 5,
    "read-io-error": 8,
}
# where a read-io-error is aimed, relative weights (spark-clean only with Spark cleans)
HALT_LINE = "Shutdown broker because all log dirs"  # Kafka's halt, logged by the broker
READ_IO_PHASES = {"fetch": 4, "local-clean": 4, "spark-clean": 2}
STORAGE_ERROR = 56  # KAFKA_STORAGE_ERROR


# -- the checker ---------------------------------------------------------------------------


def check_partition(
    tp: tuple[str, int],
    writes: dict[bytes, list[Write]],
    records: list[tuple[int, bytes | None, bytes | None]],
    *,
    compact: bool,
    read_ms: int,
    delete_retention_ms: int = DELETE_RETENTION_MS,
    retention_ms: int | None = None,
) -> list[str]:
    """Violations of Kafka's guarantees in one partition read back at wall time
    ``read_ms`` (the read began then: writes acknowledged later are not judged).

    ``writes`` maps each key to its writes in produce order (one producer per key, so
    that is log order). ``compact``: the cleaner may drop a record when a later record of
    its key exists, and a tombstone once ``delete_retention_ms`` has passed since it was
    sent (its horizon starts at the first clean that sees it, after the send).
    ``retention_ms``: a delete-policy partition may lose a prefix of records sent more
    than that long before the read (a segment goes when its newest timestamp is older).
    """
    bad: list[str] = []
    at: dict[int, tuple[bytes | None, bytes | None]] = {}
    prev = -1
    for off, key, value in records:
        if off <= prev:
            bad.append(f"{tp}: offset {off} after {prev}: offsets must strictly increase")
        prev = off
        at[off] = (key, value)
    log_start = records[0][0] if records else None
    produced: set[tuple[bytes, bytes | None]] = {
        (k, w.value) for k, ws in writes.items() for w in ws
    }
    values = Counter(v for _o, _k, v in records if v is not None)
    for v, n in values.items():
        if n > 1:
            bad.append(f"{tp}: value {v!r} appears {n} times (idempotence broken)")
    for off, key, value in records:
        if (key, value) not in produced:
            bad.append(f"{tp}: offset {off} holds {key!r}={value!r}, never produced")
    for key, ws in writes.items():
        for i, w in enumerate(ws):
            if not w.acked or w.acked_ms is None or w.acked_ms > read_ms:
                continue
            if w.offset is None:
                bad.append(f"{tp}: {key!r}={w.value!r} acknowledged without an offset")
                continue
            if w.offset in at:
                if at[w.offset] != (key, w.value):
                    bad.append(
                        f"{tp}: offset {w.offset} acknowledged as {key!r}={w.value!r} "
                        f"reads back as {at[w.offset][0]!r}={at[w.offset][1]!r}"
                    )
                continue
            if compact and i + 1 < len(ws):
                continue  # a later record of the key exists: the cleaner may drop this one
            if compact and w.value is None and w.sent_ms + delete_retention_ms <= read_ms:
                continue  # a tombstone whose delete horizon could have passed
            if (
                retention_ms is not None
                and w.sent_ms + retention_ms <= read_ms
                and log_start is not None
                and w.offset < log_start
            ):
                continue  # below the log start, old enough for retention
            if retention_ms is not None and not records and w.sent_ms + retention_ms <= read_ms:
                continue  # retention emptied the partition
            bad.append(
                f"{tp}: acknowledged {key!r}={w.value!r} at offset {w.offset} is lost "
                f"(sent {read_ms - w.sent_ms} ms before the read, "
                f"{'last write of its key' if i + 1 == len(ws) else 'superseded'})"
            )
    return bad


@dataclass
class Txn:
    n: int
    writes: list[tuple[tuple[str, int], bytes]] = field(default_factory=list)
    offsets: dict[bytes, int] = field(default_factory=dict)
    outcome: str = "open"  # committed | aborted | unknown


def check_transactions(
    txns: list[Txn], visible: dict[tuple[str, int], list[tuple[int, bytes | None, bytes | None]]]
) -> list[str]:
    """READ_COMMITTED (``visible``): a committed transaction's records all there at their
    offsets, an aborted one's none, one of unknown outcome all or none (atomicity)."""
    bad: list[str] = []
    where = {v: (tp, off) for tp, recs in visible.items() for off, _k, v in recs}
    for t in txns:
        seen = [v for _tp, v in t.writes if v in where]
        if t.outcome == "committed":
            for tp, v in t.writes:
                if v not in where:
                    bad.append(f"txn {t.n} committed but {v!r} is not visible in {tp}")
                elif t.offsets.get(v) is not None and where[v] != (tp, t.offsets[v]):
                    bad.append(
                        f"txn {t.n}: {v!r} acknowledged at {tp}@{t.offsets[v]}, read at {where[v]}"
                    )
        elif t.outcome == "aborted" and seen:
            bad.append(f"txn {t.n} aborted but {len(seen)} of its records are visible")
        elif t.outcome in ("unknown", "open") and seen and len(seen) != len(t.writes):
            bad.append(f"txn {t.n}: {len(seen)} of {len(t.writes)} records visible (not atomic)")
    txn_values = {v for t in txns for _tp, v in t.writes}
    for tp, recs in visible.items():
        for off, _k, v in recs:
            if v not in txn_values:
                bad.append(f"{tp}@{off}: {v!r} was never produced")
    return bad


def storage_error_partitions(port: int, tps: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """Partitions answering ListOffsets (latest: no segment read) with
    KAFKA_STORAGE_ERROR, as Kafka answers for a partition of an offline log dir."""
    topics: dict[str, list[dict]] = {}
    for topic, part in tps:
        topics.setdefault(topic, []).append({"partition_index": part, "timestamp": -1})
    body = {"replica_id": -1, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
    with connect(port) as sock:
        r = call(sock, 2, 1, body)
    return [
        (t.name, p.partition_index)
        for t in r.topics
        for p in t.partitions
        if p.error_code == STORAGE_ERROR
    ]


# -- clients ---------------------------------------------------------------------------------


class TxnWorker:
    """A transactional producer (``transactional.id=fc-txn``) committing small
    transactions over both partitions of the transactional topic, aborting some."""

    def __init__(self, bootstrap: str, rng: random.Random):
        self.bootstrap = bootstrap
        self.rng = rng
        self.txns: list[Txn] = []
        self.committing = threading.Event()
        self.errors: Counter[str] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fc-txn", daemon=True)
        self.producer: Any = None

    def _new_producer(self) -> Any:
        from confluent_kafka import Producer

        p = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "transactional.id": "fc-txn",
                "transaction.timeout.ms": 10000,
                "linger.ms": 2,
                "reconnect.backoff.ms": 20,
                "reconnect.backoff.max.ms": 200,
                "retry.backoff.ms": 20,
                "log_level": 2,
            }
        )
        p.init_transactions(60)
        return p

    def start(self) -> TxnWorker:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(120)

    def _run(self) -> None:
        from confluent_kafka import KafkaException

        while not self._stop.is_set():
            try:
                if self.producer is None:
                    self.producer = self._new_producer()
                self._one(KafkaException)
            except KafkaException as exc:
                self.errors[exc.args[0].name()] += 1
                self.producer = None  # init_transactions on a new one resolves the old txn
            except Exception as exc:  # noqa: BLE001 - counted, the worker goes on
                self.errors[type(exc).__name__] += 1
                self.producer = None
            self._stop.wait(0.02)

    def _one(self, kafka_exception: type) -> None:
        p = self.producer
        t = Txn(len(self.txns))
        p.begin_transaction()
        self.txns.append(t)
        for i in range(self.rng.randint(1, 4)):
            part = self.rng.randrange(TXN_PARTITIONS)
            value = f"t{t.n}-{i}".encode()
            t.writes.append(((TXN_TOPIC, part), value))

            def done(err: Any, msg: Any, v: bytes = value) -> None:
                if err is None:
                    t.offsets[v] = msg.offset()

            p.produce(TXN_TOPIC, value, b"t%d" % i, partition=part, on_delivery=done)
        if self.rng.random() < 0.15:
            try:
                p.abort_transaction(60)
                t.outcome = "aborted"
            except kafka_exception:
                t.outcome = "unknown"
                raise
            return
        t.outcome = "unknown"
        self.committing.set()
        try:
            for _attempt in range(20):
                try:
                    p.commit_transaction(60)
                    t.outcome = "committed"
                    return
                except kafka_exception as exc:
                    err = exc.args[0]
                    self.errors[f"commit:{err.name()}"] += 1
                    if err.retriable():
                        continue
                    if err.txn_requires_abort():
                        p.abort_transaction(60)  # outcome stays unknown: commit may have begun
                        return
                    raise
        finally:
            self.committing.clear()


class GroupMember:
    """One member of the ``fc-group`` consumer group; remembers what it consumed."""

    def __init__(self, bootstrap: str, topics: list[str], seen: Callable[[Any], None]):
        from confluent_kafka import Consumer

        self.assigned = threading.Event()
        self.c = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "fc-group",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": True,
                "auto.commit.interval.ms": 500,
                "session.timeout.ms": SESSION_TIMEOUT_MS,
                "heartbeat.interval.ms": 300,
                "fetch.wait.max.ms": 100,
                "reconnect.backoff.ms": 20,
                "reconnect.backoff.max.ms": 200,
                "log_level": 2,
            }
        )
        self.c.subscribe(topics, on_assign=lambda _c, _p: self.assigned.set())
        self.seen = seen
        self.errors = 0
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for m in self.c.consume(500, timeout=0.2):
                if m.error() is not None:
                    self.errors += 1
                else:
                    self.seen(m)
        self.c.close()

    def start(self) -> GroupMember:
        self.thread.start()
        return self

    def stop(self, wait: bool = True) -> None:
        self._stop.set()
        if wait:
            self.thread.join(30)


# -- the campaign ----------------------------------------------------------------------------


@dataclass
class Fault:
    t_s: float  # the kill, or the start of a pause or a full disk
    kind: str  # sigkill | pause | disk-full | read-io-error
    phase: str  # what it was aimed at

    @property
    def label(self) -> str:
        """How the summary, the CSV's readers and the PNG name it."""
        if self.kind == "sigkill":
            return self.phase
        if self.kind == "read-io-error":
            return f"read-io-error:{self.phase}"
        return self.kind

    hit: bool  # the aimed phase was observed at the fault moment
    detail: str


@dataclass
class Sample:
    t_s: float
    acked_per_s: float
    p99_ms: float  # NaN: no delivery report in that second


@dataclass
class CampaignResult:
    seed: int
    engine: str
    elapsed_s: float
    faults: list[Fault]
    samples: list[Sample]
    acked: int
    failed: int
    txns: dict[str, int]
    consumed: int
    offline_checks: int
    leftovers_after_kill: int
    restarts: int
    broker_tracebacks: int  # in the broker's log (a full disk makes some expected ones)
    violations: list[str]
    skipped: dict[str, str] = field(default_factory=dict)  # fault kind -> why not run
    read_io: dict[str, int] = field(default_factory=dict)  # what the broker did after one

    def by_kind(self) -> dict[str, str]:
        out: dict[str, list[int]] = {}
        for f in self.faults:
            n = out.setdefault(f.label, [0, 0])
            n[0] += 1
            n[1] += f.hit
        return {k: f"{n} ({h} hit)" for k, (n, h) in sorted(out.items())}

    def summary(self) -> str:
        kinds = ", ".join(f"{k} {v}" for k, v in self.by_kind().items())
        skipped = "".join(f"; SKIPPED {k}: {why}" for k, why in self.skipped.items())
        read_io = f"; after read I/O errors the broker {self.read_io}" if self.read_io else ""
        return (
            f"fault campaign: seed {self.seed}, engine {self.engine}, "
            f"{self.elapsed_s:.0f} s, {len(self.faults)} faults: {kinds}; "
            f"{self.restarts} restarts, {self.offline_checks} offline data-dir checks "
            f"({self.leftovers_after_kill} kills left cleaner files for recovery); "
            f"{self.broker_tracebacks} tracebacks in the broker log; "
            f"{self.acked} records acknowledged, {self.failed} failed; transactions "
            f"{self.txns}; {self.consumed} records consumed by the group; "
            f"violations: {len(self.violations)}{read_io}{skipped}"
        )


@dataclass
class CampaignSettings:
    seed: int
    faults: int | None = None  # stop after this many faults ...
    duration: float | None = None  # ... or this many seconds, whichever comes first
    engine: str = "both"  # background cleaner engine local|spark; both: local + Spark kills
    rate: float = 200.0  # records/s per producer (two producers)
    weights: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    check_every: int = 0  # also read everything back every N faults (0: only at the end)
    spark_every: int = 0  # every Nth fault is a kill during a Spark clean (0: by weight)
    # fault number (from 1) -> kind, or read-io-error:PHASE
    forced: dict[int, str] = field(default_factory=dict)


class Campaign:
    def __init__(self, settings: CampaignSettings, work: Path, log: Callable[[str], None] = print):
        self.s = settings
        self.rng = random.Random(settings.seed)
        self.work = Path(work)
        self.work.mkdir(parents=True, exist_ok=True)
        self.log = log
        weights = dict(settings.weights)
        if settings.engine == "local" or settings.spark_every:
            weights.pop("spark-clean", None)  # none, or only on the schedule
        self.skipped: dict[str, str] = {}
        self.fiu: Fiu | None = None
        self.worker_reads: WorkerReads | None = None  # the Spark workers' segment reads
        forced_kinds = {v.split(":")[0] for v in settings.forced.values()}
        if weights.get("read-io-error", 0) > 0 or "read-io-error" in forced_kinds:
            why = fiu_missing()
            if why is None:
                self.fiu = Fiu(self.work / "fiu")
                if settings.engine != "local":
                    self.worker_reads = WorkerReads(self.work / "fiu")
            else:
                self.skipped["read-io-error"] = why
                weights.pop("read-io-error", None)
        self.kinds = [k for k, w in weights.items() if w > 0]
        self.weights = [weights[k] for k in self.kinds]
        overrides = dict(BROKER_OVERRIDES)
        overrides["kompakt.cleaner.engine"] = "spark" if settings.engine == "spark" else "local"
        if self.worker_reads is not None:
            overrides.update(self.worker_reads.spark_overrides())
        self.broker = BrokerProcess(
            self.work / "data", overrides, wrapper=self.fiu.wrapper() if self.fiu else []
        )
        self.read_io: Counter[str] = Counter()
        self.forced_phase = ""  # "read-io-error:local-clean" in settings.forced
        self.spark_warm_pid: int | None = None  # the broker whose Spark session is up
        self.model = Model()
        self.faults: list[Fault] = []
        self.samples: list[Sample] = []
        self.violations: list[str] = []
        self.lat_lock = threading.Lock()
        self.latencies: list[float] = []
        self.consumed: dict[tuple[str, int], dict[int, tuple[bytes, bytes | None]]] = {}
        self.consumed_n = 0
        self.consumed_lock = threading.Lock()
        self.offline_checks = 0
        self.leftovers_after_kill = 0
        self.spark_clean_s: list[float] = []
        self.spark_first_s: list[float] = []
        self.t0 = 0.0
        self.members: list[GroupMember] = []
        self.producers: list[ModelProducer] = []
        self.txn: TxnWorker | None = None
        self._sampling = threading.Event()

    # -- set-up and load --------------------------------------------------------------------
    def _on_latency(self, s: float) -> None:
        with self.lat_lock:
            self.latencies.append(s)

    def _on_consumed(self, m: Any) -> None:
        tp = (m.topic(), m.partition())
        with self.consumed_lock:
            self.consumed_n += 1
            seen = self.consumed.setdefault(tp, {})
            rec = (m.key(), m.value())
            if seen.setdefault(m.offset(), rec) != rec:
                self.violations.append(
                    f"consumer: {tp}@{m.offset()} read as {seen[m.offset()]!r} and later {rec!r}"
                )

    def targets(self) -> dict[tuple[str, int], tuple[int, float]]:
        out = {(t, p): (KEYS, TOMBSTONE_SHARE) for t, n in COMPACTED.items() for p in range(n)}
        out.update({(EVENTS, p): (10**9, 0.0) for p in range(EVENTS_PARTITIONS)})
        return out

    def start_load(self) -> None:
        b = self.broker.bootstrap
        for topic, n in COMPACTED.items():
            config = dict(COMPACTED_CONFIG)
            if topic == SPARK_TOPIC:
                config["min.cleanable.dirty.ratio"] = "0.9"
            create_topic(b, topic, n, config)
        create_topic(b, EVENTS, EVENTS_PARTITIONS, EVENTS_CONFIG)
        create_topic(b, TXN_TOPIC, TXN_PARTITIONS, TXN_CONFIG)
        topics = [*COMPACTED, EVENTS]
        self.members = [GroupMember(b, topics, self._on_consumed).start() for _ in range(2)]
        for i in range(2):
            self.producers.append(
                ModelProducer(
                    b,
                    self.model,
                    self.targets(),
                    random.Random(self.s.seed + 1 + i),
                    rate=self.s.rate,
                    ident=f"p{i}",
                    key_prefix=b"p%d-" % i,
                    on_latency=self._on_latency,
                ).start()
            )
        self.txn = TxnWorker(b, random.Random(self.s.seed + 100)).start()
        threading.Thread(target=self._sample_loop, name="fc-sampler", daemon=True).start()

    def _sample_loop(self) -> None:
        last_t, last_acked = time.monotonic(), 0
        while not self._sampling.wait(1.0):
            now = time.monotonic()
            with self.lat_lock:
                window, self.latencies = self.latencies, []
            acked = self.model.acked
            self.samples.append(
                Sample(
                    round(now - self.t0, 2),
                    round((acked - last_acked) / (now - last_t), 1),
                    round(p99(window) * 1000, 2) if window else float("nan"),
                )
            )
            last_t, last_acked = now, acked

    # -- the faults ---------------------------------------------------------------------------
    def _kill_and_restart(self) -> None:
        """SIGKILL, an offline check of the data dir as the crash left it, restart."""
        children = self._children()
        self.broker.kill()
        for pid in children:  # Spark's JVM dies with its parent's pipe; make sure
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._offline_check()
        self.broker.start(timeout=60)

    def _children(self) -> list[int]:
        try:
            import psutil

            return [c.pid for c in psutil.Process(self.broker.pid).children(recursive=True)]
        except Exception:  # noqa: BLE001 - the broker may be gone already
            return []

    def _offline_check(self) -> None:
        data = self.broker.data_dir
        if any(p.name.endswith((".cleaned", ".swap")) for p in data.glob("*/*")):
            self.leftovers_after_kill += 1
        for part in sorted(p for p in data.iterdir() if p.is_dir() and any(p.glob("*.log"))):
            try:
                check_partition_dir(part)
            except AssertionError as exc:
                self.violations.append(f"offline check after kill {len(self.faults)}: {exc}")
            except FileNotFoundError:
                pass  # a .deleted rename raced the listing: nothing runs now, but be safe
        self.offline_checks += 1

    def _wait_for_file(
        self, dirs: list[Path], suffix: str, timeout: float, spin: bool = False
    ) -> str | None:

        def found() -> str | None:
            for d in dirs:
                try:
                    for name in os.listdir(d):
                        if name.endswith(suffix):
                            return name
                except FileNotFoundError:
                    continue
            return None

        # a fine step (or none): a .cleaned file lives milliseconds
        return poll_until(found, timeout, step=0.0 if spin else 0.001)

    def _dirs(self, topics: list[str]) -> list[Path]:
        return [p for p in self.broker.data_dir.iterdir() if p.name.rsplit("-", 1)[0] in topics]

    def _post_compact(self, topic: str, engine: str, timeout: float = 600) -> Any:
        body = json.dumps({"topic": topic, "engine": engine}).encode()
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.broker.admin_port}/v1/compact",
            data=body,
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        return urllib.request.urlopen(req, timeout=timeout).read()

    def _in_thread(self, fn: Callable[[], Any]) -> tuple[threading.Thread, dict]:
        box: dict[str, Any] = {}

        def run() -> None:
            t = time.monotonic()
            try:
                box["result"] = fn()
            except Exception as exc:  # noqa: BLE001 - a killed broker ends requests
                box["error"] = exc
            box["seconds"] = time.monotonic() - t

        th = threading.Thread(target=run, daemon=True)
        th.start()
        return th, box

    def fault(self, kind: str) -> Fault:
        rng = self.rng
        t = round(time.monotonic() - self.t0, 2)
        if kind == "pause":
            hold = SESSION_TIMEOUT_MS / 1000 + rng.uniform(0.3, 1.5)
            os.kill(self.broker.pid, signal.SIGSTOP)
            time.sleep(hold)  # fault: the pause
            os.kill(self.broker.pid, signal.SIGCONT)
            return Fault(t, "pause", "session-timeout", True, f"SIGSTOP {hold:.2f} s")
        if kind == "disk-full":
            limit, hold = rng.randrange(1024, 8192), rng.uniform(0.3, 2.0)
            pid = self.broker.pid
            soft, hard = resource.prlimit(pid, resource.RLIMIT_FSIZE)
            resource.prlimit(pid, resource.RLIMIT_FSIZE, (limit, hard))
            time.sleep(hold)  # fault: the disk stays full this long
            resource.prlimit(pid, resource.RLIMIT_FSIZE, (soft, hard))
            alive = self.broker.alive()
            if not alive:
                self.violations.append(f"the broker died of a full disk:\n{self.broker.log_tail()}")
                self.broker.start(timeout=60)
            return Fault(
                t, "disk-full", "append", alive, f"RLIMIT_FSIZE {limit} B for {hold:.2f} s"
            )
        if kind == "read-io-error":
            return self._read_io_error()
        hit, detail = self._aim(kind)
        t = round(time.monotonic() - self.t0, 2)  # the kill moment, not the aim's start
        if not self.broker.alive():
            self.violations.append(f"broker exited on its own before fault {len(self.faults)}")
            self.broker.start(timeout=60)
        else:
            self._kill_and_restart()
        return Fault(t, "sigkill", kind, hit, detail)

    # -- read I/O errors ----------------------------------------------------------------------
    def _read_io_error(self) -> Fault:
        """Segment reads (``pread``, ``mmap``) fail with EIO at a drawn probability for a
        drawn time, aimed at a fetch, a local clean or a Spark clean; then the broker's
        answer is judged and, if it took the dir offline, exited or was left broken,
        it is restarted (see the module docstring)."""
        assert self.fiu is not None
        rng = self.rng
        phases = {p: w for p, w in READ_IO_PHASES.items() if p != "spark-clean" or self._spark()}
        phase = rng.choices(list(phases), list(phases.values()))[0]
        phase, self.forced_phase = self.forced_phase or phase, ""
        prob, hold = round(rng.uniform(0.2, 0.8), 2), rng.uniform(0.5, 2.5)
        spark: tuple[threading.Thread, dict] | None = None
        if phase == "spark-clean":
            self._warm_spark()
        pid, mark = self.broker.pid, len(self.broker.log_text())
        t = round(time.monotonic() - self.t0, 2)
        try:
            self.fiu.enable(pid, probability=prob)
            if phase == "spark-clean" and self.worker_reads is not None:
                self.worker_reads.enable(prob)  # the executors read through the same disk
        except FiuError as exc:  # the harness failed, not the broker: said, not judged
            self.read_io["not injected"] += 1
            return Fault(t, "read-io-error", phase, False, f"not injected: {exc}")
        errors: Counter[str] = Counter()
        readers = [self._window_reader(hold, errors) for _ in range(2 if phase == "fetch" else 1)]
        if phase == "spark-clean":
            spark = self._in_thread(lambda: self._post_compact(SPARK_TOPIC, "spark", 120))
            spark[0].join(max(hold, 20.0))  # the window lasts the clean (bounded)
        else:
            time.sleep(hold)  # fault: the disk fails reads this long
        lost = ""
        if self.worker_reads is not None:
            self.worker_reads.disable()
        try:
            if self.broker.alive():
                self.fiu.disable(pid)
        except FiuError as exc:
            if self.broker.alive():
                # reads would keep failing: stacks for the record, a SIGKILL, a restart
                where = self.fiu.dump(pid, self.work / f"no-answer-{pid}.txt")
                lost = f"; libfiu did not answer ({exc}): stacks in {where}, SIGKILLed"
                self.log(f"  libfiu did not answer pid {pid}: stacks in {where} and the log")
                self.broker.kill()
        for th in readers:
            th.join(30)
        seconds = round(time.monotonic() - self.t0 - t, 2)
        outcome = "fiu-lost: restarted" if lost else self._after_read_errors(mark)
        if lost:
            self._offline_check()
            self.broker.start(timeout=60)
        self.read_io[outcome.split(":")[0]] += 1
        new_log = self.broker.log_text()[mark:]
        eio = sum(
            "Input/output error" in line or "Errno 5" in line for line in new_log.splitlines()
        )
        if phase == "fetch":
            hit = "fetch" in new_log or errors.total() > 0
        elif phase == "local-clean":
            hit = any(
                "clean" in line.lower() and ("Input/output" in line or "Errno 5" in line)
                for line in new_log.splitlines()
            )
        else:
            hit = spark is not None and ("error" in spark[1] or eio > 0)
            if spark is not None:
                answer = spark[1].get("error") or spark[1].get("result", b"still running")
                errors["spark: " + str(answer)[:120]] += 1
        points = "+".join(p.rsplit("/", 1)[-1] for p in self.fiu.points)
        detail = (
            f"{points} fail p={prob} for {seconds:.2f} s; {eio} EIO lines in the broker "
            f"log; reader errors {dict(errors) or 0}; broker {outcome}{lost}"
        )
        return Fault(t, "read-io-error", phase, hit, detail)

    def _window_reader(self, seconds: float, errors: Counter[str]) -> threading.Thread:
        """A consumer reading a random partition from its start for ``seconds``: errors
        are counted (clients may get them now), records go to the consumer check (they
        must be what was acknowledged there), and a batch failing its CRC is a
        violation (the broker served wrong bytes)."""
        from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

        tp = self.rng.choice(list(self.targets()))

        def run() -> None:
            c = Consumer(
                {
                    "bootstrap.servers": self.broker.bootstrap,
                    "group.id": "fc-window-reader",
                    "enable.auto.commit": False,
                    "check.crcs": True,
                    "fetch.wait.max.ms": 50,
                    "log_level": 2,
                }
            )
            try:
                c.assign([TopicPartition(*tp, OFFSET_BEGINNING)])
                end = time.monotonic() + seconds
                while time.monotonic() < end:
                    for m in c.consume(200, timeout=0.1):
                        err = m.error()
                        if err is None:
                            self._on_consumed(m)
                        elif err.code() == KafkaError._BAD_MSG:
                            self.violations.append(f"read-io-error: {tp} served bad bytes: {err}")
                        else:
                            errors[err.name()] += 1
            except Exception as exc:  # noqa: BLE001 - counted: clients may fail now
                errors[type(exc).__name__] += 1
            finally:
                c.close()

        th = threading.Thread(target=run, name="fc-window-reader", daemon=True)
        th.start()
        return th

    def _storage_errors(self) -> list[tuple[str, int]]:
        tps = [*self.targets(), *((TXN_TOPIC, p) for p in range(TXN_PARTITIONS))]
        return storage_error_partitions(self.broker.port, tps)

    def _restart(self, why: str) -> None:
        """SIGTERM (a clean stop; SIGKILL if ignored), the offline check, start."""
        try:
            self.broker.stop(timeout=60)
        except AssertionError as exc:
            self.violations.append(f"{why}: {exc}")
        self._offline_check()
        self.broker.start(timeout=60)

    def _halting(self, mark: int) -> bool:
        """Whether the broker began Kafka's halt (no log dir left) since ``mark``: its
        ports close a moment before the process exits; wait for the exit then."""
        if HALT_LINE not in self.broker.log_text()[mark:]:
            return False
        proc = self.broker.proc
        assert proc is not None
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.violations.append(
                f"read-io-error: the halt did not end:\n{self.broker.log_tail()}"
            )
        return True

    def _after_read_errors(self, mark: int) -> str:
        """What the broker did once reads work again: ``up``, ``exited`` (on its own,
        without a signal), ``offline`` (KAFKA_STORAGE_ERROR) or ``stuck`` (produce
        still fails); restarted in the last three cases. A read error may take the dir
        offline a moment after the window (a clean reading late): its halt is waited
        for wherever it shows."""
        proc = self.broker.proc
        assert proc is not None
        self._halting(mark)
        if not self.broker.alive():
            rc = proc.returncode
            if rc is not None and rc < 0:
                self.violations.append(
                    f"read-io-error: the broker died of signal {-rc}:\n{self.broker.log_tail()}"
                )
            self._offline_check()
            self.broker.start(timeout=60)
            return f"exited: code {rc}, restarted"
        time.sleep(0.5)  # delivery reports of the window's failed produces arrive
        try:
            offline = self._storage_errors()
        except (OSError, AssertionError) as exc:
            offline = []
            if self._halting(mark) or not self.broker.alive():
                return self._after_read_errors(mark)
            self.violations.append(f"read-io-error: ListOffsets after the window failed: {exc}")
        if offline:
            self._restart("read-io-error (dir offline)")
            return f"offline: {len(offline)} partitions KAFKA_STORAGE_ERROR, restarted"
        failed = self.model.failed
        time.sleep(1.5)  # does produce work again?
        if self._halting(mark):
            return self._after_read_errors(mark)
        if self.model.failed > failed:
            n = self.model.failed - failed
            self._restart("read-io-error (stuck)")
            return f"stuck: {n} produce failures after the window, restarted"
        return "up"

    def _spark(self) -> bool:
        return self.s.engine != "local"

    def _warm_spark(self) -> None:
        """Start this broker's Spark session (the first ``POST /v1/compact`` with the
        Spark engine does) so a read-io-error window covers a clean, not a JVM start."""
        if self.spark_warm_pid == self.broker.pid:
            return
        port = self.broker.admin_port  # up a moment after the Kafka port a restart waits for
        wait_for(lambda: accepts_connections(port), "the admin endpoint", timeout=60)
        try:
            self._post_compact(SPARK_TOPIC, "spark", 300)
        except Exception as exc:  # noqa: BLE001 - an answer at all means the session is up
            self.log(f"  Spark warm-up answered {exc}")
        self.spark_warm_pid = self.broker.pid

    def _aim(self, phase: str) -> tuple[bool, str]:
        """Wait for the phase (or a bounded time), return (observed, detail); the caller
        kills right after."""
        rng = self.rng
        if phase == "produce":
            d = rng.uniform(0.05, 1.0)
            time.sleep(d)  # fault: a random kill moment
            return True, f"after {d:.3f} s of load"
        if phase == "fetch":
            tp = rng.choice(list(self.targets()))
            th, _box = self._in_thread(
                lambda: read_partition(self.broker.bootstrap, *tp, timeout=20)
            )
            d = rng.uniform(0.0, 0.2)
            time.sleep(d)  # fault: kill while the fetch is in flight
            return th.is_alive(), f"reading {tp[0]}-{tp[1]} for {d:.3f} s"
        if phase == "rebalance":
            m = GroupMember(self.broker.bootstrap, [*COMPACTED, EVENTS], self._on_consumed)
            m.start()
            d = rng.uniform(0.0, 0.5)
            time.sleep(d)  # fault: kill while the member joins
            hit = not m.assigned.is_set()
            m.stop(wait=False)  # leaves after the restart: a second rebalance
            return hit, f"member joining for {d:.3f} s"
        if phase == "local-clean":
            name = self._wait_for_file(self._dirs(list(COMPACTED)), ".cleaned", rng.uniform(1, 4))
            return name is not None, f"saw {name}" if name else "no .cleaned file in time"
        if phase == "swap":  # renames that last microseconds: from a clean's write, spin
            dirs = self._dirs(list(COMPACTED))
            writing = self._wait_for_file(dirs, ".cleaned", rng.uniform(1, 4))
            name = self._wait_for_file(dirs, ".swap", 0.5, spin=True) if writing else None
            return name is not None, f"saw {name}" if name else "no .swap file seen"
        if phase == "retention":
            name = self._wait_for_file(self._dirs([EVENTS]), ".deleted", rng.uniform(1.0, 4.0))
            return name is not None, f"saw {name}" if name else "no .deleted file in time"
        if phase == "txn-commit":
            assert self.txn is not None
            hit = self.txn.committing.wait(rng.uniform(1.0, 3.0))
            d = rng.uniform(0.0, 0.004)
            time.sleep(d)  # fault: kill a few ms into the commit
            return hit and self.txn.committing.is_set(), f"{d * 1000:.1f} ms into a commit"
        if phase == "spark-clean":
            return self._aim_spark(rng)
        raise ValueError(f"unknown fault {phase!r}")

    def _spark_tasks_running(self) -> bool:
        """Spark's Python workers (``pyspark.daemon``/``pyspark.worker``, children of the
        broker's JVM) exist: a Spark job's tasks have started on this broker's session."""
        try:
            import psutil

            for c in psutil.Process(self.broker.pid).children(recursive=True):
                cmd = c.cmdline()  # not the JVM: its class path names pyspark's jars
                if "java" not in c.name() and any(".daemon" in a or ".worker" in a for a in cmd):
                    return True
        except Exception:  # noqa: BLE001 - a process that just went away
            return False
        return False

    def _aim_spark(self, rng: random.Random) -> tuple[bool, str]:
        """``POST /v1/compact`` with the Spark engine on the dirty topic. The first
        request on a broker starts the Spark session: once a Spark Python worker shows
        its job has begun, kill a random delay in (up to the median first-job time seen,
        20 s until one is seen). If it answers first (its worker too short-lived to
        see), send another on the now warm session and kill up to the median warm
        clean in. A request that cleaned nothing (no sealed dirty segment yet) is sent
        again after a back-off."""
        topic = SPARK_TOPIC
        t0 = time.monotonic()

        def post() -> tuple[threading.Thread, dict]:
            return self._in_thread(lambda: self._post_compact(topic, "spark"))

        def cleaned(box: dict) -> bool:
            if "error" in box:
                return False
            return any(r.get("stats") for r in json.loads(box["result"])["results"])

        th, box = post()
        while True:
            if self._spark_tasks_running() and th.is_alive():
                tasks_at = time.monotonic()
                runs = self.spark_first_s
                est = sorted(runs)[len(runs) // 2] if runs else 20.0
                d = rng.uniform(0.0, est)
                th.join(d)
                if th.is_alive():
                    return True, (
                        f"{topic}: first Spark job began {tasks_at - t0:.1f} s after the "
                        f"request, killed {d:.2f} s into it (median {est:.1f} s)"
                    )
                if cleaned(box):
                    runs.append(time.monotonic() - tasks_at)
                break
            if not th.is_alive():
                if cleaned(box):
                    break  # the session is warm now
                if time.monotonic() - t0 > 300:
                    return False, f"no Spark clean within 300 s: {box}"
                time.sleep(0.5)  # back-off: new segments to seal
                th, box = post()
            time.sleep(0.05)  # poll: Spark's workers appear
        warm = self.spark_clean_s
        est = sorted(warm)[len(warm) // 2] if warm else 5.0
        d = rng.uniform(0.0, est)
        t1 = time.monotonic()
        th, box = post()
        th.join(d)
        if not th.is_alive() and cleaned(box):
            warm.append(time.monotonic() - t1)
        return th.is_alive(), (
            f"{topic}: session warm after {t1 - t0:.1f} s, killed {d:.2f} s into a warm "
            f"Spark clean (median {est:.1f} s)"
        )

    # -- the run ------------------------------------------------------------------------------
    def run(self) -> CampaignResult:
        s = self.s
        self.log(
            f"fault campaign: seed {s.seed} (--seed {s.seed} replays the fault choices), "
            f"engine {s.engine}, faults {s.faults}, duration {s.duration}"
        )
        for kind, why in self.skipped.items():
            self.log(f"SKIPPING fault kind {kind}: {why}")
        self.t0 = time.monotonic()
        self.broker.start(timeout=60)
        try:
            self.start_load()
            time.sleep(2.0)  # let the group form and the cleaner find work
            while True:
                elapsed = time.monotonic() - self.t0
                if s.faults is not None and len(self.faults) >= s.faults:
                    break
                if s.duration is not None and elapsed >= s.duration:
                    break
                kind = self.rng.choices(self.kinds, self.weights)[0]
                if s.spark_every and (len(self.faults) + 1) % s.spark_every == 0:
                    kind = "spark-clean"
                forced = s.forced.get(len(self.faults) + 1)
                if forced is not None and forced.split(":")[0] not in self.skipped:
                    kind, _, self.forced_phase = forced.partition(":")
                f = self.fault(kind)
                self.faults.append(f)
                self.log(
                    f"  [{f.t_s:7.1f}s] #{len(self.faults):4d} {f.kind:9s} {f.phase:15s} "
                    f"{'hit ' if f.hit else 'miss'} {f.detail}  (acked {self.model.acked}, "
                    f"violations {len(self.violations)})"
                )
                if s.check_every and len(self.faults) % s.check_every == 0:
                    self.violations += self.read_back_check()
            time.sleep(1.0)  # the last broker serves some load
            self.finish_load()
            self.violations += self.read_back_check(final=True)
            self.violations += self.consumer_check()
            rc = self.broker.stop()
            if rc != 0:
                self.violations.append(f"broker exit code {rc} on SIGTERM")
            try:
                check_data_dir(self.broker.data_dir)
            except AssertionError as exc:
                self.violations.append(f"final offline check: {exc}")
        finally:
            self._sampling.set()
            for m in self.members:
                m.stop(wait=False)
            self.broker.kill()
        txns = Counter(t.outcome for t in (self.txn.txns if self.txn else []))
        return CampaignResult(
            seed=s.seed,
            engine=s.engine,
            elapsed_s=time.monotonic() - self.t0,
            faults=self.faults,
            samples=self.samples,
            acked=self.model.acked,
            failed=self.model.failed,
            txns=dict(txns),
            consumed=self.consumed_n,
            offline_checks=self.offline_checks,
            leftovers_after_kill=self.leftovers_after_kill,
            restarts=self.broker.starts - 1,
            broker_tracebacks=self.broker.log_text().count("Traceback"),
            violations=self.violations,
            skipped=dict(self.skipped),
            read_io=dict(self.read_io),
        )

    def finish_load(self) -> None:
        for p in self.producers:
            left = p.stop(180)
            if left:
                self.violations.append(f"{p.ident}: {left} messages never got a delivery report")
        if self.txn is not None:
            self.txn.stop()
        time.sleep(2.0)  # the group members catch up
        for m in self.members:
            m.stop()

    def read_back_check(self, final: bool = False) -> list[str]:
        """Read every partition from its start and judge it with :func:`check_partition`;
        the transactional topic with READ_COMMITTED and :func:`check_transactions`."""
        bad: list[str] = []
        b = self.broker.bootstrap
        cfg = {"auto.offset.reset": "earliest"}
        for tp in self.targets():
            read_ms = int(time.time() * 1000)
            records = read_partition(b, *tp, timeout=60, config=cfg)
            with self.model.lock:
                writes = {k: list(ws) for k, ws in self.model.writes.get(tp, {}).items()}
            compact = tp[0] in COMPACTED
            bad += check_partition(
                tp,
                writes,
                records,
                compact=compact,
                read_ms=read_ms,
                retention_ms=None if compact else RETENTION_MS,
            )
        if final and self.txn is not None:
            visible = {
                (TXN_TOPIC, p): read_partition(
                    b, TXN_TOPIC, p, timeout=60, config={**cfg, "isolation.level": "read_committed"}
                )
                for p in range(TXN_PARTITIONS)
            }
            bad += check_transactions(self.txn.txns, visible)
        return bad

    def consumer_check(self) -> list[str]:
        """What the group consumed: produced on that partition, at its acknowledged offset."""
        bad: list[str] = []
        with self.model.lock:
            for tp, seen in self.consumed.items():
                index = {
                    (k, w.value): w for k, ws in self.model.writes.get(tp, {}).items() for w in ws
                }
                for off, rec in seen.items():
                    w = index.get(rec)
                    if w is None:
                        bad.append(f"consumer read {tp}@{off} {rec!r}: never produced")
                    elif rec[1] is not None and w.offset is not None and w.offset != off:
                        bad.append(
                            f"consumer read {rec!r} at {tp}@{off}, acknowledged at {w.offset}"
                        )
        return bad


def run_campaign(
    settings: CampaignSettings, work: Path, log: Callable[[str], None] = print
) -> CampaignResult:
    return Campaign(settings, work, log).run()


# -- output --------------------------------------------------------------------------------


def write_outputs(result: CampaignResult, out: Path) -> tuple[Path, Path]:
    """``faults.csv`` (one row per fault), ``timeline.csv`` (per-second samples) and
    ``faults.png`` (acknowledged records/s and produce p99 with the faults marked)."""
    out.mkdir(parents=True, exist_ok=True)
    faults_csv, png = out / "faults.csv", out / "faults.png"
    with open(faults_csv, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["t_s", "kind", "phase", "hit", "detail"])
        w.writeheader()
        for fault in result.faults:
            w.writerow(asdict(fault))
    with open(out / "timeline.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["t_s", "acked_per_s", "p99_ms"])
        w.writeheader()
        for s in result.samples:
            w.writerow(asdict(s))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 1, figsize=(11, 6.5), sharex=True)
    t = [s.t_s for s in result.samples]
    axes[0].plot(t, [s.acked_per_s for s in result.samples], linewidth=0.7)
    axes[0].set_ylabel("acknowledged records/s")
    axes[1].plot(t, [s.p99_ms for s in result.samples], color="tab:red", linewidth=0.7)
    axes[1].set_ylabel("produce p99 (ms)")
    axes[1].set_yscale("symlog")
    axes[1].set_xlabel("seconds")
    names = sorted({f.label for f in result.faults})
    colors = {n: plt.cm.tab20(i % 20) for i, n in enumerate(names)}
    for f in result.faults:
        name = f.label
        for ax in axes:
            ax.axvline(f.t_s, color=colors[name], linewidth=0.6, alpha=0.7)
    handles = [plt.Line2D([], [], color=colors[n], label=n) for n in names]
    axes[0].legend(handles=handles, loc="upper right", fontsize=7, ncol=4)
    fig.suptitle(
        f"kompakt fault campaign, seed {result.seed}: {len(result.faults)} faults, "
        f"{result.acked} acked, {len(result.violations)} violations"
    )
    fig.tight_layout()
    fig.savefig(png, dpi=90)
    plt.close(fig)
    return faults_csv, png
