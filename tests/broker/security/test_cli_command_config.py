"""The CLI's broker verbs against TLS and SASL listeners with ``--command-config`` (Kafka's
tools' option): the confluent-kafka verbs (``topic list``) and the raw-request ones
(``txn list``, which does its own TLS + SaslHandshake/SaslAuthenticate)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from kompakt.cli.main import app

runner = CliRunner()


def _config(tmp_path: Path, certs, protocol: str, mechanism: str | None, pw: str) -> Path:
    lines = [f"security.protocol={protocol}"]
    if protocol.endswith("SSL"):
        lines.append(f"ssl.ca.location={certs.ca_pem}")
    if mechanism:
        user = "alice"
        lines += [f"sasl.mechanism={mechanism}", f"sasl.username={user}", f"sasl.password={pw}"]
    path = tmp_path / "client.properties"
    path.write_text("\n".join(lines) + "\n")
    return path


CASES = [
    ("SSL", "SSL", None, ""),
    ("SASL_SSL", "SASL_SSL", "SCRAM-SHA-512", "alice-scram"),
    ("SASL_SSL", "SASL_SSL", "SCRAM-SHA-256", "alice-scram"),
    ("SASL_PLAINTEXT", "SASL_PLAINTEXT", "PLAIN", "alice-secret"),
]


@pytest.mark.parametrize("listener,protocol,mechanism,pw", CASES)
@pytest.mark.parametrize("verb", [["txn", "list"], ["topic", "list"]])
def test_broker_verbs_over_tls_and_sasl(
    secure_broker, certs, tmp_path, listener, protocol, mechanism, pw, verb
):
    cfg = _config(tmp_path, certs, protocol, mechanism, pw)
    bootstrap = f"127.0.0.1:{secure_broker.ports[listener]}"
    r = runner.invoke(app, ["--command-config", str(cfg), *verb, "-b", bootstrap])
    assert r.exit_code == 0, r.output


def test_the_environment_variable_names_the_file_too(secure_broker, certs, tmp_path):
    cfg = _config(tmp_path, certs, "SASL_SSL", "SCRAM-SHA-512", "alice-scram")
    bootstrap = f"127.0.0.1:{secure_broker.ports['SASL_SSL']}"
    r = runner.invoke(
        app, ["txn", "list", "-b", bootstrap], env={"KOMPAKT_COMMAND_CONFIG": str(cfg)}
    )
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_a_wrong_password_is_one_line_naming_the_user(secure_broker, certs, tmp_path, mechanism):
    cfg = _config(tmp_path, certs, "SASL_SSL", mechanism, "wrong")
    bootstrap = f"127.0.0.1:{secure_broker.ports['SASL_SSL']}"
    r = runner.invoke(app, ["--command-config", str(cfg), "txn", "list", "-b", bootstrap])
    assert r.exit_code == 1
    [line] = r.stderr.strip().splitlines()
    assert f"refused SASL {mechanism} for 'alice'" in line


def test_plaintext_settings_against_a_tls_port_fail_in_one_line(secure_broker, tmp_path):
    bootstrap = f"127.0.0.1:{secure_broker.ports['SSL']}"
    cfg = tmp_path / "plain.properties"
    cfg.write_text("security.protocol=PLAINTEXT\n")
    r = runner.invoke(app, ["--command-config", str(cfg), "txn", "list", "-b", bootstrap])
    assert r.exit_code == 1
    [line] = r.stderr.strip().splitlines()
    assert "closed the connection" in line or "not reachable" in line, line
