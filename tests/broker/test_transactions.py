"""Kafka transactions end to end (issue 15, stage 1): a real broker on 127.0.0.1 and
librdkafka's transactional producer.

Checks what Kafka's ``TransactionCoordinator`` and ``GroupMetadataManager`` promise:
every partition of a transaction gets its COMMIT or ABORT control batch; offsets sent
with ``send_offsets_to_transaction`` count only once the transaction commits, vanish on
abort and stay so after a restart (they sit in ``__consumer_offsets`` as transactional
records, replayed only with their COMMIT marker); a second producer with the same
``transactional.id`` fences the first; a broker killed between PrepareCommit and the
markers finishes the commit when it starts again.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode
from raw_kafka import API, call
from reliability.crash_faults import start as start_broker
from shared_kit import consume_until

from kompakt.broker.app import BrokerThread, start_test_broker
from kompakt.broker.coordinator.records import partition_for
from kompakt.broker.txn import records as txn_rec
from kompakt.broker.txn.log import TRANSACTION_STATE_TOPIC
from kompakt.broker.txn.state import TransactionState
from kompakt.log.manager import LogManager
from kompakt.record.header import CONTROL_ABORT, CONTROL_COMMIT, CONTROL_KEY

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 20
_ids = itertools.count()
SMALL = {"transaction.state.log.num.partitions": 2, "offsets.topic.num.partitions": 2}


def unique(prefix: str) -> str:
    return f"{prefix}-{next(_ids)}-{time.monotonic_ns() % 100000}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def create(bootstrap: str, name: str, partitions: int = 2) -> None:
    a = AdminClient({"bootstrap.servers": bootstrap})
    a.create_topics([NewTopic(name, partitions, 1)], operation_timeout=TIMEOUT)[name].result(
        TIMEOUT
    )


def txn_producer(bootstrap: str, tid: str) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 0})
    p.init_transactions(TIMEOUT)
    return p


def consumer(bootstrap: str, group: str, isolation: str = "read_uncommitted") -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )


def committed(bootstrap: str, group: str, topic: str, partition: int, stable: bool = True) -> int:
    """The group's offset; ``stable``: as a read_committed client asks (OffsetFetch
    ``require_stable``, retried by librdkafka while a transactional offset waits for its
    marker), else as a read_uncommitted one (the offset applied so far)."""
    c = consumer(bootstrap, group, "read_committed" if stable else "read_uncommitted")
    try:
        return c.committed([TopicPartition(topic, partition)], TIMEOUT)[0].offset
    finally:
        c.close()


def offset_fetch_error(b: BrokerThread, group: str, topic: str, stable: bool) -> ErrorCode:
    """Partition 0's error in a raw OffsetFetch v7 (the first with ``require_stable``)."""
    body = {
        "group_id": group,
        "topics": [{"name": topic, "partition_indexes": [0]}],
        "require_stable": stable,
    }
    r = call(b.port, API.offset_fetch, 7, body)
    return r.topics[0].partitions[0].error_code


def markers(logs: LogManager, topic: str, partition: int) -> list[tuple[int, int]]:
    """(producer id, control type) of each control batch in the partition, in order."""
    out = []
    for b in logs.get_log(topic, partition).iter_batches(0):
        if b.header.is_control:
            (r,) = b.records()
            out.append((b.header.producer_id, CONTROL_KEY.unpack(bytes(r.key))[1]))
    return out


def wait_markers(logs: LogManager, topic: str, partition: int, n: int) -> None:
    """Wait until the partition holds ``n`` markers: EndTxn is answered once the Prepare
    record is written and the markers follow (Kafka's order), so a test that looks at
    them waits, woken by each append to the partition."""
    plog = logs.get_log(topic, partition)
    appended = threading.Event()

    def on_append(_plog: Any) -> None:
        appended.set()

    plog.append_listeners.append(on_append)
    deadline = time.monotonic() + TIMEOUT
    try:
        while True:
            appended.clear()
            if len(markers(logs, topic, partition)) >= n:
                return
            left = deadline - time.monotonic()
            assert left > 0, f"{topic}-{partition}: fewer than {n} markers"
            appended.wait(left)
    finally:
        plog.append_listeners.remove(on_append)


