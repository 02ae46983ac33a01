"""TLS and SASL listeners with real clients (Kafka's SslTransportLayer and
SaslServerAuthenticator rules), on one broker for the module (see conftest); the failed
authentication delay on a broker of its own."""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
import subprocess
import time
import uuid
import warnings

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from kio.schema.errors import ErrorCode
from raw_kafka import API, decode_response, encode_request
from shared_kit import wait_for

from kompakt.broker.app import BrokerThread
from kompakt.broker.config import BrokerConfig
from kompakt.broker.security.scram_store import SCRAM_FILE
from kompakt.errors import InvalidConfigError

PLAIN_USERS = {"alice": "alice-secret"}
SCRAM_PASSWORD = "alice-scram"


def _topic() -> str:
    return f"sec-{uuid.uuid4().hex[:10]}"


def _client_conf(b, certs, listener: str, mechanism: str | None, password: str | None = None):
    conf = {"bootstrap.servers": f"127.0.0.1:{b.ports[listener]}"}
    if listener in ("SSL", "SASL_SSL"):
        conf["ssl.ca.location"] = str(certs.ca_pem)
    proto = {"SCRAMONLY": "SASL_PLAINTEXT"}.get(listener, listener)
    conf["security.protocol"] = proto
    if mechanism is not None:
        default = PLAIN_USERS["alice"] if mechanism == "PLAIN" else SCRAM_PASSWORD
        conf.update(
            {
                "sasl.mechanism": mechanism,
                "sasl.username": "alice",
                "sasl.password": password or default,
            }
        )
    return conf


def _produce_consume(conf: dict) -> list[bytes]:
    topic = _topic()
    p = Producer({**conf, "linger.ms": 0})
    for i in range(3):
        p.produce(topic, f"v{i}".encode(), key=b"k%d" % i)
    assert p.flush(20) == 0
    c = Consumer({**conf, "group.id": topic, "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got: list[bytes] = []
    try:

        def three() -> bool:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
            return len(got) == 3

        wait_for(three, "three records back", 30)
    finally:
        c.close()
    return got


def _failures(b) -> dict[tuple[str, str], float]:
    out = {}
    for fam in b.broker.metrics.registry.collect():
        if fam.name == "kompakt_auth_failures":
            for s in fam.samples:
                if s.name.endswith("_total"):
                    out[(s.labels["mechanism"], s.labels["reason"])] = s.value
    return out


@pytest.mark.parametrize(
    "listener,mechanism",
    [
        ("SSL", None),
        ("SASL_PLAINTEXT", "PLAIN"),
        ("SASL_PLAINTEXT", "SCRAM-SHA-256"),
        ("SASL_SSL", "SCRAM-SHA-512"),
        ("SASL_SSL", "PLAIN"),
        ("SCRAMONLY", "SCRAM-SHA-256"),
    ],
)
def test_confluent_kafka_produces_and_consumes_over_each_protocol(
    secure_broker, certs, listener, mechanism
):
    got = _produce_consume(_client_conf(secure_broker, certs, listener, mechanism))
    assert got == [b"v0", b"v1", b"v2"]


def test_metadata_advertises_the_listener_the_client_came_in_on(secure_broker, certs):
    """Kafka answers Metadata with the endpoint of the request's listener, so a client
    bootstrapped on SASL_SSL keeps talking SASL_SSL."""
    from confluent_kafka.admin import AdminClient

    for listener, mech in (("PLAINTEXT", None), ("SASL_SSL", "PLAIN")):
        conf = _client_conf(secure_broker, certs, listener, mech)
        md = AdminClient(conf).list_topics(timeout=10)
        (broker,) = md.brokers.values()
        assert broker.port == secure_broker.ports[listener]


def test_kafka_python_over_sasl_ssl_scram_and_sasl_plaintext_plain(secure_broker, certs):
    from kafka import KafkaConsumer, KafkaProducer

    for listener, mech, password in (
        ("SASL_SSL", "SCRAM-SHA-256", SCRAM_PASSWORD),
        ("SASL_PLAINTEXT", "PLAIN", PLAIN_USERS["alice"]),
    ):
        topic = _topic()
        common = {
            "bootstrap_servers": f"127.0.0.1:{secure_broker.ports[listener]}",
            "security_protocol": listener,
            "sasl_mechanism": mech,
            "sasl_plain_username": "alice",
            "sasl_plain_password": password,
        }
        if listener == "SASL_SSL":
            common["ssl_cafile"] = str(certs.ca_pem)
        p = KafkaProducer(**common)
        p.send(topic, b"hello").get(timeout=20)
        p.close()
        c = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=10000, **common)
        assert next(iter(c)).value == b"hello"  # the first record, not a wait for the timeout
        c.close()


def test_aiokafka_over_sasl_ssl_scram_sha_512(secure_broker, certs):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    async def run() -> list[bytes]:
        topic = _topic()
        common = {
            "bootstrap_servers": f"127.0.0.1:{secure_broker.ports['SASL_SSL']}",
            "security_protocol": "SASL_SSL",
            "ssl_context": create_ssl_context(cafile=str(certs.ca_pem)),
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_plain_username": "alice",
            "sasl_plain_password": SCRAM_PASSWORD,
        }
        p = AIOKafkaProducer(**common)
        await p.start()
        try:
            await p.send_and_wait(topic, b"async")
        finally:
            await p.stop()
        c = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **common)
        await c.start()
        try:
            m = await asyncio.wait_for(c.getone(), 20)
            return [m.value]
        finally:
            await c.stop()

    assert asyncio.run(run()) == [b"async"]


