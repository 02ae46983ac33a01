"""Helpers for the crash, full-disk and soak scenarios (and ``benchmarks/soak.py``).

A broker run as a real ``kompakt serve`` process (so SIGKILL is a real crash), a
producer that keeps a model built only from successful delivery reports, readers that
fold a partition back into a dict, and an offline checker for a data dir (every batch
parses with its CRC, offsets increase, indexes point at batch starts, no cleaner
leftovers). Importable as ``reliability.kit`` (``tests/`` is in pytest's ``pythonpath``).
"""

from __future__ import annotations

import os
import random
import resource
import signal
import struct
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shared_kit import consume_until, free_port, wait_for_port

REPO = Path(__file__).resolve().parents[2]
TOMBSTONE = None


def kompakt_command() -> list[str]:
    """``kompakt serve`` from the same environment as this interpreter."""
    script = Path(sys.executable).parent / "kompakt"
    if script.exists():
        return [str(script), "serve"]
    return [sys.executable, "-m", "kompakt.broker"]


# -- the broker process ---------------------------------------------------------------------


@dataclass
class BrokerProcess:
    """``kompakt serve`` on fixed free ports over one data dir; restartable after a kill.

    The ports stay the same across restarts so clients reconnect on their own. Output
    goes to ``log_path`` (appended across restarts) so a full pipe never stalls it.
    ``fsize_limit`` sets ``RLIMIT_FSIZE`` in the child (a per-file size cap: writes past
    it fail with EFBIG because Python ignores SIGXFSZ). ``wrapper`` goes before the
    command (``fiu-run -x ...`` for injected I/O errors, :mod:`reliability.fiu`).
    """

    data_dir: Path
    overrides: dict[str, str] = field(default_factory=dict)
    log_path: Path | None = None
    fsize_limit: int | None = None
    wrapper: list[str] = field(default_factory=list)
    port: int = field(default_factory=free_port)
    admin_port: int = field(default_factory=free_port)
    proc: subprocess.Popen | None = None
    starts: int = 0

    def __post_init__(self) -> None:
        self.data_dir = Path(self.data_dir)
        if self.log_path is None:
            self.log_path = self.data_dir.parent / f"{self.data_dir.name}-broker.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def command(self) -> list[str]:
        props = {
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "log.dirs": str(self.data_dir),
            "kompakt.admin.listener": f"http://127.0.0.1:{self.admin_port}",
            **self.overrides,
        }
        cmd = [*self.wrapper, *kompakt_command()]
        for k, v in props.items():
            cmd += ["--override", f"{k}={v}"]
        return cmd

    def _preexec(self) -> None:
        if self.fsize_limit is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (self.fsize_limit, self.fsize_limit))

    def start(self, timeout: float = 30.0) -> BrokerProcess:
        assert self.proc is None or self.proc.poll() is not None, "already running"
        assert self.log_path is not None
        with open(self.log_path, "ab") as out:
            out.write(f"=== start {self.starts} ===\n".encode())
            out.flush()
            self.proc = subprocess.Popen(
                self.command(),
                cwd=REPO,
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=self._preexec if self.fsize_limit is not None else None,
            )
        self.starts += 1
        try:
            wait_for_port(self.port, self.proc, timeout)
            wait_for_port(self.admin_port, self.proc, timeout)  # bound apart from Kafka's
        except AssertionError as exc:
            self.kill()
            raise AssertionError(f"broker did not start: {exc}:\n{self.log_tail()}") from None
        return self

    def kill(self) -> None:
        """SIGKILL: no shutdown hook runs, no buffer is flushed by the process."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM and wait: a clean shutdown; returns the exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError(f"broker ignored SIGTERM:\n{self.log_tail()}") from None
        return self.proc.returncode

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_text(self) -> str:
        assert self.log_path is not None
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def admin_get(self, path: str, timeout: float = 5.0) -> bytes:
        url = f"http://127.0.0.1:{self.admin_port}{path}"
        return urllib.request.urlopen(url, timeout=timeout).read()

    def __enter__(self) -> BrokerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill()


def create_topic(bootstrap: str, name: str, partitions: int, config: dict[str, str]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    admin.create_topics([NewTopic(name, partitions, 1, config=config)])[name].result(30)


def process_stats(pid: int) -> tuple[int, int, int, int]:
    """(RSS bytes, open fds, fds of segments waiting for deletion, fds of segment files)
    of a process.

    RSS from psutil when installed, else /proc. A clean's old segments stay open for
    readers until ``file.delete.delay.ms`` has passed (``.deleted``), so they come and go
    in bursts. Segment files are ``.log``/``.index``/``.timeindex`` with any suffix; an
    index holds two fds (its file and the mmap's duplicate), so a segment costs five.
    Everything else (sockets, pipes, the lock) is what must stay flat.
    """
    try:
        import psutil

        rss = psutil.Process(pid).memory_info().rss
    except ImportError:
        rss = 0
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) * 1024
    fds = pending = segment_fds = 0
    fd_dir = f"/proc/{pid}/fd"
    for name in os.listdir(fd_dir):
        try:
            target = os.readlink(f"{fd_dir}/{name}")
        except OSError:  # closed since the listing: a flush's duplicate, say; not open
            continue
        fds += 1
        if target.endswith((".deleted", ".deleted (deleted)")):
            pending += 1
        if any(s in target for s in (".log", ".index", ".timeindex")):
            segment_fds += 1
    return rss, fds, pending, segment_fds


# -- producing with a model -------------------------------------------------------------------


@dataclass(slots=True)
class Write:
    value: bytes | None
    acked: bool | None = None  # None: no delivery report yet; False: failed
    offset: int | None = None  # where the delivery report says it was written
    sent_ms: int = field(default_factory=lambda: int(time.time() * 1000))  # before produce()
    acked_ms: int | None = None  # wall clock of the successful delivery report


class Model:
    """Every write, in produce order per (topic, partition, key), with its delivery status.

    librdkafka keeps per-partition order for an idempotent producer, so the last write
    of a key that reached the log is its final value. Only writes whose delivery report
    succeeded are *acknowledged*; a write that failed may or may not be in the log.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.writes: dict[tuple[str, int], dict[bytes, list[Write]]] = {}
        self.acked = 0
        self.failed = 0
        self.errors: dict[str, int] = {}

    def add(self, topic: str, partition: int, key: bytes, value: bytes | None) -> Write:
        w = Write(value)
        with self.lock:
            self.writes.setdefault((topic, partition), {}).setdefault(key, []).append(w)
        return w

    def report(self, w: Write, err: Any, msg: Any = None) -> None:
        with self.lock:
            w.acked = err is None
            if err is None:
                self.acked += 1
                w.acked_ms = int(time.time() * 1000)
                if msg is not None:
                    w.offset = msg.offset()
            else:
                self.failed += 1
                self.errors[str(err.name())] = self.errors.get(str(err.name()), 0) + 1

    def unreported(self) -> int:
        with self.lock:
            return sum(
                1
                for keys in self.writes.values()
                for ws in keys.values()
                for w in ws
                if w.acked is None
            )

    def allowed_final(self, tp: tuple[str, int], key: bytes) -> tuple[set, bool]:
        """(values the key may end with, whether it may be absent); None = deleted."""
        ws = self.writes[tp][key]
        last_acked = max((i for i, w in enumerate(ws) if w.acked), default=None)
        if last_acked is None:
            return {w.value for w in ws} | {None}, True
        return {w.value for w in ws[last_acked:]}, False

    def acked_records(self, tp: tuple[str, int]) -> list[tuple[bytes, bytes | None]]:
        return [(k, w.value) for k, ws in self.writes.get(tp, {}).items() for w in ws if w.acked]


class ModelProducer:
    """A background thread producing keyed records (some tombstones) with acks=all.

    ``targets`` maps (topic, partition) to its key space and tombstone share. Values are
    unique (``p<id>-<n>``) so the final state can name the write it came from.
    """

    def __init__(
        self,
        bootstrap: str,
        model: Model,
        targets: dict[tuple[str, int], tuple[int, float]],
        rng: random.Random,
        *,
        rate: float = 2000.0,
        ident: str = "p0",
        key_prefix: bytes = b"",
        extra: dict[str, Any] | None = None,
        on_latency: Callable[[float], None] | None = None,
    ):
        from confluent_kafka import Producer

        conf = {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": 180_000,
            "reconnect.backoff.ms": 20,
            "reconnect.backoff.max.ms": 200,
            "retry.backoff.ms": 20,
            "retry.backoff.max.ms": 200,
            "log_level": 2,
            **(extra or {}),
        }
        self.producer = Producer(conf)
        self.model = model
        self.targets = list(targets.items())
        self.rng = rng
        self.rate = rate
        self.ident = ident
        # disjoint keys per producer when several write one partition: a key's order
        # is then one producer's order, which the model knows
        self.key_prefix = key_prefix
        self.on_latency = on_latency
        self.sent = 0
        self.fatal: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"producer-{ident}", daemon=True)

    def start(self) -> ModelProducer:
        self._thread.start()
        return self

    def _send_one(self) -> None:
        (topic, part), (nkeys, tomb_share) = self.rng.choice(self.targets)
        key = self.key_prefix + b"k%d" % self.rng.randrange(nkeys)
        value = None if self.rng.random() < tomb_share else f"{self.ident}-{self.sent}".encode()
        w = self.model.add(topic, part, key, value)
        t0 = time.monotonic()

        def done(err: Any, msg: Any) -> None:
            self.model.report(w, err, msg)
            if err is None and self.on_latency is not None:
                self.on_latency(time.monotonic() - t0)

        while True:
            try:
                self.producer.produce(topic, value, key, partition=part, on_delivery=done)
                break
            except BufferError:
                self.producer.poll(0.05)
        self.sent += 1

    def _run(self) -> None:
        interval = 1.0 / self.rate
        next_t = time.monotonic()
        while not self._stop.is_set():
            self._send_one()
            self.producer.poll(0)
            next_t += interval
            delay = next_t - time.monotonic()
            if delay > 0:
                self._stop.wait(delay)
            elif delay < -1:
                next_t = time.monotonic()  # do not burst to catch up after a stall
        err = self.producer.poll(0)
        del err

    def stop(self, flush_timeout: float = 120.0) -> int:
        """Stop sending and wait for every delivery report; returns messages left."""
        self._stop.set()
        self._thread.join(30)
        return self.producer.flush(flush_timeout)


