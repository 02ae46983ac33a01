"""SASL on a listener, sans-IO: Kafka's ``SaslServerAuthenticator`` state machine.

A SASL connection may send ApiVersions, then SaslHandshake (API 17) naming a mechanism,
then SaslAuthenticate (API 36) requests carrying the mechanism's tokens (KIP-152) until the
mechanism is done. Anything else before that closes the connection (Kafka throws
``InvalidRequestException`` from the authenticator); a SaslAuthenticate before a handshake
is answered ILLEGAL_SASL_STATE; a mechanism not enabled is answered
UNSUPPORTED_SASL_MECHANISM with the enabled list and the connection closed; bad
credentials are SASL_AUTHENTICATION_FAILED with a message, then the connection closed;
these failure answers wait ``connection.failed.authentication.delay.ms`` (KIP-306).
The legacy flow after a v0 handshake (raw tokens without Kafka framing) is not served:
every maintained client (librdkafka, the Java client, kafka-python, aiokafka) uses
SaslAuthenticate when the broker advertises it.
"""

from __future__ import annotations

import hmac
import logging
import re
from dataclasses import dataclass
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from kompakt.broker.security.scram_store import SCRAM_MECHANISMS, ScramStore
from kompakt.errors import InvalidConfigError

log = logging.getLogger(__name__)

API_VERSIONS = 18
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36

# -- JAAS -------------------------------------------------------------------------------------
_JAAS = re.compile(
    r"^\s*([\w.$]+)\s+(required|requisite|sufficient|optional)\s+(.*?)\s*;\s*$", re.S
)
_OPTION = re.compile(r'\s*([\w.-]+)\s*=\s*(?:"((?:\\.|[^"\\])*)"|([^\s";=]+))\s*')


def parse_jaas(key: str, text: str) -> dict[str, str]:
    """The options of a one-module JAAS config (Kafka's ``JaasConfig``):
    ``<LoginModule> required name="value" ...;``."""
    m = _JAAS.match(text)
    if m is None:
        raise InvalidConfigError(
            f"Invalid value for configuration {key}: expected "
            '<LoginModule> required name="value" ...;'
        )
    options: dict[str, str] = {}
    rest = m.group(3)
    pos = 0
    while pos < len(rest):
        om = _OPTION.match(rest, pos)
        if om is None or om.end() == pos:
            raise InvalidConfigError(
                f"Invalid value for configuration {key}: cannot parse the JAAS options "
                f"at character {pos}"
            )
        value = om.group(2) if om.group(2) is not None else om.group(3)
        options[om.group(1)] = re.sub(r"\\(.)", r"\1", value)
        pos = om.end()
    return options


def plain_users(options: dict[str, str]) -> dict[str, str]:
    """Kafka's ``PlainServerCallbackHandler``: ``user_<name>="<password>"`` options."""
    return {k[len("user_") :]: v for k, v in options.items() if k.startswith("user_")}