def test_kcat_over_sasl_ssl_plain(secure_broker, certs):
    """PLAIN, not SCRAM: the system kcat links librdkafka 2.0.2, whose SCRAM client-final
    repeats the client nonce (fixed in librdkafka 2.6.1, confluentinc/librdkafka#4895);
    kompakt checks the nonce strictly as Kafka 4 does since CVE-2024-56128, so that kcat's
    SCRAM is refused by Kafka 4 and by kompakt alike. confluent-kafka (librdkafka 2.12)
    covers SCRAM above."""
    topic = _topic()
    base = [
        "kcat",
        "-b",
        f"127.0.0.1:{secure_broker.ports['SASL_SSL']}",
        "-X",
        "security.protocol=SASL_SSL",
        "-X",
        f"ssl.ca.location={certs.ca_pem}",
        "-X",
        "sasl.mechanisms=PLAIN",
        "-X",
        "sasl.username=alice",
        "-X",
        f"sasl.password={PLAIN_USERS['alice']}",
    ]
    subprocess.run([*base, "-P", "-t", topic], input=b"from-kcat\n", check=True, timeout=60)
    out = subprocess.run(
        [*base, "-C", "-t", topic, "-o", "beginning", "-c", "1", "-e"],
        capture_output=True,
        check=True,
        timeout=60,
    )
    assert out.stdout.strip() == b"from-kcat"


# -- raw protocol: principals and the pre-authentication rules ----------------------------------
def _recv(s: socket.socket) -> bytes | None:
    head = b""
    while len(head) < 4:
        chunk = s.recv(4 - len(head))
        if not chunk:
            return None
        head += chunk
    (n,) = struct.unpack(">i", head)
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _call(s, api_key, version, body):
    s.sendall(encode_request(api_key, version, body))
    frame = _recv(s)
    assert frame is not None, "connection closed instead of an answer"
    return decode_response(api_key, version, frame)[1]


def _closed(s) -> bool:
    s.settimeout(10)
    try:
        return s.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError, ssl.SSLError):
        return True


def _connect(b, listener, tls_ctx=None):
    s = socket.create_connection(("127.0.0.1", b.ports[listener]), timeout=10)
    if tls_ctx is not None:
        s = tls_ctx.wrap_socket(s, server_hostname="127.0.0.1")
    return s


def _api_versions(s):
    return _call(
        s, API.api_versions, 3, {"client_software_name": "raw", "client_software_version": "1"}
    )


def _principals(b, listener) -> list[str]:
    return [c.principal for c in b.broker.server._conns.values() if c.spec.name == listener]


def _tls(certs, cert_pem=None, key=None):
    ctx = ssl.create_default_context(cafile=str(certs.ca_pem))
    if cert_pem is not None:
        ctx.load_cert_chain(str(cert_pem), str(key) if key else None)
    return ctx


