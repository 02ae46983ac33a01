"""READ_COMMITTED fetch takes its ``aborted_transactions`` from the ``.txnindex`` (Kafka's
``LocalLog.collectAbortedTransactions``), and they survive a broker restart: the index
files are on disk, and a lost one is rebuilt from the segment when the log opens."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kompakt.broker.app import start_test_broker
from kompakt.log.manager import CLEAN_SHUTDOWN_FILE

TIMEOUT = 20
SMALL = {"transaction.state.log.num.partitions": 2, "offsets.topic.num.partitions": 2}


def read_all(bootstrap: str, topic: str, isolation: str, n_end: int) -> list[bytes]:
    """Every value of partition 0 that a ``isolation`` consumer returns up to ``n_end``."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    tp = TopicPartition(topic, 0, 0)
    c.assign([tp])
    got: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT
    try:
        while c.position([TopicPartition(topic, 0)])[0].offset < n_end:
            assert time.monotonic() < deadline, f"read only {got}"
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m.value())
    finally:
        c.close()
    return got


@pytest.mark.parametrize("lose", ["nothing", "txnindex", "txnindex-unclean"])
def test_read_committed_fetch_after_restart_drops_aborted_records(
    tmp_path: Path, lose: str
) -> None:
    """Kafka's READ_COMMITTED after a restart: the aborted transactions come from the
    ``.txnindex`` files, rebuilt at open when lost (and after an unclean shutdown), so
    librdkafka still drops the aborted records; READ_UNCOMMITTED still sees them."""
    b = start_test_broker(tmp_path, **SMALL)
    topic = "rc-restart"
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1)], operation_timeout=TIMEOUT)[topic].result(
            TIMEOUT
        )
        p = Producer(
            {"bootstrap.servers": b.bootstrap, "transactional.id": "tx-rc", "linger.ms": 0}
        )
        p.init_transactions(TIMEOUT)
        for i in range(4):  # c0, a1, c2, a3: each 1 record + its marker
            p.begin_transaction()
            p.produce(topic, value=b"%s%d" % (b"ca"[i % 2 : i % 2 + 1], i), partition=0)
            assert p.flush(TIMEOUT) == 0  # an abort would purge an unsent record
            if i % 2:
                p.abort_transaction(TIMEOUT)
            else:
                p.commit_transaction(TIMEOUT)
        plog = b.logs.get_log(topic, 0)
        deadline = time.monotonic() + TIMEOUT
        while plog.log_end_offset < 8:  # the last marker follows the EndTxn answer
            assert time.monotonic() < deadline
            time.sleep(0.05)  # back-off: polling the log end offset for the marker
        part_dir = plog.dir
        assert [a.first_offset for a in plog.collect_aborted_transactions(0, 8)] == [2, 6]
    finally:
        b.stop()
    if lose != "nothing":
        for f in part_dir.glob("*.txnindex"):
            f.unlink()
    if lose == "txnindex-unclean":
        (tmp_path / CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)
    b = start_test_broker(tmp_path, **SMALL)
    try:
        assert read_all(b.bootstrap, topic, "read_committed", 8) == [b"c0", b"c2"]
        assert read_all(b.bootstrap, topic, "read_uncommitted", 8) == [b"c0", b"a1", b"c2", b"a3"]
        assert sorted(f.name for f in part_dir.glob("*.txnindex")) == [
            "00000000000000000000.txnindex"
        ]
    finally:
        b.stop()
