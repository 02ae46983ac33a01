"""Where a transaction's time goes on an in-process broker, for ``bench_broker``'s
transactions: the broker's mean answer time of each request a transaction sends (from
its own latency histogram) and the CPU each of its threads spent, per transaction.
Taken around a loop of transactions: :func:`snapshot` before, :func:`report` after."""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass
from typing import Any

TXN_APIS = ("AddPartitionsToTxn", "Produce", "EndTxn")
"""The requests of one transaction (one partition), in the order the client sends them."""

_TICK_S = 1 / os.sysconf("SC_CLK_TCK")
_NUMBERED = re.compile(r"_?\d+$")


@dataclass(frozen=True)
class Snapshot:
    latency: dict[tuple[str, str], float]
    """(api, "sum" or "count") of the broker's request latency histogram."""
    cpu: dict[str, float]
    """CPU seconds by thread group (numbered threads of a pool together)."""


def snapshot(broker: Any) -> Snapshot:
    """The broker's latency sums and its Python threads' CPU now; the rest of the
    process (librdkafka's threads) is one group."""
    latency: dict[tuple[str, str], float] = {}
    for family in broker.broker.metrics.registry.collect():
        if family.name != "kompakt_request_latency_seconds":
            continue
        for s in family.samples:
            for kind in ("sum", "count"):
                if s.name.endswith("_" + kind):
                    latency[(s.labels["api"], kind)] = s.value
    cpu: dict[str, float] = {}
    named = 0.0
    for t in threading.enumerate():
        spent = _thread_cpu(t.native_id)
        if spent is None:
            continue
        main = t is threading.main_thread()
        group = "client: the bench's thread" if main else _NUMBERED.sub("", t.name)
        cpu[group] = cpu.get(group, 0.0) + spent
        named += spent
    total = sum(os.times()[:2])
    cpu["client: librdkafka, other"] = max(0.0, total - named)
    return Snapshot(latency, cpu)


def _thread_cpu(native_id: int | None) -> float | None:
    if native_id is None:
        return None
    try:
        with open(f"/proc/self/task/{native_id}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:  # gone, or not Linux
        return None
    return (int(fields[11]) + int(fields[12])) * _TICK_S


def report(before: Snapshot, after: Snapshot, transactions: int) -> list[str]:
    """Lines: each request's mean answer time and count per transaction, then CPU ms
    per transaction by thread group, largest first."""
    lines = []
    for api in TXN_APIS:
        n = after.latency.get((api, "count"), 0.0) - before.latency.get((api, "count"), 0.0)
        spent = after.latency.get((api, "sum"), 0.0) - before.latency.get((api, "sum"), 0.0)
        if n:
            lines.append(
                f"  {api:20} {n / transactions:4.2f} per txn, answered in {spent / n * 1000:.2f} ms"
            )
    spent_by = {g: after.cpu[g] - before.cpu.get(g, 0.0) for g in after.cpu}
    total = sum(spent_by.values())
    lines.append(f"  CPU ms per txn: {total / transactions * 1000:.2f} in all")
    for group, spent in sorted(spent_by.items(), key=lambda kv: -kv[1]):
        if spent > 0:
            lines.append(f"    {group:28} {spent / transactions * 1000:.3f}")
    return lines
