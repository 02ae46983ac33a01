"""Listener and security config validation, as Kafka's KafkaConfig checks (no broker)."""

from __future__ import annotations

import pytest

from kompakt.broker.config import BrokerConfig
from kompakt.broker.security.principal import NoMatchingRule, PrincipalMapper
from kompakt.errors import InvalidConfigError


@pytest.mark.parametrize(
    "props,fragment",
    [
        (
            {"listeners": "CUSTOM://127.0.0.1:9093"},
            "No security protocol defined for listener CUSTOM",
        ),
        (
            {"listeners": "PLAINTEXT://127.0.0.1:9092,PLAINTEXT://127.0.0.1:9093"},
            "Each listener must have a different name",
        ),
        (
            {"listeners": "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9092"},
            "Each listener must have a different port",
        ),
        ({"listener.security.protocol.map": "A:KERBEROS"}, "LISTENER_NAME:SECURITY_PROTOCOL"),
        ({"sasl.enabled.mechanisms": "GSSAPI"}, "GSSAPI is not supported"),
        ({"ssl.keystore.type": "JKS"}, "PEM"),
        ({"ssl.enabled.protocols": "TLSv1.1"}, "TLSv1.2 and TLSv1.3 only"),
        ({"ssl.client.auth": "maybe"}, "ssl.client.auth"),
        ({"listener.name.ssl.ssl.bogus": "x"}, "Unknown broker config key"),
        ({"listener.name.sasl_ssl.plain.sasl.jaas.config": "garbage"}, "LoginModule"),
        (
            {
                "listeners": "PLAINTEXT://127.0.0.1:9092",
                "advertised.listeners": "SSL://example.com:9093",
            },
            "SSL is not in listeners",
        ),
    ],
)
def test_bad_listener_and_security_configs_are_refused_naming_the_key(props, fragment):
    with pytest.raises(InvalidConfigError, match=fragment):
        BrokerConfig.from_mapping(props)


def test_custom_listener_names_map_to_security_protocols_and_advertise_per_listener():
    cfg = BrokerConfig.from_mapping(
        {
            "listeners": "INTERNAL://127.0.0.1:9092,EXTERNAL://0.0.0.0:9093",
            "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:SASL_SSL",
            "advertised.listeners": "EXTERNAL://kafka.example.com:443",
        }
    )
    assert cfg.security_protocols == {"INTERNAL": "PLAINTEXT", "EXTERNAL": "SASL_SSL"}
    adv = cfg.advertised_listeners
    assert (adv["EXTERNAL"].host, adv["EXTERNAL"].port) == ("kafka.example.com", 443)
    assert (adv["INTERNAL"].host, adv["INTERNAL"].port) == ("127.0.0.1", 9092)


def test_password_configs_are_never_described():
    """Kafka's ConfigDef.Type.PASSWORD: DescribeConfigs' value is null."""
    cfg = BrokerConfig.from_mapping(
        {
            "ssl.key.password": "hunter2",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": 'x.Y required user_a="hunter2";',
            "listener.name.ssl.ssl.client.auth": "required",
        }
    )
    rows = {e.name: e for e in cfg.describe_entries()}
    assert rows["ssl.key.password"].value is None
    assert all(s.value is None for s in rows["ssl.key.password"].synonyms)
    assert rows["listener.name.sasl_ssl.plain.sasl.jaas.config"].value is None
    assert rows["listener.name.ssl.ssl.client.auth"].value == "required"
    assert "hunter2" not in repr(cfg.describe())


@pytest.mark.parametrize(
    "rules,dn,name",
    [
        ("DEFAULT", "CN=Alice,OU=eng,O=Example", "CN=Alice,OU=eng,O=Example"),
        ("RULE:^CN=(.*?),OU=(.*?),.*$/$1@$2/L,DEFAULT", "CN=Alice,OU=Eng,O=X", "alice@eng"),
        ("RULE:^CN=(.*?),.*$/$1/U", "CN=alice,O=X", "ALICE"),
        ("RULE:^OU=x$/y/,DEFAULT", "CN=a", "CN=a"),
    ],
)
def test_ssl_principal_mapping_rules_follow_kafkas_ssl_principal_mapper(rules, dn, name):
    assert PrincipalMapper(rules).name(dn) == name


def test_a_dn_no_rule_matches_fails_as_kafkas_no_matching_rule():
    with pytest.raises(NoMatchingRule):
        PrincipalMapper("RULE:^CN=(.*?),OU=eng$/$1/").name("CN=a,OU=ops")


def test_inline_pem_keystore_and_an_encrypted_key_with_ssl_key_password(tmp_path):
    """ssl.keystore.key + ssl.keystore.certificate.chain inline; an encrypted key opens
    with ssl.key.password and a wrong one is a config error that never shows it."""
    import trustme
    from cryptography.hazmat.primitives import serialization

    from kompakt.broker.security.tls import server_context

    leaf = trustme.CA().issue_cert("127.0.0.1")
    chain = "".join(b.bytes().decode() for b in leaf.cert_chain_pems)
    cfg = BrokerConfig.from_mapping(
        {
            "ssl.keystore.key": leaf.private_key_pem.bytes().decode(),
            "ssl.keystore.certificate.chain": chain,
        }
    )
    assert server_context(cfg, "SSL").minimum_version.name == "TLSv1_2"
    key = serialization.load_pem_private_key(leaf.private_key_pem.bytes(), None)
    encrypted = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"k3y-pass"),
    )
    (tmp_path / "ks.pem").write_bytes(encrypted + chain.encode())
    base = {"ssl.keystore.location": str(tmp_path / "ks.pem")}
    server_context(BrokerConfig.from_mapping({**base, "ssl.key.password": "k3y-pass"}), "SSL")
    with pytest.raises(InvalidConfigError, match="cannot load the keystore") as err:
        server_context(BrokerConfig.from_mapping({**base, "ssl.key.password": "wrong-pw"}), "SSL")
    assert "wrong-pw" not in str(err.value)
    with pytest.raises(InvalidConfigError, match="has no keystore"):
        server_context(BrokerConfig.from_mapping({}), "SSL")


def test_store_passwords_on_pem_stores_are_refused_as_kafka_does(tmp_path):
    """Kafka's DefaultSslEngineFactory: a PEM key store takes only ssl.key.password, a
    PEM trust store no password at all; either store password is a config error that
    never shows the value."""
    import trustme

    from kompakt.broker.security.tls import server_context

    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1")
    ks = tmp_path / "ks.pem"
    ks.write_bytes(leaf.private_key_pem.bytes() + b"".join(b.bytes() for b in leaf.cert_chain_pems))
    base = {"ssl.keystore.location": str(ks)}
    server_context(BrokerConfig.from_mapping(base), "SSL")
    with pytest.raises(InvalidConfigError, match="key store password cannot") as err:
        server_context(BrokerConfig.from_mapping({**base, "ssl.keystore.password": "s3"}), "SSL")
    assert "s3" not in str(err.value)
    with pytest.raises(InvalidConfigError, match="trust store password cannot"):
        server_context(BrokerConfig.from_mapping({**base, "ssl.truststore.password": "s3"}), "SSL")
