"""Produce latency while the cleaner works, per cleaner I/O limit (issue 17).

For each ``--throttle-limits`` value, on a fresh broker each, in the same run: produce
p50/p99 of a steady update load (1 KiB, acks=all, paced, to a compacted topic the
background cleaner keeps clean) while idle and during the clean of a large compacted
topic, with the dirty-bytes backlog, the limit in force and the throttle time sampled
from ``/metrics`` every second, and the load average.

Run: ``.venv/bin/python benchmarks/bench_throttle.py [--throttle-limits unlimited,default]``
(``bench_broker.py --cleaner-throttle`` runs the same).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import threading
import time
import urllib.request

from broker_kit import create_topic, pct, produce_all, producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from kompakt.broker.app import start_test_broker


def scrape(admin_port: int) -> dict[str, float]:
    """The unlabelled samples of ``/metrics`` (name -> value)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/metrics", timeout=30) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and "{" not in line:
            name, _, value = line.partition(" ")
            try:
                out[name] = float(value)
            except ValueError:
                continue
    return out


def alter_topic(bootstrap: str, topic: str, config: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    res = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
            for k, v in config.items()
        ],
    )
    for fut in admin.incremental_alter_configs([res]).values():
        fut.result(30)


class UpdateLoad:
    """The steady update load: paced acks=all produces of 1 KiB values over ``keys`` keys
    of a compacted topic, from its own thread; each delivery's latency (ms) is filed
    under the phase that was current when it was produced."""

    def __init__(self, bootstrap: str, topic: str, rate: int, keys: int = 5_000):
        self.p = producer(bootstrap, "all", linger_ms=0)
        self.topic, self.rate, self.keys = topic, rate, keys
        self.value = b"u" * 1024
        self.phase = "warm-up"
        self.lat: dict[str, list[float]] = {}
        self.timeline: list[tuple[float, float]] = []  # (send time, latency ms)
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> UpdateLoad:
        self._thread.start()
        return self

    def _run(self) -> None:
        start = time.perf_counter()
        i = 0
        while not self._stop.is_set():
            now = time.perf_counter()
            due = start + i / self.rate
            if now < due:
                self.p.poll(min(due - now, 0.002))  # pacing: serve callbacks meanwhile
                continue
            phase = self.lat.setdefault(self.phase, [])

            def done(err, _msg, t0=now, xs=phase) -> None:
                if err is None:
                    ms = (time.perf_counter() - t0) * 1000
                    xs.append(ms)
                    self.timeline.append((t0, ms))

            try:
                key = b"key-%d" % (i % self.keys)
                self.p.produce(self.topic, self.value, key, on_delivery=done)
                i += 1
            except BufferError:
                self.p.poll(0.001)
        self.p.flush(60)
        self.sent = i

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _limit_value(name: str) -> str:
    from kompakt.cleaner.config import IO_MAX_BYTES_PER_SECOND_DEFAULT

    if name == "unlimited":
        return "1.7976931348623157E308"
    if name == "default":
        return repr(IO_MAX_BYTES_PER_SECOND_DEFAULT)
    return name