def test_mtls_principal_is_the_subject_dn_through_ssl_principal_mapping_rules(secure_broker, certs):
    """Kafka's SslPrincipalMapper: RULE:^CN=([^,]+),OU=eng,.*$/$1/L turns
    CN=Alice,OU=eng,O=... into User:alice; without a certificate (ssl.client.auth=requested)
    the principal is User:ANONYMOUS."""
    with _connect(secure_broker, "SSL", _tls(certs, certs.client_cert, certs.client_key)) as s:
        assert _api_versions(s).error_code == ErrorCode.none
        assert "User:alice" in _principals(secure_broker, "SSL")
    with _connect(secure_broker, "SSL", _tls(certs)) as s:
        assert _api_versions(s).error_code == ErrorCode.none
        assert "User:ANONYMOUS" in _principals(secure_broker, "SSL")


def test_required_client_auth_refuses_a_client_without_certificate(secure_broker, certs):
    """ssl.client.auth=required (listener.name.mtls.ssl.client.auth): no certificate, no
    connection; with one, the mapped principal."""
    before = _failures(secure_broker).get(("SSL", "ssl_handshake"), 0)
    with pytest.raises((ssl.SSLError, ConnectionError, AssertionError)):
        with _connect(secure_broker, "MTLS", _tls(certs)) as s:
            _api_versions(s)  # TLS 1.3: the refusal arrives on the first read
    wait_for(lambda: _failures(secure_broker).get(("SSL", "ssl_handshake"), 0) == before + 1)
    with _connect(secure_broker, "MTLS", _tls(certs, certs.client_cert, certs.client_key)) as s:
        assert _api_versions(s).error_code == ErrorCode.none
        assert "User:alice" in _principals(secure_broker, "MTLS")


