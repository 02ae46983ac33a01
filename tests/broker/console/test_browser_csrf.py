"""CSRF against the admin listener in a real Chromium (issue 26): the admin's browser is
logged in (Basic, cached by the browser context), then opens a page of another origin
that auto-submits a form to the console's config edit and posts ``text/plain`` JSON to
``/v1/compact`` with ``mode: 'no-cors'`` and ``credentials: 'include'``: both kinds of
request a page may send to any origin without a CORS preflight (Fetch standard's "simple
requests"). The listener refuses both (403 for a foreign Origin or Sec-Fetch-Site, 415
for a body type a JSON route does not take) and nothing changes: the topic's
``retention.ms`` is what it was and no clean ran.

Setup as in the finding: ``kompakt.admin.auth=basic``, ``kompakt.admin.console.writes=true``,
the broker's authorizer with the logged-in user as super user.
"""

from __future__ import annotations

import http.server
import threading
from pathlib import Path

import httpx
import pytest

from tests.broker.console.conftest import make_broker

ADMIN = ("admin", "admin-pw")
STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"

ATTACK = """<!doctype html>
<html><body>
<form id="f" method="POST" action="{admin}/configs/users">
  <input name="name" value="retention.ms"><input name="value" value="1">
  <input name="action" value="set">
</form>
<script>
fetch("{admin}/v1/compact", {{
  method: "POST", mode: "no-cors", credentials: "include",
  headers: {{"Content-Type": "text/plain"}},
  body: JSON.stringify({{topic: "users", partition: 0}})
}}).catch(() => null).finally(() => {{
  document.title = "fetched";
  document.getElementById("f").submit();
}});
</script>
</body></html>
"""


@pytest.fixture(scope="module")
def gated_broker(tmp_path_factory):
    b = make_broker(
        tmp_path_factory,
        "csrf",
        **{
            "kompakt.admin.console.writes": "true",
            "kompakt.admin.auth": "basic",
            "kompakt.sasl.bootstrap.users": f"{ADMIN[0]}:{ADMIN[1]}",
            "authorizer.class.name": STANDARD,
            "super.users": f"User:{ADMIN[0]}",
            "allow.everyone.if.no.acl.found": "true",  # the fixture's producer: anonymous
        },
    )
    yield b
    b.stop()


def _serve(html: str):
    """A page of another origin: a tiny HTTP server on its own port."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            body = html.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    class Server(http.server.ThreadingHTTPServer):
        def handle_error(self, request, client_address):
            pass  # the browser leaving early (a favicon, the form navigating away)

    server = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _segments(b) -> list[tuple[str, int]]:
    """users-0's files and sizes: a clean rewrites them."""
    d = Path(b.logs.dir) / "users-0"
    return sorted((p.name, p.stat().st_size) for p in d.iterdir())


def _state(b, admin: str) -> dict:
    """What the attack would change: users' retention.ms and overrides (the topic config
    DescribeConfigs answers from), users-0's files and its /v1/partitions row (sizes,
    last clean)."""
    parts = httpx.get(admin + "/v1/partitions", auth=ADMIN, timeout=30).json()
    users0 = [p for p in parts["partitions"] if (p["topic"], p["partition"]) == ("users", 0)]
    return {
        "retention.ms": b.logs.topic_config("users").retention_ms,
        "overrides": dict(b.logs.topic_meta("users").overrides),
        "segments": _segments(b),
        "users-0": users0,
    }


@pytest.mark.parametrize(
    "attacker_host", ["localhost", "127.0.0.1"], ids=["cross-site", "same-site"]
)
def test_a_page_of_another_origin_cannot_use_the_admins_login(browser, gated_broker, attacker_host):
    """The form and the no-cors text/plain fetch reach the listener with the admin's
    cached login and are refused 403/415; retention.ms and users-0 are unchanged.
    ``localhost:<port>`` is another site than ``127.0.0.1:<admin>``; another port of
    127.0.0.1 is the same site but another origin (both refused). Chromium sends the
    cached login on the top-level form navigation in both cases, and on the fetch only
    from the same site (its HTTP auth cache is partitioned by top-level site)."""
    b = gated_broker
    admin = f"http://127.0.0.1:{b.admin_port}"
    before = _state(b, admin)
    assert "retention.ms" not in before["overrides"]

    ctx = browser.new_context(
        http_credentials={"username": ADMIN[0], "password": ADMIN[1], "origin": admin}
    )
    evil = _serve(ATTACK.format(admin=admin))
    try:
        page = ctx.new_page()
        # the admin is logged in: the console answers this browser
        resp = page.goto(admin + "/configs/users")
        assert resp is not None and resp.status == 200
        assert page.locator('#configs tr[data-name="retention.ms"]').count() == 1

        seen: list = []  # the admin listener's answers, as the page's network saw them
        page.on("response", lambda r: seen.append(r) if r.url.startswith(admin) else None)
        to_admin = lambda url: url.startswith(admin + "/configs/users")  # noqa: E731
        with page.expect_navigation(url=to_admin, timeout=30_000) as nav:
            page.goto(f"http://{attacker_host}:{evil.server_address[1]}/")
        page.wait_for_load_state()
        form_status = nav.value.status if nav.value is not None else None
        posts = {
            r.url.removeprefix(admin): (r.status, "authorization" in r.request.all_headers())
            for r in seen
            if r.request.method == "POST"
        }
    finally:
        ctx.close()
        evil.shutdown()
        evil.server_close()

    assert _state(b, admin) == before  # retention.ms as it was, no clean of users-0
    assert set(posts) == {"/v1/compact", "/configs/users"}, posts
    assert posts["/v1/compact"][0] in (403, 415), posts
    assert posts["/configs/users"][0] in (403, 415), posts
    assert form_status == posts["/configs/users"][0]
    # the form, a top-level navigation, carried the admin's cached login: refused anyway
    assert posts["/configs/users"][1], posts