def data_values(logs: LogManager, topic: str, partition: int) -> list[bytes]:
    return [
        bytes(r.value)
        for b in logs.get_log(topic, partition).iter_batches(0)
        if not b.header.is_control
        for r in b.records()
    ]


def read_uncommitted(bootstrap: str, topic: str, partitions: int, n: int) -> list[bytes]:
    c = consumer(bootstrap, unique("reader"))
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    try:
        got = consume_until(c, lambda out: len(out) >= n, TIMEOUT, f"{n} records")
    finally:
        c.close()
    return [m.value() for m in got]


@pytest.fixture(scope="module")
def tbroker(tmp_path_factory: pytest.TempPathFactory) -> Any:
    b = start_test_broker(tmp_path_factory.mktemp("txn-data"), **SMALL)
    yield b
    b.stop()


def test_commit_then_abort_writes_markers_and_offsets_count_only_on_commit(
    tbroker: BrokerThread,
) -> None:
    topic, group, tid = unique("txn"), unique("g"), unique("tx")
    create(tbroker.bootstrap, topic)
    p = txn_producer(tbroker.bootstrap, tid)
    meta = consumer(tbroker.bootstrap, group)
    try:
        p.begin_transaction()
        for i in range(4):
            p.produce(topic, value=b"c%d" % i, partition=i % 2)
        assert p.flush(TIMEOUT) == 0
        offsets = [TopicPartition(topic, 0, 5)]
        p.send_offsets_to_transaction(offsets, meta.consumer_group_metadata(), TIMEOUT)
        # written to __consumer_offsets, but not the group's offset until the commit;
        # a require_stable fetch (read_committed clients) is told to retry meanwhile
        assert committed(tbroker.bootstrap, group, topic, 0, stable=False) < 0
        assert offset_fetch_error(tbroker, group, topic, stable=True) == (
            ErrorCode.unstable_offset_commit
        )
        assert offset_fetch_error(tbroker, group, topic, stable=False) == ErrorCode.none
        p.commit_transaction(TIMEOUT)
        assert committed(tbroker.bootstrap, group, topic, 0) == 5

        p.begin_transaction()
        p.produce(topic, value=b"a0", partition=0)
        p.produce(topic, value=b"a1", partition=1)
        assert p.flush(TIMEOUT) == 0
        p.send_offsets_to_transaction(
            [TopicPartition(topic, 0, 9)], meta.consumer_group_metadata(), TIMEOUT
        )
        p.abort_transaction(TIMEOUT)
    finally:
        meta.close()
    logs = tbroker.logs
    assert committed(tbroker.bootstrap, group, topic, 0) == 5
    for part in (0, 1):
        wait_markers(logs, topic, part, 2)
        kinds = [kind for _pid, kind in markers(logs, topic, part)]
        assert kinds == [CONTROL_COMMIT, CONTROL_ABORT]
        assert len({pid for pid, _k in markers(logs, topic, part)}) == 1
    # read_uncommitted sees the aborted records too; the markers are not records
    got = read_uncommitted(tbroker.bootstrap, topic, 2, 6)
    assert sorted(got) == [b"a0", b"a1", b"c0", b"c1", b"c2", b"c3"]
    # kompakt dump shows the markers
    seg = logs.get_log(topic, 0).segments[0].log_path
    doc = json.loads(
        subprocess.run(
            [sys.executable, "-m", "kompakt.cli.main", "dump", str(seg), "--deep", "--json"],
            capture_output=True,
            text=True,
            check=True,
            cwd=REPO,
        ).stdout
    )
    controls = [
        b["records"][0]["controlType"] for b in doc["files"][0]["batches"] if b["isControl"]
    ]
    assert controls == ["COMMIT", "ABORT"]