def test_sasl_principal_is_the_authenticated_user(secure_broker):
    with _connect(secure_broker, "SASL_PLAINTEXT") as s:
        hs = _call(s, API.sasl_handshake, 1, {"mechanism": "PLAIN"})
        assert hs.error_code == ErrorCode.none
        assert set(hs.mechanisms) == {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
        auth = _call(s, API.sasl_authenticate, 2, {"auth_bytes": b"\0alice\0alice-secret"})
        assert auth.error_code == ErrorCode.none
        assert "User:alice" in _principals(secure_broker, "SASL_PLAINTEXT")
        # KafkaApis after authentication: a second handshake is ILLEGAL_SASL_STATE
        again = _call(s, API.sasl_handshake, 1, {"mechanism": "PLAIN"})
        assert again.error_code == ErrorCode.illegal_sasl_state


def _plain_attempt(b, token: bytes):
    with _connect(b, "SASL_PLAINTEXT") as s:
        assert _call(s, API.sasl_handshake, 1, {"mechanism": "PLAIN"}).error_code == 0
        auth = _call(s, API.sasl_authenticate, 2, {"auth_bytes": token})
        return auth, _closed(s)


@pytest.mark.parametrize(
    "token,reason",
    [(b"\0alice\0wrong", "bad_password"), (b"\0nobody\0alice-secret", "unknown_user")],
)
def test_wrong_password_or_unknown_user_is_sasl_authentication_failed_and_counted(
    secure_broker, token, reason
):
    before = _failures(secure_broker).get(("PLAIN", reason), 0)
    auth, closed = _plain_attempt(secure_broker, token)
    assert auth.error_code == ErrorCode.sasl_authentication_failed
    assert auth.error_message == "Authentication failed: Invalid username or password"
    assert closed
    assert _failures(secure_broker)[("PLAIN", reason)] == before + 1
    assert _api_versions(_connect(secure_broker, "PLAINTEXT")).error_code == 0  # still up


def test_scram_wrong_password_fails_with_kafkas_message(secure_broker, certs):
    conf = _client_conf(secure_broker, certs, "SASL_PLAINTEXT", "SCRAM-SHA-256", "nope")
    p = Producer({**conf, "message.timeout.ms": 3000})
    errors = []
    p.produce(_topic(), b"x", on_delivery=lambda e, m: errors.append(e))
    p.flush(10)
    assert errors and errors[0] is not None
    wait_for(lambda: _failures(secure_broker).get(("SCRAM-SHA-256", "bad_password"), 0) >= 1)


def test_plain_offered_when_only_scram_enabled_is_unsupported_sasl_mechanism(secure_broker):
    with _connect(secure_broker, "SCRAMONLY") as s:
        hs = _call(s, API.sasl_handshake, 1, {"mechanism": "PLAIN"})
        assert hs.error_code == ErrorCode.unsupported_sasl_mechanism
        assert list(hs.mechanisms) == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
        assert _closed(s)
    assert _failures(secure_broker)[("-", "unsupported_mechanism")] >= 1


def test_request_before_authentication_closes_the_connection(secure_broker):
    """Kafka's SaslServerAuthenticator: only ApiVersions and the SASL requests before
    authentication; anything else is an InvalidRequestException, the channel closed."""
    with _connect(secure_broker, "SASL_PLAINTEXT") as s:
        assert _api_versions(s).error_code == ErrorCode.none  # allowed
        s.sendall(encode_request(API.metadata, 12, {"topics": None}))
        assert _recv(s) is None
    assert _failures(secure_broker)[("-", "request_before_authentication")] >= 1


def test_sasl_authenticate_before_handshake_is_illegal_sasl_state(secure_broker):
    with _connect(secure_broker, "SASL_PLAINTEXT") as s:
        auth = _call(s, API.sasl_authenticate, 2, {"auth_bytes": b"\0alice\0alice-secret"})
        assert auth.error_code == ErrorCode.illegal_sasl_state
        assert _closed(s)


def test_ten_mib_sasl_authenticate_frame_closes_the_connection(secure_broker):
    """sasl.server.max.receive.size (524288) bounds every frame before authentication."""
    before = _failures(secure_broker).get(("PLAIN", "bad_frame"), 0)
    with _connect(secure_broker, "SASL_PLAINTEXT") as s:
        assert _call(s, API.sasl_handshake, 1, {"mechanism": "PLAIN"}).error_code == 0
        s.sendall(struct.pack(">i", 10 * 1024 * 1024) + b"\0" * 1024)
        assert _closed(s)
    assert _failures(secure_broker)[("PLAIN", "bad_frame")] == before + 1
    assert _api_versions(_connect(secure_broker, "PLAINTEXT")).error_code == 0


def test_plaintext_client_on_a_tls_port_is_closed_and_counted(secure_broker):
    before = _failures(secure_broker).get(("SSL", "ssl_handshake"), 0)
    with _connect(secure_broker, "SASL_SSL") as s:
        s.sendall(encode_request(API.api_versions, 0, {}))
        assert _closed(s)
    wait_for(lambda: _failures(secure_broker).get(("SSL", "ssl_handshake"), 0) == before + 1)


@pytest.mark.parametrize("which", ["untrusted", "expired"])
def test_untrusted_or_expired_client_certificate_fails_the_handshake(secure_broker, certs, which):
    pem = certs.untrusted_pem if which == "untrusted" else certs.expired_pem
    before = _failures(secure_broker).get(("SSL", "ssl_handshake"), 0)
    with pytest.raises((ssl.SSLError, ConnectionError, AssertionError)):
        with _connect(secure_broker, "SSL", _tls(certs, pem)) as s:
            # TLS 1.3: the client learns of the refusal on its first read
            _api_versions(s)
    wait_for(lambda: _failures(secure_broker).get(("SSL", "ssl_handshake"), 0) == before + 1)


def test_tls_1_1_client_is_refused(secure_broker, certs):
    ctx = _tls(certs)
    with warnings.catch_warnings():  # TLSv1_1 is deprecated: that is the point here
        warnings.simplefilter("ignore", DeprecationWarning)
        ctx.minimum_version = ctx.maximum_version = ssl.TLSVersion.TLSv1_1
    with pytest.raises((ssl.SSLError, ConnectionError)):
        _connect(secure_broker, "SSL", ctx)


def test_scram_credentials_are_stored_salted_never_the_password(secure_broker):
    text = (secure_broker.broker.config.data_dir / SCRAM_FILE).read_text()
    assert SCRAM_PASSWORD not in text
    assert '"stored_key"' in text and '"iterations": 4096' in text


def test_describe_configs_hides_password_configs(secure_broker):
    """Kafka's ConfigDef.Type.PASSWORD: value null, is_sensitive true."""
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{secure_broker.ports['PLAINTEXT']}"})
    res = ConfigResource(ConfigResource.Type.BROKER, "1")
    configs = admin.describe_configs([res])[res].result(timeout=10)
    jaas = configs["listener.name.sasl_ssl.plain.sasl.jaas.config"]
    assert jaas.value is None and jaas.is_sensitive
    users = configs["kompakt.sasl.bootstrap.users"]
    assert users.value is None and users.is_sensitive
    assert (
        configs["ssl.client.auth"].value == "none" and not configs["ssl.client.auth"].is_sensitive
    )


def test_a_failed_login_raises_in_the_client_not_hangs(secure_broker, certs):
    from confluent_kafka.admin import AdminClient

    conf = _client_conf(secure_broker, certs, "SASL_SSL", "PLAIN", "wrong")
    with pytest.raises(KafkaException):
        AdminClient(conf).list_topics(timeout=5)


# -- connection.failed.authentication.delay.ms ------------------------------------------------
DELAY_MS = 1500


@pytest.fixture(scope="module")
def slow_failure_broker(tmp_path_factory):
    """A SASL_PLAINTEXT broker whose failed logins wait DELAY_MS before their answer."""
    props = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "kompakt.admin.listener": "http://127.0.0.1:0",
        "log.dirs": str(tmp_path_factory.mktemp("slow-failure")),
        "kompakt.cleaner.engine": "local",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
            'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";'
        ),
        "connection.failed.authentication.delay.ms": str(DELAY_MS),
    }
    with BrokerThread(BrokerConfig.from_mapping(props)) as b:
        b.ports = dict(b.broker.server.ports)
        yield b


