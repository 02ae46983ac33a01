"""The console's data pages in a real browser: headless Chromium (Debian's package, via
Playwright's ``executable_path``) against a running broker with data produced and
consumed by confluent-kafka. Each test asserts on what the page shows and saves a
1280x800 screenshot to ``test-output/console/``."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kompakt.broker.app import start_test_broker
from tests.shared_kit import wait_for


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = start_test_broker(
        tmp_path_factory.mktemp("browser-data"),
        **{"log.cleaner.enable": "false", "kompakt.admin.console.writes": "true"},
    )
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    compacted = {
        "cleanup.policy": "compact",
        "segment.bytes": "1024",
        "min.cleanable.dirty.ratio": "0.01",
        "min.compaction.lag.ms": "0",
    }
    fs = admin.create_topics([NewTopic("users", 1, 1, config=compacted), NewTopic("orders", 2, 1)])
    for f in fs.values():
        f.result(30)
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0})
    for i in range(3):  # one batch each: three records of user-1
        p.produce("users", key=b"user-1", value=json.dumps({"name": "Ada", "v": i}).encode())
        p.flush(30)
    for i in range(20):  # others, so the segments of user-1 roll out of the active one
        p.produce("users", key=f"user-{i + 2}".encode(), value=b"x" * 120)
        p.flush(30)
    for i in range(12):
        p.produce(
            "orders",
            key=f"o{i}".encode(),
            value=json.dumps({"order": i, "items": [i, i + 1]}).encode(),
            partition=0,
            headers=[("source", b"web")],
        )
    for _ in range(5):
        p.produce("orders", key=b"o", value=b"v", partition=1)
    p.flush(30)
    c = Consumer(
        {
            "bootstrap.servers": b.bootstrap,
            "group.id": "billing",
            "client.id": "billing-1",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    c.subscribe(["orders"])
    wait_for(lambda: c.poll(0.2) is not None and c.assignment(), "an assignment of orders")
    c.commit(
        offsets=[TopicPartition("orders", 0, 4), TopicPartition("orders", 1, 5)],
        asynchronous=False,
    )
    b.consumer = c
    yield b
    c.close()
    b.stop()


def url(broker, path: str) -> str:
    return f"http://127.0.0.1:{broker.admin_port}{path}"


def test_key_inspector_shows_which_records_the_next_clean_removes(broker, page, shot):
    page.goto(url(broker, "/keys"))
    page.select_option("#topic", "users")
    page.fill("#key", "user-1")
    page.click("#inspect")
    page.wait_for_selector("#key-records")
    rows = page.locator("#key-records tbody tr")
    assert rows.count() == 3
    assert page.inner_text("#removed-count") == "2"
    assert "removed: superseded by offset 2" in rows.nth(0).inner_text()
    assert "kept: the latest record of its key" in rows.nth(2).inner_text()
    assert '"v": 2' in rows.nth(2).inner_text()
    shot(page, "keys")


def test_message_browser_renders_json_and_headers_and_pages_on(broker, page, shot):
    page.goto(url(broker, "/messages?topic=orders&partition=0&offset=2&limit=5&render=json"))
    rows = page.locator("#messages tbody tr")
    assert rows.count() == 5
    first = rows.nth(0)
    assert first.get_attribute("data-offset") == "2"
    value = first.locator("pre.value").inner_text()
    assert json.loads(value) == {"order": 2, "items": [2, 3]} and "\n" in value
    assert "source=web" in first.inner_text()
    shot(page, "messages")
    page.click("#next-page")
    page.wait_for_url("**offset=7**")
    assert page.locator("#messages tbody tr").nth(0).get_attribute("data-offset") == "7"
    page.goto(url(broker, "/messages?topic=orders&partition=0&render=hex&limit=1"))
    assert page.locator("pre.value").inner_text().startswith("7b 22 6f")


def test_groups_pages_show_lag_per_partition_and_total(broker, page, shot):
    page.goto(url(broker, "/groups"))
    row = page.locator('#groups tr[data-group="billing"]')
    assert row.locator(".lag").inner_text() == "8"  # (12 - 4) + (5 - 5)
    shot(page, "groups")
    row.locator("a").click()
    page.wait_for_selector("#lag")
    assert page.inner_text("#total-lag") == "8"
    assert page.locator('#lag tr[data-tp="orders-0"] .lag').inner_text() == "8"
    assert page.locator('#lag tr[data-tp="orders-1"] .lag').inner_text() == "0"
    assert "orders-0, orders-1" in page.inner_text("#members")
    assert "billing-1" in page.inner_text("#members")
    shot(page, "group")
    # from the lag row to the records the group has not consumed yet
    page.locator('#lag tr[data-tp="orders-0"] a').click()
    page.wait_for_selector("#messages")
    assert page.locator("#messages tbody tr").nth(0).get_attribute("data-offset") == "4"
    assert page.locator("#messages tbody tr").count() == 8


def test_config_edit_shows_alter_configs_error_inline_then_saves(broker, page, shot):
    page.goto(url(broker, "/configs/users"))
    row = page.locator('#configs tr[data-name="cleanup.policy"]')
    assert row.locator(".source").inner_text() == "topic"
    assert page.locator('#configs tr[data-name="retention.bytes"] .source').inner_text() in (
        "default",
        "broker",
    )
    page.select_option("#config-name", "min.cleanable.dirty.ratio")
    page.fill("#config-value", "7")
    page.click("#config-set")
    page.wait_for_selector("#config-error")
    error = page.inner_text("#config-error")
    assert "min.cleanable.dirty.ratio" in error and "7" in error
    assert page.locator("tr.inline-error").count() == 1
    shot(page, "configs-error")
    page.select_option("#config-name", "delete.retention.ms")
    page.fill("#config-value", "4242")
    page.click("#config-set")
    page.wait_for_selector("#saved")
    cell = page.locator('#configs tr[data-name="delete.retention.ms"]')
    assert cell.locator(".value").inner_text() == "4242"
    assert cell.locator(".source").inner_text() == "topic"
    shot(page, "configs")


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/messages?topic=orders&offset=abc", "offset must be a whole number"),
        ("/messages?topic=orders&offset=-5", "offset must be between 0"),
        ("/messages?topic=orders&offset=99999999999999999999999", "offset must be between 0"),
        ("/messages?topic=orders&timestamp=tomorrow", "neither ms since the epoch nor ISO 8601"),
        ("/messages?topic=nope", "topic 'nope' does not exist"),
        ("/messages?topic=orders&partition=9", "has partitions 0..1, not 9"),
        ("/messages?topic=orders&render=xml", "unknown rendering"),
        ("/keys?topic=users&key=zz&encoding=hex", "is not hex"),
        ("/keys?topic=users&key=%25%00&encoding=base64", "not valid base64"),
        ("/keys?topic=users&partition=abc&key=a", "partition must be a whole number"),
        ("/keys?topic=users&key=" + "k" * 5000, "key is longer than 4096 characters"),
        ("/groups/no-such-group", "consumer group 'no-such-group' does not exist"),
        ("/configs/nope", "topic 'nope' does not exist"),
    ],
)
def test_hostile_input_is_a_message_on_the_page_never_a_500(broker, page, shot, path, message):
    resp = page.goto(url(broker, path))
    assert resp is not None and 400 <= resp.status < 500
    assert message in page.inner_text("#error-message")
    assert "Traceback" not in page.content()
