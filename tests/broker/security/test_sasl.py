"""The SASL authenticator sans-IO (Kafka's SaslServerAuthenticator states) with scramp's
client on the other side, and the SCRAM credential file."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from kio.schema.errors import ErrorCode
from scramp import ScramClient

from kompakt.broker.security.sasl import (
    API_VERSIONS,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    SaslAuthenticator,
)
from kompakt.broker.security.scram_store import SCRAM_FILE, ScramCredential, ScramStore
from kompakt.errors import InvalidConfigError


def _auth(store, mechanisms=("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")):
    return SaslAuthenticator("L", tuple(mechanisms), {"alice": "pw"}, store)


def _token(a, data: bytes):
    return a.on_request(SASL_AUTHENTICATE, 2, SimpleNamespace(auth_bytes=data))


@pytest.fixture
def store(tmp_path):
    s = ScramStore(tmp_path)
    for m in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        s.put("bob", m, ScramCredential.from_password(m, "bob-pw"))
    return s


@pytest.mark.parametrize("mech", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_exchange_with_scramp_client_authenticates_as_the_user(store, mech):
    a = _auth(store)
    assert a.on_request(API_VERSIONS, 3, None).passthrough
    hs = a.on_request(SASL_HANDSHAKE, 1, SimpleNamespace(mechanism=mech))
    assert hs.body["error_code"] == ErrorCode.none and not hs.close
    c = ScramClient([mech], "bob", "bob-pw")
    out = _token(a, c.get_client_first().encode())
    c.set_server_first(out.body["auth_bytes"].decode())
    out = _token(a, c.get_client_final().encode())
    assert out.body["error_code"] == ErrorCode.none
    c.set_server_final(out.body["auth_bytes"].decode())  # the server proved its key too
    assert a.principal == "User:bob"


def test_scram_wrong_password_is_sasl_authentication_failed(store):
    a = _auth(store)
    a.on_request(SASL_HANDSHAKE, 1, SimpleNamespace(mechanism="SCRAM-SHA-256"))
    c = ScramClient(["SCRAM-SHA-256"], "bob", "nope")
    c.set_server_first(_token(a, c.get_client_first().encode()).body["auth_bytes"].decode())
    out = _token(a, c.get_client_final().encode())
    assert out.body["error_code"] == ErrorCode.sasl_authentication_failed
    assert out.close and out.failure == "bad_password" and a.principal is None


def test_scram_unknown_user_fails_at_the_first_message(store):
    a = _auth(store)
    a.on_request(SASL_HANDSHAKE, 1, SimpleNamespace(mechanism="SCRAM-SHA-512"))
    out = _token(a, ScramClient(["SCRAM-SHA-512"], "eve", "x").get_client_first().encode())
    assert out.body["error_code"] == ErrorCode.sasl_authentication_failed
    assert out.failure == "unknown_user"


@pytest.mark.parametrize(
    "token,reason",
    [
        (b"alice\0pw", "malformed"),
        (b"\0\0pw", "malformed"),
        (b"bob\0alice\0pw", "authorization_id"),
    ],
)
def test_plain_malformed_tokens_fail_without_crashing(token, reason):
    a = _auth(None)
    a.on_request(SASL_HANDSHAKE, 1, SimpleNamespace(mechanism="PLAIN"))
    out = _token(a, token)
    assert out.body["error_code"] == ErrorCode.sasl_authentication_failed
    assert out.failure == reason


@pytest.mark.parametrize("token", [b"\0nopw\0", b"nopw\0nopw\0", b"\0alice\0"])
def test_plain_empty_password_is_refused_even_for_an_empty_jaas_entry(token):
    """Kafka's PlainSaslServer: "Authentication failed: password not specified" before
    any JAAS entry is looked at, so ``user_nopw=""`` lets nobody in; the client reads
    SaslServerAuthenticator's generic text, never the cause."""
    a = SaslAuthenticator("L", ("PLAIN",), {"alice": "pw", "nopw": ""}, None)
    a.on_request(SASL_HANDSHAKE, 1, SimpleNamespace(mechanism="PLAIN"))
    out = _token(a, token)
    assert out.body["error_code"] == ErrorCode.sasl_authentication_failed
    assert out.body["error_message"] == (
        "Authentication failed during authentication due to invalid credentials "
        "with SASL mechanism PLAIN"
    )
    assert out.close and out.failure == "no_password" and a.principal is None


def test_a_second_handshake_before_completion_is_illegal_sasl_state():
    a = _auth(None)
    a.on_request(SASL_HANDSHAKE, 1, SimpleNamespace(mechanism="PLAIN"))
    out = a.on_request(SASL_HANDSHAKE, 1, SimpleNamespace(mechanism="PLAIN"))
    assert out.body["error_code"] == ErrorCode.illegal_sasl_state and out.close


def test_credential_file_is_written_atomically_and_a_corrupt_one_is_a_clear_error(tmp_path):
    s = ScramStore(tmp_path)
    s.put("bob", "SCRAM-SHA-256", ScramCredential.from_password("SCRAM-SHA-256", "pw"))
    assert not (tmp_path / (SCRAM_FILE + ".tmp")).exists()
    assert (tmp_path / SCRAM_FILE).stat().st_mode & 0o077 == 0  # owner-only
    assert ScramStore(tmp_path).verify_password("bob", "pw") is None
    assert ScramStore(tmp_path).verify_password("bob", "px") == "bad_password"
    (tmp_path / SCRAM_FILE).write_text('{"users": {"bob": {"SCRAM-SHA-256": {"salt": 1}}}}')
    with pytest.raises(InvalidConfigError, match=SCRAM_FILE):
        ScramStore(tmp_path)
