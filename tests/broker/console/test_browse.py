"""The console's data functions (kompakt.broker.console.browse) against a real broker:
data produced and consumed with confluent-kafka, verdicts checked against a real clean."""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kompakt.broker.app import start_test_broker
from kompakt.broker.console import browse, groups, keys, messages, topic_configs
from tests.shared_kit import wait_for

COMPACTED = {
    "cleanup.policy": "compact",
    "segment.bytes": "1024",
    "min.cleanable.dirty.ratio": "0.01",
    "min.compaction.lag.ms": "0",
    "delete.retention.ms": "0",
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    # no background cleaning: the tests decide when a clean runs
    b = start_test_broker(
        tmp_path_factory.mktemp("browse"),
        **{"log.cleaner.enable": "false", "log.index.interval.bytes": "4096"},
    )
    yield b
    b.stop()


def create(broker, name: str, partitions: int = 1, config: dict | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    fs = admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])
    fs[name].result(30)


def produce(broker, topic: str, records: list[tuple[bytes | None, bytes | None]], **kw) -> None:
    """One batch per record (flushed one by one), so small segments roll predictably."""
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for key, value in records:
        p.produce(topic, value=value, key=key, **kw)
        p.flush(30)


def fillers(n: int, tag: str = "f") -> list[tuple[bytes, bytes]]:
    return [(f"{tag}{i}".encode(), b"x" * 120) for i in range(n)]


def keys_of(plog, key: bytes) -> list[tuple[int, bytes | None]]:
    return [
        (r.offset, r.value)
        for b in plog.iter_batches()
        if not b.header.is_control
        for r in b.records()
        if r.key == key
    ]


def compact_now(broker, topic: str) -> dict:
    return broker.broker._compact(topic, 0, False)


def now_ms() -> int:
    return int(time.time() * 1000)


def test_key_inspector_verdicts_match_what_the_clean_then_removes(broker):
    """Kafka's shouldRetainRecord: of a key, only its latest offset in the dirty range
    survives; the inspector's 'removed' set is exactly what the next clean drops."""
    create(broker, "insp", config=COMPACTED)
    values = [json.dumps({"v": i}).encode() for i in range(3)]
    produce(broker, "insp", [(b"user-1", v) for v in values] + fillers(20))
    plog = broker.logs.get_log("insp", 0)
    rep = keys.inspect_key(broker.logs, plog, b"user-1", now_ms())
    assert [r.offset for r in rep.records] == [0, 1, 2]
    assert [r.removed for r in rep.records] == [True, True, False]
    assert rep.records[0].why == "removed: superseded by offset 2"
    assert rep.records[2].value == values[2]
    compact_now(broker, "insp")
    assert [o for o, _v in keys_of(plog, b"user-1")] == [
        r.offset for r in rep.records if not r.removed
    ]


def test_tombstone_kept_until_its_delete_horizon_passes_then_removed(broker):
    """KIP-534: the first clean that keeps a tombstone stamps clean time +
    delete.retention.ms; a later clean past that horizon removes it."""
    create(broker, "tomb", config=COMPACTED)
    produce(broker, "tomb", [(b"gone", b"alive"), (b"gone", None)] + fillers(20))
    plog = broker.logs.get_log("tomb", 0)
    rep = keys.inspect_key(broker.logs, plog, b"gone", now_ms())
    first, tomb = rep.records
    assert first.removed and "superseded by offset 1" in first.why
    assert tomb.tombstone and not tomb.removed
    assert tomb.delete_horizon_ms is None
    assert "next clean sets its delete horizon" in tomb.horizon_note
    compact_now(broker, "tomb")
    assert keys_of(plog, b"gone") == [(1, None)]
    # new dirty data so that a second clean has something to do
    produce(broker, "tomb", fillers(20, "g"))
    later = now_ms()
    rep2 = keys.inspect_key(broker.logs, plog, b"gone", later)
    (tomb2,) = rep2.records
    assert tomb2.delete_horizon_ms is not None and tomb2.delete_horizon_ms <= later
    assert "(passed)" in tomb2.horizon_note
    assert tomb2.removed and tomb2.why == "removed: tombstone past its delete horizon"
    compact_now(broker, "tomb")
    assert keys_of(plog, b"gone") == []