def _throttle_case(args: argparse.Namespace, limit: str) -> dict:
    """One broker: fill the large topic (held back by min.compaction.lag.ms), run the
    update load idle, then let the cleaner at the large topic and keep the load going
    until that clean is done; metrics sampled every second."""
    tmp = tempfile.mkdtemp(prefix="kompakt-bench-throttle-")
    overrides = {
        "kompakt.cleaner.engine": args.throttle_engine,
        "log.cleaner.backoff.ms": "200",
        "log.cleaner.io.max.bytes.per.second": _limit_value(limit.partition("@")[0]),
    }
    if "@" in limit:
        overrides["kompakt.log.cleaner.io.check.interval.ms"] = limit.partition("@")[2]
    overrides.update(kv.split("=", 1) for kv in args.throttle_set)
    b = start_test_broker(tmp, **overrides)
    samples: list[dict] = []
    try:
        bs, port = b.bootstrap, b.admin_port
        compacted = {"cleanup.policy": "compact"}
        # the update load's topic: small segments, so the cleaner cleans it every few
        # seconds (a steady load to keep up with); the large topic: held back until the
        # clean is let go
        create_topic(
            bs,
            "updates",
            {**compacted, "segment.bytes": str(1 << 20), "min.cleanable.dirty.ratio": "0.5"},
        )
        create_topic(
            bs,
            "big",
            {**compacted, "segment.bytes": str(16 << 20), "min.compaction.lag.ms": "3600000"},
        )
        vsize = 1000
        nfill = max(1000, int(args.throttle_big_mb * 1e6 / vsize))
        t0 = time.perf_counter()
        produce_all(producer(bs, "1"), "big", b"c" * vsize, nfill, key_mod=args.throttle_big_keys)
        fill_s = time.perf_counter() - t0
        warm = getattr(b.broker, "_spark_warm", None)  # the Spark engine's eager start
        if warm is not None:
            warm.join(600)  # the JVM's start-up is not the clean being measured
        load = UpdateLoad(bs, "updates", args.throttle_rate).start()
        t_start = time.perf_counter()
        load.t_start = t_start
        stop = threading.Event()

        def sampler() -> None:
            while not stop.is_set():
                m = scrape(port)
                samples.append(
                    {
                        "t": time.perf_counter() - t_start,
                        "phase": load.phase,
                        "backlog": m.get("kompakt_log_cleaner_backlog_bytes", 0),
                        "limit": m.get("kompakt_log_cleaner_io_limit_bytes_per_second", 0),
                        "throttle_s": m.get("kompakt_log_cleaner_throttle_seconds_total", 0),
                        "io": m.get("kompakt_log_cleaner_io_bytes_total", 0),
                        "cleans": m.get("kompakt_log_cleaner_compactions_total", 0),
                        "load1": os.getloadavg()[0],
                    }
                )
                stop.wait(1.0)  # pacing: one sample a second

        st = threading.Thread(target=sampler, daemon=True)
        st.start()
        time.sleep(3)  # pacing: the load's first seconds (connections, first cleans)
        load.phase = "idle"
        time.sleep(args.throttle_idle_seconds)  # pacing: the idle phase lasts this long
        before = scrape(port)
        load.phase = "large clean"
        t_clean = time.perf_counter()
        alter_topic(bs, "big", {"min.compaction.lag.ms": "0"})
        clean_s = None
        while time.perf_counter() - t_clean < 1800:
            if _big_cleaned(port):
                clean_s = time.perf_counter() - t_clean
                break
            time.sleep(0.5)  # pacing: polling the admin endpoint
        load.phase = "after"
        time.sleep(3)  # pacing: a few seconds of the load after the clean
        stop.set()
        st.join()
        load.stop()
        after = scrape(port)
    finally:
        b.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return {
        "limit": limit,
        "lat": load.lat,
        "samples": samples,
        "timeline": [(t - t_start, ms) for t, ms in load.timeline],
        "fill_s": fill_s,
        "nfill": nfill,
        "clean_s": clean_s,
        "throttle_s": after.get("kompakt_log_cleaner_throttle_seconds_total", 0)
        - before.get("kompakt_log_cleaner_throttle_seconds_total", 0),
        "io_mb": (
            after.get("kompakt_log_cleaner_io_bytes_total", 0)
            - before.get("kompakt_log_cleaner_io_bytes_total", 0)
        )
        / 1e6,
    }


