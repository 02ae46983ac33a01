"""The admin listener's authorization matrix (issue 26): every route of the app ×
{no credentials, wrong password, user without ACLs, user with exactly the needed ACL,
super user} -> the status, and no record byte in any refused answer.

The rules are Kafka's for the operation each route amounts to
(``kompakt.broker.http_gate.RULES``): records are READ on the TOPIC (Fetch), state
DESCRIBE (Metadata, which hides what one may not describe), groups DESCRIBE on the
GROUP (DescribeGroups), configs DESCRIBE_CONFIGS / ALTER_CONFIGS, a clean ALTER on the
TOPIC, /metrics DESCRIBE on the CLUSTER.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

import httpx
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from kompakt.broker.acls import AclBinding, AclFilter, Op, PatternType, ResourceType
from kompakt.broker.app import start_test_broker
from kompakt.broker.console.app import build_app
from kompakt.broker.handlers.acls import AUTHORIZER_KEY
from kompakt.broker.http_gate import RULES, rule_key

STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
SECRET_KEY = b"k-secret-key-31"
SECRET_VALUE = b"RECORD-BYTES-9f2c41"
GROUP_ID = "billing"
USERS = {"alice": "alice-pw", "bob": "bob-pw", "admin": "admin-pw"}  # alice: no ACL


@dataclass
class Route:
    method: str
    path: str  # the Starlette route it exercises
    url: str
    needs: list[tuple[ResourceType, str, Op]]
    ok: int = 200
    body: dict | None = None
    form: dict | None = None
    listing: bool = False  # a list: 200 for anyone, the topic/group hidden without the ACL
    shows: str = "secret"  # what a listing shows with the ACL
    records: bool = False  # the answer with the ACL carries the record's bytes
    extra: dict = field(default_factory=dict)


DRY = {"topic": "secret", "partition": 0, "dry_run": True}
ROUTES = [
    Route("GET", "/metrics", "/metrics", [(CLUSTER, "kafka-cluster", Op.DESCRIBE)]),
    Route("GET", "/v1", "/v1", []),
    Route("GET", "/static", "/static/console.css", []),
    Route(
        "GET", "/v1/partitions", "/v1/partitions", [(TOPIC, "secret", Op.DESCRIBE)], listing=True
    ),
    Route("GET", "/", "/", [(TOPIC, "secret", Op.DESCRIBE)], listing=True),
    Route(
        "GET", "/topics/{topic}/{partition}", "/topics/secret/0", [(TOPIC, "secret", Op.DESCRIBE)]
    ),
    Route(
        "GET",
        "/console/progress",
        "/console/progress?topic=secret&partition=0",
        [(TOPIC, "secret", Op.DESCRIBE)],
    ),
    Route(
        "GET",
        "/messages",
        "/messages?topic=secret&partition=0",
        [(TOPIC, "secret", Op.READ)],
        records=True,
    ),
    Route(
        "GET",
        "/keys",
        f"/keys?topic=secret&partition=0&key={SECRET_KEY.decode()}",
        [(TOPIC, "secret", Op.READ)],
        records=True,
    ),
    Route(
        "GET",
        "/console/dry-run",
        "/console/dry-run?topic=secret&partition=0",
        [(TOPIC, "secret", Op.READ)],
    ),
    Route("POST", "/v1/compact", "/v1/compact", [(TOPIC, "secret", Op.ALTER)], body=DRY),
    Route("POST", "/console/compact", "/console/compact", [(TOPIC, "secret", Op.ALTER)], body=DRY),
    Route(
        "GET", "/groups", "/groups", [(GROUP, GROUP_ID, Op.DESCRIBE)], listing=True, shows=GROUP_ID
    ),
    Route("GET", "/groups/{group:path}", f"/groups/{GROUP_ID}", [(GROUP, GROUP_ID, Op.DESCRIBE)]),
    Route("GET", "/configs", "/configs", [(TOPIC, "secret", Op.DESCRIBE_CONFIGS)], listing=True),
    Route("GET", "/configs/{topic}", "/configs/secret", [(TOPIC, "secret", Op.DESCRIBE_CONFIGS)]),
    Route(
        "POST",
        "/configs/{topic}",
        "/configs/secret",
        [(TOPIC, "secret", Op.ALTER_CONFIGS)],
        ok=303,
        form={"name": "delete.retention.ms", "value": "777", "action": "set"},
    ),
]


def _acl(principal: str, rtype: ResourceType, name: str, op: Op) -> AclBinding:
    return AclBinding(int(rtype), name, int(PatternType.LITERAL), principal, "*", int(op), 3)


@pytest.fixture(scope="module")
def gated(tmp_path_factory):
    """A broker with the authorizer on, Basic on the admin listener, console writes on,
    a topic holding a recognisable record and a group that committed an offset in it."""
    b = start_test_broker(
        tmp_path_factory.mktemp("http-matrix"),
        **{
            "authorizer.class.name": STANDARD,
            "super.users": "User:admin",
            "kompakt.admin.auth": "basic",
            "kompakt.admin.console.writes": "true",
            "kompakt.sasl.bootstrap.users": ",".join(f"{u}:{p}" for u, p in USERS.items()),
            "connection.failed.authentication.delay.ms": "0",  # wrong passwords, fast
            "log.cleaner.backoff.ms": "600000",
        },
    )
    b.logs.create_topic("secret", 1, {"cleanup.policy": "compact"})
    az = b.broker.state.extra[AUTHORIZER_KEY]
    anon = "User:ANONYMOUS"
    setup = [
        _acl(anon, TOPIC, "secret", Op.WRITE),
        _acl(anon, TOPIC, "secret", Op.READ),
        _acl(anon, GROUP, GROUP_ID, Op.READ),
    ]
    az.store.add(setup)
    p = Producer({"bootstrap.servers": b.bootstrap})
    p.produce("secret", SECRET_VALUE, SECRET_KEY, partition=0)
    assert p.flush(10) == 0
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": GROUP_ID})
    c.commit(offsets=[TopicPartition("secret", 0, 1)], asynchronous=False)
    c.close()
    az.store.remove([AclFilter(principal=anon)])
    yield b
    b.stop()


def _send(b, route: Route, auth: tuple[str, str] | None) -> httpx.Response:
    url = f"http://127.0.0.1:{b.admin_port}{route.url}"
    if route.method == "GET":
        return httpx.get(url, auth=auth, timeout=30)
    if route.form is not None:
        form = dict(route.form)
        if auth is not None:  # the token of the configs page, when it can be read
            page = httpx.get(url, auth=auth, headers={"Accept": "text/html"}, timeout=30).text
            m = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
            form["csrf"] = m.group(1) if m else ""
        return httpx.post(url, data=form, auth=auth, timeout=30)
    return httpx.post(url, json=route.body, auth=auth, timeout=30)


def _no_record_bytes(r: httpx.Response) -> None:
    assert SECRET_VALUE not in r.content and SECRET_KEY not in r.content, r.text[:300]


def test_every_route_of_the_app_has_a_rule_and_a_matrix_row():
    """A new route must say which Kafka operation it amounts to (RULES) and be in this
    matrix, as a new Kafka API must have a policy (test_acl_matrix)."""
    app = build_app(None).app.app  # ServerTiming(Gate(Starlette))
    served = set()
    for route in app.routes:
        for method in getattr(route, "methods", None) or {"GET"}:
            if method != "HEAD":
                served.add(rule_key(method, route.path))
    assert served == set(RULES), (served - set(RULES), set(RULES) - served)
    assert {(r.method, r.path) for r in ROUTES} == set(RULES)


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: f"{r.method} {r.path}")
def test_route_matrix(gated, route: Route):
    b = gated
    az = b.broker.state.extra[AUTHORIZER_KEY]
    # no credentials, a wrong password: 401, before anything is read
    for auth in (None, ("bob", "wrong"), ("nobody", "x")):
        r = _send(b, route, auth)
        assert r.status_code == 401, (auth, r.status_code, r.text[:200])
        assert r.headers["www-authenticate"].startswith("Basic ")
        _no_record_bytes(r)
    # a user without ACLs: refused (403), or a listing without the resource
    r = _send(b, route, ("alice", USERS["alice"]))
    _no_record_bytes(r)
    if not route.needs:
        assert r.status_code == route.ok
    elif route.listing:
        assert r.status_code == 200 and route.shows not in r.text, r.text[:300]
    else:
        assert r.status_code == 403, (r.status_code, r.text[:200])
        assert "AUTHORIZATION_FAILED" in r.text and "User:alice" in r.text
    # exactly the needed ACL, then the super user
    grants = [_acl("User:bob", *need) for need in route.needs]
    az.store.add(grants)
    try:
        r = _send(b, route, ("bob", USERS["bob"]))
    finally:
        az.store.remove([AclFilter(principal="User:bob")])
    assert r.status_code == route.ok, (r.status_code, r.text[:300])
    if route.listing:
        assert route.shows in r.text
    if route.records:
        assert SECRET_VALUE in r.content
    r = _send(b, route, ("admin", USERS["admin"]))
    assert r.status_code == route.ok, (r.status_code, r.text[:300])


def test_each_needed_acl_on_another_resource_is_not_enough(gated):
    """An ACL on another topic (or READ where ALTER is needed) opens nothing."""
    b = gated
    az = b.broker.state.extra[AUTHORIZER_KEY]
    az.store.add(
        [_acl("User:bob", TOPIC, "other", Op.ALL), _acl("User:bob", TOPIC, "secret", Op.READ)]
    )
    try:
        auth = ("bob", USERS["bob"])
        url = f"http://127.0.0.1:{b.admin_port}"
        assert httpx.post(f"{url}/v1/compact", json=DRY, auth=auth).status_code == 403
        r = httpx.get(f"{url}/configs/secret", auth=auth)
        assert r.status_code == 403 and SECRET_VALUE not in r.content
    finally:
        az.store.remove([AclFilter(principal="User:bob")])


def test_a_forged_authorization_header_without_auth_is_user_anonymous(tmp_path):
    """With kompakt.admin.auth=none a config edit took its principal from an unchecked
    'Authorization: Basic admin:anything' and acted as the super user. Without auth the
    listener is a PLAINTEXT one: every request is User:ANONYMOUS, whatever it says."""
    b = start_test_broker(
        tmp_path,
        **{
            "authorizer.class.name": STANDARD,
            "super.users": "User:admin",
            "kompakt.admin.console.writes": "true",
        },
    )
    try:
        b.logs.create_topic("secret", 1, {"cleanup.policy": "compact"})
        url = f"http://127.0.0.1:{b.admin_port}/configs/secret"
        forged = {"Authorization": "Basic YWRtaW46YW55dGhpbmc="}  # admin:anything
        form = {"name": "retention.ms", "value": "1", "action": "set"}
        r = httpx.post(url, data=form, headers=forged)
        assert r.status_code == 403 and "User:ANONYMOUS" in r.text, r.text[:300]
        assert "retention.ms" not in b.logs.topic_meta("secret").overrides
        r = httpx.post(
            f"http://127.0.0.1:{b.admin_port}/v1/compact",
            content=json.dumps({"topic": "secret"}),
            headers={**forged, "Content-Type": "application/json"},
        )
        assert r.status_code == 403 and "User:ANONYMOUS" in r.text
    finally:
        b.stop()
