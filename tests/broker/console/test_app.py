"""The admin listener's console over HTTP (httpx): pages, JSON, hostile input, the
read-only default and "compact now" through the cleaner's one ``compact_now``."""

from __future__ import annotations

import httpx
import pytest

from kompakt.broker.console.history import History, Sample

HTML = {"Accept": "text/html"}


def get(url: str, path: str, **kw) -> httpx.Response:
    return httpx.get(url + path, timeout=60, **kw)


def segment_files(broker, name: str) -> list[str]:
    return sorted(p.name for p in (broker.logs.dir / name).iterdir())


def test_endpoint_list_stays_reachable_as_json(console_url):
    for resp in (
        get(console_url, "/v1"),
        get(console_url, "/", headers={"Accept": "application/json"}),
    ):
        assert resp.status_code == 200
        paths = {e["path"] for e in resp.json()["endpoints"]}
        assert {"/metrics", "/v1/partitions", "/v1/compact", "/"} <= paths


def test_old_json_api_is_unchanged(console_url):
    rows = get(console_url, "/v1/partitions").json()["partitions"]
    users0 = next(r for r in rows if (r["topic"], r["partition"]) == ("users", 0))
    assert users0["cleanup_policy"] == "compact" and users0["tombstones_pending"] > 0
    metrics = get(console_url, "/metrics")
    assert metrics.headers["content-type"].startswith("text/plain; version=0.0.4")
    # an unknown API path is still a JSON 404
    missing = get(console_url, "/v1/nope")
    assert missing.status_code == 404 and "no such endpoint" in missing.json()["error"]


def test_overview_lists_topics_with_compaction_columns_and_the_cleaner(console_url):
    page = get(console_url, "/", headers=HTML)
    assert page.status_code == 200
    text = page.text
    for needle in (
        "users",
        "slow",
        "events",
        "cleanup.policy",
        "dirty ratio",
        "tombstones pending",
        "uncleanable",
        "Log cleaner",
        "backoff",
        "log.cleaner.backoff.ms",
        "Queue",
    ):
        assert needle in text, needle
    for nav in ("/keys", "/messages", "/groups", "/configs"):
        assert f'href="{nav}"' in text


def test_partition_page_shows_segments_and_why_min_lag_holds_the_log(console_url):
    """Kafka's cleanableOffsets: a segment with a record younger than
    min.compaction.lag.ms bounds the cleanable range, and the page names that bound."""
    page = get(console_url, "/topics/slow/0", headers=HTML).text
    assert 'class="seg active"' in page and 'class="seg held"' in page
    assert 'id="uncleanable-why">min.compaction.lag.ms<' in page
    assert "nothing to clean" in page


def test_partition_page_of_a_dirty_log_shows_the_dirty_tail_and_active_segment(console_url):
    page = get(console_url, "/topics/users/1", headers=HTML).text
    assert 'class="seg dirty"' in page and 'class="seg active"' in page
    assert 'id="uncleanable-why">active segment<' in page
    # never cleaned: its dirty ratio is 1.0, above min.cleanable.dirty.ratio=0.99, so it
    # waits in the queue for the next pass (ten minutes away in this broker)
    assert "due: position" in page
    assert "<svg" in page and "Compact now" in page


HOSTILE_PAGES = [
    ("/topics/users/abc", 400, "partition must be an integer"),
    ("/topics/users/-1", 400, "at least 0"),
    ("/topics/users/99999999999999999999999", 400, "integer"),
    ("/topics/users/7", 404, "users"),
    ("/topics/no-such-topic/0", 404, "no-such-topic"),
    ("/topics/..%2F..%2Fetc/0", 404, ""),
    ("/topics/%3Cscript%3E/0", 404, "&lt;script&gt;"),
    ("/no/such/page", 404, "no such endpoint"),
]


@pytest.mark.parametrize("path,status,fragment", HOSTILE_PAGES)
def test_hostile_page_input_gets_a_message_never_a_500(console_url, path, status, fragment):
    resp = get(console_url, path, headers=HTML)
    assert resp.status_code == status
    assert 'id="error-message"' in resp.text and fragment in resp.text
    assert "Traceback" not in resp.text and "<script>" not in resp.text