def _big_cleaned(admin_port: int) -> bool:
    """Whether the large topic has had its clean (its last-clean duration is exported)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/metrics", timeout=30) as r:
        text = r.read().decode()
    return any(
        line.startswith("kompakt_log_cleaner_duration_seconds{") and 'topic="big"' in line
        for line in text.splitlines()
    )


def bench_cleaner_throttle(args: argparse.Namespace) -> None:
    """Issue 17's must-show: produce p99 idle vs during a large clean, per I/O limit."""
    cases = [_throttle_case(args, name) for name in args.throttle_limits.split(",")]
    print(
        f"cleaner I/O throttle: update load {args.throttle_rate} msg/s x 1 KiB acks=all "
        f"(linger.ms=0) to a compacted topic; large clean of {args.throttle_big_mb:.0f} MB "
        f"({cases[0]['nfill']} x 1000 B, {args.throttle_big_keys} keys); "
        f"engine {args.throttle_engine}; "
        f"{os.cpu_count()} cores; extra: {args.throttle_set or 'none'}"
    )
    hdr = (
        f"{'limit (B/s)':>22} {'phase':>12} {'msgs':>6} {'p50 ms':>7} {'p99 ms':>7} "
        f"{'max ms':>7} {'p99/idle':>8} {'clean s':>8} {'thr s':>6} {'io MB':>7} {'load1':>6}"
    )
    print(hdr)
    print("-" * len(hdr))
    for c in cases:
        idle = c["lat"].get("idle", [])
        for phase in ("idle", "large clean"):
            xs = c["lat"].get(phase, [])
            loads = [s["load1"] for s in c["samples"] if s["phase"] == phase]
            extra = (
                f"{c['clean_s'] or float('nan'):>8.1f} {c['throttle_s']:>6.1f} {c['io_mb']:>7.0f}"
                if phase == "large clean"
                else f"{'':>8} {'':>6} {'':>7}"
            )
            print(
                f"{c['limit']:>22} {phase:>12} {len(xs):>6} {pct(xs, 0.5):>7.2f} "
                f"{pct(xs, 0.99):>7.2f} {max(xs, default=float('nan')):>7.2f} "
                f"{pct(xs, 0.99) / pct(idle, 0.99):>8.2f} {extra} "
                f"{sum(loads) / max(1, len(loads)):>6.2f}"
            )
    for c in cases:
        print()
        print(
            f"backlog over time, limit {c['limit']} (sampled from /metrics every ~2 s; "
            "p99 of the update load sent since the row before)"
        )
        print(
            f"{'t s':>6} {'phase':>12} {'backlog MB':>10} {'limit MB/s':>10} "
            f"{'throttle s':>10} {'io MB':>8} {'cleans':>6} {'p99 ms':>7} {'load1':>6}"
        )
        prev = 0.0
        for s in c["samples"][::2]:
            lim = s["limit"]
            lim_s = "unlimited" if lim > 1e300 or lim == float("inf") else f"{lim / 1e6:.1f}"
            window = [ms for t, ms in c["timeline"] if prev <= t < s["t"]]
            prev = s["t"]
            print(
                f"{s['t']:>6.1f} {s['phase']:>12} {s['backlog'] / 1e6:>10.1f} {lim_s:>10} "
                f"{s['throttle_s']:>10.1f} {s['io'] / 1e6:>8.0f} {s['cleans']:>6.0f} "
                f"{pct(window, 0.99):>7.1f} {s['load1']:>6.2f}"
            )


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument(
        "--throttle-limits",
        default="unlimited,default",
        help="comma-separated log.cleaner.io.max.bytes.per.second values (bytes/s, "
        "'unlimited' = Kafka's Double.MaxValue, 'default' = kompakt's), each optionally "
        "with @N for kompakt.log.cleaner.io.check.interval.ms=N",
    )
    ap.add_argument("--throttle-big-mb", type=float, default=200.0, help="large topic size")
    ap.add_argument("--throttle-rate", type=int, default=200, help="update load msgs/s")
    ap.add_argument(
        "--throttle-big-keys",
        type=int,
        default=100_000,
        help="distinct keys of the large topic (what its clean writes back)",
    )
    ap.add_argument("--throttle-idle-seconds", type=float, default=20.0)
    ap.add_argument("--throttle-engine", default="local", help="local | spark")
    ap.add_argument(
        "--throttle-set",
        action="append",
        default=[],
        help="extra broker key=value for every case (e.g. a backlog setpoint)",
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(ap)
    bench_cleaner_throttle(ap.parse_args())


if __name__ == "__main__":
    main()