# -- reading back -----------------------------------------------------------------------------


def read_partition(
    bootstrap: str,
    topic: str,
    partition: int,
    timeout: float = 30.0,
    config: dict[str, Any] | None = None,
) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record from the start to the high watermark;
    ``config`` adds consumer settings (``isolation.level``, ``auto.offset.reset``)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "reliability-reader",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 50,
            "log_level": 2,
            **(config or {}),
        }
    )
    try:
        _low, high = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        c.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        seen = [0, time.monotonic()]  # messages so far, when the last one came

        def at_end(msgs: list) -> bool:
            if len(msgs) > seen[0]:
                seen[:] = [len(msgs), time.monotonic()]
            if msgs and msgs[-1].offset() >= high - 1:
                return True
            pos = c.position([TopicPartition(topic, partition)])[0].offset
            # past the high watermark, or nothing new for 3 s (a compacted tail's gaps)
            return pos >= high or time.monotonic() - seen[1] > 3

        msgs = consume_until(c, at_end, timeout, f"{topic}-{partition} up to offset {high}")
        return [(m.offset(), m.key(), m.value()) for m in msgs]
    finally:
        c.close()


def fold(records: list[tuple[int, bytes | None, bytes | None]]) -> dict[bytes, bytes | None]:
    """Latest value per key (a tombstone leaves ``None``)."""
    state: dict[bytes, bytes | None] = {}
    for _off, key, value in records:
        assert key is not None
        state[key] = value
    return state


