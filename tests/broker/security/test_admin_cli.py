"""The CLI against an https admin endpoint with HTTP Basic (``kompakt.admin.auth=basic``):
user from the URL, password and CA from the environment, one-line errors otherwise."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kompakt.cli.main import app

runner = CliRunner()


@pytest.fixture(scope="module")
def topic(secure_broker):
    bootstrap = f"127.0.0.1:{secure_broker.ports['PLAINTEXT']}"
    r = runner.invoke(
        app, ["topic", "create", "cli-admin", "--config", "cleanup.policy=compact", "-b", bootstrap]
    )
    assert r.exit_code == 0, r.output
    return "cli-admin", bootstrap


def _compact(secure_broker, user: str, env: dict[str, str]):
    url = f"https://{user}127.0.0.1:{secure_broker.admin_port}"
    return runner.invoke(app, ["compact", "cli-admin", "--admin-url", url, "--json"], env=env)


def test_compact_over_https_with_basic_credentials_from_url_and_environment(
    secure_broker, certs, topic
):
    env = {"KOMPAKT_ADMIN_PASSWORD": "alice-scram", "KOMPAKT_ADMIN_CAFILE": str(certs.ca_pem)}
    r = _compact(secure_broker, "alice@", env)
    assert r.exit_code == 0, r.output
    [result] = json.loads(r.stdout)["results"]
    assert (result["topic"], result["partition"]) == ("cli-admin", 0)


@pytest.mark.parametrize(
    "user,env,message",
    [
        ("alice@", {"KOMPAKT_ADMIN_PASSWORD": "wrong"}, "refused the credentials: user 'alice'"),
        ("", {}, "refused the credentials: no user (set KOMPAKT_ADMIN_USER"),
        ("alice@", {}, "no password (set KOMPAKT_ADMIN_PASSWORD)"),
    ],
)
def test_bad_or_missing_credentials_are_one_line_errors(
    secure_broker, certs, topic, user, env, message
):
    r = _compact(secure_broker, user, {"KOMPAKT_ADMIN_CAFILE": str(certs.ca_pem), **env})
    assert r.exit_code != 0
    assert message in r.stderr, r.output
    assert "Traceback" not in r.output


def test_an_untrusted_certificate_says_which_variable_to_set(secure_broker, topic):
    r = _compact(secure_broker, "alice@", {"KOMPAKT_ADMIN_PASSWORD": "alice-scram"})
    assert r.exit_code != 0
    assert "set KOMPAKT_ADMIN_CAFILE" in r.stderr, r.output
    assert len(r.stderr.strip().splitlines()) == 1


def test_topic_describe_reads_sizes_through_the_secured_endpoint(secure_broker, certs, topic):
    name, bootstrap = topic
    url = f"https://alice:alice-scram@127.0.0.1:{secure_broker.admin_port}"
    r = runner.invoke(
        app,
        ["topic", "describe", name, "-b", bootstrap, "--admin-url", url, "--json"],
        env={"KOMPAKT_ADMIN_CAFILE": str(certs.ca_pem)},
    )
    assert r.exit_code == 0, r.output
    assert "not reachable" not in r.stderr
    [desc] = json.loads(r.stdout)
    assert desc["partitions"][0]["size_bytes"] is not None, desc
