"""The admin listener as an SSL listener (issue 26): on https with
``listener.name.admin.ssl.client.auth=required`` a request's principal is its client
certificate's subject through ``ssl.principal.mapping.rules`` (Kafka's
SslPrincipalMapper, the Kafka port's own code), which the broker's authorizer then
checks; without a certificate the TLS handshake is refused, as on a Kafka listener with
``ssl.client.auth=required``, and a subject no rule maps fails the authentication."""

from __future__ import annotations

import ssl

import httpx
import pytest
from confluent_kafka import Producer

from kompakt.broker.acls import AclBinding, AclFilter, Op, PatternType, ResourceType
from kompakt.broker.app import BrokerThread
from kompakt.broker.config import BrokerConfig
from kompakt.broker.handlers.acls import AUTHORIZER_KEY
from kompakt.errors import InvalidConfigError

STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
VALUE = b"MTLS-RECORD-5e1d"
ALLOW, DENY = 3, 2  # Kafka's AclPermissionType
# CN=Alice,OU=eng,... -> alice; no DEFAULT: another OU maps to nothing
RULES = "RULE:^CN=([^,]+),OU=eng,.*$/$1/L"


def _acl(principal: str, op: Op, permission: int = ALLOW) -> AclBinding:
    return AclBinding(
        int(ResourceType.TOPIC), "secret", int(PatternType.LITERAL), principal, "*", int(op),
        permission,
    )  # fmt: skip


def _props(tmp, certs) -> dict[str, str]:
    return {
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "kompakt.admin.listener": "https://127.0.0.1:0",
        "log.dirs": str(tmp),
        "kompakt.cleaner.engine": "local",
        "ssl.keystore.location": str(certs.server_pem),
        "ssl.truststore.location": str(certs.ca_pem),
        "listener.name.admin.ssl.client.auth": "required",
        "listener.name.admin.ssl.principal.mapping.rules": RULES,
        "authorizer.class.name": STANDARD,
        "super.users": "User:admin",
        "log.cleaner.backoff.ms": "600000",
    }


@pytest.fixture(scope="module")
def mtls_broker(tmp_path_factory, certs):
    b = BrokerThread(BrokerConfig.from_mapping(_props(tmp_path_factory.mktemp("mtls"), certs)))
    b.start()
    b.logs.create_topic("secret", 1, {"cleanup.policy": "compact"})
    az = b.broker.state.extra[AUTHORIZER_KEY]
    az.store.add([_acl("User:ANONYMOUS", Op.WRITE)])
    p = Producer({"bootstrap.servers": b.bootstrap})
    p.produce("secret", VALUE, b"k", partition=0)
    assert p.flush(10) == 0
    az.store.remove([AclFilter(principal="User:ANONYMOUS")])
    yield b
    b.stop()


def _get(b, certs, path: str, cert: tuple[str, ...] = ()) -> httpx.Response:
    """GET over https trusting the test CA, presenting ``cert`` (PEM file(s)) if given."""
    tls = ssl.create_default_context(cafile=str(certs.ca_pem))
    if cert:
        tls.load_cert_chain(*cert)
    with httpx.Client(verify=tls, timeout=30) as client:
        return client.get(f"https://127.0.0.1:{b.admin_port}{path}")


def test_client_certificate_is_the_principal_the_authorizer_checks(mtls_broker, certs):
    """Kafka's SslPrincipalMapper names the principal (CN=Alice,OU=eng -> User:alice);
    READ on the topic allows /messages, no ACL or a DENY refuses it (403, no record)."""
    b = mtls_broker
    az = b.broker.state.extra[AUTHORIZER_KEY]
    alice = (str(certs.client_cert), str(certs.client_key))
    url = "/messages?topic=secret&partition=0"
    r = _get(b, certs, url, alice)
    assert r.status_code == 403 and "User:alice" in r.text, r.text[:300]
    assert VALUE not in r.content
    az.store.add([_acl("User:alice", Op.READ)])
    try:
        r = _get(b, certs, url, alice)
        assert r.status_code == 200 and VALUE in r.content, r.text[:300]
        az.store.add([_acl("User:alice", Op.READ, DENY)])  # DENY wins, as in Kafka
        r = _get(b, certs, url, alice)
        assert r.status_code == 403 and VALUE not in r.content
    finally:
        az.store.remove([AclFilter(principal="User:alice")])


def test_no_client_certificate_is_refused_at_the_handshake(mtls_broker, certs):
    """ssl.client.auth=required: no certificate, or one of another CA, gets no answer."""
    for cert in ((), (str(certs.untrusted_pem),)):
        with pytest.raises(httpx.TransportError):
            _get(mtls_broker, certs, "/v1", cert)


def test_a_subject_no_rule_maps_fails_authentication(mtls_broker, certs, tmp_path):
    """Kafka's NoMatchingRule fails the authentication: 401, nothing read."""
    other = certs.ca.issue_cert(
        "carol@example.com", common_name="Carol", organization_unit_name="ops"
    )
    pem = tmp_path / "carol.pem"
    other.private_key_and_cert_chain_pem.write_to_path(str(pem))
    r = _get(mtls_broker, certs, "/messages?topic=secret&partition=0", (str(pem),))
    assert r.status_code == 401 and VALUE not in r.content, r.text[:300]


def test_a_non_loopback_admin_listener_may_rely_on_client_certificates(tmp_path, certs):
    """Client certificates authenticate as Basic does: such a listener may bind a
    non-loopback address; https asking no certificate still may not."""
    props = _props(tmp_path, certs) | {"kompakt.admin.listener": "https://0.0.0.0:9644"}
    BrokerConfig.from_mapping(props)
    props["listener.name.admin.ssl.client.auth"] = "none"
    with pytest.raises(InvalidConfigError, match="client.auth=required"):
        BrokerConfig.from_mapping(props)
