"""``kompakt user``: SCRAM users offline and through AlterUserScramCredentials (API 51) /
DescribeUserScramCredentials (API 50), then used to log in."""

from __future__ import annotations

import json
import logging
import subprocess

import pytest
from cli_kit import kompakt_cmd
from confluent_kafka.admin import AdminClient
from kio.schema.errors import ErrorCode
from raw_kafka import call
from typer.testing import CliRunner

from kompakt.broker.app import BrokerThread
from kompakt.broker.config import BrokerConfig
from kompakt.broker.security.scram_store import SCRAM_FILE
from kompakt.cli.main import app

runner = CliRunner()


def test_offline_create_list_delete_stores_no_password(tmp_path):
    r = runner.invoke(
        app, ["user", "create", "bob", "-d", str(tmp_path), "--password-stdin"], input="s3cret\n"
    )
    assert r.exit_code == 0, r.output
    stored = (tmp_path / SCRAM_FILE).read_text()
    assert "s3cret" not in stored
    r = runner.invoke(app, ["user", "list", "-d", str(tmp_path), "--json"])
    assert json.loads(r.output) == {"bob": {"SCRAM-SHA-256": 4096, "SCRAM-SHA-512": 4096}}
    r = runner.invoke(app, ["user", "delete", "bob", "-d", str(tmp_path), "-m", "SCRAM-SHA-512"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["user", "list", "-d", str(tmp_path), "--json"])
    assert json.loads(r.output) == {"bob": {"SCRAM-SHA-256": 4096}}


def test_offline_bad_input_is_a_clear_error_and_changes_nothing(tmp_path):
    r = runner.invoke(
        app,
        ["user", "create", "bob", "-d", str(tmp_path), "--password-stdin", "--iterations", "10"],
        input="pw\n",
    )
    assert r.exit_code != 0 and "Iterations 10" in r.output
    r = runner.invoke(app, ["user", "create", "bob", "-d", str(tmp_path), "-m", "MD5"], input="")
    assert r.exit_code != 0 and "unknown SCRAM mechanism MD5" in r.output
    assert list(tmp_path.iterdir()) == []  # refused before the data dir was touched
    r = runner.invoke(app, ["user", "delete", "nobody", "-d", str(tmp_path)])
    assert r.exit_code != 0 and "not a kompakt data dir" in r.output
    runner.invoke(
        app, ["user", "create", "x", "-d", str(tmp_path), "--password-stdin"], input="p\n"
    )
    r = runner.invoke(app, ["user", "delete", "nobody", "-d", str(tmp_path)])
    assert r.exit_code != 0 and "has no" in r.output


def test_user_created_through_the_broker_can_log_in_with_scram(tmp_path):
    logging.getLogger("kompakt").setLevel(logging.INFO)
    props = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "kompakt.admin.listener": "http://127.0.0.1:0",
        "log.dirs": str(tmp_path),
        "kompakt.cleaner.engine": "local",
    }
    with BrokerThread(BrokerConfig.from_mapping(props)) as b:
        ports = b.broker.server.ports
        plain = f"127.0.0.1:{ports['PLAINTEXT']}"
        r = runner.invoke(
            app, ["user", "create", "carol", "-b", plain, "--password-stdin"], input="pw-carol\n"
        )
        assert r.exit_code == 0, r.output
        r = runner.invoke(app, ["user", "list", "-b", plain, "--json"])
        assert json.loads(r.output) == {"carol": {"SCRAM-SHA-256": 4096, "SCRAM-SHA-512": 4096}}
        conf = {
            "bootstrap.servers": f"127.0.0.1:{ports['SASL_PLAINTEXT']}",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "carol",
            "sasl.password": "pw-carol",
        }
        assert AdminClient(conf).list_topics(timeout=10).brokers
        r = runner.invoke(app, ["user", "delete", "carol", "-b", plain])
        assert r.exit_code == 0, r.output
        r = runner.invoke(app, ["user", "list", "-b", plain, "--json"])
        assert json.loads(r.output) == {}


@pytest.fixture
def refusing_broker(tmp_path):
    """A broker with ACLs on whose only super user is not the CLI's User:ANONYMOUS."""
    props = {
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "kompakt.admin.listener": "http://127.0.0.1:0",
        "log.dirs": str(tmp_path),
        "kompakt.cleaner.engine": "local",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",
    }
    with BrokerThread(BrokerConfig.from_mapping(props)) as b:
        yield b.broker.server.ports["PLAINTEXT"]


def test_a_refusal_by_acls_is_one_line_for_user_create_and_delete(refusing_broker):
    """Kafka answers AlterUserScramCredentials / DescribeUserScramCredentials of a
    principal without ALTER / DESCRIBE on the cluster with CLUSTER_AUTHORIZATION_FAILED
    (``kafka-configs.sh`` prints one ``ClusterAuthorizationException`` line). The CLI
    printed 45 lines of typer frames; it prints one ``error:`` line and exits 1."""
    plain = f"127.0.0.1:{refusing_broker}"
    for args, stdin in (
        (["user", "create", "carol", "-b", plain, "--password-stdin"], "pw\n"),
        (["user", "delete", "carol", "-b", plain], None),
    ):
        r = runner.invoke(app, args, input=stdin)
        assert r.exit_code == 1, (args, r.output)
        assert isinstance(r.exception, SystemExit), (args, r.exception)
        assert r.stderr.splitlines() == ["error: Cluster authorization failed"], args


def test_a_refusal_by_acls_is_one_line_for_user_list(refusing_broker):
    """Refused DescribeUserScramCredentials (no DESCRIBE on the cluster): one line, as
    for create/delete. In a process of its own: librdkafka frees the refusal's error text
    it does not own, and ``user list`` through confluent-kafka died with SIGSEGV (139)."""
    plain = f"127.0.0.1:{refusing_broker}"
    for extra in ([], ["--json"]):
        r = subprocess.run(
            [*kompakt_cmd(), "user", "list", "-b", plain, *extra],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert (r.returncode, r.stdout) == (1, ""), (extra, r.returncode, r.stderr[-500:])
        assert r.stderr.splitlines() == ["error: Cluster authorization failed"], extra


def test_refused_describe_user_scram_credentials_answers_as_kafka(refusing_broker):
    """Kafka's DescribeUserScramCredentialsRequest.getErrorResponse: the code at the top
    and in one (unnamed) result per user asked for, and no error message, since
    ApiError.fromThrowable drops a message that is only the code's own description."""
    asked = [{"name": "carol"}, {"name": "dave"}]
    resp = call(refusing_broker, 50, 0, {"users": asked})
    denied = ErrorCode.cluster_authorization_failed
    assert (resp.error_code, resp.error_message) == (denied, None)
    assert [(r.user, r.error_code, r.error_message, r.credential_infos) for r in resp.results] == [
        ("", denied, None, ())
    ] * len(asked)
    resp = call(refusing_broker, 50, 0, {"users": None})  # all users: nothing to answer each
    assert (resp.error_code, resp.error_message, resp.results) == (denied, None, ())