def test_aborted_transaction_records_of_a_key_are_removed_by_the_next_clean(broker):
    """Kafka's cleaner drops the data of aborted transactions (CleanedTransactionMetadata
    fed from the .txnindex) and never lets it into the key map."""
    create(broker, "txn", config=COMPACTED)
    produce(broker, "txn", [(b"acct", b"committed")])
    tp = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "browse-txn"})
    tp.init_transactions(30)
    tp.begin_transaction()
    tp.produce("txn", key=b"acct", value=b"aborted")
    tp.flush(30)
    tp.abort_transaction(30)
    produce(broker, "txn", fillers(20))
    plog = broker.logs.get_log("txn", 0)
    rep = keys.inspect_key(broker.logs, plog, b"acct", now_ms())
    verdicts = {r.value: (r.removed, r.why) for r in rep.records}
    assert verdicts[b"aborted"] == (True, "removed: part of an aborted transaction")
    assert verdicts[b"committed"] == (False, "kept: the latest record of its key")
    compact_now(broker, "txn")
    assert [v for _o, v in keys_of(plog, b"acct")] == [b"committed"]


def test_a_dirty_range_larger_than_the_local_key_map_is_said_to_clean_partially(broker):
    """Kafka's SkimpyOffsetMap: dedupe.buffer.size / 24 bytes x load factor keys per pass."""
    create(broker, "partial", config=COMPACTED)
    produce(broker, "partial", fillers(30, "p"))
    plog = broker.logs.get_log("partial", 0)
    settings = {
        "kompakt.cleaner.engine": "local",
        "log.cleaner.dedupe.buffer.size": str(24 * 10),
        "log.cleaner.io.buffer.load.factor": "0.9",
    }
    assert keys.key_map_entries(settings) == 9
    assert keys.key_map_entries({"kompakt.cleaner.engine": "spark"}) is None
    rep = keys.inspect_key(broker.logs, plog, b"p1", now_ms(), map_entries=9)
    assert any("the next clean is partial" in n for n in rep.notes)
    rep = keys.inspect_key(broker.logs, plog, b"p1", now_ms(), map_entries=None)
    assert not any("partial" in n for n in rep.notes)


def test_key_in_active_segment_is_kept_and_non_compacted_topic_says_so(broker):
    """Kafka never cleans the active segment; a delete-policy topic is never compacted."""
    create(broker, "act", config=COMPACTED)
    produce(broker, "act", [(b"a", b"1"), (b"a", b"2")])
    plog = broker.logs.get_log("act", 0)
    rep = keys.inspect_key(broker.logs, plog, b"a", now_ms())
    assert [r.removed for r in rep.records] == [False, False]
    assert any("nothing is cleanable" in n for n in rep.notes)
    create(broker, "plain")
    produce(broker, "plain", [(b"a", b"1")])
    rep = keys.inspect_key(broker.logs, broker.logs.get_log("plain", 0), b"a", now_ms())
    assert not rep.compacted and "never compacts" in rep.notes[0]
    assert rep.records[0].why == "kept: no clean is due to rewrite it"


