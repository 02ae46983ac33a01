"""The CLI's requests to the broker's admin endpoint: http or https, with HTTP Basic.

A secured broker (``kompakt.admin.listener=https://...``, ``kompakt.admin.auth=basic``)
wants TLS it can verify and a SCRAM user's name and password. The CLI takes them the way
curl and most HTTP tools do, without putting a password on the command line (where
``ps`` and shell history would keep it):

* the user from the URL (``https://alice@host:9644``) or ``KOMPAKT_ADMIN_USER``;
* the password from ``KOMPAKT_ADMIN_PASSWORD`` (a password in the URL works too, for
  scripts that already hold one there);
* the CA bundle that signed the endpoint's certificate from ``KOMPAKT_ADMIN_CAFILE``
  (PEM), else the system's trust store.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from .backend import CliError

USER_ENV = "KOMPAKT_ADMIN_USER"
PASSWORD_ENV = "KOMPAKT_ADMIN_PASSWORD"
CAFILE_ENV = "KOMPAKT_ADMIN_CAFILE"


class AdminUnreachable(CliError):
    """The endpoint did not answer (refused, timed out, TLS failed)."""


def _split_credentials(url: str) -> tuple[str, str | None, str | None]:
    """``url`` without its userinfo, and the user and password it carried (if any)."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None:
        return url, None, None
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        netloc += f":{parts.port}"
    clean = urllib.parse.urlunsplit(parts._replace(netloc=netloc))
    user = urllib.parse.unquote(parts.username)
    pw = urllib.parse.unquote(parts.password) if parts.password is not None else None
    return clean, user, pw


def _context(url: str) -> ssl.SSLContext | None:
    if not url.startswith("https:"):
        return None
    cafile = os.environ.get(CAFILE_ENV)
    if cafile and not os.path.isfile(cafile):
        raise CliError(f"{CAFILE_ENV}={cafile}: no such file")
    try:
        return ssl.create_default_context(cafile=cafile or None)
    except ssl.SSLError as exc:
        raise CliError(f"{CAFILE_ENV}={cafile}: not a PEM CA bundle ({exc.reason})") from None


def admin_json(admin_url: str, path: str, body: Any = None, *, timeout: float = 30) -> Any:
    """GET ``path`` (or POST ``body`` as JSON) on the admin endpoint; the decoded JSON.

    Raises :class:`AdminUnreachable` when nothing answers and :class:`CliError` with the
    endpoint's own message for an HTTP error (401 says which variables to set).
    """
    if "://" not in admin_url:  # urllib's "unknown url type" names no fix
        raise CliError(f"--admin takes http(s)://HOST:PORT, not {admin_url!r}")
    base, user, pw = _split_credentials(admin_url.rstrip("/"))
    user = user or os.environ.get(USER_ENV)
    if pw is None:
        pw = os.environ.get(PASSWORD_ENV)
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method="GET" if data is None else "POST")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if user is not None:
        token = base64.b64encode(f"{user}:{pw or ''}".encode()).decode()
        req.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=_context(base)) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        if exc.code == 401:
            who = f"user {user!r}" if user else f"no user (set {USER_ENV} or put it in the URL)"
            raise CliError(
                f"admin endpoint {base} refused the credentials: {who}"
                + ("" if pw or not user else f", no password (set {PASSWORD_ENV})")
            ) from None
        try:
            msg = json.loads(exc.read()).get("error", str(exc))
        except (ValueError, AttributeError):
            msg = str(exc)
        raise CliError(msg) from None
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, ssl.SSLCertVerificationError):
            reason = f"{reason.verify_message} (set {CAFILE_ENV} to the CA that signed it)"
        elif isinstance(reason, OSError) and reason.strerror:
            reason = reason.strerror
        raise AdminUnreachable(f"admin endpoint {base} not reachable: {reason}") from None
    except (OSError, ValueError) as exc:  # a reset mid-answer, a body that is not JSON
        raise AdminUnreachable(f"admin endpoint {base} not reachable: {exc}") from None
