"""The broker's ssl.*, sasl.* and listener keys: Kafka's names, types and defaults.

Rows of the broker's key table (:mod:`kompakt.broker.broker_keys`), kept here so the
security modules can read them without importing the whole config. ``password`` is Kafka's
``ConfigDef.Type.PASSWORD``: such values are never shown (DescribeConfigs answers null with
``is_sensitive=true``, ``topic describe`` and logs leave them out).
"""

from __future__ import annotations

import re
from typing import Any

from kompakt.errors import InvalidConfigError
from kompakt.log.config import ConfigKey, OneOf, at_least

PASSWORD = "password"
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# Kafka's SaslConfigs: mechanisms a broker may enable; GSSAPI and OAUTHBEARER are
# Kafka's, kompakt serves neither and says so at start.
SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SASL_SERVER_MAX_RECEIVE_SIZE = 524288  # Kafka's BrokerSecurityConfigs default
FAILED_AUTHENTICATION_DELAY_MS = 100  # Kafka's SocketServerConfigs default


def _store_type(name: str, value: Any) -> None:
    if str(value).upper() != "PEM":
        raise InvalidConfigError(
            f"Invalid value {value} for configuration {name}: kompakt reads PEM key and "
            "trust stores only (ssl.keystore.type=PEM, ssl.truststore.type=PEM); convert a "
            "JKS/PKCS12 store with `keytool -importkeystore` + `openssl pkcs12 -nodes`"
        )


def _mechanisms(name: str, value: Any) -> None:
    for m in value:
        if m not in SUPPORTED_MECHANISMS:
            raise InvalidConfigError(
                f"Invalid value {','.join(value)} for configuration {name}: mechanism {m} is "
                f"not supported by kompakt (supported: {', '.join(SUPPORTED_MECHANISMS)})"
            )


def _protocols(name: str, value: Any) -> None:
    for p in value:
        if p not in ("TLSv1.2", "TLSv1.3"):
            raise InvalidConfigError(
                f"Invalid value {','.join(value)} for configuration {name}: {p} is not "
                "allowed; kompakt speaks TLSv1.2 and TLSv1.3 only"
            )
    if not value:
        raise InvalidConfigError(f"Invalid value for configuration {name}: empty")


