"""SCRAM credentials, stored salted and hashed in the data dir.

Kafka keeps a ``ScramCredential`` (salt, stored key, server key, iterations; RFC 5802)
per user and mechanism in its metadata log and never the password. kompakt keeps the same
four values in ``kompakt-scram-credentials.json`` beside ``kompakt-topics.json``, written
the same way (temp file, fsync, rename), the temp file made 0600 before its first byte::

    {"users": {"alice": {"SCRAM-SHA-256": {"salt": "<base64>", "stored_key": "<base64>",
                                           "server_key": "<base64>", "iterations": 4096}}}}
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import threading
from pathlib import Path
from typing import Any

from kompakt.errors import InvalidConfigError
from kompakt.log.durable import PRIVATE, write_json_atomically

SCRAM_FILE = "kompakt-scram-credentials.json"
SCRAM_MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
# Kafka's ScramMechanism: minIterations 4096, maxIterations 16384
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 4096


class ScramCredential(tuple):
    """(salt, stored_key, server_key, iterations): what scramp's ``auth_fn`` returns."""

    __slots__ = ()

    def __new__(cls, salt: bytes, stored_key: bytes, server_key: bytes, iterations: int):
        return super().__new__(cls, (salt, stored_key, server_key, iterations))

    @property
    def iterations(self) -> int:
        return self[3]

    @classmethod
    def from_salted_password(
        cls, mechanism: str, salt: bytes, salted: bytes, iterations: int
    ) -> ScramCredential:
        """RFC 5802: StoredKey = H(HMAC(SaltedPassword, "Client Key")),
        ServerKey = HMAC(SaltedPassword, "Server Key")."""
        h = SCRAM_MECHANISMS[mechanism]
        client_key = hmac.new(salted, b"Client Key", h).digest()
        stored = hashlib.new(h, client_key).digest()
        server = hmac.new(salted, b"Server Key", h).digest()
        return cls(salt, stored, server, iterations)

    @classmethod
    def from_password(
        cls, mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS
    ) -> ScramCredential:
        check_mechanism(mechanism)
        check_iterations(mechanism, iterations)
        salt = os.urandom(32)
        h = SCRAM_MECHANISMS[mechanism]
        salted = hashlib.pbkdf2_hmac(h, password.encode(), salt, iterations)
        return cls.from_salted_password(mechanism, salt, salted, iterations)

    def to_json(self) -> dict[str, Any]:
        b64 = base64.b64encode
        return {
            "salt": b64(self[0]).decode(),
            "stored_key": b64(self[1]).decode(),
            "server_key": b64(self[2]).decode(),
            "iterations": self[3],
        }

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> ScramCredential:
        d = base64.b64decode
        return cls(
            d(body["salt"]), d(body["stored_key"]), d(body["server_key"]), int(body["iterations"])
        )


def check_mechanism(mechanism: str) -> None:
    if mechanism not in SCRAM_MECHANISMS:
        raise ValueError(f"Unsupported SCRAM mechanism {mechanism}")


def check_iterations(mechanism: str, iterations: int) -> None:
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(
            f"Iterations {iterations} is outside [{MIN_ITERATIONS}, {MAX_ITERATIONS}] "
            f"for {mechanism}"
        )


class ScramStore:
    """The credentials of one data dir; thread-safe, every change written at once."""

    def __init__(self, data_dir: Path):
        self.path = Path(data_dir) / SCRAM_FILE
        self._lock = threading.Lock()
        self._users: dict[str, dict[str, ScramCredential]] = self._read()

    def _read(self) -> dict[str, dict[str, ScramCredential]]:
        try:
            body = json.loads(self.path.read_text())
            users = body["users"]
            return {
                str(u): {m: ScramCredential.from_json(c) for m, c in mechs.items()}
                for u, mechs in users.items()
            }
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise InvalidConfigError(f"cannot read SCRAM credentials {self.path}: {exc}") from exc

    def _write(self) -> None:
        body = {
            "users": {
                u: {m: c.to_json() for m, c in mechs.items()} for u, mechs in self._users.items()
            }
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomically(self.path, body, mode=PRIVATE)

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        with self._lock:
            return self._users.get(user, {}).get(mechanism)

    def users(self) -> dict[str, dict[str, int]]:
        """{user: {mechanism: iterations}}."""
        with self._lock:
            return {
                u: {m: c.iterations for m, c in mechs.items()}
                for u, mechs in sorted(self._users.items())
            }

    def put(self, user: str, mechanism: str, cred: ScramCredential) -> None:
        check_mechanism(mechanism)
        if not user:
            raise ValueError("Username must not be empty")
        with self._lock:
            self._users.setdefault(user, {})[mechanism] = cred
            self._write()

    def delete(self, user: str, mechanism: str) -> bool:
        """Remove one credential; False if there was none."""
        with self._lock:
            mechs = self._users.get(user)
            if not mechs or mechanism not in mechs:
                return False
            del mechs[mechanism]
            if not mechs:
                del self._users[user]
            self._write()
            return True

    def verify_password(self, user: str, password: str) -> str | None:
        """Check a plaintext password (HTTP Basic on the admin endpoint) against the
        user's strongest stored credential: PBKDF2 with its salt and iterations, then the
        stored key compared in constant time. A failure reason, or None."""
        with self._lock:
            mechs = dict(self._users.get(user, {}))
        if not mechs:
            return "unknown_user"
        mech = "SCRAM-SHA-512" if "SCRAM-SHA-512" in mechs else "SCRAM-SHA-256"
        cred = mechs[mech]
        salted = hashlib.pbkdf2_hmac(
            SCRAM_MECHANISMS[mech], password.encode(), cred[0], cred.iterations
        )
        again = ScramCredential.from_salted_password(mech, cred[0], salted, cred.iterations)
        return None if hmac.compare_digest(again[1], cred[1]) else "bad_password"

    def bootstrap(self, users: str | None) -> list[str]:
        """``kompakt.sasl.bootstrap.users`` (``user:password,...``): give each user both
        SCRAM credentials unless it has them already; returns the users created."""
        created = []
        for item in [s.strip() for s in (users or "").split(",") if s.strip()]:
            name, sep, password = item.partition(":")
            if not sep or not name or not password:
                raise InvalidConfigError(
                    "Invalid value for configuration kompakt.sasl.bootstrap.users: "
                    "expected user:password[,user:password...]"
                )
            for mech in SCRAM_MECHANISMS:
                if self.get(name, mech) is None:
                    self.put(name, mech, ScramCredential.from_password(mech, password))
                    if name not in created:
                        created.append(name)
        return created