def test_second_producer_with_the_same_transactional_id_fences_the_first(
    tbroker: BrokerThread,
) -> None:
    topic, tid = unique("fence"), unique("tx")
    create(tbroker.bootstrap, topic, 1)
    zombie = txn_producer(tbroker.bootstrap, tid)
    zombie.begin_transaction()
    zombie.produce(topic, value=b"zombie", partition=0)
    assert zombie.flush(TIMEOUT) == 0
    fresh = txn_producer(tbroker.bootstrap, tid)  # aborts the zombie's transaction
    with pytest.raises(KafkaException) as info:
        zombie.commit_transaction(TIMEOUT)
    error = info.value.args[0]
    assert error.code() == KafkaError._FENCED and error.fatal()
    fresh.begin_transaction()
    fresh.produce(topic, value=b"fresh", partition=0)
    fresh.commit_transaction(TIMEOUT)
    wait_markers(tbroker.logs, topic, 0, 2)
    kinds = [kind for _pid, kind in markers(tbroker.logs, topic, 0)]
    assert kinds == [CONTROL_ABORT, CONTROL_COMMIT]
    assert data_values(tbroker.logs, topic, 0) == [b"zombie", b"fresh"]


def test_transactional_offsets_after_restart_only_the_committed_ones(tmp_path: Path) -> None:
    """``__consumer_offsets`` holds the aborted transaction's offset record too; the
    load replays a transactional record only with its COMMIT marker."""
    port = free_port()
    listeners = {"listeners": f"PLAINTEXT://127.0.0.1:{port}", **SMALL}
    b = start_test_broker(tmp_path, **listeners)
    topic, group, tid = unique("restart"), unique("g"), unique("tx")
    try:
        create(b.bootstrap, topic, 1)
        p = txn_producer(b.bootstrap, tid)
        meta = consumer(b.bootstrap, group)
        for offset, commit in ((3, True), (7, False)):
            p.begin_transaction()
            p.produce(topic, value=b"v%d" % offset, partition=0)
            p.send_offsets_to_transaction(
                [TopicPartition(topic, 0, offset)], meta.consumer_group_metadata(), TIMEOUT
            )
            if commit:
                p.commit_transaction(TIMEOUT)
            else:
                p.abort_transaction(TIMEOUT)
        meta.close()
        assert committed(b.bootstrap, group, topic, 0) == 3
    finally:
        b.stop()
    b = start_test_broker(tmp_path, **listeners)
    try:
        assert committed(b.bootstrap, group, topic, 0) == 3
        # the transactional id and its producer id survive: the next epoch is a bump
        again = txn_producer(b.bootstrap, tid)
        again.begin_transaction()
        again.produce(topic, value=b"after", partition=0)
        again.commit_transaction(TIMEOUT)
        wait_markers(b.logs, topic, 0, 3)
        pids = {pid for pid, _k in markers(b.logs, topic, 0)}
        assert len(pids) == 1
    finally:
        b.stop()


def start_process(data_dir: Path, port: int, faults: str) -> subprocess.Popen:
    """A broker process with the named crash points (``reliability.crash_faults``)."""
    return start_broker(data_dir, port, faults, SMALL)


def states(data_dir: Path, tid: str) -> list[TransactionState]:
    """The states ``__transaction_state`` recorded for ``tid``, in order."""
    logs = LogManager(data_dir)
    try:
        found = []
        for p in range(logs.partition_count(TRANSACTION_STATE_TOPIC)):
            for b in logs.get_log(TRANSACTION_STATE_TOPIC, p).iter_batches(0):
                for r in b.records():
                    rec = txn_rec.read_record(bytes(r.key), r.value and bytes(r.value))
                    if rec is not None and rec[0] == tid and rec[1] is not None:
                        found.append(rec[1].state)
        return found
    finally:
        logs.close()


def two_partition_transaction(bootstrap: str, topic: str, tid: str, prefix: bytes) -> Producer:
    """``tid``'s open transaction of one record (prefix + partition) in each partition
    of a new two-partition ``topic``."""
    create(bootstrap, topic)
    p = txn_producer(bootstrap, tid)
    p.begin_transaction()
    for part in (0, 1):
        p.produce(topic, value=prefix + b"%d" % part, partition=part)
    return p