def mismatches(model: Model, tp: tuple[str, int], state: dict) -> list[str]:
    """Keys of ``tp`` whose final value in ``state`` the model does not allow: an
    acknowledged write lost, or a value nobody wrote (``None`` or absent = deleted)."""
    out = []
    keys = model.writes.get(tp, {})
    for key in keys:
        allowed, may_be_absent = model.allowed_final(tp, key)
        if key not in state:
            if not (may_be_absent or None in allowed):
                out.append(
                    f"{tp} key {key!r}: acknowledged value {sorted(map(repr, allowed))[:2]} is lost"
                )
        elif state[key] not in allowed:
            out.append(
                f"{tp} key {key!r} ends as {state[key]!r}, expected one of "
                f"{sorted(map(repr, allowed))[:2]}"
            )
    out += [f"{tp}: key {k!r} was never produced" for k in set(state) - set(keys)]
    return out


def check_compacted(model: Model, tp: tuple[str, int], records: list) -> None:
    """Every key ends at its last acknowledged write (or a later unacknowledged one);
    a deleted key is absent or its last record is the tombstone."""
    bad = mismatches(model, tp, fold(records))
    assert not bad, f"{len(bad)} keys wrong, e.g. {bad[:3]}"


def check_delete_policy(model: Model, tp: tuple[str, int], records: list) -> None:
    """Every acknowledged record is there, exactly once (idempotence survives restarts)."""
    seen: dict[tuple[bytes | None, bytes | None], int] = {}
    for _off, key, value in records:
        seen[(key, value)] = seen.get((key, value), 0) + 1
    for kv in model.acked_records(tp):
        assert kv in seen, f"{tp}: acknowledged record {kv!r} is lost"
    dups = {kv: n for kv, n in seen.items() if n > 1}
    assert not dups, f"{tp}: duplicated records {list(dups.items())[:5]}"