SECURITY_KEYS: list[ConfigKey] = [
    ConfigKey(
        "listener.security.protocol.map",
        "string",
        "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
        "Listener name to security protocol (Kafka's default maps each protocol to itself).",
        None,
    ),
    ConfigKey(
        "ssl.keystore.type",
        "string",
        "PEM",
        "PEM only. Kafka's default is JKS; kompakt has no JKS reader, so PEM is the default.",
        _store_type,
    ),
    ConfigKey(
        "ssl.keystore.location",
        "string",
        None,
        "PEM file with the private key and the certificate chain.",
        None,
    ),
    ConfigKey(
        "ssl.keystore.password",
        PASSWORD,
        None,
        "A PEM store has none: set, it is refused as Kafka does.",
        None,
    ),
    ConfigKey("ssl.keystore.key", PASSWORD, None, "Inline PEM private key.", None),
    ConfigKey(
        "ssl.keystore.certificate.chain", PASSWORD, None, "Inline PEM certificate chain.", None
    ),
    ConfigKey("ssl.key.password", PASSWORD, None, "Password of an encrypted private key.", None),
    ConfigKey("ssl.truststore.type", "string", "PEM", "PEM only.", _store_type),
    ConfigKey(
        "ssl.truststore.location", "string", None, "PEM file of trusted CA certificates.", None
    ),
    ConfigKey(
        "ssl.truststore.password", PASSWORD, None, "A PEM store has none: refused if set.", None
    ),
    ConfigKey(
        "ssl.truststore.certificates", PASSWORD, None, "Inline PEM trusted certificates.", None
    ),
    ConfigKey(
        "ssl.client.auth",
        "string",
        "none",
        "none | requested | required: whether TLS clients present a certificate.",
        OneOf(("none", "requested", "required")),
    ),
    ConfigKey(
        "ssl.enabled.protocols",
        "list",
        ("TLSv1.2", "TLSv1.3"),
        "TLS versions accepted (1.2 and 1.3 only).",
        _protocols,
    ),
    ConfigKey(
        "ssl.principal.mapping.rules",
        "string",
        "DEFAULT",
        "Kafka's SslPrincipalMapper rules from the certificate's subject DN to a user name: "
        "RULE:pattern/replacement/[LU], ..., DEFAULT.",
        None,
    ),
    ConfigKey(
        "ssl.cipher.suites",
        "list",
        (),
        "OpenSSL cipher list for TLSv1.2 (empty: Python's defaults).",
        None,
    ),
    ConfigKey(
        "sasl.enabled.mechanisms",
        "list",
        ("PLAIN",),
        "SASL mechanisms of SASL listeners. Kafka's default is GSSAPI (Kerberos), which "
        "kompakt does not serve; PLAIN is the default here as the one mechanism whose users "
        "come with the listener's JAAS config.",
        _mechanisms,
    ),
    ConfigKey(
        "sasl.server.max.receive.size",
        "int",
        SASL_SERVER_MAX_RECEIVE_SIZE,
        "Largest frame accepted before authentication completes.",
        None,
    ),
    ConfigKey(
        "connection.failed.authentication.delay.ms",
        "int",
        FAILED_AUTHENTICATION_DELAY_MS,
        "Kafka's delay before a connection that failed SASL authentication gets its "
        "error and is closed, which slows a password guesser down. Keep it below Kafka's "
        "connections.max.idle.ms (10 minutes), as Kafka asks.",
        at_least(0),
    ),
    ConfigKey(
        "kompakt.admin.auth",
        "string",
        "none",
        "none | basic: HTTP Basic authentication of the admin endpoint against the SCRAM "
        "users, for every request (GET too); none: every request is User:ANONYMOUS, or, on "
        "https with listener.name.admin.ssl.client.auth=required (or requested), its "
        "client certificate's subject through [listener.name.admin.]"
        "ssl.principal.mapping.rules, as on a Kafka SSL listener. Each route is then "
        "authorized by the broker's authorizer (authorizer.class.name).",
        OneOf(("none", "basic")),
    ),
    ConfigKey(
        "kompakt.admin.auth.get",
        "boolean",
        False,
        "Ignored (a warning at start): with kompakt.admin.auth=basic every request asks for "
        "credentials; kompakt.admin.metrics.public=true opens /metrics for a scraper.",
        None,
    ),
    ConfigKey(
        "kompakt.admin.metrics.public",
        "boolean",
        False,
        "Serve the admin endpoint's /metrics to anyone (a Prometheus scraper without "
        "credentials): no authentication and no DESCRIBE on CLUSTER asked. Topic and group "
        "names appear in its labels.",
        None,
    ),
    ConfigKey(
        "kompakt.admin.allowed.hosts",
        "list",
        (),
        "Host names (besides the listener's address, localhost, 127.0.0.1, ::1 and the "
        "advertised listeners' hosts) the admin endpoint answers to; another Host header "
        "is answered 421 (DNS rebinding).",
        None,
    ),
    ConfigKey(
        "kompakt.admin.allow.insecure",
        "boolean",
        False,
        "Let the admin endpoint bind a non-loopback address without authentication, or "
        "with Basic credentials over plain http.",
        None,
    ),
    ConfigKey(
        "kompakt.sasl.bootstrap.users",
        PASSWORD,
        None,
        "user:password,... given SCRAM-SHA-256 and SCRAM-SHA-512 credentials at start "
        "when they have none (Kafka's `kafka-storage format --add-scram`).",
        None,
    ),
]

_PREFIX = re.compile(r"^listener\.name\.([a-z0-9_]+)\.(.+)$")
_JAAS_KEY = re.compile(r"^([a-z0-9-]+)\.sasl\.jaas\.config$")
_OVERRIDABLE = {k.name for k in SECURITY_KEYS if k.name.startswith(("ssl.", "sasl."))}


def listener_prefix(listener: str) -> str:
    return f"listener.name.{listener.lower()}."


def listener_key_type(key: str) -> str:
    """The type of a ``listener.name.<l>.<key>`` key; InvalidConfigError if unknown."""
    m = _PREFIX.match(key)
    if m is None:
        raise InvalidConfigError(f"Unknown broker config key: {key}")
    rest = m.group(2)
    if _JAAS_KEY.match(rest) or rest == "sasl.jaas.config":
        return PASSWORD
    for k in SECURITY_KEYS:
        if k.name == rest and k.name in _OVERRIDABLE:
            return k.type
    raise InvalidConfigError(f"Unknown broker config key: {key}")


def check_listener_key(key: str, text: str) -> None:
    listener_key_type(key)
    m = _PREFIX.match(key)
    assert m is not None
    jaas = _JAAS_KEY.match(m.group(2))
    if jaas is not None:
        from kompakt.broker.security.sasl import parse_jaas

        parse_jaas(key, text)
