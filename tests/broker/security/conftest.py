"""One broker per module with every listener kind, and certificates made here (trustme):
never a checked-in key."""

from __future__ import annotations

import datetime
import logging

import pytest
import trustme

from kompakt.broker.app import BrokerThread
from kompakt.broker.config import BrokerConfig

PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" '
    'user_admin="admin-secret" user_alice="alice-secret";'
)


class Certs:
    def __init__(self, tmp):
        self.ca = trustme.CA()
        self.other_ca = trustme.CA()
        server = self.ca.issue_cert("127.0.0.1", "localhost")
        self.server_pem = tmp / "server.pem"
        server.private_key_and_cert_chain_pem.write_to_path(str(self.server_pem))
        self.ca_pem = tmp / "ca.pem"
        self.ca.cert_pem.write_to_path(str(self.ca_pem))
        self.client = self.ca.issue_cert(
            "alice@example.com", common_name="Alice", organization_unit_name="eng"
        )
        self.client_cert = tmp / "client.crt"
        self.client_key = tmp / "client.key"
        self.client.cert_chain_pems[0].write_to_path(str(self.client_cert))
        self.client.private_key_pem.write_to_path(str(self.client_key))
        untrusted = self.other_ca.issue_cert("mallory@example.com", common_name="Mallory")
        self.untrusted_pem = tmp / "untrusted.pem"
        untrusted.private_key_and_cert_chain_pem.write_to_path(str(self.untrusted_pem))
        past = datetime.datetime(2020, 1, 1)
        expired = self.ca.issue_cert(
            "old@example.com",
            common_name="Old",
            not_before=past,
            not_after=past + datetime.timedelta(days=1),
        )
        self.expired_pem = tmp / "expired.pem"
        expired.private_key_and_cert_chain_pem.write_to_path(str(self.expired_pem))


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return Certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory, certs):
    """PLAINTEXT, SSL (client certificate requested), SASL_PLAINTEXT and SASL_SSL with
    PLAIN + both SCRAMs, and SCRAMONLY (a custom name mapped to SASL_PLAINTEXT) with
    SCRAM only, and MTLS (SSL with ssl.client.auth=required); bootstrap user
    alice/alice-scram."""
    logging.getLogger("kompakt").setLevel(logging.INFO)
    data = tmp_path_factory.mktemp("secure-data")
    mechs = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
    props = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,"
        "SASL_SSL://127.0.0.1:0,SCRAMONLY://127.0.0.1:0,MTLS://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,"
        "SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL,SCRAMONLY:SASL_PLAINTEXT,MTLS:SSL",
        "kompakt.admin.listener": "https://127.0.0.1:0",
        "kompakt.admin.auth": "basic",
        "log.dirs": str(data),
        "kompakt.cleaner.engine": "local",
        "ssl.keystore.location": str(certs.server_pem),
        "ssl.truststore.location": str(certs.ca_pem),
        "listener.name.ssl.ssl.client.auth": "requested",
        "listener.name.mtls.ssl.client.auth": "required",
        "ssl.principal.mapping.rules": "RULE:^CN=([^,]+),OU=eng,.*$/$1/L,DEFAULT",
        "sasl.enabled.mechanisms": mechs,
        "listener.name.scramonly.sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        "kompakt.sasl.bootstrap.users": "alice:alice-scram",
    }
    b = BrokerThread(BrokerConfig.from_mapping(props)).start()
    b.ports = dict(b.broker.server.ports)
    yield b
    b.stop()
