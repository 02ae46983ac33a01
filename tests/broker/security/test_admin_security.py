"""The admin endpoint over https with HTTP Basic against the SCRAM users (issue 16)."""

from __future__ import annotations

import base64
import json
import logging
import ssl
import urllib.error
import urllib.request

import pytest

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
