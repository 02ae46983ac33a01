"""bench_broker's throughput section: produce and consume MB/s against kompakt and
against the protocol sink (the client's ceiling), each case back to back, ``--repeat``
rounds.

An acks=all produce is answered once an fsync covers it (kompakt's durability, see
docs/configuration.md), so besides the client its ceiling is the disk's: each round
also writes the same bytes to a file in the broker's filesystem in 1 MiB pieces with
an ``fdatasync`` after each (the pieces the client's 1 MiB batches arrive in), and
the table prints that ``disk MB/s`` and kompakt over the lower of the two ceilings.
The disk of a shared virtual machine swings: fdatasync'd 1 MiB writes ran at
245-1,882 MB/s within a minute here, so the probe runs right after kompakt's case in
every round, not once. Why it swings here: the guest hands free memory back to its
host (free page reporting), and a page cache growing into it faults on the host again
(docs/performance.md, "The tenth pass").
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import socket
import tempfile
import threading
import time
from pathlib import Path
from statistics import median_high

from broker_kit import consume_from_start, create_topic, load_average, produce_all, producer
from protocol_sink import ProtocolSink
from served import ServedBroker, ServedSink, cpu_of

CHUNK = 1 << 20


def bench_produce(bootstrap: str, topic: str, size: int, n: int, acks: str) -> float:
    create_topic(bootstrap, topic)
    p = producer(bootstrap, acks)
    produce_all(p, topic, b"p" * 10, 10)  # connect and fetch metadata before timing
    t0 = time.perf_counter()
    produce_all(p, topic, b"x" * size, n)
    return time.perf_counter() - t0


def bench_tcp(total: int) -> float:
    """Seconds to push ``total`` bytes through loopback TCP to a read-and-discard thread."""
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]

    def sink() -> None:
        conn, _ = srv.accept()
        buf = bytearray(CHUNK)
        view = memoryview(buf)
        while conn.recv_into(view):
            pass
        conn.close()

    t = threading.Thread(target=sink, daemon=True)
    t.start()
    cli = socket.create_connection(("127.0.0.1", port))
    data = b"x" * CHUNK
    t0 = time.perf_counter()
    left = total
    while left > 0:
        k = min(left, CHUNK)
        cli.sendall(data[:k] if k < CHUNK else data)
        left -= k
    cli.shutdown(socket.SHUT_WR)
    t.join()
    dt = time.perf_counter() - t0
    cli.close()
    srv.close()
    return dt


def bench_disk(total: int, where: Path, fsync: bool) -> float:
    """Seconds to write ``total`` bytes to a new file in ``where`` in 1 MiB pieces, each
    followed by an ``fdatasync`` when ``fsync`` (acks=all): the machine's own pace for
    what a produce stores. The file is kept until the section ends, as the broker keeps
    its segments, so the probe grows the page cache as the broker's appends do."""
    fd, _path = tempfile.mkstemp(prefix="disk-", dir=where)
    try:
        data = b"x" * CHUNK
        t0 = time.perf_counter()
        left = total
        while left > 0:
            k = min(left, CHUNK)
            os.write(fd, data[:k] if k < CHUNK else data)
            if fsync:
                os.fdatasync(fd)
            left -= k
        return time.perf_counter() - t0
    finally:
        os.close(fd)


def _timed(server, fn, *args):
    """(fn's result, wall seconds, CPU seconds of the client and ``server``: this whole
    process, the broker's or the sink's threads included, plus the server's own
    process when it has one) for one case."""
    c0, t0 = time.process_time() + cpu_of(server), time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - t0, time.process_time() + cpu_of(server) - c0


