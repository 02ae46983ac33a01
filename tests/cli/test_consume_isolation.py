"""``kompakt consume --isolation-level``: kafka-console-consumer's flag. read_committed
(the default here, as librdkafka's and the Spark source's) leaves out the records of
aborted transactions and stops at the last stable offset, the first offset of a
transaction still open (Kafka's ``FetchIsolation.TXN_COMMITTED``); read_uncommitted
prints every data record up to the log end. A data dir and a broker read alike: the
same verb printed aborted records offline and hid them through a broker before."""

from __future__ import annotations

from pathlib import Path

import pytest
from txn_kit import data, marker
from typer.testing import CliRunner

from kompakt.cli.backend import ConsumeRequest
from kompakt.cli.main import app
from kompakt.cli.offline import OfflineBackend
from kompakt.log.manager import LogManager
from kompakt.record.header import CONTROL_ABORT, CONTROL_COMMIT

runner = CliRunner()

COMMITTED = ["a\t0", "c9\tcommitted"]
EVERY = ["a\t0", "x7\taborted", "c9\tcommitted", "o11\topen", "z\tafter-open"]


def write_transactions(data_dir: Path) -> None:
    """Offsets: 0 a plain record; 1 producer 7's record, 2 its ABORT; 3 producer 9's,
    4 its COMMIT; 5 producer 11's, still open (the last stable offset); 6 a plain
    record after it. The batches' old timestamps roll a segment for each: the
    transactions span segments."""
    with LogManager(data_dir) as logs:
        logs.create_topic("t", 1, {})
        plog = logs.get_log("t", 0)
        for batch in (
            data(-1, b"0", key=b"a", transactional=False),
            data(7, b"aborted", key=b"x7"),
            marker(7, CONTROL_ABORT),
            data(9, b"committed", key=b"c9"),
            marker(9, CONTROL_COMMIT),
            data(11, b"open", key=b"o11"),
            data(-1, b"after-open", key=b"z", transactional=False),
        ):
            plog.append(batch)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    d = tmp_path / "data"
    write_transactions(d)
    return d


def consume(data_dir: Path, *args: str) -> list[str]:
    r = runner.invoke(app, ["consume", "t", "--data-dir", str(data_dir), *args])
    assert r.exit_code == 0, (r.output, r.exception)
    return r.stdout.splitlines()


def test_read_committed_is_the_default_offline(data_dir: Path) -> None:
    assert consume(data_dir) == COMMITTED
    assert consume(data_dir, "--isolation-level", "read_committed") == COMMITTED


def test_read_uncommitted_prints_every_data_record(data_dir: Path) -> None:
    assert consume(data_dir, "--isolation-level", "read_uncommitted") == EVERY


def test_read_committed_from_an_offset_inside_the_aborted_transaction(data_dir: Path) -> None:
    assert consume(data_dir, "--offset", "1") == ["c9\tcommitted"]


def test_an_unknown_isolation_level_is_refused(data_dir: Path) -> None:
    r = runner.invoke(
        app, ["consume", "t", "--data-dir", str(data_dir), "--isolation-level", "committed"]
    )
    assert r.exit_code != 0
    assert "read_committed" in r.output


def test_the_writable_backend_reads_alike(data_dir: Path) -> None:
    """``OfflineBackend`` (the log opened) reads as the read-only reader does, from the
    log's own last stable offset and aborted transactions."""

    def text(read_committed: bool) -> list[str]:
        with OfflineBackend(data_dir) as backend:
            request = ConsumeRequest("t", read_committed=read_committed)
            return [f"{r.key.decode()}\t{r.value.decode()}" for r in backend.consume(request)]

    assert text(True) == COMMITTED
    assert text(False) == EVERY


def test_through_a_broker_the_same_levels(tmp_path: Path) -> None:
    """Against a real broker: the verb passes its level to the consumer
    (``isolation.level``), so an aborted transaction's record shows only with
    read_uncommitted."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from kompakt.broker.app import start_test_broker

    b = start_test_broker(str(tmp_path / "broker"))
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})  # kept until answered
        admin.create_topics([NewTopic("t", 1, 1)])["t"].result(30)
        p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "iso"})
        p.init_transactions(30)
        for key, commit in ((b"x7", False), (b"c9", True)):
            p.begin_transaction()
            p.produce("t", b"aborted" if not commit else b"committed", key)
            p.flush(30)
            if commit:
                p.commit_transaction(30)
            else:
                p.abort_transaction(30)

        def lines(*args: str) -> list[str]:
            r = runner.invoke(app, ["consume", "t", "--bootstrap-server", b.bootstrap, *args])
            assert r.exit_code == 0, (r.output, r.exception)
            return r.stdout.splitlines()

        assert lines() == ["c9\tcommitted"]
        assert lines("--isolation-level", "read_uncommitted") == ["x7\taborted", "c9\tcommitted"]
        # a transaction still open: read_committed ends at the last stable offset (the
        # consumer's end of partition there), not waiting for the high watermark
        p.begin_transaction()
        p.produce("t", b"open", b"o11")
        p.flush(30)
        assert lines() == ["c9\tcommitted"]
        assert lines("--isolation-level", "read_uncommitted")[-1] == "o11\topen"
        p.abort_transaction(30)
    finally:
        b.stop()
