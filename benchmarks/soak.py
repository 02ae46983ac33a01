"""Sustained load: producers and group consumers on compacted topics while cleans run.

Starts ``kompakt serve`` as a subprocess (``tests/reliability/kit.py``), then for
``--duration`` seconds:

* ``--producers`` idempotent acks=all confluent-kafka producers write keyed records (8%
  tombstones) to two compacted topics and one delete-policy topic, each producer on its
  own keys, at ``--rate`` records/s each; the model keeps only acknowledged writes;
* ``--consumers`` confluent-kafka consumers in one group (``subscribe``) fold the
  compacted topics into a table, skipping records they already applied (a rebalance
  replays from the committed offset);
* the background cleaner cleans 64 KiB segments (``--engine local`` or ``spark``);
* ``--kills N`` SIGKILLs the broker at N seeded random moments and restarts it.

Every ``--interval`` seconds it samples acknowledged records/s, consumed records/s,
produce p99 latency (send to delivery report), broker RSS and open fds (psutil, else
/proc) and cleans so far. It writes ``soak.csv`` and ``soak.png`` to ``--out`` and prints
the headline: records acknowledged, kills survived, records lost (read back from the
broker after the run: acknowledged writes missing or overwritten), consumer table
mismatches, p99, RSS and fds first vs last.

Old segments are deleted 2 s after a clean (``log.segment.delete.delay.ms=2000``;
Kafka's 60 s default would make fds climb for the first minute of any run).

Run: ``.venv/bin/python benchmarks/soak.py [--duration 300] [--kills 10] [--engine local]``.
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from reliability.kit import (  # noqa: E402
    BrokerProcess,
    Model,
    ModelProducer,
    check_delete_policy,
    create_topic,
    fold,
    mismatches,
    p99,
    process_stats,
    read_partition,
)

COMPACTED = {"soak-users": 4, "soak-orders": 2}
EVENTS = "soak-events"
KEYS_PER_PARTITION = 2000
COMPACTED_CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": str(64 * 1024),
    "min.cleanable.dirty.ratio": "0.3",
    "delete.retention.ms": "60000",  # longer than any consumer lag, as Kafka requires
}
EVENTS_CONFIG = {"cleanup.policy": "delete", "segment.bytes": str(1 << 20), "retention.ms": "-1"}


@dataclass
class Sample:
    t_s: float
    acked_per_s: float
    consumed_per_s: float
    p99_ms: float
    rss_mb: float
    fds: int
    fds_pending_delete: int  # old segments kept open until file.delete.delay.ms
    fds_other: int  # not segment files: sockets, pipes, the lock
    segments: int  # live segments in the data dir (5 fds each: .log, 2 per mmapped index)
    cleans: int
    kills: int


@dataclass
class SoakResult:
    duration_s: float
    acked: int
    failed: int
    kills: int
    records_lost: int
    consumer_mismatches: int
    p99_ms: float
    cleans: int
    samples: list[Sample] = field(default_factory=list)
    lost_examples: list[str] = field(default_factory=list)

    def headline(self) -> str:
        first, last = self.samples[0], self.samples[-1]
        return (
            f"{self.acked} records acknowledged in {self.duration_s:.0f} s "
            f"({self.acked / self.duration_s:.0f}/s), {self.failed} failed; "
            f"kills survived: {self.kills}; records lost: {self.records_lost}; "
            f"consumer table mismatches: {self.consumer_mismatches}; "
            f"produce p99 {self.p99_ms:.1f} ms; cleans {self.cleans}; "
            f"RSS {first.rss_mb:.0f} -> {last.rss_mb:.0f} MB "
            f"(max {max(s.rss_mb for s in self.samples):.0f}); fds {first.fds} -> {last.fds}"
        )


class Table:
    """The compacted topics folded by a consumer group, once per offset."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.state: dict[tuple[str, int], dict[bytes, bytes | None]] = {}
        self.applied: dict[tuple[str, int], int] = {}
        self.consumed = 0
        self.replayed = 0

    def apply(self, topic: str, part: int, offset: int, key: bytes, value: bytes | None) -> None:
        tp = (topic, part)
        with self.lock:
            self.consumed += 1
            if offset <= self.applied.get(tp, -1):
                self.replayed += 1
                return
            self.applied[tp] = offset
            self.state.setdefault(tp, {})[key] = value


class GroupConsumer:
    def __init__(self, bootstrap: str, group: str, topics: list[str], table: Table):
        from confluent_kafka import Consumer

        self.c = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": True,
                "auto.commit.interval.ms": 1000,
                "session.timeout.ms": 10000,
                "heartbeat.interval.ms": 1000,
                "fetch.wait.max.ms": 100,
                "reconnect.backoff.ms": 20,
                "reconnect.backoff.max.ms": 200,
                "log_level": 2,
            }
        )
        self.c.subscribe(topics)
        self.table = table
        self.errors = 0
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for m in self.c.consume(500, timeout=0.2):
                if m.error() is not None:
                    self.errors += 1
                    continue
                self.table.apply(m.topic(), m.partition(), m.offset(), m.key(), m.value())

    def start(self) -> GroupConsumer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(30)
        self.c.close()


