"""The admin endpoint over https with HTTP Basic against the SCRAM users (issue 16)."""

from __future__ import annotations

import base64
import json
import logging
import ssl
import urllib.error
import urllib.request

import pytest
from shared_kit import poll_until

from kompakt.broker.app import BrokerThread
from kompakt.broker.config import BrokerConfig
from kompakt.errors import InvalidConfigError


def _request(b, certs, method: str, path: str, user: str | None = None, pw: str = ""):
    url = f"https://127.0.0.1:{b.admin_port}{path}"
    data = json.dumps({"topic": "no-such-topic"}).encode() if method == "POST" else None
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if user is not None:
        token = base64.b64encode(f"{user}:{pw}".encode()).decode()
        req.add_header("Authorization", f"Basic {token}")
    ctx = ssl.create_default_context(cafile=str(certs.ca_pem))
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _failures(b, reason):
    for fam in b.broker.metrics.registry.collect():
        if fam.name == "kompakt_auth_failures":
            for s in fam.samples:
                if s.name.endswith("_total") and s.labels == {
                    "mechanism": "HTTP_BASIC",
                    "reason": reason,
                }:
                    return s.value
    return 0


def test_every_route_get_included_needs_basic_credentials(secure_broker, certs):
    """Issue 26: with kompakt.admin.auth=basic only POST was checked, so /metrics,
    /v1/partitions and the record pages answered anyone. Now every request is
    authenticated as a Kafka connection on a SASL listener is: no request before it."""
    for path in ("/metrics", "/v1/partitions", "/messages?topic=x", "/", "/v1"):
        assert _request(secure_broker, certs, "GET", path) == 401, path
        assert _request(secure_broker, certs, "GET", path, "alice", "alice-scram") in (
            200,
            400,  # /messages of a missing topic: a message on the page
        ), path
    before = _failures(secure_broker, "bad_password")
    assert _request(secure_broker, certs, "POST", "/v1/compact") == 401
    assert _request(secure_broker, certs, "POST", "/v1/compact", "alice", "wrong") == 401
    assert _failures(secure_broker, "bad_password") == before + 1
    assert _request(secure_broker, certs, "POST", "/v1/compact", "nobody", "x") == 401
    # authenticated (no authorizer configured: Kafka allows all): the handler answers
    assert _request(secure_broker, certs, "POST", "/v1/compact", "alice", "alice-scram") == 404


def test_plain_http_to_the_https_admin_port_is_refused_and_counted(secure_broker, certs):
    before = _failures(secure_broker, "ssl_handshake")
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        urllib.request.urlopen(f"http://127.0.0.1:{secure_broker.admin_port}/metrics", timeout=5)
    assert _failures(secure_broker, "ssl_handshake") == before + 1
    assert _request(secure_broker, certs, "GET", "/metrics") == 401  # still serving


@pytest.mark.parametrize(
    "props,fragment",
    [
        ({"kompakt.admin.listener": "http://0.0.0.0:9644"}, "kompakt.admin.auth=none"),
        (
            {"kompakt.admin.listener": "http://0.0.0.0:9644", "kompakt.admin.auth": "basic"},
            "in clear",
        ),
    ],
)
def test_admin_refuses_a_non_loopback_bind_without_auth_unless_allowed(props, fragment):
    with pytest.raises(InvalidConfigError, match=fragment):
        BrokerConfig.from_mapping(props)
    BrokerConfig.from_mapping({**props, "kompakt.admin.allow.insecure": "true"})
    BrokerConfig.from_mapping(
        {
            "kompakt.admin.listener": "https://0.0.0.0:9644",
            "kompakt.admin.auth": "basic",
        }
    )


def test_console_pages_and_actions_need_basic_credentials(secure_broker, certs):
    """The console on the admin listener: its pages ask for credentials as its actions
    do, and with them the read-only console (the default) still refuses a clean."""
    assert _request(secure_broker, certs, "GET", "/") == 401
    assert _request(secure_broker, certs, "GET", "/", "alice", "alice-scram") == 200
    assert _request(secure_broker, certs, "POST", "/console/compact") == 401
    assert _request(secure_broker, certs, "POST", "/console/compact", "alice", "alice-scram") == 403


def test_the_start_lines_name_the_admin_endpoint_https_when_it_serves_tls(tmp_path, certs, caplog):
    """The start line tells a user where to point a browser or curl: an admin listener
    serving TLS is https://, as Kafka's start line prints each listener with its own
    security protocol (it said http:// for an https endpoint)."""
    props = {
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "kompakt.admin.listener": "https://127.0.0.1:0",
        "log.dirs": str(tmp_path / "data"),
        "kompakt.cleaner.engine": "local",
        "ssl.keystore.location": str(certs.server_pem),
    }
    with caplog.at_level(logging.INFO, logger="kompakt.broker"):
        with BrokerThread(BrokerConfig.from_mapping(props)) as b:
            url = f"https://127.0.0.1:{b.admin_port}"
            assert _request(b, certs, "GET", "/metrics") == 200
    [start] = [
        r.getMessage() for r in caplog.records if "kompakt broker listening" in r.getMessage()
    ]
    assert start.endswith(f"admin on {url}"), start
    [admin] = [
        r.getMessage() for r in caplog.records if "admin endpoint listening" in r.getMessage()
    ]
    assert admin.endswith(url), admin
    assert "http://" not in start + admin