def test_message_browser_pages_by_offset_timestamp_and_key(broker):
    """ListOffsets by timestamp: the first offset whose timestamp is >= the one asked."""
    create(broker, "msgs")
    base = 1_700_000_000_000
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(30):
        p.produce(
            "msgs",
            key=f"k{i % 3}".encode(),
            value=json.dumps({"n": i}).encode(),
            timestamp=base + i * 1000,
            headers=[("trace", f"t{i}".encode())],
        )
        p.flush(30)
    plog = broker.logs.get_log("msgs", 0)
    page = messages.browse_messages(plog, offset="5", limit="10")
    assert [m.offset for m in page.messages] == list(range(5, 15))
    assert page.next_offset == 15
    assert page.messages[0].headers == (("trace", b"t5"),)
    assert json.loads(page.messages[0].value_as("json")) == {"n": 5}
    assert page.messages[0].value_as("hex").startswith("7b 22 6e 22")
    page = messages.browse_messages(plog, timestamp=str(base + 20_500))
    assert page.messages[0].offset == 21
    page = messages.browse_messages(plog, timestamp="2023-11-14T22:13:20Z")  # == base
    assert page.messages[0].offset == 0
    page = messages.browse_messages(plog, key=b"k1")
    assert [m.offset for m in page.messages] == list(range(1, 30, 3))
    assert page.next_offset is None
    # a scan budget smaller than the log: stops, says where to go on
    page = messages.browse_messages(plog, key=b"nope", max_scan_bytes=200)
    assert not page.messages and page.next_offset is not None and page.notes


def test_a_value_far_larger_than_its_batch_is_shown_cut_with_its_size(broker):
    """Kafka checks max.message.bytes against a batch's compressed size, so a few KiB of
    zstd may carry a value of many MiB; the browser and the key inspector held each
    such value twice (one view of a 512 MiB value took 1.3 GB). They show its start and
    its size, and what follows it still pages."""
    create(broker, "wide-values", config=COMPACTED)
    p = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "linger.ms": 0,
            "compression.type": "zstd",
            "message.max.bytes": 100_000_000,
        }
    )
    big = 40 << 20
    p.produce("wide-values", key=b"wide", value=b"a" * big)
    p.produce("wide-values", key=b"next", value=b"after")
    p.flush(30)
    plog = broker.logs.get_log("wide-values", 0)
    page = messages.browse_messages(plog)
    wide, after = page.messages
    assert wide.value_size == big and len(wide.value) == 64 << 10
    assert wide.value_as("text").endswith(f"(a value of {big} bytes: its first 65536 read)")
    assert (after.key, after.value) == (b"next", b"after")
    assert [m.offset for m in messages.browse_messages(plog, key=b"wide").messages] == [0]
    found = keys.inspect_key(broker.logs, plog, b"wide", int(time.time() * 1000))
    assert [len(r.value) for r in found.records] == [64 << 10]


def test_message_browser_reads_committed_as_a_read_committed_consumer(broker):
    """Kafka's READ_COMMITTED: the records of an aborted transaction are left out and a
    page stops at the last stable offset (the first offset of a transaction still
    open), each with a note; once that transaction commits its records show."""
    create(broker, "browse-txn")
    produce(broker, "browse-txn", [(b"plain", b"0")])
    done = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "bt-done"})
    done.init_transactions(30)
    for value, commit in ((b"aborted", False), (b"committed", True)):
        done.begin_transaction()
        done.produce("browse-txn", key=b"k", value=value)
        done.flush(30)
        if commit:
            done.commit_transaction(30)
        else:
            done.abort_transaction(30)
    still = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "bt-open"})
    still.init_transactions(30)
    still.begin_transaction()
    still.produce("browse-txn", key=b"k", value=b"open")
    still.flush(30)
    produce(broker, "browse-txn", [(b"plain", b"after")])
    plog = broker.logs.get_log("browse-txn", 0)
    page = messages.browse_messages(plog)
    assert [m.value for m in page.messages] == [b"0", b"committed"]
    assert page.next_offset is None
    assert any("1 records of aborted transactions are left out" in n for n in page.notes)
    lso = plog.last_stable_offset
    assert any(f"from offset {lso} on belong to a transaction still open" in n for n in page.notes)
    still.commit_transaction(30)
    # the COMMIT marker is written after EndTxn is answered (as Kafka's WriteTxnMarkers)
    wait_for(lambda: plog.last_stable_offset == plog.high_watermark, "the COMMIT marker")
    page = messages.browse_messages(plog)
    assert [m.value for m in page.messages] == [b"0", b"committed", b"open", b"after"]
    assert not any("still open" in n for n in page.notes)