@contextlib.contextmanager
def killed_in_prepare_commit(data_dir: Path, port: int, faults: str, tid: str) -> Iterator[None]:
    """A broker process with the crash point ``faults``, for the block's client calls;
    then it must have died of it, leaving ``tid`` in PrepareCommit."""
    proc = start_process(data_dir, port, faults)
    try:
        yield
        assert proc.wait(TIMEOUT) == -9
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert states(data_dir, tid)[-1] == TransactionState.PREPARE_COMMIT


def test_broker_killed_between_prepare_commit_and_markers_completes_on_restart(
    tmp_path: Path,
) -> None:
    port = free_port()
    bootstrap = f"127.0.0.1:{port}"
    topic, tid, group = unique("crash"), unique("tx"), unique("g")
    with killed_in_prepare_commit(tmp_path, port, "kill_before_markers", tid):
        p = two_partition_transaction(bootstrap, topic, tid, b"x")
        assert p.flush(TIMEOUT) == 0
        meta = consumer(bootstrap, group)
        p.send_offsets_to_transaction(
            [TopicPartition(topic, 0, 11)], meta.consumer_group_metadata(), TIMEOUT
        )
        meta.close()
        # EndTxn is answered once PrepareCommit is written, so the answer may or may not
        # leave before the broker dies writing the markers: both are fine
        try:
            p.commit_transaction(5)
        except KafkaException:
            pass
    proc = start_process(tmp_path, port, "none")
    try:
        # the load finishes the commit without a client; InitProducerId answers
        # CONCURRENT_TRANSACTIONS (librdkafka retries) until CompleteCommit is written
        txn_producer(bootstrap, tid)
        # the offsets sent in the transaction were applied with its COMMIT marker
        assert committed(bootstrap, group, topic, 0) == 11
        got = read_uncommitted(bootstrap, topic, 2, 2)
        assert sorted(got) == [b"x0", b"x1"]
    finally:
        proc.terminate()
        proc.wait(TIMEOUT)
    history = states(tmp_path, tid)
    k = history.index(TransactionState.PREPARE_COMMIT)
    assert history[k : k + 3] == [
        TransactionState.PREPARE_COMMIT,
        TransactionState.COMPLETE_COMMIT,
        TransactionState.EMPTY,
    ]
    logs = LogManager(tmp_path)
    try:
        for part in (0, 1):
            assert [k for _pid, k in markers(logs, topic, part)] == [CONTROL_COMMIT]
            assert data_values(logs, topic, part) == [b"x%d" % part]
    finally:
        logs.close()


def test_commit_answered_then_broker_killed_before_markers_is_committed_on_restart(
    tmp_path: Path,
) -> None:
    """Kafka answers EndTxn once PrepareCommit is written (acks=-1; here fsynced), before
    any marker: a broker killed after that answer, markers unwritten, still commits the
    transaction when it starts again (``loadTransactionsForTxnTopicPartition`` resends
    the markers of a PrepareCommit), so the client's successful commit holds."""
    port = free_port()
    bootstrap = f"127.0.0.1:{port}"
    topic, tid = unique("answered"), unique("tx")
    with killed_in_prepare_commit(tmp_path, port, "kill_after_end_txn_answer", tid):
        p = two_partition_transaction(bootstrap, topic, tid, b"y")
        p.commit_transaction(TIMEOUT)  # answered: the Prepare record is durable
    proc = start_process(tmp_path, port, "none")
    try:
        txn_producer(bootstrap, tid)  # CONCURRENT_TRANSACTIONS until the load completes
        rc = consumer(bootstrap, unique("g"), "read_committed")
        rc.assign([TopicPartition(topic, part, 0) for part in (0, 1)])
        got = [m.value() for m in consume_until(rc, lambda out: len(out) >= 2, TIMEOUT)]
        rc.close()
        assert sorted(got) == [b"y0", b"y1"]
    finally:
        proc.terminate()
        proc.wait(TIMEOUT)
    logs = LogManager(tmp_path)
    try:
        for part in (0, 1):
            assert [k for _pid, k in markers(logs, topic, part)] == [CONTROL_COMMIT]
    finally:
        logs.close()


