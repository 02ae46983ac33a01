"""The partition page's remote tier section on a real broker with the file:// tier:
every offset of a tiered partition in one row, ``remote`` (only in the tier), ``both``
(tiered, still local until ``local.retention.*`` removes it, Kafka's
``localLogStartOffset``), ``local`` (not tiered yet) or ``active``; the manifest's
generation, remote log start and clean point; and the page is DESCRIBE on the TOPIC
(Kafka's Metadata rule), 403 without it."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
from shared_kit import wait_for

from kompakt.broker.acls import AclBinding, Op, PatternType, ResourceType
from kompakt.broker.handlers.acls import AUTHORIZER_KEY
from kompakt.broker.tiering import tiering_of
from kompakt.remote.layout import SEGMENTS
from tests.broker.test_tiered import TIERED, produce, start, tiered_down
from tests.remote.broker_kit import create_topic, tiered_broker

ROW = re.compile(r'<tr class="tier-row [a-z]+" data-where="([a-z]+)" data-base="(\d+)">')


def page(admin_port: int, topic: str, auth: tuple[str, str] | None = None) -> httpx.Response:
    return httpx.get(f"http://127.0.0.1:{admin_port}/topics/{topic}/0", auth=auth, timeout=30)


def rows(html: str) -> list[tuple[str, int]]:
    return [(where, int(base)) for where, base in ROW.findall(html)]


def bold(html: str, element_id: str) -> str:
    m = re.search(rf'<b id="{element_id}">([^<]*)</b>', html)
    assert m is not None, element_id
    return m.group(1)


def test_partition_page_shows_remote_both_and_local_segments(tmp_path: Path) -> None:
    """After tiering and local retention: the oldest segments only remote, the newest
    tiered ones both, the active one local; the rows follow the manifest and the log."""
    b = start(tmp_path / "data")
    try:
        create_topic(b, "tiered", TIERED)
        produce(b.bootstrap, ["tiered"])
        local_start = tiered_down(b, "tiered")
        plog = b.logs.get_log("tiered", 0)
        m = tiering_of(b.broker.state).manifest(plog)
        assert m is not None
        r = page(b.admin_port, "tiered")
        assert r.status_code == 200
        found = rows(r.text)
        remote = [base for where, base in found if where == "remote"]
        both = [base for where, base in found if where == "both"]
        assert remote and both, found
        assert remote + both == [s.base_offset for s in m.segments]
        assert all(s.last_offset < local_start for s in m.segments[: len(remote)])
        assert both[0] <= local_start
        assert found[-1] == ("active", plog.active_segment.base_offset)
        assert [w for w, _ in found].count("local") == 0  # everything rolled is tiered
        assert int(bold(r.text, "tier-generation")) == m.generation
        assert int(bold(r.text, "tier-log-start")) == m.log_start_offset == 0
        assert int(bold(r.text, "tier-clean-point")) == m.clean_point
        assert int(bold(r.text, "tier-local-start")) == local_start
        assert bold(r.text, "tier-lag-segments") == "0"
        assert '<p id="remote-cleans">none yet</p>' in r.text
        # an untiered topic's page has no remote section
        create_topic(b, "plain", {"cleanup.policy": "compact"})
        assert 'id="remote-tier"' not in page(b.admin_port, "plain").text
    finally:
        b.stop()


def test_segments_the_tier_did_not_take_are_local(tmp_path: Path) -> None:
    """Uploads failing (the partition's segments folder is a file): every rolled segment
    is a local row and counted as waiting to be tiered, nothing remote."""
    remote = tmp_path / "remote"
    (remote / "topics" / "t" / "0").mkdir(parents=True)
    (remote / "topics" / "t" / "0" / SEGMENTS).write_bytes(b"not a folder")
    b = start(tmp_path / "data", **{"kompakt.remote.storage.url": remote.as_uri()})
    try:
        create_topic(b, "t", TIERED)
        produce(b.bootstrap, ["t"], 300)
        plog = b.logs.get_log("t", 0)
        task = next(t for t in b.broker.background.threads if "remote" in t.name)
        runs = task.runs
        wait_for(lambda: task.runs >= runs + 2, "two more passes of the task")
        html = page(b.admin_port, "t").text
        rolled = plog.segments_snapshot()[:-1]
        assert rows(html) == [("local", s.base_offset) for s in rolled] + [
            ("active", plog.active_segment.base_offset)
        ]
        assert "nothing tiered yet" in html
        assert int(bold(html, "tier-lag-segments")) == len(rolled) > 0
    finally:
        b.stop()


def test_partition_page_of_a_tiered_topic_needs_describe(tmp_path: Path) -> None:
    """Kafka's Metadata rule on the admin listener: without DESCRIBE on the TOPIC the
    page is 403 and says nothing of the tier; with exactly that ACL it shows the tier."""
    users = {"alice": "alice-pw", "bob": "bob-pw"}
    b = tiered_broker(
        tmp_path / "data",
        **{
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "kompakt.admin.auth": "basic",
            "kompakt.sasl.bootstrap.users": ",".join(f"{u}:{p}" for u, p in users.items()),
            "connection.failed.authentication.delay.ms": "0",
        },
    )
    try:
        b.logs.create_topic("secret", 1, TIERED)
        az = b.broker.state.extra[AUTHORIZER_KEY]
        az.store.add(
            [
                AclBinding(
                    int(ResourceType.TOPIC),
                    "secret",
                    int(PatternType.LITERAL),
                    "User:bob",
                    "*",
                    int(Op.DESCRIBE),
                    3,
                )
            ]
        )
        r = page(b.admin_port, "secret", ("alice", users["alice"]))
        assert r.status_code == 403 and "AUTHORIZATION_FAILED" in r.text
        assert "remote-tier" not in r.text and "file://" not in r.text
        r = page(b.admin_port, "secret", ("bob", users["bob"]))
        assert r.status_code == 200 and 'id="remote-tier"' in r.text
        assert [w for w, _ in rows(r.text)] == ["active"]
    finally:
        b.stop()


def test_after_a_remote_clean_the_page_shows_the_clean_point_and_its_history(
    tmp_path: Path,
) -> None:
    """The manifest's clean point after a clean of the remote range, and the remote
    clean in the history table: engine, segments and bytes before and after, and the
    clean point it committed."""
    b = start(tmp_path / "data", **{"log.cleaner.enable": "true"})
    try:
        create_topic(b, "tiered", {**TIERED, "min.cleanable.dirty.ratio": "0.01"})
        produce(b.bootstrap, ["tiered"])
        plog = b.logs.get_log("tiered", 0)
        tiering = tiering_of(b.broker.state)

        def cleaned() -> bool:
            m = tiering.manifest(plog)
            return m is not None and m.clean_point > 0

        wait_for(cleaned, "a clean of the remote range")
        html = page(b.admin_port, "tiered").text
        point = int(bold(html, "tier-clean-point"))
        assert point > 0
        assert "none yet" not in html
        history = tiering.remote_cleaner.history("tiered", 0)
        assert history and history[0].engine == "local"
        assert history[0].replaced_segments >= history[0].cleaned_segments >= 1
        # not "fewer bytes after": a clean that finds no duplicate yet (the producer still
        # writing) drops nothing, and stamping its tombstones' delete horizon (KIP-534:
        # baseTimestamp = now + delete.retention.ms) lengthens their batches' deltas
        assert history[0].replaced_bytes > 0 and history[0].cleaned_bytes > 0
        cells = re.findall(r'<tr class="remote-clean">(.*?)</tr>', html, re.S)
        assert cells
        first = re.findall(r"<td[^>]*>([^<]*)</td>", cells[0])
        assert first[1] == "local" and "→" in first[3] and "→" in first[4]
        committed = [c.clean_point for c in tiering.remote_cleaner.history("tiered", 0)]
        assert int(first[5]) in committed and point in committed
    finally:
        b.stop()


def test_an_unreadable_manifest_is_said_and_the_local_segments_still_shown(
    tmp_path: Path,
) -> None:
    """A manifest that does not parse: the page says why in one line (not a 500) and
    lists the local segments."""
    remote = tmp_path / "remote"
    (remote / "topics" / "t" / "0").mkdir(parents=True)
    (remote / "topics" / "t" / "0" / "manifest.json").write_bytes(b"{not json")
    b = start(tmp_path / "data", **{"kompakt.remote.storage.url": remote.as_uri()})
    try:
        create_topic(b, "t", TIERED)
        produce(b.bootstrap, ["t"], 100)
        r = page(b.admin_port, "t")
        assert r.status_code == 200
        m = re.search(r'<p class="error" id="tier-error">([^<]*)</p>', r.text)
        assert m is not None and "manifest" in m.group(1), r.text[:500]
        plog = b.logs.get_log("t", 0)
        assert rows(r.text)[-1] == ("active", plog.active_segment.base_offset)
        assert {w for w, _ in rows(r.text)} <= {"local", "active"}
    finally:
        b.stop()