@pytest.mark.parametrize(
    ("offset", "timestamp", "limit", "message"),
    [
        ("abc", None, None, "offset must be a whole number"),
        ("-5", None, None, "offset must be between 0"),
        ("99999999999999999999999", None, None, "offset must be between 0"),
        (None, "yesterday", None, "neither ms since the epoch nor ISO 8601"),
        (None, None, "0", "records per page must be between 1"),
    ],
)
def test_hostile_browser_input_is_a_message(broker, offset, timestamp, limit, message):
    if not broker.logs.has_topic("hostile"):
        create(broker, "hostile")
    plog = broker.logs.get_log("hostile", 0)
    with pytest.raises(browse.BrowseInputError, match=message):
        messages.browse_messages(plog, offset=offset, timestamp=timestamp, limit=limit)


def test_offsets_outside_the_log_are_clamped_with_a_note(broker):
    create(broker, "clamp")
    produce(broker, "clamp", [(b"a", b"1"), (b"b", b"2")])
    plog = broker.logs.get_log("clamp", 0)
    page = messages.browse_messages(plog, offset="1000")
    assert not page.messages and "past the end of the log (2)" in page.notes[0]


def test_parse_key_and_partition_errors_are_messages(broker):
    assert browse.parse_key("0a ff", "hex") == b"\n\xff"
    assert browse.parse_key("aGk=", "base64") == b"hi"
    for text, enc, msg in [
        ("zz", "hex", "is not hex"),
        ("!!", "base64", "not valid base64"),
        ("", "text", "enter a key"),
        ("k", "rot13", "unknown key encoding"),
    ]:
        with pytest.raises(browse.BrowseInputError, match=msg):
            browse.parse_key(text, enc)
    with pytest.raises(browse.BrowseInputError, match="does not exist"):
        browse.partition_log(broker.logs, "no-such-topic", "0")
    if not broker.logs.has_topic("hostile"):
        create(broker, "hostile")
    with pytest.raises(browse.BrowseInputError, match="has partitions 0..0, not 7"):
        browse.partition_log(broker.logs, "hostile", "7")
    with pytest.raises(browse.BrowseInputError, match="partition must be a whole number"):
        browse.partition_log(broker.logs, "hostile", "x")


def test_group_lag_is_end_offset_minus_committed_as_kafka_consumer_groups(broker):
    """kafka-consumer-groups.sh --describe: LAG = LOG-END-OFFSET - CURRENT-OFFSET."""
    create(broker, "lagged", partitions=2)
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for _ in range(10):
        p.produce("lagged", key=b"k", value=b"v", partition=0)
    for _ in range(4):
        p.produce("lagged", key=b"k", value=b"v", partition=1)
    p.flush(30)
    c = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "lag-group",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        c.subscribe(["lagged"])
        wait_for(lambda: c.assignment() or c.poll(0.2) and c.assignment(), "an assignment")
        c.commit(
            offsets=[TopicPartition("lagged", 0, 3), TopicPartition("lagged", 1, 4)],
            asynchronous=False,
        )
        gc = broker.broker.group_coordinator()
        view = wait_for(
            lambda: (
                (v := groups.describe_group(broker.logs, gc, "lag-group"))
                and v.state == "Stable"
                and v
            ),
            "the group to be Stable",
        )
        lags = {(x.topic, x.partition): (x.committed, x.end_offset, x.lag) for x in view.partitions}
        assert lags == {("lagged", 0): (3, 10, 7), ("lagged", 1): (4, 4, 0)}
        assert view.total_lag == 7
        (member,) = view.members
        assert member.assignment == [("lagged", 0), ("lagged", 1)]
        assert {x.member_id for x in view.partitions} == {member.member_id}
        assert ("lag-group", "lagged", 0, 7) in set(groups.lag_samples(broker.logs, gc))
        text = broker.broker.metrics.render().decode()
        assert (
            'kompakt_consumer_group_lag{group="lag-group",partition="0",topic="lagged"} 7.0' in text
        )
        assert (
            'kompakt_consumer_group_lag{group="lag-group",partition="1",topic="lagged"} 0.0' in text
        )
        assert "lag-group" in [g.group_id for g in groups.describe_groups(broker.logs, gc)]
        assert groups.describe_group(broker.logs, gc, "no-such-group") is None
    finally:
        c.close()


