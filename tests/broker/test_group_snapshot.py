"""Readers on other threads see the group coordinator's state through
:meth:`GroupCoordinator.snapshot`: frozen copies built on the Kafka loop that owns the
groups (``asyncio.run_coroutine_threadsafe``), never the live dicts a rebalance changes
under them. The console's group pages and ``/metrics`` run on the admin server's
threads.

1. A change the loop makes in two steps is never seen half done by a snapshot taken
   from another thread in between.
2. Stress: real librdkafka consumers keep rebalancing three groups while the console's
   ``/groups`` pages and ``/metrics`` are read over and over: every answer is 200,
   every group and every committed partition's lag is there each time, and nothing is
   logged at ERROR.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from shared_kit import unique, wait_for

from kompakt.broker.app import BrokerThread, start_test_broker
from kompakt.broker.config import BrokerConfig
from kompakt.broker.coordinator.coordinator import GroupCoordinator
from kompakt.broker.coordinator.scheduler import LoopScheduler
from kompakt.broker.coordinator.state import Group, GroupState

TIMEOUT = 30
PARTITIONS = 4
GROUPS = 3
HTML = {"Accept": "text/html"}


def test_a_snapshot_from_another_thread_waits_for_the_loop_and_sees_no_half_change():
    loop = asyncio.new_event_loop()
    runner = threading.Thread(target=loop.run_forever, daemon=True)
    runner.start()
    try:
        cfg = BrokerConfig.from_mapping({})
        gc = GroupCoordinator(cfg, LoopScheduler(loop, lambda: 0), loop=loop)
        half, read = threading.Event(), threading.Event()

        def two_steps() -> None:  # one loop callback: a generation and its state
            g = gc.groups["g"] = Group("g")
            g.generation = 1
            half.set()
            read.wait(1.0)  # a reader that does not wait for the loop reads now
            g.state = GroupState.STABLE

        loop.call_soon_threadsafe(two_steps)
        assert half.wait(TIMEOUT)
        snap = gc.snapshot()
        read.set()
        g = snap.groups["g"]
        assert (g.generation, g.state) == (1, GroupState.STABLE)
        with pytest.raises(TypeError):
            snap.groups["h"] = g  # type: ignore[index]  # frozen: readers cannot change it
    finally:
        loop.call_soon_threadsafe(loop.stop)
        runner.join(TIMEOUT)
        loop.close()


class Errors(logging.Handler):
    """Every record at ERROR or above from the broker and the admin server."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(f"{record.name}: {record.getMessage()}")


@pytest.fixture
def errors() -> Iterator[Errors]:
    handler = Errors()
    loggers = [logging.getLogger(n) for n in ("kompakt", "uvicorn.error", "uvicorn")]
    for lg in loggers:
        lg.addHandler(handler)
    yield handler
    for lg in loggers:
        lg.removeHandler(handler)


def consumer(b: BrokerThread, group: str, name: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": b.bootstrap,
            "group.id": group,
            "client.id": name,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 200,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )


def churn(b: BrokerThread, groups: list[str], topic: str, stop: threading.Event) -> list[int]:
    """Join and leave each group again and again (two rebalances a round) until
    ``stop``; returns the rounds done per group."""
    rounds = [0] * len(groups)
    while not stop.is_set():
        for i, group in enumerate(groups):
            c = consumer(b, group, f"churn-{i}")
            c.subscribe([topic])
            for _ in range(10):  # a few polls: the join, the sync, then leave
                c.poll(0.05)
            c.close()
            rounds[i] += 1
    return rounds


def lag_groups(metrics: str) -> dict[str, set[str]]:
    """group -> partitions with a kompakt_consumer_group_lag sample."""
    out: dict[str, set[str]] = {}
    for line in metrics.splitlines():
        if line.startswith("kompakt_consumer_group_lag{"):
            group = re.search(r'group="([^"]*)"', line)
            part = re.search(r'partition="([^"]*)"', line)
            assert group and part, line
            out.setdefault(group.group(1), set()).add(part.group(1))
    return out


def test_console_and_metrics_read_while_consumers_rebalance(tmp_path: Path, errors: Errors):
    b = start_test_broker(
        tmp_path / "data",
        **{"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 1},
    )
    stayers: list[Consumer] = []
    try:
        topic = unique("snap")
        groups = [unique(f"sg{i}") for i in range(GROUPS)]
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(TIMEOUT)
        p = Producer({"bootstrap.servers": b.bootstrap})
        for i in range(40):
            p.produce(topic, value=b"v%d" % i, partition=i % PARTITIONS)
        assert p.flush(TIMEOUT) == 0
        for i, group in enumerate(groups):
            c = consumer(b, group, f"stay-{i}")
            c.subscribe([topic])
            wait_for(lambda c=c: c.poll(0.1) is not None or c.assignment(), "an assignment")
            c.commit(
                offsets=[TopicPartition(topic, q, 5) for q in range(PARTITIONS)],
                asynchronous=False,
            )
            stayers.append(c)
        url = f"http://127.0.0.1:{b.admin_port}"
        stop = threading.Event()
        done: list[list[int]] = []
        churner = threading.Thread(target=lambda: done.append(churn(b, groups, topic, stop)))
        churner.start()
        try:
            with httpx.Client(base_url=url, timeout=TIMEOUT) as http:
                for _ in range(30):
                    for c in stayers:
                        c.poll(0)  # keep the stayers' sessions alive
                    listing = http.get("/groups", headers=HTML)
                    assert listing.status_code == 200
                    for group in groups:
                        assert f'data-group="{group}"' in listing.text
                        page = http.get(f"/groups/{group}", headers=HTML)
                        assert page.status_code == 200
                        assert 'id="group-state"' in page.text
                    metrics = http.get("/metrics")
                    assert metrics.status_code == 200
                    assert "kompakt_consumer_groups{" in metrics.text
                    lags = lag_groups(metrics.text)
                    for group in groups:
                        assert lags.get(group) == {str(q) for q in range(PARTITIONS)}
        finally:
            stop.set()
            churner.join(TIMEOUT * 2)
        assert done and all(n >= 1 for n in done[0]), "the groups never rebalanced"
        assert errors.records == []
    finally:
        for c in stayers:
            c.close()
        b.stop()