@pytest.mark.parametrize(
    "query",
    ["topic=users&partition=abc", "topic=users&partition=-5", "topic=users", "partition=0"],
)
def test_hostile_dry_run_query_is_a_json_400_or_404(console_url, query):
    resp = get(console_url, f"/console/dry-run?{query}")
    assert resp.status_code in (400, 404) and isinstance(resp.json()["error"], str)


def test_dry_run_previews_and_changes_nothing(console_broker, console_url):
    before = segment_files(console_broker, "users-1")
    doc = get(console_url, "/console/dry-run?topic=users&partition=1").json()
    assert doc["dry_run"] is True and doc["results"][0]["status"] == "dry-run"
    stats = doc["results"][0]["stats"]
    assert stats["records_read"] > stats["records_written"] and stats["tombstones_removed"] == 0
    assert doc["summary"].startswith("This clean would remove ")
    assert segment_files(console_broker, "users-1") == before


def test_compact_now_goes_through_compact_now_and_lands_in_the_history(console_broker, console_url):
    resp = httpx.post(
        console_url + "/console/compact", json={"topic": "users", "partition": 1}, timeout=120
    )
    assert resp.status_code == 200, resp.text
    doc = resp.json()
    assert doc["results"][0]["status"] == "cleaned" and doc["summary"].startswith("Cleaned users-1")
    cleans = console_broker.broker.history.cleans(("users", 1))
    assert cleans and cleans[-1]["records_written"] < cleans[-1]["records_read"]
    before, after = console_broker.broker.history.samples(("users", 1))[-2:]
    assert before.ms == cleans[-1]["started_ms"] and after.size_bytes < before.size_bytes
    page = get(console_url, "/topics/users/1", headers=HTML).text
    assert 'class="clean-row"' in page and 'class="seg clean"' in page
    rows = get(console_url, "/v1/partitions").json()["partitions"]
    users1 = next(r for r in rows if (r["topic"], r["partition"]) == ("users", 1))
    assert users1["last_compaction"]["records_read"] == cleans[-1]["records_read"]


@pytest.mark.parametrize(
    "body,status",
    [
        (b"{", 400),
        (b'{"topic": "users", "partition": "0"}', 400),
        (b'{"topic": "users", "partition": -1}', 400),
        (b'{"topic": "nope"}', 404),
        (b'{"topic": "events"}', 409),  # not compacted: NotCompactedError
        (b"[" * 20_000 + b"]" * 20_000, 400),
    ],
)
def test_console_compact_bad_input_is_a_json_4xx(console_url, body, status):
    resp = httpx.post(
        console_url + "/console/compact",
        content=body,
        headers={"Content-Type": "application/json"},
        timeout=60,
    )
    assert resp.status_code == status and isinstance(resp.json()["error"], str)


def test_console_is_read_only_by_default(readonly_broker):
    """kompakt.admin.console.writes defaults to false: the console refuses to compact
    (403, nothing changed) and still offers the dry run."""
    b = readonly_broker
    url = f"http://127.0.0.1:{b.admin_port}"
    before = segment_files(b, "users-0")
    resp = httpx.post(url + "/console/compact", json={"topic": "users", "partition": 0})
    assert resp.status_code == 403 and "read-only" in resp.json()["error"]
    assert segment_files(b, "users-0") == before
    page = get(url, "/topics/users/0", headers=HTML).text
    assert 'id="compact-now" disabled' in page and "read-only" in page
    dry = get(url, "/console/dry-run?topic=users&partition=0").json()
    assert dry["results"][0]["status"] == "dry-run"
    assert segment_files(b, "users-0") == before