def test_topic_configs_have_sources_and_edits_use_alter_configs_rules(broker):
    """DescribeConfigs' sources (DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG,
    DEFAULT_CONFIG) and IncrementalAlterConfigs' validation and messages."""
    create(broker, "cfg", config={"cleanup.policy": "compact"})
    rows = {r.name: r for r in topic_configs.topic_configs(broker.logs, "cfg")}
    assert rows["cleanup.policy"].source == "topic" and rows["cleanup.policy"].value == "compact"
    assert rows["segment.ms"].source == "default"
    # server.properties' log.index.interval.bytes is the broker synonym (Kafka's
    # STATIC_BROKER_CONFIG source)
    assert rows["index.interval.bytes"].source == "broker"
    assert rows["index.interval.bytes"].kafka_source == "STATIC_BROKER_CONFIG"
    state = broker.broker
    err = topic_configs.alter_topic_config(state, "cfg", "min.cleanable.dirty.ratio", "2")
    assert err is not None and "min.cleanable.dirty.ratio" in err
    err = topic_configs.alter_topic_config(state, "cfg", "retention.ms", "abc")
    assert err is not None and "retention.ms" in err
    err = topic_configs.alter_topic_config(state, "cfg", "no.such.key", "1")
    assert err == "Unknown topic config name: no.such.key"
    assert topic_configs.alter_topic_config(state, "cfg", "delete.retention.ms", "1234") is None
    rows = {r.name: r for r in topic_configs.topic_configs(broker.logs, "cfg")}
    assert (
        rows["delete.retention.ms"].value == "1234"
        and rows["delete.retention.ms"].source == "topic"
    )
    assert (
        topic_configs.alter_topic_config(state, "cfg", "delete.retention.ms", None, delete=True)
        is None
    )
    rows = {r.name: r for r in topic_configs.topic_configs(broker.logs, "cfg")}
    assert rows["delete.retention.ms"].source != "topic"
    with pytest.raises(browse.BrowseInputError, match="does not exist"):
        topic_configs.topic_configs(broker.logs, "nope")
    assert "does not exist" in topic_configs.alter_topic_config(state, "nope", "retention.ms", "1")


def test_render_bytes_modes():
    assert browse.render_bytes(None) == "null"
    assert browse.render_bytes(b'{"a":[1,2]}', "json") == '{\n  "a": [\n    1,\n    2\n  ]\n}'
    assert browse.render_bytes(b"not json", "json") == "not json"
    assert browse.render_bytes(b"\x00\xff", "hex") == "00 ff"
    assert browse.render_bytes(b"\xff", "text") == "\ufffd"
    assert browse.render_bytes(b"a" * 500, "text", 10) == "a" * 9 + "…"