def _timed(s, api_key, version, body):
    t0 = time.monotonic()
    out = _call(s, api_key, version, body)
    return out, time.monotonic() - t0


def test_a_failed_login_is_answered_and_closed_after_the_failed_authentication_delay(
    slow_failure_broker,
):
    """Kafka's connection.failed.authentication.delay.ms (KIP-306's delayed close): the
    SaslAuthenticate error comes after the delay, then the connection closes; another
    client meanwhile is served at once, and a good login is not delayed."""
    b = slow_failure_broker
    with _connect(b, "SASL_PLAINTEXT") as s:
        assert _call(s, API.sasl_handshake, 1, {"mechanism": "PLAIN"}).error_code == 0
        s.sendall(encode_request(API.sasl_authenticate, 2, {"auth_bytes": b"\0alice\0wrong"}))
        t0 = time.monotonic()
        with _connect(b, "PLAINTEXT") as other:  # the wait holds only the failed connection
            assert _api_versions(other).error_code == ErrorCode.none
            assert time.monotonic() - t0 < DELAY_MS / 1000
        frame = _recv(s)
        waited = time.monotonic() - t0
        assert frame is not None
        auth = decode_response(API.sasl_authenticate, 2, frame)[1]
        assert auth.error_code == ErrorCode.sasl_authentication_failed
        assert waited >= DELAY_MS / 1000
        assert _closed(s)
    with _connect(b, "SASL_PLAINTEXT") as s:
        assert _call(s, API.sasl_handshake, 1, {"mechanism": "PLAIN"}).error_code == 0
        auth, took = _timed(s, API.sasl_authenticate, 2, {"auth_bytes": b"\0alice\0alice-secret"})
        assert auth.error_code == ErrorCode.none
        assert took < DELAY_MS / 1000


def test_a_mechanism_not_enabled_is_delayed_but_a_request_before_authentication_is_not(
    slow_failure_broker,
):
    """Kafka delays every AuthenticationException of the SASL exchange (here
    UnsupportedSaslMechanismException); a request before authentication is an
    InvalidRequestException, closed at once."""
    b = slow_failure_broker
    with _connect(b, "SASL_PLAINTEXT") as s:
        hs, took = _timed(s, API.sasl_handshake, 1, {"mechanism": "SCRAM-SHA-256"})
        assert hs.error_code == ErrorCode.unsupported_sasl_mechanism
        assert took >= DELAY_MS / 1000
    with _connect(b, "SASL_PLAINTEXT") as s:
        t0 = time.monotonic()
        s.sendall(encode_request(API.metadata, 12, {"topics": None}))
        assert _recv(s) is None
        assert time.monotonic() - t0 < DELAY_MS / 1000


def test_failed_authentication_delay_has_kafkas_default_and_bounds():
    assert BrokerConfig.from_mapping({}).get("connection.failed.authentication.delay.ms") == 100
    with pytest.raises(InvalidConfigError, match="connection.failed.authentication.delay.ms"):
        BrokerConfig.from_mapping({"connection.failed.authentication.delay.ms": "-1"})