def check_offsets_increase(records: list) -> None:
    offs = [o for o, _k, _v in records]
    assert all(a < b for a, b in zip(offs, offs[1:], strict=False)), "offsets do not increase"


# -- offline data dir checks --------------------------------------------------------------------

LEFTOVER_SUFFIXES = (".cleaned", ".swap")


def leftovers(data_dir: Path) -> list[str]:
    """Cleaner temporary files (``.cleaned``/``.swap``) anywhere in a data dir."""
    return sorted(
        str(p.relative_to(data_dir))
        for p in Path(data_dir).rglob("*")
        if p.name.endswith(LEFTOVER_SUFFIXES)
    )


@dataclass
class SegmentReport:
    batches: int = 0
    records: int = 0
    segments: int = 0


def check_partition_dir(part_dir: Path) -> SegmentReport:
    """Every ``.log`` parses end to end (CRC checked), offsets strictly increase within
    and across segments, and every index entry points at a batch start in its segment.
    Only the last (the active) one may end in the zeros a live segment is written ahead
    with (kompakt.log.syncs.WRITE_AHEAD): a roll cuts them before the next is made."""
    from kompakt.log.syncs import file_batches, is_written_ahead

    rep = SegmentReport()
    last = -1
    logs = sorted(p for p in part_dir.iterdir() if p.name.endswith(".log"))
    for path in logs:
        base = int(path.name.split(".")[0])
        data = path.read_bytes()
        starts: dict[int, tuple[int, int]] = {}  # position -> (base offset, last offset)
        end = 0
        for b in file_batches(data):
            b.ensure_valid()  # CRC-32C and framing
            h = b.header
            assert h.base_offset >= base, f"{path.name}: batch {h.base_offset} below base {base}"
            assert h.base_offset > last, f"{path.name}: offset {h.base_offset} after {last}"
            last = h.last_offset
            starts[b.position] = (h.base_offset, h.last_offset)
            end = b.position + h.size
            rep.batches += 1
            rep.records += h.record_count
        ahead = path == logs[-1] and is_written_ahead(data[end:])
        assert end == len(data) or ahead, (
            f"{path.name}: {len(data) - end} trailing bytes after the last batch"
        )
        _check_offset_index(path.with_suffix(".index"), base, starts, len(data))
        _check_time_index(path.with_suffix(".timeindex"), base, last)
        rep.segments += 1
    return rep


def _entries(path: Path, size: int, fmt: str) -> list[tuple[int, int]]:
    if not path.exists():
        return []
    raw = path.read_bytes()
    # a crash leaves the index preallocated (10 MiB of zero slots): skip the zero tail
    # in C before unpacking, then round up to whole entries
    used = min(len(raw) - len(raw) % size, -(-len(raw.rstrip(b"\0")) // size) * size)
    out = [struct.unpack_from(fmt, raw, i) for i in range(0, used, size)]
    while out and out[-1] == (0, 0):  # preallocated, unused slots
        out.pop()
    return out


def _check_offset_index(path: Path, base: int, starts: dict, log_size: int) -> None:
    prev = -1
    for rel, pos in _entries(path, 8, ">ii"):
        assert rel > prev, f"{path.name}: entries not increasing"
        prev = rel
        assert pos in starts, f"{path.name}: entry ({rel}, {pos}) is not a batch start"
        first, last = starts[pos]
        assert first <= base + rel <= last, (
            f"{path.name}: entry offset {base + rel} not in its batch"
        )


def _check_time_index(path: Path, base: int, last_offset: int) -> None:
    prev_ts, prev_rel = -1, -1
    for ts, rel in _entries(path, 12, ">qi"):
        assert ts >= prev_ts and rel >= prev_rel, f"{path.name}: entries go backwards"
        assert base + rel <= max(last_offset, base), f"{path.name}: entry past the segment"
        prev_ts, prev_rel = ts, rel


def check_data_dir(data_dir: Path) -> dict[str, SegmentReport]:
    """:func:`check_partition_dir` for every partition, and no cleaner leftovers."""
    left = leftovers(data_dir)
    assert not left, f"cleaner leftovers: {left}"
    out = {}
    for p in sorted(Path(data_dir).iterdir()):
        if p.is_dir() and "-" in p.name and any(p.glob("*.log")):
            out[p.name] = check_partition_dir(p)
    return out


def p99(samples: list[float]) -> float:
    if not samples:
        return 0.0
    s = sorted(samples)
    return s[min(len(s) - 1, int(0.99 * len(s)))]