# -- stage 2: read_committed ----------------------------------------------------------------


def read_until(c: Consumer, done: Any) -> list[bytes]:
    """Poll ``c`` until ``done(c)``; returns the values read meanwhile."""
    return [m.value() for m in consume_until(c, lambda _out: done(c), TIMEOUT, batch=1)]


def test_read_committed_sees_committed_records_only_and_an_open_transaction_after_commit(
    tbroker: BrokerThread,
) -> None:
    """Kafka's READ_COMMITTED: a fetch stops at the last stable offset (the first offset
    of the earliest open transaction) and names the aborted transactions so the client
    drops their records; ListOffsets LATEST answers the LSO."""
    topic = unique("rc")
    create(tbroker.bootstrap, topic)
    p = txn_producer(tbroker.bootstrap, unique("tx"))
    for prefix, end in ((b"c", "commit"), (b"a", "abort"), (b"o", "open")):
        p.begin_transaction()
        for i in range(2):
            p.produce(topic, value=prefix + b"%d" % i, partition=i)
        assert p.flush(TIMEOUT) == 0
        if end == "commit":
            p.commit_transaction(TIMEOUT)
        elif end == "abort":
            p.abort_transaction(TIMEOUT)
    for part in (0, 1):
        wait_markers(tbroker.logs, topic, part, 2)
    # each partition: c (0), COMMIT (1), a (2), ABORT (3), o (4): LSO 4, HW 5
    tps = [TopicPartition(topic, i) for i in (0, 1)]
    rc = consumer(tbroker.bootstrap, unique("g"), "read_committed")
    ru = consumer(tbroker.bootstrap, unique("g"))
    try:
        assert [rc.get_watermark_offsets(tp, TIMEOUT, cached=False)[1] for tp in tps] == [4, 4]
        assert [ru.get_watermark_offsets(tp, TIMEOUT, cached=False)[1] for tp in tps] == [5, 5]
        rc.assign([TopicPartition(topic, i, 0) for i in (0, 1)])

        def at(offset: int) -> Any:
            return lambda c: [tp.offset for tp in c.position(tps)] == [offset, offset]

        before = read_until(rc, at(4))  # read up to the LSO: past the aborted ones
        assert sorted(before) == [b"c0", b"c1"]
        p.commit_transaction(TIMEOUT)
        after = read_until(rc, at(6))
        assert sorted(after) == [b"o0", b"o1"]
    finally:
        rc.close()
        ru.close()


def test_an_existing_transaction_state_topic_keeps_its_partition_count(tmp_path: Path) -> None:
    """Kafka's ``partitionFor`` hashes over the topic's partitions: a broker restarted
    with another ``transaction.state.log.num.partitions`` still finds and writes each id
    where it was (it used the configured count, so this id landed out of range)."""
    tid = next(t for t in (unique("tx") for _ in range(100)) if partition_for(t, 5) >= 2)
    topic = unique("count")
    b = start_test_broker(tmp_path, **SMALL)
    try:
        create(b.bootstrap, topic, 1)
        p = txn_producer(b.bootstrap, tid)
        p.begin_transaction()
        p.produce(topic, value=b"one", partition=0)
        p.commit_transaction(TIMEOUT)
        wait_markers(b.logs, topic, 0, 1)
    finally:
        b.stop()
    b = start_test_broker(tmp_path, **{**SMALL, "transaction.state.log.num.partitions": 5})
    try:
        p = txn_producer(b.bootstrap, tid)
        p.begin_transaction()
        p.produce(topic, value=b"two", partition=0)
        p.commit_transaction(TIMEOUT)
        wait_markers(b.logs, topic, 0, 2)
        assert len({pid for pid, _k in markers(b.logs, topic, 0)}) == 1  # same producer id
        assert b.logs.partition_count(TRANSACTION_STATE_TOPIC) == 2
    finally:
        b.stop()