def test_history_is_bounded_per_partition():
    """The bound the README states: the last 256 samples and 64 cleans per partition."""
    h = History()
    for i in range(1000):
        h.add_sample(("t", 0), Sample(i, i, 0.5))
        h.add_clean(("t", 0), {"n": i})
    assert len(h.samples(("t", 0))) == 256 and h.samples(("t", 0))[0].ms == 1000 - 256
    assert len(h.cleans(("t", 0))) == 64 and h.cleans(("t", 0))[-1] == {"n": 999}
    h.keep_only([])
    assert h.samples(("t", 0)) == [] and h.cleans(("t", 0)) == []


def test_every_response_says_its_server_time(console_url):
    """``Server-Timing`` (W3C) is what benchmarks/bench_console.py reports."""
    for path in ("/", "/v1/partitions", "/topics/users/0", "/no/such/page"):
        timing = get(console_url, path, headers=HTML).headers["server-timing"]
        assert timing.startswith("app;dur=") and float(timing.split("=")[1]) >= 0


@pytest.mark.parametrize(
    "key, partition, how",
    [
        ("user-03", 1, "where Kafka's default partitioner (murmur2"),
        ("user-01", 1, "found by reading every partition"),  # produced to partition 1
    ],
)
def test_key_inspector_without_a_partition_finds_the_key_and_says_where(
    console_url, key, partition, how
):
    """No partition typed: the partition Kafka's default partitioner picks
    (toPositive(murmur2(key)) % partitions) first, then every other one; the page says
    which partition answered (user-01 is in partition 1, not the form's old default 0)."""
    from html import unescape

    page = get(console_url, f"/keys?topic=users&key={key}", headers=HTML)
    text = unescape(page.text)
    assert page.status_code == 200
    assert "No record of this key" not in text
    assert f"users-{partition}</a>" in text and how in text
    missing = unescape(get(console_url, "/keys?topic=users&key=nobody", headers=HTML).text)
    assert "No partition of users holds this key (all 2 read" in missing
    asked = get(console_url, f"/keys?topic=users&partition=0&key={key}", headers=HTML).text
    assert "Partition 0, as asked." in asked and "No record of this key" in asked


def test_one_key_inspection_at_a_time_and_a_waiting_one_is_refused(console_url, monkeypatch):
    """A dry run holds up to its expansion budget a few times over and the pages run on a
    pool of threads, so a second inspection waits for the first, then is refused with
    503 (the service is busy, not the request wrong), and the next one runs."""
    from kompakt.broker.console import key_find

    monkeypatch.setattr(key_find, "WAIT_S", 0.2)
    assert key_find._RUNNING.acquire(timeout=5)  # an inspection running
    try:
        busy = get(console_url, "/keys?topic=users&key=user-01", headers=HTML)
    finally:
        key_find._RUNNING.release()
    assert busy.status_code == 503 and "another key inspection has been running" in busy.text
    assert get(console_url, "/keys?topic=users&key=user-01", headers=HTML).status_code == 200


def test_a_group_id_with_slashes_links_to_its_own_page(console_broker, console_url):
    """Group ids may hold ``/`` and ``..`` (Kafka checks only that one is not empty);
    the groups page linked ``/groups/../../etc/x``, which a browser resolves to
    ``/etc/x``. The link is one encoded path segment, and it leads to the group."""
    import re
    from html import unescape

    from raw_kafka import API, call

    group = "../../etc/x"
    body = {
        "group_id": group,
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "group_instance_id": None,
        "topics": [
            {
                "name": "users",
                "partitions": [
                    {
                        "partition_index": 0,
                        "committed_offset": 1,
                        "committed_leader_epoch": -1,
                        "committed_metadata": "",
                    }
                ],
            }
        ],
    }
    r = call(console_broker.port, API.offset_commit, 8, body)
    assert r.topics[0].partitions[0].error_code == 0
    page = get(console_url, "/groups", headers=HTML).text
    [href] = re.findall(r'href="(/groups/[^"]*etc[^"]*)"', page)
    assert href == "/groups/..%2F..%2Fetc%2Fx"
    one = get(console_url, href, headers=HTML)
    assert one.status_code == 200 and group in unescape(one.text)