def throughput(b, args: argparse.Namespace) -> None:
    """Each produce and consume case against kompakt and against the sink, ``--repeat``
    rounds; the best of each side (the run least disturbed by others on a shared
    machine) is printed, then every round's figures, so a reader sees how far each side
    swung. The two sides of a case run back to back, kompakt first in even rounds and
    the sink first in odd ones: neither always runs after the other (behind its disk
    writeback, or with the caches it warmed). Every round reads the topics the first
    wrote: from the second on, kompakt reads from the page cache and the sink sends the
    responses it keeps encoded, each at its cheapest.

    Wall time on a busy machine swings by 2-3x from run to run; the CPU time of the
    process per MB (client + broker, or client + sink) does not, so it is printed too:
    ``sink CPU ÷ kompakt CPU`` is the throughput ratio a CPU-bound run would show."""
    # case -> (records, bytes, [(kompakt s, sink s, kompakt CPU s, sink CPU s) per round])
    rounds: dict[str, tuple[int, int, list[tuple[float, ...]]]] = {}
    disks: dict[str, list[float]] = {}  # produce case -> bench_disk's seconds per round
    held = Path(tempfile.mkdtemp(prefix="kompakt-bench-disk-"))  # bench_disk's files

    print(f"before: {load_average()}")
    # the broker's first connection does its one-time work (the start-up's objects
    # frozen out of the garbage collector's walks) before any case's clock runs
    create_topic(b.bootstrap, "bench-warm")
    try:
        _rounds(b, args, rounds, disks, held)
    finally:
        shutil.rmtree(held, ignore_errors=True)
    after = load_average()

    print(
        f"broker {b.bootstrap}; best of {args.repeat} rounds; MB = 10^6 bytes of values; "
        "sink = the same client and config against a protocol sink that stores nothing "
        "(the client's ceiling); disk = the same bytes written to a new file in 1 MiB "
        "pieces, each fdatasync'd for acks=all (the storage's ceiling); ÷ ceil = over the "
        "lower of the two; CPU ms/MB = this process's CPU time (client + broker or "
        "sink); TCP = the same bytes through a loopback socket"
    )
    hdr = (
        f"{'case':24} {'records':>7} {'MB':>5} {'MB/s':>6} {'rec/s':>7} {'sink MB/s':>9} "
        f"{'÷ sink':>6} {'disk MB/s':>9} {'÷ ceil':>6} {'CPU ms/MB':>9} {'sink CPU':>8} "
        f"{'÷ by CPU':>8} {'TCP MB/s':>8} {'÷ TCP':>6}"
    )
    print(hdr)
    print("-" * len(hdr))
    for name, (n, nbytes, runs) in rounds.items():
        dt, sdt, cpu, scpu = (min(x) for x in zip(*runs, strict=True))
        tcp = nbytes / 1e6 / bench_tcp(nbytes)
        mb = nbytes / 1e6
        ceiling = sdt
        disk = "-"
        if name in disks:
            ceiling = max(sdt, min(disks[name]))
            disk = f"{mb / min(disks[name]):.1f}"
        print(
            f"{name:24} {n:>7} {mb:>5.1f} {mb / dt:>6.1f} {n / dt:>7.0f} {mb / sdt:>9.1f} "
            f"{sdt / dt:>6.2f} {disk:>9} {ceiling / dt:>6.2f} {cpu / mb * 1000:>9.1f} "
            f"{scpu / mb * 1000:>8.1f} {scpu / cpu:>8.2f} {tcp:>8.0f} {mb / dt / tcp:>6.3f}"
        )
    print(spread_table(rounds, disks))
    print(f"after: {after}")