def run_soak(
    duration: float,
    *,
    kills: int = 0,
    producers: int = 2,
    consumers: int = 2,
    rate: float = 1000.0,
    interval: float = 5.0,
    engine: str = "local",
    seed: int | None = None,
    work_dir: Path | None = None,
    log: Any = print,
) -> SoakResult:
    seed = random.randrange(2**31) if seed is None else seed
    log(f"soak: seed {seed}, {duration:.0f} s, {kills} kills, engine {engine}")
    rng = random.Random(seed)
    work = Path(work_dir or tempfile.mkdtemp(prefix="kompakt-soak-"))
    broker = BrokerProcess(
        work / "data",
        {
            "kompakt.cleaner.engine": engine,
            "log.cleaner.backoff.ms": "500",
            "log.segment.delete.delay.ms": "2000",
            "log.flush.offset.checkpoint.interval.ms": "5000",
        },
    )
    broker.start()
    model, table = Model(), Table()
    lat_lock = threading.Lock()
    latencies: list[float] = []

    def on_latency(s: float) -> None:
        with lat_lock:
            latencies.append(s)

    targets: dict[tuple[str, int], tuple[int, float]] = {
        (t, p): (KEYS_PER_PARTITION // producers, 0.08)
        for t, n in COMPACTED.items()
        for p in range(n)
    }
    targets[(EVENTS, 0)] = (10**9, 0.0)
    prods: list[ModelProducer] = []
    cons: list[GroupConsumer] = []
    samples: list[Sample] = []
    all_latencies: list[float] = []
    killed = 0
    t0 = time.monotonic()
    try:
        for topic, n in COMPACTED.items():
            create_topic(broker.bootstrap, topic, n, COMPACTED_CONFIG)
        create_topic(broker.bootstrap, EVENTS, 1, EVENTS_CONFIG)
        for _ in range(consumers):
            cons.append(GroupConsumer(broker.bootstrap, "soak", list(COMPACTED), table).start())
        for i in range(producers):
            prods.append(
                ModelProducer(
                    broker.bootstrap,
                    model,
                    targets,
                    random.Random(seed + 1 + i),
                    rate=rate,
                    ident=f"p{i}",
                    key_prefix=b"p%d-" % i,
                    on_latency=on_latency,
                ).start()
            )
        kill_at = sorted(rng.uniform(3, max(4, duration - 3)) for _ in range(kills))
        t_start = time.monotonic()
        last_t, last_acked, last_consumed = t_start, 0, 0
        next_sample = t_start + interval
        while (now := time.monotonic()) < t_start + duration:
            if kill_at and now - t_start >= kill_at[0]:
                kill_at.pop(0)
                broker.kill()
                killed += 1
                broker.start()
            if now >= next_sample:
                with lat_lock:
                    window, latencies[:] = list(latencies), []
                all_latencies += window
                rss, fds, pending, segment_fds = process_stats(broker.pid)
                dt = now - last_t
                s = Sample(
                    t_s=round(now - t_start, 1),
                    acked_per_s=round((model.acked - last_acked) / dt, 1),
                    consumed_per_s=round((table.consumed - last_consumed) / dt, 1),
                    p99_ms=round(p99(window) * 1000, 2),
                    rss_mb=round(rss / 2**20, 1),
                    fds=fds,
                    fds_pending_delete=pending,
                    fds_other=fds - segment_fds,
                    segments=sum(1 for _ in broker.data_dir.glob("*/*.log")),
                    cleans=broker.log_text().count(" Cleaned "),
                    kills=killed,
                )
                samples.append(s)
                log(
                    f"  t={s.t_s:6.1f}s  acked/s={s.acked_per_s:7.0f}  consumed/s="
                    f"{s.consumed_per_s:7.0f}  p99={s.p99_ms:7.1f}ms  rss={s.rss_mb:6.1f}MB  "
                    f"fds={s.fds:4d} ({s.fds_pending_delete:3d} to delete)  cleans={s.cleans}  kills={s.kills}"
                )
                last_t, last_acked, last_consumed = now, model.acked, table.consumed
                next_sample += interval
            time.sleep(0.05)
        for p in prods:
            left = p.stop(120)
            if left:
                raise AssertionError(f"{left} messages never got a delivery report")
        with lat_lock:
            all_latencies += latencies
        # consumers catch up: wait until their table matches what the broker holds
        expected_tps = [(t, p) for t, n in COMPACTED.items() for p in range(n)]
        deadline = time.monotonic() + 60
        bad: list[str] = []
        while time.monotonic() < deadline:
            with table.lock:
                bad = [b for tp in expected_tps for b in mismatches(model, tp, _live(table, tp))]
            if not bad:
                break
            time.sleep(0.5)
        consumer_bad = len(bad)
        lost: list[str] = []
        for tp in expected_tps:
            lost += mismatches(model, tp, _live_fold(read_partition(broker.bootstrap, *tp)))
        try:
            check_delete_policy(model, (EVENTS, 0), read_partition(broker.bootstrap, EVENTS, 0))
        except AssertionError as exc:
            lost.append(str(exc))
    finally:
        for c in cons:
            c.stop()
        for p in prods:
            p.stop(5)
        rc = broker.stop() if broker.alive() else None
    if rc not in (0, None):
        raise AssertionError(f"broker exit code {rc}:\n{broker.log_tail()}")
    result = SoakResult(
        duration_s=time.monotonic() - t0,
        acked=model.acked,
        failed=model.failed,
        kills=killed,
        records_lost=len(lost),
        consumer_mismatches=consumer_bad,
        p99_ms=p99(all_latencies) * 1000,
        cleans=broker.log_text().count(" Cleaned "),
        samples=samples,
        lost_examples=(lost + bad)[:5],
    )
    return result


def _live(table: Table, tp: tuple[str, int]) -> dict[bytes, bytes | None]:
    """A consumer's view: a tombstone removes the key."""
    return {k: v for k, v in table.state.get(tp, {}).items() if v is not None}


def _live_fold(records: list) -> dict[bytes, bytes | None]:
    return {k: v for k, v in fold(records).items() if v is not None}


def write_outputs(result: SoakResult, out: Path) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    csv_path, png_path = out / "soak.csv", out / "soak.png"
    with open(csv_path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(asdict(result.samples[0])))
        w.writeheader()
        for s in result.samples:
            w.writerow(asdict(s))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [s.t_s for s in result.samples]
    fig, axes = plt.subplots(4, 1, figsize=(9, 10), sharex=True)
    axes[0].plot(t, [s.acked_per_s for s in result.samples], label="acked records/s")
    axes[0].plot(t, [s.consumed_per_s for s in result.samples], label="consumed records/s")
    axes[0].legend(loc="lower right")
    axes[1].plot(t, [s.p99_ms for s in result.samples], color="tab:red")
    axes[1].set_ylabel("produce p99 (ms)")
    axes[2].plot(t, [s.rss_mb for s in result.samples], color="tab:green")
    axes[2].set_ylabel("broker RSS (MB)")
    axes[2].set_ylim(bottom=0)
    axes[3].plot(t, [s.fds for s in result.samples], color="tab:purple", label="all")
    axes[3].plot(
        t,
        [s.fds - s.fds_pending_delete for s in result.samples],
        color="tab:olive",
        label="without segments waiting for deletion",
    )
    axes[3].legend(loc="lower right")
    axes[3].set_ylabel("broker open fds")
    axes[3].set_xlabel("seconds")
    for s0, s1 in zip(result.samples, result.samples[1:], strict=False):
        if s1.kills > s0.kills:
            for ax in axes:
                ax.axvline(s1.t_s, color="grey", linestyle=":", linewidth=0.8)
    fig.suptitle(
        f"kompakt soak: {result.acked} acked, {result.kills} kills, "
        f"{result.records_lost} lost, p99 {result.p99_ms:.0f} ms"
    )
    fig.tight_layout()
    fig.savefig(png_path, dpi=90)
    plt.close(fig)
    return csv_path, png_path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=300.0, help="seconds of load")
    ap.add_argument("--kills", type=int, default=0, help="SIGKILLs of the broker during the run")
    ap.add_argument("--producers", type=int, default=2)
    ap.add_argument("--consumers", type=int, default=2)
    ap.add_argument("--rate", type=float, default=1000.0, help="records/s per producer")
    ap.add_argument("--interval", type=float, default=5.0, help="seconds per sample")
    ap.add_argument("--engine", choices=("local", "spark"), default="local")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--out", type=Path, default=Path("soak-out"))
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    args = ap.parse_args(argv)
    result = run_soak(
        args.duration,
        kills=args.kills,
        producers=args.producers,
        consumers=args.consumers,
        rate=args.rate,
        interval=args.interval,
        engine=args.engine,
        seed=args.seed,
    )
    csv_path, png_path = write_outputs(result, args.out)
    if args.json:
        print(json.dumps(asdict(result), indent=1))
    print(result.headline())
    print(f"wrote {csv_path} and {png_path}")
    for line in result.lost_examples:
        print("  ", line)
    return 0 if result.records_lost == 0 and result.consumer_mismatches == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