def test_config_edit_is_refused_while_the_console_is_read_only(broker):
    """Actions that change data are off by default (kompakt.admin.console.writes)."""
    import httpx

    create(broker, "ro", config={"cleanup.policy": "compact"})
    base = f"http://127.0.0.1:{broker.admin_port}"
    page = httpx.get(f"{base}/configs/ro", headers={"Accept": "text/html"}).text
    assert "Read-only" in page and 'id="config-form"' not in page
    r = httpx.post(
        f"{base}/configs/ro",
        data={"name": "delete.retention.ms", "value": "1", "action": "set"},
        headers={"Accept": "text/html"},
    )
    assert r.status_code == 403 and "read-only" in r.text
    rows = {x.name: x for x in topic_configs.topic_configs(broker.logs, "ro")}
    assert rows["delete.retention.ms"].source != "topic"


def _form_token(url: str, **kw) -> str:
    """The form token of the configs page, as the browser posts it back."""
    import re

    import httpx

    page = httpx.get(url, headers={"Accept": "text/html"}, **kw).text
    return re.search(r'name="csrf" value="([0-9a-f]+)"', page).group(1)


def test_config_edit_needs_the_admin_endpoints_basic_credentials(tmp_path):
    """kompakt.admin.auth=basic: every request needs a SCRAM user's credentials, and the
    form the token of the page it came from (issue 26: a page of another origin cannot
    read it, so cannot forge the form)."""
    import httpx

    b = start_test_broker(
        tmp_path,
        **{
            "kompakt.admin.console.writes": "true",
            "kompakt.admin.auth": "basic",
            "kompakt.sasl.bootstrap.users": "alice:alice-scram",
        },
    )
    try:
        b.logs.create_topic("secured", 1, {"cleanup.policy": "compact"})
        url = f"http://127.0.0.1:{b.admin_port}/configs/secured"
        form = {"name": "delete.retention.ms", "value": "777", "action": "set"}
        assert httpx.post(url, data=form).status_code == 401
        assert httpx.post(url, data=form, auth=("alice", "wrong")).status_code == 401
        alice = ("alice", "alice-scram")
        assert httpx.post(url, data=form, auth=alice).status_code == 403  # no token
        assert httpx.post(url, data={**form, "csrf": "0" * 40}, auth=alice).status_code == 403
        assert b.logs.topic_meta("secured").overrides.get("delete.retention.ms") is None
        r = httpx.post(url, data={**form, "csrf": _form_token(url, auth=alice)}, auth=alice)
        assert r.status_code == 303 and r.headers["location"].endswith("?saved=delete.retention.ms")
        assert b.logs.topic_meta("secured").overrides["delete.retention.ms"] == "777"
    finally:
        b.stop()


def test_key_found_by_murmur2_partition_then_every_partition(broker):
    """No partition given: the one Kafka's default partitioner (murmur2, as librdkafka's
    murmur2_random and the Java producer) picks is read first; a key produced to another
    partition is found by reading the rest; one in none says so."""
    from kompakt.broker.console.key_find import find_key
    from kompakt.record.partitioner import partition_for_key

    create(broker, "spread", 4, COMPACTED)
    p = Producer({"bootstrap.servers": broker.bootstrap, "partitioner": "murmur2_random"})
    p.produce("spread", b"v1", b"home")
    p.produce("spread", b"v2", b"moved", partition=3)
    p.flush(30)
    home = partition_for_key(b"home", 4)
    rep = find_key(broker.logs, "spread", "", b"home", now_ms())
    assert rep.partition == home and [r.value for r in rep.records] == [b"v1"]
    assert "default partitioner (murmur2" in rep.where
    assert partition_for_key(b"moved", 4) != 3
    rep = find_key(broker.logs, "spread", None, b"moved", now_ms())
    assert rep.partition == 3 and [r.value for r in rep.records] == [b"v2"]
    assert "found by reading every partition" in rep.where
    rep = find_key(broker.logs, "spread", "", b"nobody", now_ms())
    assert not rep.records and rep.complete and "all 4 read" in rep.where
    rep = find_key(broker.logs, "spread", "", b"moved", now_ms(), max_scan_bytes=0)
    assert not rep.records and not rep.complete and "not all 4 read" in rep.where