def _rounds(
    b,
    args: argparse.Namespace,
    rounds: dict[str, tuple[int, int, list[tuple[float, ...]]]],
    disks: dict[str, list[float]],
    held: Path,
) -> None:
    """Run every case ``--repeat`` times into ``rounds`` (and ``disks``)."""

    def both(r: int, kompakt, sink) -> tuple[tuple, tuple]:
        """(kompakt's, sink's) ``_timed`` results, in this round's order."""
        if r % 2:
            theirs = sink()
            return kompakt(), theirs
        ours = kompakt()
        return ours, sink()

    separate = isinstance(b, ServedBroker)
    with ServedSink(sink_topics(args)) if separate else ProtocolSink() as sink:
        consumed: list[tuple[int, int, str]] = []  # round 0's acks=1 topics, read each round
        for r in range(args.repeat):
            for size, n0 in ((100, args.small), (1024, args.large)):
                n = max(1000, int(n0 * args.scale))
                for acks in ("1", "all"):
                    topic = f"tp-{size}-{acks}-{r}"
                    sink.add_topic(topic, 1, size)
                    (dt, _, cpu), (sdt, _, scpu) = both(
                        r,
                        functools.partial(
                            _timed, b, bench_produce, b.bootstrap, topic, size, n, acks
                        ),
                        functools.partial(
                            _timed, sink, bench_produce, sink.bootstrap, topic, size, n, acks
                        ),
                    )
                    case = f"produce {size} B acks={acks}"
                    rounds.setdefault(case, (n, n * size, []))[2].append((dt, sdt, cpu, scpu))
                    # the machine's pace for storing the same bytes, this minute
                    disks.setdefault(case, []).append(bench_disk(n * size, held, acks == "all"))
                    if acks == "1" and r == 0:
                        consumed.append((size, n, topic))
            for size, n, topic in consumed:
                ((dt, nbytes), _, cpu), ((sdt, sbytes), _, scpu) = both(
                    r,
                    functools.partial(
                        _timed, b, consume_from_start, {"bootstrap.servers": b.bootstrap}, topic, n
                    ),
                    functools.partial(
                        _timed,
                        sink,
                        consume_from_start,
                        {"bootstrap.servers": sink.bootstrap},
                        topic,
                        n,
                    ),
                )
                k = nbytes / sbytes  # the sink's records are all full-size: scaled to kompakt's
                case = f"consume {size} B (assign)"
                rounds.setdefault(case, (n, nbytes, []))[2].append((dt, sdt * k, cpu, scpu * k))


def sink_topics(args: argparse.Namespace) -> list[tuple[str, int]]:
    """The topics :func:`throughput` produces to, with their record sizes (a sink in a
    process of its own is given them when it starts)."""
    return [
        (f"tp-{size}-{acks}-{r}", size)
        for r in range(args.repeat)
        for size in (100, 1024)
        for acks in ("1", "all")
    ]


def spread_table(
    rounds: dict[str, tuple[int, int, list[tuple[float, ...]]]], disks: dict[str, list[float]]
) -> str:
    """Every round's MB/s of each side and their ratio in that round (the sides of a
    round ran back to back): how much each side swung, the sink's own variance
    included, behind the best-of figures above. The best-of ratio takes each side's
    luckiest round, so one lucky sink round sinks it; the median of the rounds' ratios
    does not hang on one round. A produce case adds the disk's MB/s of that round and
    kompakt over the lower ceiling."""
    lines = ["each round, MB/s kompakt / sink = ratio (*: the sink ran first):"]
    for name, (_n, nbytes, runs) in rounds.items():
        mb = nbytes / 1e6
        cells = []
        ceiled = []
        for r, (dt, sdt, _cpu, _scpu) in enumerate(runs):
            cell = f"{'*' if r % 2 else ''}{mb / dt:.0f} / {mb / sdt:.0f} = {sdt / dt:.2f}"
            if name in disks:
                ddt = disks[name][r]
                ceiled.append(max(sdt, ddt) / dt)
                cell += f" (disk {mb / ddt:.0f}: {ceiled[-1]:.2f})"
            cells.append(cell)
        ratios = [sdt / dt for dt, sdt, _cpu, _scpu in runs]
        line = f"  {name:24} " + "; ".join(cells) + f"  (median ratio {median_high(ratios):.2f}"
        if ceiled:
            line += f", over the lower ceiling {median_high(ceiled):.2f}"
        lines.append(line + ")")
    return "\n".join(lines)
