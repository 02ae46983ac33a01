"""What the console tells a caller about partitions it may not DESCRIBE (issue 26): as
Metadata leaves such topics out, the cleaner's queue a caller sees holds only visible
partitions, and a partition page's queue position counts only those."""

from __future__ import annotations

import re
import time

import httpx
import pytest

from kompakt.broker.acls import AclBinding, AclFilter, Op, PatternType, ResourceType
from kompakt.broker.app import start_test_broker
from kompakt.broker.handlers.acls import AUTHORIZER_KEY
from kompakt.record.encode import build_simple_batch

STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
USERS = {"bob": "bob-pw", "admin": "admin-pw"}
HIDDEN, MINE = "a-hidden", "b-mine"  # the hidden topic first in the log order


@pytest.fixture(scope="module")
def queued(tmp_path_factory):
    """Two compacted topics, both due for cleaning (never cleaned, rolled segments of
    overwritten keys), the cleaner's next pass far away."""
    b = start_test_broker(
        tmp_path_factory.mktemp("console-visibility"),
        **{
            "authorizer.class.name": STANDARD,
            "super.users": "User:admin",
            "kompakt.admin.auth": "basic",
            "kompakt.sasl.bootstrap.users": ",".join(f"{u}:{p}" for u, p in USERS.items()),
            "connection.failed.authentication.delay.ms": "0",
            "log.cleaner.backoff.ms": "600000",
        },
    )
    compact = {"cleanup.policy": "compact", "segment.bytes": "1024"}
    for topic in (HIDDEN, MINE):
        b.logs.create_topic(topic, 1, {**compact, "min.cleanable.dirty.ratio": "0.01"})
        plog = b.logs.get_log(topic, 0)
        now = int(time.time() * 1000)
        for i in range(40):
            plog.append(build_simple_batch([(b"k%d" % (i % 4), b"v" * 100)], timestamp=now))
    az = b.broker.state.extra[AUTHORIZER_KEY]
    az.store.add(
        [
            AclBinding(
                int(ResourceType.TOPIC), MINE, int(PatternType.LITERAL), "User:bob", "*",
                int(Op.DESCRIBE), 3,
            )
        ]
    )  # fmt: skip
    yield b
    az.store.remove([AclFilter(principal="User:bob")])
    b.stop()


def _position(b, user: str) -> str:
    page = httpx.get(
        f"http://127.0.0.1:{b.admin_port}/topics/{MINE}/0",
        auth=(user, USERS[user]),
        headers={"Accept": "text/html"},
        timeout=60,
    )
    assert page.status_code == 200, page.text[:300]
    m = re.search(r"due: position (\d+) in the cleaner", page.text)
    assert m, page.text[:500]
    return m.group(1)


def test_queue_position_counts_only_partitions_the_caller_may_describe(queued):
    """The super user sees both topics due, the hidden one first; bob, who may DESCRIBE
    only his topic, is told it is first: nothing about the hidden partition ahead."""
    assert _position(queued, "admin") == "2"
    assert _position(queued, "bob") == "1"
    url = f"http://127.0.0.1:{queued.admin_port}/console/progress"
    queue = httpx.get(url, auth=("bob", USERS["bob"]), timeout=60).json()["queue"]
    assert [q["topic"] for q in queue] == [MINE]
    queue = httpx.get(url, auth=("admin", USERS["admin"]), timeout=60).json()["queue"]
    assert [q["topic"] for q in queue] == [HIDDEN, MINE]
