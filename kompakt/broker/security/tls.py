"""A listener's server-side TLS context from Kafka's ssl.* keys (PEM stores only).

``ssl.keystore.location`` (a PEM file with the key and its chain) or the inline
``ssl.keystore.key`` + ``ssl.keystore.certificate.chain``; ``ssl.key.password`` for an
encrypted key; ``ssl.truststore.location`` or inline ``ssl.truststore.certificates``
(the CAs client certificates must chain to); ``ssl.client.auth`` none | requested |
required; ``ssl.enabled.protocols`` among TLSv1.2 and TLSv1.3. Keys may be overridden per
listener (``listener.name.<l>.ssl.*``). Problems are InvalidConfigErrors at start.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from typing import Any

from kompakt.errors import InvalidConfigError

_VERIFY = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


def server_context(cfg: Any, listener: str) -> ssl.SSLContext:
    """The SSLContext of ``listener`` (``cfg`` is a BrokerConfig)."""

    def get(key: str) -> Any:
        return cfg.listener_value(listener, key)

    for key in ("ssl.keystore.type", "ssl.truststore.type"):
        if str(get(key)).upper() != "PEM":
            raise InvalidConfigError(
                f"Invalid value {get(key)} for configuration {key} (listener {listener}): "
                "kompakt reads PEM stores only"
            )
    # Kafka's DefaultSslEngineFactory refuses store passwords on PEM stores: only
    # ssl.key.password (an encrypted key) applies
    if get("ssl.keystore.password") is not None:
        raise InvalidConfigError(
            f"listener {listener}: SSL key store password cannot be specified with PEM "
            "format, only key password may be specified (ssl.key.password)"
        )
    if get("ssl.truststore.password") is not None:
        raise InvalidConfigError(
            f"listener {listener}: SSL trust store password cannot be specified for PEM format"
        )
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    versions = sorted(_VERSIONS[v] for v in get("ssl.enabled.protocols"))
    ctx.minimum_version, ctx.maximum_version = versions[0], versions[-1]
    ciphers = get("ssl.cipher.suites")
    if ciphers:
        try:
            ctx.set_ciphers(":".join(ciphers))
        except ssl.SSLError as exc:
            raise InvalidConfigError(f"Invalid value for ssl.cipher.suites: {exc}") from exc
    _load_keystore(ctx, listener, get)
    client_auth = str(get("ssl.client.auth"))
    trust_file, trust_pem = get("ssl.truststore.location"), get("ssl.truststore.certificates")
    if trust_file or trust_pem:
        try:
            ctx.load_verify_locations(cafile=trust_file or None, cadata=trust_pem or None)
        except (OSError, ssl.SSLError, ValueError) as exc:
            raise InvalidConfigError(
                f"cannot load the truststore of listener {listener}: {exc}"
            ) from exc
    elif client_auth != "none":
        raise InvalidConfigError(
            f"ssl.client.auth={client_auth} on listener {listener} needs a truststore "
            "(ssl.truststore.location or ssl.truststore.certificates)"
        )
    ctx.verify_mode = _VERIFY[client_auth]
    return ctx


def _load_keystore(ctx: ssl.SSLContext, listener: str, get: Any) -> None:
    location = get("ssl.keystore.location")
    key, chain = get("ssl.keystore.key"), get("ssl.keystore.certificate.chain")
    password = get("ssl.key.password")
    if location and (key or chain):
        raise InvalidConfigError(
            f"listener {listener}: set ssl.keystore.location or ssl.keystore.key + "
            "ssl.keystore.certificate.chain, not both"
        )
    if not location and not (key and chain):
        raise InvalidConfigError(
            f"listener {listener} uses TLS but has no keystore: set ssl.keystore.location "
            "(a PEM file with the key and certificate chain) or ssl.keystore.key and "
            "ssl.keystore.certificate.chain"
        )
    try:
        if location:
            ctx.load_cert_chain(location, password=password or None)
            return
        # the ssl module loads keys from files only: a private temp file, removed at once
        fd, path = tempfile.mkstemp(suffix=".pem")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(key.strip() + "\n" + chain.strip() + "\n")
            ctx.load_cert_chain(path, password=password or None)
        finally:
            os.unlink(path)
    except (OSError, ssl.SSLError) as exc:
        # never the password or the key in the message
        raise InvalidConfigError(
            f"cannot load the keystore of listener {listener}: "
            f"{getattr(exc, 'strerror', None) or type(exc).__name__}: {exc.args[-1]}"
        ) from None
