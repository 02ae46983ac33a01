"""One Kafka request over one socket, built and read with kio's schemas.

For the admin calls confluent-kafka's AdminClient lacks (DescribeTransactions,
ListTransactions, DescribeProducers) or answers in a shape that loses fields the CLI
prints (DescribeAcls): kompakt is a single node, every partition's leader and every
coordinator, so the bootstrap address is the one to ask. The connection honours the
``--command-config`` client settings (:mod:`kompakt.cli.client_config`) as librdkafka
would: TLS for ``SSL``/``SASL_SSL``, then SaslHandshake v1 + SaslAuthenticate v2
(KIP-152) with PLAIN or SCRAM-SHA-256/512 (``scramp``'s client) for ``SASL_*``.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Mapping
from typing import Any

from .backend import CliError

TIMEOUT = 10.0
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
SCRAM = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def _frame(api_key: int, version: int, body: dict[str, Any], client_id: str, corr: int) -> bytes:
    import io

    from kio.index import load_request_schema
    from kio.serial import entity_writer

    from kompakt.broker.protocol import build

    req_cls = load_request_schema(api_key, version)
    hdr_cls = req_cls.__header_schema__
    buf = io.BytesIO()
    head = {
        "request_api_key": api_key,
        "request_api_version": version,
        "correlation_id": corr,
        "client_id": client_id,
    }
    entity_writer(hdr_cls)(buf, build(hdr_cls, head))
    entity_writer(req_cls)(buf, build(req_cls, body))
    data = buf.getvalue()
    return struct.pack(">i", len(data)) + data


def _read_frame(sock: socket.socket, where: str) -> bytes:
    f = sock.makefile("rb")
    size = f.read(4)
    if len(size) < 4:
        raise CliError(f"broker at {where} closed the connection")
    (n,) = struct.unpack(">i", size)
    frame = f.read(n)
    if len(frame) < n:
        raise CliError(f"broker at {where} closed the connection mid-response")
    return frame


def decode(api_key: int, version: int, frame: bytes) -> Any:
    """The response body of ``frame`` (kio's entity)."""
    from kio.index import load_response_schema
    from kio.serial import entity_reader

    resp_cls = load_response_schema(api_key, version)
    _hdr, used = entity_reader(resp_cls.__header_schema__)(frame, 0)
    return entity_reader(resp_cls)(frame, used)[0]


def _tls(sock: socket.socket, host: str, conf: dict[str, str]) -> socket.socket:
    import ssl

    try:
        ctx = ssl.create_default_context(cafile=conf.get("ssl.ca.location") or None)
        if conf.get("ssl.endpoint.identification.algorithm", "https").lower() == "none":
            ctx.check_hostname = False
        if conf.get("ssl.certificate.location"):
            ctx.load_cert_chain(
                conf["ssl.certificate.location"],
                conf.get("ssl.key.location") or None,
                conf.get("ssl.key.password") or None,
            )
    except (OSError, ssl.SSLError) as exc:
        raise CliError(f"--command-config TLS settings: {exc}") from None
    return ctx.wrap_socket(sock, server_hostname=host)


def _sasl(sock: socket.socket, conf: dict[str, str], where: str) -> None:
    from kio.schema.errors import ErrorCode

    mech = (conf.get("sasl.mechanism") or conf.get("sasl.mechanisms") or "GSSAPI").upper()
    if mech != "PLAIN" and mech not in SCRAM:
        raise CliError(f"sasl.mechanism {mech}: the CLI speaks PLAIN, {', '.join(SCRAM)}")
    user, pw = conf.get("sasl.username", ""), conf.get("sasl.password", "")

    def call(api_key: int, version: int, body: dict[str, Any], corr: int) -> Any:
        sock.sendall(_frame(api_key, version, body, "kompakt-cli", corr))
        resp = decode(api_key, version, _read_frame(sock, where))
        if resp.error_code != ErrorCode.none:
            detail = getattr(resp, "error_message", None) or ErrorCode(resp.error_code).name
            raise CliError(f"broker {where} refused SASL {mech} for {user!r}: {detail}")
        return resp

    call(SASL_HANDSHAKE, 1, {"mechanism": mech}, 1)
    if mech == "PLAIN":
        call(SASL_AUTHENTICATE, 2, {"auth_bytes": f"\0{user}\0{pw}".encode()}, 2)
        return
    import scramp

    client = scramp.ScramClient([mech], user, pw)
    first = call(SASL_AUTHENTICATE, 2, {"auth_bytes": client.get_client_first().encode()}, 2)
    try:
        client.set_server_first(first.auth_bytes.decode())
        final = call(SASL_AUTHENTICATE, 2, {"auth_bytes": client.get_client_final().encode()}, 3)
        client.set_server_final(final.auth_bytes.decode())
    except scramp.ScramException as exc:
        raise CliError(f"broker {where}: SCRAM exchange failed: {exc}") from None


def send(
    bootstrap: str,
    api_key: int,
    version: int,
    body: dict[str, Any],
    client_id: str = "kompakt-cli",
    conf: Mapping[str, str] | None = None,
) -> bytes:
    """Send one request (after TLS and SASL when the client settings ask for them); the
    whole response frame (header, then body). ``conf``: the client settings, by default
    ``--command-config``'s."""
    import ssl

    from .broker_backend import parse_bootstrap
    from .client_config import settings

    conf = settings() if conf is None else conf
    protocol = conf.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
        raise CliError(f"security.protocol {protocol}: expected PLAINTEXT, SSL, SASL_*")
    host, port = parse_bootstrap(bootstrap)[0]
    where = f"{host}:{port}"
    try:
        with socket.create_connection((host, port), timeout=TIMEOUT) as raw:
            s = _tls(raw, host, conf) if protocol.endswith("SSL") else raw
            if protocol.startswith("SASL_"):
                _sasl(s, conf, where)
            s.sendall(_frame(api_key, version, body, client_id, 100))
            return _read_frame(s, where)
    except ssl.SSLError as exc:
        raise CliError(f"broker {where}: TLS failed: {exc.reason or exc}") from None
    except OSError as exc:
        why = exc.strerror or str(exc) or type(exc).__name__
        raise CliError(f"broker {where} not reachable: {why}") from exc


def request(
    bootstrap: str,
    api_key: int,
    version: int,
    body: dict[str, Any],
    conf: Mapping[str, str] | None = None,
) -> Any:
    """:func:`send`, then :func:`decode`."""
    return decode(api_key, version, send(bootstrap, api_key, version, body, conf=conf))
