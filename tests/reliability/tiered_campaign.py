"""A SIGKILL campaign against the remote tier's crash safety (issue 29): a real
``kompakt serve`` tiering a compacted topic (two partitions, cleaned locally and in the
remote tier) and a delete-policy topic (remote retention expires its oldest segments),
under two idempotent acks=all producers whose delivery reports are the model of what
was acknowledged (:class:`reliability.kit.Model`).

Each kill is aimed at one named step (:mod:`reliability.tiered_faults`: before/after a
segment object's put, before/after a manifest's compare-and-swap, before/after a
replaced or expired object's delete, and the remote clean's fetched, cleaned, uploaded,
committed and deleted), at the 1st to 3rd time the step is reached after the broker is
armed; ``random`` kills from outside at a random moment. A kill is a *hit* when the
broker died at its step (the step was reached in time), else it is killed from outside
and counted a miss.

After each kill, with the broker down, the bucket is checked offline: every object a
manifest names exists with the size and SHA-256 the manifest recorded; the objects no
manifest names (orphans the kill left: uploads not committed, replaced objects not yet
deleted) are counted, the orphan sweep runs (as if its grace period had passed), and
afterwards no object is left that no manifest names. The broker is then restarted and,
before it is armed again, every partition is read from offset 0 and judged by
:func:`reliability.fault_campaign.check_partition` (Kafka's rules: every acknowledged
record at its offset unless a later record of its key exists, or it is a tombstone past
``delete.retention.ms``, or on the delete-policy topic older than ``retention.ms`` and
below the log start).

Run as a module for a longer campaign: ``PYTHONPATH=tests python -m
reliability.tiered_campaign --kills 60 [--seed N] [--work DIR]``.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from reliability.fault_campaign import check_partition
from reliability.kit import BrokerProcess, Model, ModelProducer, create_topic, read_partition
from reliability.tiered_faults import SCRIPT as FAULTS_SCRIPT
from reliability.tiered_faults import STEPS
from reliability.wire_kit import call, connect

from kompakt.remote import open_store
from kompakt.remote.layout import TOPICS, partition_of_key, segments_folder
from kompakt.remote.metadata import ORPHAN_GRACE_MS, RemoteLogMetadataManager
from kompakt.remote.store import ObjectNotFoundError, ObjectStore, RemoteStorageError

COMPACT, EVENTS = "tc-compact", "tc-events"
COMPACT_PARTITIONS = 2
DELETE_RETENTION_MS = 3000
RETENTION_MS = 15000
TIERED = {"remote.storage.enable": "true", "segment.bytes": "2048", "local.retention.bytes": "2048"}
COMPACT_CONFIG = {
    **TIERED,
    # TIERED's local.retention.bytes keeps a tiered segment locally: the local cleaner
    # merges it with segments not tiered yet, and the merged segment goes up from the
    # remote end only (a kill mid-way must not leave overlapping manifest segments)
    "cleanup.policy": "compact",
    "min.cleanable.dirty.ratio": "0.3",
    "delete.retention.ms": str(DELETE_RETENTION_MS),
    "min.compaction.lag.ms": "0",
    "file.delete.delay.ms": "300",
}
EVENTS_CONFIG = {**TIERED, "cleanup.policy": "delete", "retention.ms": str(RETENTION_MS)}
BROKER_OVERRIDES = {
    "remote.log.storage.system.enable": "true",
    "remote.log.manager.task.interval.ms": "50",
    "log.cleaner.enable": "true",  # the local cleaner, and the remote clean by the task
    "kompakt.cleaner.engine": "local",
    "log.cleaner.backoff.ms": "100",
    "log.segment.delete.delay.ms": "300",
    "offsets.topic.num.partitions": "1",
}
RANDOM = "random"
SUITE_STEPS = (
    "upload.put.after",
    "manifest.cas.before",
    "manifest.cas.after",
    "clean.uploaded",
    "clean.committed",
    RANDOM,
)
EARLIEST_LOCAL = -4  # ListOffsets: the local log start (KIP-405)


def targets() -> list[tuple[str, int]]:
    return [*((COMPACT, p) for p in range(COMPACT_PARTITIONS)), (EVENTS, 0)]


# -- the bucket, offline --------------------------------------------------------------------


@dataclass
class BucketCheck:
    objects: int  # segment objects before the sweep
    orphans: int  # of them, named by no manifest
    swept: int  # deleted by the sweep
    violations: list[str]


def check_bucket(store: ObjectStore) -> BucketCheck:
    """With no broker running: every manifest-named object present with its size and
    SHA-256; the sweep (grace passed) leaves exactly the named objects."""
    meta = RemoteLogMetadataManager(store)
    bad: list[str] = []

    def segment_objects() -> dict[tuple[str, int], set[str]]:
        out: dict[tuple[str, int], set[str]] = {}
        for o in store.list(TOPICS):
            where = partition_of_key(o.key)
            if where is not None and o.key.startswith(segments_folder(*where) + "/"):
                out.setdefault(where, set()).add(o.key)
        return out

    named: dict[tuple[str, int], set[str]] = {}
    present = segment_objects()
    for tp in sorted(set(present) | set(targets())):
        try:
            v = meta.load_partition(*tp)
        except RemoteStorageError as exc:
            bad.append(f"{tp}: manifest unreadable: {exc}")
            continue
        named[tp] = v.value.keys() if v is not None else set()
        for s in v.value.segments if v is not None else ():
            for suffix, f in s.files.items():
                try:
                    data, _ = store.get(f.key)
                except ObjectNotFoundError:
                    bad.append(f"{tp}: the manifest names {f.key}, which is missing")
                    continue
                if len(data) != f.size or hashlib.sha256(data).hexdigest() != f.sha256:
                    bad.append(f"{tp}: {f.key} ({suffix}) fails its recorded size or SHA-256")
    objects = sum(len(keys) for keys in present.values())
    orphans = sum(len(keys - named.get(tp, set())) for tp, keys in present.items())
    swept = meta.sweep_orphans(now_ms=int(time.time() * 1000) + 2 * ORPHAN_GRACE_MS)
    for tp, keys in segment_objects().items():
        left = keys - named.get(tp, set())
        if left:
            bad.append(f"{tp}: {len(left)} objects no manifest names after the sweep")
    return BucketCheck(objects, orphans, len(swept), bad)


def earliest_local(port: int, topic: str, partition: int) -> int:
    part = {"partition_index": partition, "current_leader_epoch": -1, "timestamp": EARLIEST_LOCAL}
    body = {
        "replica_id": -1,
        "isolation_level": 0,
        "topics": [{"name": topic, "partitions": [part]}],
    }
    with connect(port) as sock:
        (p,) = call(sock, 2, 9, body).topics[0].partitions
    return p.offset if p.error_code == 0 else -1


# -- the campaign -----------------------------------------------------------------------------


@dataclass
class Kill:
    n: int
    step: str
    occurrence: int  # killed at the step's n-th pass after arming
    hit: bool  # died at its step (random: always)
    after_s: float  # from arming to death
    bucket: BucketCheck


@dataclass
class TieredResult:
    seed: int
    elapsed_s: float
    kills: list[Kill]
    acked: int
    failed: int
    read_checks: int
    remote_reads: int  # final reads of partitions whose local log start was past 0
    violations: list[str] = field(default_factory=list)

    def by_step(self) -> dict[str, str]:
        n: Counter[str] = Counter(k.step for k in self.kills)
        hit: Counter[str] = Counter(k.step for k in self.kills if k.hit)
        return {s: f"{n[s]} ({hit[s]} hit)" for s in sorted(n)}

    def summary(self) -> str:
        steps = ", ".join(f"{s} {v}" for s, v in self.by_step().items())
        orphans = sum(k.bucket.orphans for k in self.kills)
        swept = sum(k.bucket.swept for k in self.kills)
        return (
            f"tiered campaign: seed {self.seed}, {self.elapsed_s:.0f} s, {len(self.kills)} "
            f"kills ({sum(k.hit for k in self.kills)} hit their step): {steps}; "
            f"{self.acked} records acknowledged, {self.failed} failed; {self.read_checks} "
            f"read-backs from offset 0; orphans left by kills {orphans}, swept {swept}, "
            f"left after sweeps 0 unless a violation says so; partitions read partly from "
            f"the remote tier at the end {self.remote_reads}/{len(targets())}; "
            f"violations: {len(self.violations)}"
        )


class TieredCampaign:
    def __init__(
        self,
        seed: int,
        kills: int,
        work: Path,
        steps: tuple[str, ...] | None = None,
        log: Callable[[str], None] = print,
        rate: float = 120.0,
        wait_s: float = 20.0,
    ):
        self.seed, self.rng = seed, random.Random(seed)
        self.work = Path(work)
        self.work.mkdir(parents=True, exist_ok=True)
        steps = steps or (*STEPS, RANDOM)
        # each step once in order, then drawn: a short campaign covers the list
        self.schedule = [
            steps[i] if i < len(steps) else self.rng.choice(steps) for i in range(kills)
        ]
        self.log, self.rate, self.wait_s = log, rate, wait_s
        self.remote = self.work / "remote"
        self.store = open_store(self.remote.as_uri())
        self.arm = self.work / "arm"
        overrides = {**BROKER_OVERRIDES, "kompakt.remote.storage.url": self.remote.as_uri()}
        self.broker = BrokerProcess(self.work / "data", overrides)
        self.model = Model()
        self.producers: list[ModelProducer] = []
        self.violations: list[str] = []
        self.read_checks = 0

    def start(self, step: str, occurrence: int) -> None:
        """The broker, armed to die at ``step`` once :attr:`arm` exists."""
        self.arm.unlink(missing_ok=True)
        fault = "none" if step == RANDOM else step
        self.broker.wrapper = [
            sys.executable,
            str(FAULTS_SCRIPT),
            fault,
            str(occurrence),
            str(self.arm),
        ]
        self.broker.start(60)

    def start_load(self) -> None:
        b = self.broker.bootstrap
        create_topic(b, COMPACT, COMPACT_PARTITIONS, COMPACT_CONFIG)
        create_topic(b, EVENTS, 1, EVENTS_CONFIG)
        compact = {(COMPACT, p): (40, 0.1) for p in range(COMPACT_PARTITIONS)}
        for i, tps in enumerate((compact, {(EVENTS, 0): (1000, 0.0)})):
            rng = random.Random(self.rng.random())
            self.producers.append(
                ModelProducer(b, self.model, tps, rng, rate=self.rate, ident=f"p{i}").start()
            )

    def read_back(self) -> int:
        """Read every partition from offset 0 and judge it; the partitions whose local
        log start is past 0 (read partly from the remote tier)."""
        remote = 0
        for tp in targets():
            read_ms = int(time.time() * 1000)
            records = read_partition(
                self.broker.bootstrap, *tp, timeout=60, config={"auto.offset.reset": "earliest"}
            )
            with self.model.lock:
                writes = {k: list(ws) for k, ws in self.model.writes.get(tp, {}).items()}
            self.violations += check_partition(
                tp,
                writes,
                records,
                compact=tp[0] == COMPACT,
                read_ms=read_ms,
                delete_retention_ms=DELETE_RETENTION_MS,
                retention_ms=RETENTION_MS if tp[0] == EVENTS else None,
            )
            remote += earliest_local(self.broker.port, *tp) > 0
        self.read_checks += 1
        return remote

    def kill_once(self, n: int, step: str) -> Kill:
        occurrence = self.rng.randint(1, 3)
        self.start(step, occurrence)
        if n == 1:
            self.start_load()
            time.sleep(1.0)  # fault: let the first segments roll before the first kill
        else:
            self.read_back()
        t0 = time.monotonic()
        self.arm.touch()
        proc = self.broker.proc
        assert proc is not None
        if step == RANDOM:
            time.sleep(self.rng.uniform(0.1, 3.0))  # fault: a kill at a random moment
            self.broker.kill()
            hit = True
        else:
            try:
                proc.wait(self.wait_s)
            except subprocess.TimeoutExpired:  # the step was not reached in time
                pass
            hit = proc.returncode == -9
            self.broker.kill()
        after = time.monotonic() - t0
        bucket = check_bucket(self.store)
        self.violations += [f"after kill {n} at {step}: {v}" for v in bucket.violations]
        k = Kill(n, step, occurrence, hit, after, bucket)
        self.log(
            f"  #{n:3d} {step:21s} x{occurrence} {'hit ' if hit else 'miss'} {after:5.1f} s; "
            f"objects {bucket.objects}, orphans {bucket.orphans}, swept {bucket.swept}; "
            f"acked {self.model.acked}, violations {len(self.violations)}"
            + (f", first: {self.violations[0]}" if self.violations else "")
            + (f"; producer errors {self.model.errors}" if self.model.errors else "")
        )
        return k

    def stop_producer(self, p: ModelProducer) -> None:
        """Stop sending and wait for every delivery report, within a bound: a producer
        whose thread died (a fatal idempotence error: the broker lost acknowledged
        records) is a violation, not a hung campaign."""
        if not p._thread.is_alive():
            self.violations.append(
                f"{p.ident}: its thread died (producer errors {self.model.errors})"
            )
        box: list[int] = []
        t = threading.Thread(target=lambda: box.append(p.stop(120)), daemon=True)
        t.start()
        t.join(150)
        if not box:
            self.violations.append(
                f"{p.ident}: stopping it hung (producer errors {self.model.errors})"
            )
        elif box[0]:
            self.violations.append(f"{p.ident}: {box[0]} records never got a delivery report")

    def run(self) -> TieredResult:
        t0 = time.monotonic()
        self.log(f"tiered campaign: seed {self.seed}, {len(self.schedule)} kills")
        kills: list[Kill] = []
        remote = 0
        try:
            for n, step in enumerate(self.schedule, 1):
                kills.append(self.kill_once(n, step))
            self.start("none", 1)
            for p in self.producers:
                self.stop_producer(p)
            remote = self.read_back()
            rc = self.broker.stop()
            if rc != 0:
                self.violations.append(f"broker exit code {rc} on SIGTERM")
            final = check_bucket(self.store)
            self.violations += [f"at the end: {v}" for v in final.violations]
        finally:
            self.broker.kill()
        return TieredResult(
            self.seed,
            time.monotonic() - t0,
            kills,
            self.model.acked,
            self.model.failed,
            self.read_checks,
            remote,
            self.violations,
        )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kills", type=int, default=60)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--work", type=Path, default=None)
    p.add_argument("--suite-steps", action="store_true", help="only the CI test's steps")
    args = p.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(2**31)
    work = args.work or Path(tempfile.mkdtemp(prefix="tiered-campaign-"))
    steps = SUITE_STEPS if args.suite_steps else None
    result = TieredCampaign(seed, args.kills, work, steps=steps).run()
    print(result.summary())
    for v in result.violations[:30]:
        print("VIOLATION", v)
    print(f"work dir (broker log, bucket): {work}")
    return 1 if result.violations else 0


if __name__ == "__main__":
    sys.exit(main())
