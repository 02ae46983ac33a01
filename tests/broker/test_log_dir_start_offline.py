"""A broker whose second log dir is unusable at start serves the first, as Kafka does.

Kafka's ``LogManager.createAndValidateLogDirs``/``loadLogs`` hand a log dir that cannot
be used to the ``LogDirFailureChannel`` and the broker starts with the others; the
partitions of that dir answer KAFKA_STORAGE_ERROR (56) and are never created again in
another dir (KIP-858 keeps each replica's directory id; kompakt keeps it in
``kompakt-topics.json``). With no usable dir the broker exits: "None of the specified
log dirs from ... can be created or validated". Driven with confluent-kafka and raw
requests against ``kompakt serve``; a regular file stands in place of the dir, which
stops root as well as any other user.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from confluent_kafka import KafkaError, Producer
from raw_kafka import call
from reliability.kit import REPO, BrokerProcess, create_topic, kompakt_command, read_partition

STORAGE_ERROR = 56
assert KafkaError.KAFKA_STORAGE_ERROR == STORAGE_ERROR
NODE = 1
OVERRIDES = {
    "kompakt.cleaner.engine": "local",
    "log.cleaner.enable": "false",
    "log.index.size.max.bytes": "4096",
    "node.id": str(NODE),
    "offsets.topic.num.partitions": "1",
}


def produce(bootstrap: str, topic: str, n: int, tag: bytes) -> tuple[list, list[int]]:
    """acks=all, no retries: each delivery report is the broker's answer."""
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "retries": 0,
            "enable.idempotence": False,
            "message.timeout.ms": 20000,
            "log_level": 2,
        }
    )
    acked: list[tuple[int, bytes, bytes]] = []
    codes: list[int] = []

    def done(err, msg):
        if err is None:
            acked.append((msg.offset(), msg.key(), msg.value()))
        codes.append(0 if err is None else err.code())

    for i in range(n):
        p.produce(topic, b"%s-%d" % (tag, i), b"k%d" % i, partition=0, on_delivery=done)
    assert p.flush(30) == 0
    return acked, codes


def errors_of(port: int, topic: str) -> dict[str, int]:
    """The partition's error code in Metadata, ListOffsets and Fetch (raw requests)."""
    md = call(port, 3, 12, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
    part = md.topics[0].partitions[0]
    lo = call(
        port,
        2,
        7,
        {"replica_id": -1, "topics": [{"name": topic, "partitions": [{"timestamp": -1}]}]},
    )
    fetch = call(
        port,
        1,
        11,
        {
            "replica_id": -1,
            "max_bytes": 1 << 20,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": topic,
                    "partitions": [{"fetch_offset": 0, "partition_max_bytes": 1 << 20}],
                }
            ],
        },
    )
    return {
        "metadata": int(part.error_code),
        "offline_replicas": list(part.offline_replicas),
        "list_offsets": int(lo.topics[0].partitions[0].error_code),
        "fetch": int(fetch.responses[0].partitions[0].error_code),
    }


def test_a_second_log_dir_that_is_a_file_at_start_is_offline_and_comes_back_when_fixed(tmp_path):
    good, bad = tmp_path / "good", tmp_path / "bad"
    broker = BrokerProcess(
        good, {**OVERRIDES, "log.dirs": f"{good},{bad}"}, log_path=tmp_path / "broker.log"
    )
    broker.start(timeout=120)
    try:
        create_topic(broker.bootstrap, "safe", 1, {})  # the fewest partitions: good
        create_topic(broker.bootstrap, "doomed", 1, {})  # then bad
        safe_acked, codes = produce(broker.bootstrap, "safe", 10, b"safe")
        doomed_acked, codes2 = produce(broker.bootstrap, "doomed", 10, b"doomed")
        assert set(codes + codes2) == {0}
    finally:
        assert broker.stop() == 0
    assert (bad / "doomed-0").is_dir() and (good / "safe-0").is_dir()

    # the disk of 'bad' is gone: a regular file where its mount point was
    away = tmp_path / "bad.away"
    bad.rename(away)
    bad.write_bytes(b"not a directory\n")
    outside = sorted(p.name for p in tmp_path.iterdir())
    broker.start(timeout=120)
    try:
        assert errors_of(broker.port, "doomed") == {
            "metadata": STORAGE_ERROR,  # not UNKNOWN_TOPIC_OR_PARTITION
            "offline_replicas": [NODE],
            "list_offsets": STORAGE_ERROR,
            "fetch": STORAGE_ERROR,
        }
        _acked, codes = produce(broker.bootstrap, "doomed", 3, b"late")
        assert codes == [STORAGE_ERROR] * 3
        dirs = {Path(r.log_dir): r for r in call(broker.port, 35, 4, {"topics": None}).results}
        assert int(dirs[bad.resolve()].error_code) == STORAGE_ERROR
        assert int(dirs[good.resolve()].error_code) == 0
        assert {t.name for t in dirs[good.resolve()].topics} == {"safe"}
        metrics = broker.admin_get("/metrics").decode()
        assert f'kompakt_log_dir_offline{{dir="{bad}"}} 1.0' in metrics
        assert "kompakt_offline_partitions 1.0" in metrics
        rows = json.loads(broker.admin_get("/v1/partitions"))
        rows = {r["topic"]: r for r in (rows["partitions"] if isinstance(rows, dict) else rows)}
        assert rows["doomed"]["offline"] is True
        assert "KAFKA_STORAGE_ERROR" in rows["doomed"]["error"]
        # the other dir serves produce and fetch
        more, codes = produce(broker.bootstrap, "safe", 5, b"more")
        assert set(codes) == {0}
        assert read_partition(broker.bootstrap, "safe", 0) == safe_acked + more
        assert not (good / "doomed-0").exists()  # never an empty copy in the online dir
        assert "log dir" in broker.log_text() and str(bad) in broker.log_text()
    finally:
        assert broker.stop() == 0
    assert bad.read_bytes() == b"not a directory\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == outside

    # the disk is back: a restart brings the partition back with every record
    bad.unlink()
    away.rename(bad)
    broker.start(timeout=120)
    try:
        assert errors_of(broker.port, "doomed")["metadata"] == 0
        assert read_partition(broker.bootstrap, "doomed", 0) == doomed_acked
        again, codes = produce(broker.bootstrap, "doomed", 2, b"again")
        assert set(codes) == {0} and again[0][0] == doomed_acked[-1][0] + 1
    finally:
        assert broker.stop() == 0


def test_a_broker_with_no_usable_log_dir_exits_non_zero_in_one_line_and_writes_nothing(
    tmp_path,
):
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_bytes(b"a\n")
    b.write_bytes(b"b\n")
    before = sorted(tmp_path.iterdir())
    res = subprocess.run(
        [*kompakt_command(), "--override", f"log.dirs={a},{b}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode != 0
    out = res.stdout + res.stderr
    lines = [ln for ln in out.splitlines() if "None of the specified log dirs from" in ln]
    assert len(lines) == 1 and str(a) in lines[0], out
    assert sorted(tmp_path.iterdir()) == before
    assert a.read_bytes() == b"a\n" and b.read_bytes() == b"b\n"