# -- mechanisms ---------------------------------------------------------------------------------
class AuthenticationFailed(Exception):
    """Wrong or unknown credentials: SASL_AUTHENTICATION_FAILED, message to the client."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


class MechanismServer(Protocol):
    def step(self, token: bytes) -> bytes | None: ...  # the server token; None: more
    @property
    def complete(self) -> bool: ...
    @property
    def user(self) -> str: ...


def invalid_credentials(mechanism: str) -> str:
    """Kafka's SaslServerAuthenticator answer to a mechanism's SaslException: the same
    for every cause, so a client learns nothing (whether a user exists)."""
    return (
        "Authentication failed during authentication due to invalid credentials "
        f"with SASL mechanism {mechanism}"
    )


PLAIN_REFUSED = invalid_credentials("PLAIN")


class PlainServer:
    """RFC 4616 PLAIN: one token ``authzid NUL authcid NUL passwd``."""

    def __init__(self, users: dict[str, str]):
        self.users = users
        self.complete = False
        self.user = ""

    def step(self, token: bytes) -> bytes:
        # Kafka's PlainSaslServer refuses these three with a SaslException, whose text
        # SaslServerAuthenticator keeps from the client (it might tell who exists): the
        # client reads the generic message, the log the reason
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise AuthenticationFailed(PLAIN_REFUSED, "malformed")
        authz, user_b, password_b = parts
        user = user_b.decode("utf-8", "replace")
        if not user:  # "Authentication failed: username not specified"
            raise AuthenticationFailed(PLAIN_REFUSED, "malformed")
        if not password_b:  # "Authentication failed: password not specified", whatever
            # the JAAS entry says: a user_x="" entry lets nobody in as x
            raise AuthenticationFailed(PLAIN_REFUSED, "no_password")
        expected = self.users.get(user)
        if expected is None or not hmac.compare_digest(expected.encode(), password_b):
            reason = "unknown_user" if expected is None else "bad_password"
            raise AuthenticationFailed(
                "Authentication failed: Invalid username or password", reason
            )
        if authz and authz != user_b:
            raise AuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is "
                "different from username",
                "authorization_id",
            )
        self.user = user
        self.complete = True
        return b""


class ScramServer:
    """RFC 5802 SCRAM-SHA-256/-512 with scramp, credentials from the store."""

    def __init__(self, mechanism: str, store: ScramStore):
        from scramp import ScramMechanism

        self.mechanism = mechanism
        self.store = store
        self._unknown = False
        self._server = ScramMechanism(mechanism).make_server(self._auth_info)
        self._step = 0
        self.complete = False
        self.user = ""

    def _auth_info(self, user: str) -> tuple:
        cred = self.store.get(user, self.mechanism)
        if cred is None:
            self._unknown = True
            raise AuthenticationFailed(
                invalid_credentials(self.mechanism),
                "unknown_user",
            )
        self.user = user
        return tuple(cred)

    def step(self, token: bytes) -> bytes:
        from scramp import ScramException

        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise AuthenticationFailed("Invalid SCRAM message: not UTF-8", "malformed") from exc
        try:
            if self._step == 0:
                self._step = 1
                self._server.set_client_first(text)
                return self._server.get_server_first().encode()
            if self._step == 1:
                self._step = 2
                self._server.set_client_final(text)
                out = self._server.get_server_final().encode()
                self.complete = True
                return out
        except ScramException as exc:
            log.debug("SCRAM exchange failed: %s", exc)  # scramp's text holds no secret
            bad_proof = "proof" in str(exc).lower() or "signature" in str(exc).lower()
            raise AuthenticationFailed(
                invalid_credentials(self.mechanism),
                "unknown_user" if self._unknown else "bad_password" if bad_proof else "malformed",
            ) from exc
        except AuthenticationFailed:
            raise
        raise AuthenticationFailed("Unexpected SCRAM message after completion", "malformed")


# -- the connection's authenticator ----------------------------------------------------------------
@dataclass
class SaslOutcome:
    """What the server does with one pre-authentication request."""

    body: Any = None  # response body to send, if any
    close: bool = False  # close the connection after sending
    passthrough: bool = False  # let the normal handler answer (ApiVersions)
    failure: str | None = None  # reason to count/log, if this was a failed attempt

    @property
    def delayed(self) -> bool:
        """Kafka answers an authentication failure (bad credentials, a mechanism not
        enabled, an illegal SASL state) and closes only after
        ``connection.failed.authentication.delay.ms``, to slow a guesser down; a request
        before authentication (its ``InvalidRequestException``) is closed at once."""
        return self.close and self.body is not None


class SaslAuthenticator:
    """One SASL connection's state: HANDSHAKE → AUTHENTICATE → COMPLETE (or FAILED)."""

    def __init__(
        self, listener: str, mechanisms: tuple[str, ...], plain: dict[str, str], store: Any
    ):
        self.listener = listener
        self.mechanisms = mechanisms
        self.plain = plain
        self.store = store
        self.mechanism: str | None = None
        self._server: MechanismServer | None = None
        self.principal: str | None = None

    @property
    def complete(self) -> bool:
        return self.principal is not None

    def on_request(self, api_key: int, api_version: int, body: Any) -> SaslOutcome:
        if api_key == API_VERSIONS:
            return SaslOutcome(passthrough=True)
        if api_key == SASL_HANDSHAKE:
            return self._handshake(body)
        if api_key == SASL_AUTHENTICATE:
            return self._authenticate(body)
        return SaslOutcome(close=True, failure="request_before_authentication")

    def _handshake(self, body: Any) -> SaslOutcome:
        if self._server is not None:
            return SaslOutcome(
                {"error_code": ErrorCode.illegal_sasl_state, "mechanisms": list(self.mechanisms)},
                close=True,
                failure="illegal_state",
            )
        mech = body.mechanism
        if mech not in self.mechanisms:
            return SaslOutcome(
                {
                    "error_code": ErrorCode.unsupported_sasl_mechanism,
                    "mechanisms": list(self.mechanisms),
                },
                close=True,
                failure="unsupported_mechanism",
            )
        self.mechanism = mech
        if mech == "PLAIN":
            self._server = PlainServer(self.plain)
        elif mech in SCRAM_MECHANISMS:
            self._server = ScramServer(mech, self.store)
        return SaslOutcome({"error_code": ErrorCode.none, "mechanisms": list(self.mechanisms)})

    def _authenticate(self, body: Any) -> SaslOutcome:
        server = self._server
        if server is None:
            return SaslOutcome(
                _auth_error(
                    ErrorCode.illegal_sasl_state,
                    "Unexpected SaslAuthenticate request before SaslHandshake",
                ),
                close=True,
                failure="illegal_state",
            )
        try:
            token = server.step(bytes(body.auth_bytes))
        except AuthenticationFailed as exc:
            return SaslOutcome(
                _auth_error(ErrorCode.sasl_authentication_failed, str(exc)),
                close=True,
                failure=exc.reason,
            )
        if server.complete:
            self.principal = f"User:{server.user}"
        return SaslOutcome(
            {
                "error_code": ErrorCode.none,
                "error_message": None,
                "auth_bytes": token or b"",
            }
        )


def _auth_error(code: int, message: str) -> dict[str, Any]:
    return {"error_code": code, "error_message": message, "auth_bytes": b""}