# -- browser safety (issue 26) -------------------------------------------------------------


@pytest.fixture(scope="module")
def plain_broker(tmp_path_factory):
    """No auth, console writes on, a name in kompakt.admin.allowed.hosts."""
    from kompakt.broker.app import start_test_broker

    b = start_test_broker(
        tmp_path_factory.mktemp("browser-safety"),
        **{
            "kompakt.admin.console.writes": "true",
            "kompakt.admin.allowed.hosts": "console.example.com",
        },
    )
    b.logs.create_topic("t", 1, {"cleanup.policy": "compact"})
    yield b
    b.stop()


def _raw(b, method: str, path: str, headers: dict[str, str], body: bytes = b""):
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", b.admin_port, timeout=10)
    conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
    for k, v in headers.items():
        conn.putheader(k, v)
    if body or method == "POST":
        conn.putheader("Content-Length", str(len(body)))
    conn.endheaders(body)
    r = conn.getresponse()
    data = r.read()
    conn.close()
    return r.status, dict(r.getheaders()), data


def test_a_host_not_of_this_listener_is_421_dns_rebinding(plain_broker):
    """A page on evil.example whose name an attacker rebinds to 127.0.0.1 calls the
    listener with Host: evil.example; only the listener's names are served."""
    b = plain_broker
    port = b.admin_port
    assert _raw(b, "GET", "/v1/partitions", {"Host": f"evil.example:{port}"})[0] == 421
    assert _raw(b, "GET", "/v1/partitions", {"Host": "evil.example"})[0] == 421
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "console.example.com", "[::1]"):
        assert _raw(b, "GET", "/v1/partitions", {"Host": host})[0] == 200, host


JSON = {"Content-Type": "application/json"}


@pytest.mark.parametrize(
    "headers,status",
    [
        ({"Origin": "http://evil.example", **JSON}, 403),
        ({"Origin": "null", **JSON}, 403),
        ({"Origin": "http://localhost:1", **JSON}, 403),  # another port: another origin
        ({"Referer": "http://evil.example/page", **JSON}, 403),
        ({"Sec-Fetch-Site": "cross-site", **JSON}, 403),
        ({"Sec-Fetch-Site": "same-site", **JSON}, 403),
        ({"Content-Type": "text/plain"}, 415),  # no preflight for text/plain
        ({"Content-Type": "application/x-www-form-urlencoded"}, 415),
        ({"Content-Type": "multipart/form-data; boundary=x"}, 415),
        (JSON, 200),  # curl, the CLI: not a browser
        ({"Origin": "ORIGIN", "Sec-Fetch-Site": "same-origin", **JSON}, 200),
    ],
)
def test_state_changing_requests_from_another_origin_or_not_json_are_refused(
    plain_broker, headers, status
):
    """CSRF: a page of another origin could post text/plain or a form to /v1/compact
    with the admin's browser; Origin, Sec-Fetch-Site and the content type stop it."""
    b = plain_broker
    host = f"127.0.0.1:{b.admin_port}"
    headers = {k: v.replace("ORIGIN", f"http://{host}") for k, v in headers.items()}
    body = json.dumps({"topic": "t", "partition": 0, "dry_run": True}).encode()
    got, _h, data = _raw(b, "POST", "/v1/compact", {"Host": host, **headers}, body)
    assert got == status, data[:300]
    form = b"name=retention.ms&value=1&action=set"
    got, _h, _data = _raw(
        b,
        "POST",
        "/configs/t",
        {"Host": host, **{**headers, "Content-Type": "text/plain"}},
        form,
    )
    assert got in (403, 415)
    assert "retention.ms" not in b.logs.topic_meta("t").overrides


def test_every_answer_carries_the_security_headers(plain_broker):
    b = plain_broker
    host = {"Host": f"127.0.0.1:{b.admin_port}"}
    for path, status in (("/", 200), ("/v1", 200), ("/nope", 404), ("/messages?topic=x", 400)):
        got, headers, _ = _raw(b, "GET", path, {**host, "Accept": "text/html"})
        h = {k.lower(): v for k, v in headers.items()}
        assert got == status
        assert "frame-ancestors 'none'" in h["content-security-policy"]
        assert h["x-content-type-options"] == "nosniff"
        assert h["referrer-policy"] == "same-origin"
    got, headers, _ = _raw(b, "GET", "/", {"Host": "evil.example"})
    assert got == 421 and "content-security-policy" in {k.lower() for k in headers}


def test_a_client_that_never_finishes_its_headers_is_cut_off():
    """uvicorn's keep-alive timer is reset by every byte: one header byte a second held a
    connection for ever. The headers now have a deadline."""
    import socket
    import time

    from kompakt.broker.admin_http import AdminApi, AdminServer

    server = AdminServer(
        AdminApi(lambda: b"", lambda: [], lambda *a: {}), "127.0.0.1", 0, header_timeout_s=0.5
    )
    server.start()
    try:
        s = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        s.sendall(b"GET /v1 HTTP/1.1\r\nHost: localhost\r\n")
        t0 = time.monotonic()

        def trickle_until_closed() -> bool:
            try:
                s.sendall(b"X-Slow: 1\r\n")
            except OSError:
                return True
            s.settimeout(0.2)
            try:
                return s.recv(100) == b""
            except TimeoutError:
                return False

        closed = poll_until(trickle_until_closed, 4, step=0)
        assert closed and time.monotonic() - t0 < 2
        # a client that sends its request in time is served, and again on the same connection
        import http.client

        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        for _ in range(2):
            conn.request("GET", "/v1")
            assert b"endpoints" in conn.getresponse().read()
        conn.close()
    finally:
        server.stop()


def _gated_server(on_failure):
    """An admin server of its own whose Basic check takes the password "right", each
    failure waiting 100 ms more (the failed-login delay), started."""
    from kompakt.broker.admin_http import AdminApi, AdminServer
    from kompakt.broker.http_gate import GateSettings

    gate = GateSettings(
        authenticate=lambda u, p: None if p == "right" else "bad_password",
        on_failure=on_failure,
        failed_delay_ms=100,
    )
    server = AdminServer(
        AdminApi(lambda: b"", lambda: [], lambda *a: {}), "127.0.0.1", 0, gate=gate
    )
    server.start()
    return server


def test_failed_logins_wait_longer_each_time_per_address_and_are_counted():
    """About 110 guesses a second were possible; now each failure from an address doubles
    the wait before its next check (from connection.failed.authentication.delay.ms, Kafka's
    delay for a failed SASL login), a success forgets it, and each failure is counted."""
    import time

    import httpx

    reasons: list[str] = []
    server = _gated_server(reasons.append)
    url = f"http://127.0.0.1:{server.port}/v1"
    try:

        def took(pw: str) -> float:
            t0 = time.monotonic()
            httpx.get(url, auth=("u", pw), timeout=10)
            return time.monotonic() - t0

        throttle = server.app.app.throttle  # ServerTiming(Gate(...)): the gate's
        waits = []
        for _ in range(4):  # the wait each check will get (a loaded machine adds its own)
            waits.append(throttle.delay_s("127.0.0.1"))
            assert took("wrong") >= waits[-1]
        assert waits == [0.0, 0.1, 0.2, 0.4]
        assert reasons == ["bad_password"] * 4
        assert took("right") >= 0.8  # the address still waits, then is forgotten
        assert throttle.delay_s("127.0.0.1") == 0.0
    finally:
        server.stop()


def test_the_peer_is_the_sockets_address_not_an_x_forwarded_for_header():
    """uvicorn takes X-Forwarded-For from loopback peers unless told not to, and the
    address then picked an ACL's host and the failed-login delay's entry: a client on
    127.0.0.1 could pass a host-restricted ACL or dodge the delay by naming another
    address. An admin request's host is its connection's peer, as a Kafka request's
    (RequestContext.clientAddress)."""
    import httpx

    server = _gated_server(lambda _reason: None)
    url = f"http://127.0.0.1:{server.port}/v1"
    try:
        forged = {
            "X-Forwarded-For": "10.0.0.1",
            "X-Real-IP": "10.0.0.2",
            "Forwarded": "for=10.0.0.3",
        }
        httpx.get(url, auth=("u", "wrong"), headers=forged, timeout=10)
        throttle = server.app.app.throttle
        assert throttle.delay_s("127.0.0.1") == 0.1
        for other in ("10.0.0.1", "10.0.0.2", "10.0.0.3"):
            assert throttle.delay_s(other) == 0.0
    finally:
        server.stop()


def test_a_body_too_large_is_413_and_one_too_slow_is_408(plain_broker, monkeypatch):
    """A body past the limit answered 400; one dripped a byte at a time held its
    connection for as long as the client liked (the headers had a timeout, the body
    none). Every body the listener reads comes through one reader with both bounds."""
    import socket
    import time

    from kompakt.broker.console import actions

    b = plain_broker
    host = {"Host": f"127.0.0.1:{b.admin_port}", **JSON}
    status, _h, data = _raw(b, "POST", "/v1/compact", host, b"{" + b" " * (70 << 10) + b"}")
    assert status == 413 and b"at most 65536 bytes" in data
    monkeypatch.setattr(actions, "BODY_TIMEOUT_S", 0.5)
    with socket.create_connection(("127.0.0.1", b.admin_port), timeout=10) as s:
        head = f"POST /v1/compact HTTP/1.1\r\nHost: {host['Host']}\r\n"
        head += "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
        t0 = time.monotonic()
        s.sendall(head.encode())
        answer = s.recv(4096)
        assert answer.startswith(b"HTTP/1.1 408"), answer[:80]
        assert time.monotonic() - t0 < 5
